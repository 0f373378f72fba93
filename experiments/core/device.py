"""Which device a job measures, and the facts about it that every row and file records."""

from __future__ import annotations

import logging
import os
import platform
import socket
import tempfile
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from filelock import FileLock, Timeout

from experiments.core.cpu_peak import cpu_identity
from experiments.core.cpu_time import cpu_clock
from experiments.core.cpus import read_topology
from experiments.core.devicenames import DeviceError, DeviceName

log = logging.getLogger(__name__)


def visible_devices() -> list[str]:
    """What "auto" means: the CPU plus every GPU this process can see."""
    return ["cpu"] + [f"cuda:{i}" for i in range(torch.cuda.device_count())]


@dataclass(frozen=True)
class JobDevice:
    """A job's device, resolved once: its name in every spelling, and the torch devices it may
    run on (one, or each GPU of a pool cuda:0+1, which must all be one model)."""

    name: DeviceName
    devices: tuple[torch.device, ...]

    @classmethod
    def resolve(cls, name: "str | DeviceName | JobDevice") -> "JobDevice":
        """Fails naming what exists."""
        if isinstance(name, JobDevice):
            return name
        name = name if isinstance(name, DeviceName) else DeviceName(name)
        if name.name == "auto":
            return cls(name, (torch.device("cuda:0" if torch.cuda.is_available() else "cpu"),))
        if name.name == "cpu":
            return cls(name, (torch.device("cpu"),))
        count = torch.cuda.device_count()
        missing = [i for i in name.gpus if i >= count]
        if missing:
            raise DeviceError(f"device={name.name!r}: cuda:{missing[0]} does not exist here; "
                              f"visible devices: {visible_devices()}")
        devs = tuple(torch.device("cuda", i) for i in name.gpus)
        models = sorted({torch.cuda.get_device_name(d) for d in devs})
        if len(models) > 1:
            raise DeviceError(f"device={name.name!r} pools different GPUs {models}; a pool is "
                              "one model")
        return cls(name, devs)

    @property
    def pooled(self) -> bool:
        """Whether the job takes a GPU of several (or, holding all, every GPU of them)."""
        return len(self.name.gpus) > 1


def gpu_group(devices, no_gpu: str, one_gpu: str) -> tuple[list, str | None]:
    """The GPUs of a job that needs two or more (copies between GPUs, collectives), and why it
    cannot run when it has fewer: `no_gpu`, or `one_gpu` formatted with the one GPU as {dev}."""
    gpus = [d for d in devices if d.type == "cuda"]
    if not gpus:
        return gpus, no_gpu
    return gpus, (one_gpu.format(dev=gpus[0]) if len(gpus) < 2 else None)


# One folder per machine, whatever TMPDIR or user a run has: every run on the machine sees it.
# /dev/shm first (tmpfs on Linux, empty after a boot), else /tmp. Never TMPDIR: two runs with
# different ones would each hold "the" CPU. World-writable without the sticky bit, its files too:
# another user's run must be able to open (and so wait on) a lock file this one made.
LOCK_DIRS = (Path("/dev/shm/rooflab-locks"), Path("/tmp/rooflab-locks"))


def default_lock_dir() -> Path:
    """The machine's lock folder: the first of LOCK_DIRS that is or can be made writable."""
    for folder in LOCK_DIRS:
        if not folder.parent.is_dir():
            continue
        try:
            folder.mkdir(mode=0o777, exist_ok=True)
            if folder.stat().st_uid == os.geteuid():
                os.chmod(folder, 0o777)  # mkdir's mode went through the umask
        except OSError:
            continue
        if os.access(folder, os.W_OK | os.X_OK):
            return folder
        log.warning("%s is not writable for this user: a run of another user may measure "
                    "beside this one", folder)
    # no shared place at all: a folder of this user's (the runs of others do not see it)
    return Path(tempfile.gettempdir()) / f"rooflab-locks-{os.getuid()}"


def acquire_first_free(paths: list[Path], poll_s: float = 0.05) -> tuple[int, FileLock]:
    """Lock the first free of `paths`, waiting while all are held. Returns its index and lock."""
    locks = [FileLock(p, mode=LOCK_MODE) for p in paths]
    waiting = False
    while True:
        for i, lock in enumerate(locks):
            try:
                lock.acquire(timeout=0)
                _say_holder(paths[i])
                return i, lock
            except Timeout:
                pass
        if not waiting:
            log.info("waiting for the %s held by %s: %s", "CPU" if paths[0].name == CPU_LOCK
                     else "GPU", " and ".join(_holder(p) for p in paths), ", ".join(map(str, paths)))
            waiting = True
        time.sleep(poll_s)


