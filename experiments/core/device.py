"""Which device a job measures, and the facts about it that every row and file records."""

from __future__ import annotations

import os
import platform
import re
import socket
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

DEVICE_PATTERN = re.compile(r"^(auto|cpu|cuda|cuda:\d+)$")


class DeviceError(ValueError):
    """A device name that is malformed or names hardware this machine does not have."""


def visible_devices() -> list[str]:
    """What "auto" means: the CPU plus every GPU this process can see."""
    return ["cpu"] + [f"cuda:{i}" for i in range(torch.cuda.device_count())]


def resolve_device(name: str) -> torch.device:
    """Turn a config device name into a torch.device, or fail naming what exists."""
    if not isinstance(name, str) or not DEVICE_PATTERN.match(name):
        raise DeviceError(
            f"device={name!r} is not a device name; allowed: auto, cpu, cuda, cuda:N"
        )
    if name == "auto":
        name = "cuda:0" if torch.cuda.is_available() else "cpu"
    if name == "cuda":
        name = "cuda:0"
    dev = torch.device(name)
    if dev.type == "cuda":
        count = torch.cuda.device_count()
        if dev.index >= count:
            raise DeviceError(
                f"device={name!r} does not exist here; visible devices: {visible_devices()}"
            )
    return dev


def device_slug(dev: torch.device | str) -> str:
    """A path- and resource-safe name: cpu, cuda0, cuda1 ..."""
    dev = torch.device(dev)
    return "cpu" if dev.type == "cpu" else f"cuda{dev.index or 0}"


@dataclass
class DeviceFacts:
    """What the device is. Filled from the runtime, never typed in."""

    device: str
    kind: str
    name: str
    host: str
    compute_units: int  # SMs on a GPU, usable cores on a CPU
    memory_bytes: int
    llc_bytes: int  # L2 on a GPU, last-level cache on a CPU
    cache_bytes: dict = field(default_factory=dict)  # every level we can read
    capability: str = ""
    driver: str = ""
    torch_version: str = torch.__version__
    cuda_version: str = torch.version.cuda or ""
    max_clock_mhz: float | None = None
    memory_clock_mhz: float | None = None
    pcie_generation: int | None = None
    pcie_width: int | None = None
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def _cpu_caches() -> dict[str, int]:
    caches: dict[str, int] = {}
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    for index in sorted(base.glob("index*")):
        try:
            level = (index / "level").read_text().strip()
            kind = (index / "type").read_text().strip()
            size = (index / "size").read_text().strip()
        except OSError:
            continue
        if kind == "Instruction":
            continue
        units = {"K": 1024, "M": 1024**2, "G": 1024**3}
        value = int(size[:-1]) * units[size[-1]] if size[-1] in units else int(size)
        caches[f"L{level}"] = value
    return caches


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _cpu_facts(dev: torch.device) -> DeviceFacts:
    caches = _cpu_caches()
    llc = caches[max(caches)] if caches else 32 * 1024**2
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return DeviceFacts(
        device="cpu",
        kind="cpu",
        name=_cpu_name(),
        host=socket.gethostname(),
        compute_units=len(os.sched_getaffinity(0)),
        memory_bytes=mem,
        llc_bytes=llc,
        cache_bytes=caches,
        extra={"torch_threads": torch.get_num_threads(), "machine": platform.machine()},
    )


def _nvml_handle(index: int):
    """NVML handle for torch's device `index` (matched by UUID, so CUDA_VISIBLE_DEVICES is safe)."""
    try:
        import pynvml
    except ImportError:
        return None, None
    try:
        pynvml.nvmlInit()
        uuid = str(torch.cuda.get_device_properties(index).uuid)
        handle = pynvml.nvmlDeviceGetHandleByUUID(f"GPU-{uuid}")
        return pynvml, handle
    except Exception:  # NVML missing or refusing: facts stay empty, the run goes on
        return None, None


def _cuda_facts(dev: torch.device) -> DeviceFacts:
    props = torch.cuda.get_device_properties(dev)
    facts = DeviceFacts(
        device=str(dev),
        kind="cuda",
        name=props.name,
        host=socket.gethostname(),
        compute_units=props.multi_processor_count,
        memory_bytes=props.total_memory,
        llc_bytes=int(getattr(props, "L2_cache_size", 0)),
        cache_bytes={"L2": int(getattr(props, "L2_cache_size", 0))},
        capability=f"{props.major}.{props.minor}",
    )
    nvml, handle = _nvml_handle(dev.index or 0)
    if handle is not None:
        facts.driver = nvml.nvmlSystemGetDriverVersion()
        facts.max_clock_mhz = nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_SM)
        facts.memory_clock_mhz = nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_MEM)
        try:
            facts.pcie_generation = nvml.nvmlDeviceGetMaxPcieLinkGeneration(handle)
            facts.pcie_width = nvml.nvmlDeviceGetMaxPcieLinkWidth(handle)
        except Exception:
            pass
    return facts


def device_facts(dev: torch.device) -> DeviceFacts:
    return _cuda_facts(dev) if dev.type == "cuda" else _cpu_facts(dev)


def device_state(dev: torch.device) -> dict:
    """Clocks and temperature now (GPU, through NVML); recorded at a job's start and end."""
    state: dict = {}
    if dev.type == "cuda":
        nvml, handle = _nvml_handle(dev.index or 0)
        if handle is not None:
            try:
                state["sm_clock_mhz"] = nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)
                state["memory_clock_mhz"] = nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_MEM)
                state["temperature_c"] = nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU)
                state["power_w"] = nvml.nvmlDeviceGetPowerUsage(handle) / 1000
            except Exception:
                pass
    else:
        try:
            mhz = [
                float(line.split(":")[1])
                for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("cpu MHz")
            ]
            if mhz:
                state["cpu_mhz_mean"] = sum(mhz) / len(mhz)
        except OSError:
            pass
        state["loadavg_1m"] = os.getloadavg()[0]
    return state