def acquire_all(paths: list[Path], poll_s: float = 0.05) -> list[FileLock]:
    """Lock every one of `paths`, in sorted order, waiting for each while another job holds it.

    One order for every job that takes several, so two of them never hold one lock each and wait
    for the other's (a job taking one GPU holds one lock and never waits while holding it)."""
    locks = []
    waiting = False
    try:
        for path in sorted(paths):
            lock = FileLock(path, mode=LOCK_MODE)
            while True:
                try:
                    lock.acquire(timeout=0)
                    break
                except Timeout:
                    if not waiting:
                        log.info("a GPU of the pool is busy; waiting for all of them: %s", path)
                        waiting = True
                    time.sleep(poll_s)
            locks.append(lock)
    except BaseException:
        for lock in locks:
            lock.release()
        raise
    return locks


CPU_LOCK = "CPU.lock"


LOCK_MODE = 0o666  # any user's run opens the lock files of the machine's folder


def _holder_file(path: Path) -> Path:
    return path.with_name(path.name + ".pid")


def _say_holder(path: Path) -> None:
    """Write this PID beside the lock it holds, for a waiting job's log line; best effort (the
    file may be another user's)."""
    try:
        fd = os.open(_holder_file(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, LOCK_MODE)
        try:
            if os.fstat(fd).st_uid == os.geteuid():
                os.fchmod(fd, LOCK_MODE)
            os.write(fd, str(os.getpid()).encode())
        finally:
            os.close(fd)
    except OSError:
        pass


def _holder(path: Path) -> str:
    """Who holds a lock: the PID its holder wrote beside it, with its command where readable."""
    try:
        pid = int(_holder_file(path).read_text())
    except (OSError, ValueError):
        return "another job"
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:80].strip()
    except OSError:
        cmd = ""
    return f"PID {pid}" + (f" ({cmd})" if cmd else "")


def context_ahead(device: "str | JobDevice", all_gpus: bool = False) -> float | None:
    """Make the CUDA context of a job's one GPU before it waits for that GPU's lock, and return
    the seconds that took (None where the GPU is not known before the lock: the CPU, a pool).
    Making a context launches nothing on the GPU: a few tenths of a second of driver work
    that the GPU's previous job would otherwise wait through, in each of a sweep's ~30 GPU jobs.
    A job measuring beside it kept its medians (docs/benchmarks.md)."""
    devs = JobDevice.resolve(device).devices
    if all_gpus or len(devs) != 1 or devs[0].type != "cuda":
        return None
    t0 = time.perf_counter()
    try:
        torch.cuda.set_device(devs[0])  # CUDA 12+: makes the device's primary context
    except RuntimeError as exc:  # a GPU in exclusive-process mode takes one context at a time
        log.info("no CUDA context before the lock (%s): made once the GPU is held", exc)
        return None
    return time.perf_counter() - t0


@contextmanager
def claim_device(device: "str | JobDevice", lock_dir: Path | None = None,
                 all_gpus: bool = False):
    """Hold the job's device while it measures; given a pool, the first free GPU of it, or, with
    `all_gpus` (an experiment between GPUs: peer_copy, collectives), every GPU of it, yielding the list.

    The lock is a file per GPU UUID, and one for the CPU, in one folder per machine
    (default_lock_dir), so no two jobs -- of one workflow, or of two runs on this machine, by
    any user, with any TMPDIR, host label or results folder -- measure one device at once,
    whatever CUDA_VISIBLE_DEVICES says."""
    devs = list(JobDevice.resolve(device).devices)
    lock_dir = Path(lock_dir or default_lock_dir())
    lock_dir.mkdir(parents=True, exist_ok=True)
    if devs[0].type == "cpu":
        # a CPU measurement takes every core: another one beside it would halve both
        paths = [lock_dir / CPU_LOCK]
    else:
        paths = [lock_dir / f"GPU-{torch.cuda.get_device_properties(d).uuid}.lock" for d in devs]
    if all_gpus:
        locks = acquire_all(paths)
        try:
            yield devs
        finally:
            for lock in locks:
                lock.release()
        return
    index, lock = acquire_first_free(paths)
    try:
        yield devs[index]
    finally:
        lock.release()


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
    topo = read_topology()
    caches = topo.cache_sizes() or _cpu_caches()
    llc = caches[max(caches)] if caches else 32 * 1024**2
    team = topo.team()
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
        # team: one CPU per physical core (the CPU kernels' threads); cache_total_bytes: what the
        # team holds together per level (private caches add up over cores); numa: node -> CPUs
        extra={"torch_threads": torch.get_num_threads(), "machine": platform.machine(),
               "team": team, "placement": topo.placement(team),
               "cache_total_bytes": topo.cache_total(team),
               "numa": {str(n): list(c) for n, c in topo.nodes.items()},
               "smt_per_core": max(len(c) for c in topo.cores),
               # what the silicon's peak reads (core/cpu_peak.py), and where the rows' clock
               # comes from (cpu_time.CLOCK_SOURCES)
               "cpu": (cpu_identity() or {}) | {"clock_source": cpu_clock()[1]}},
    )


def nvml_handle(index: int):
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
    nvml, handle = nvml_handle(dev.index or 0)
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
        nvml, handle = nvml_handle(dev.index or 0)
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
