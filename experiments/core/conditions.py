"""The conditions one timed run ran under: clocks, power, temperature, throttling and energy of a
GPU (NVML), the CPU's frequency and how much of the machine other processes used.

One interface for both device kinds; timer.measure wraps every timed run in it:

    with Conditions(device) as c:
        times = timer.run(fn, inner, samples)
    columns = c.summary(time_s, contention_threshold)

A GPU is polled from a background thread every few ms while the run goes on (NVML calls are
ctypes calls, which release the GIL, so the timed thread keeps running). CPU time shares come from
cumulative jiffy counters read at the window's two ends, so they cost nothing in between.
Anything that cannot be read (no NVML, NVMLError_NotSupported, no /proc) is null, never an error:
a measurement must not fail for want of its conditions.
"""

from __future__ import annotations

import functools
import math
import operator
import statistics
import threading
import time

from experiments.core import cotenants
from experiments.core.cpu_time import _hz, cpu_freq_mhz, own_cpus, proc_stat, self_ticks
from experiments.core.power import (  # noqa: F401  (re-exported: the analysis reads them here)
    ABOVE_LIMIT, ENERGY_UNRESOLVED, POWER_LIMITS_W, POWER_TOLERANCE, drop_impossible_power,
    window_power)

GPU_POLL_S = 0.005  # NVML's clock and power readings change on a ms scale
CPU_POLL_S = 0.1  # the CPU frequency only: keep wake-ups off the cores being measured
# Jiffies are 1/USER_HZ s of one CPU, and the kernel charges busy time by scheduler ticks: a
# window's jiffy counts are off by up to about one tick per CPU, plus one for the rounding of our own
# time. A window shorter than that error says nothing (share null); a longer one is `contended`
# only when its share exceeds the threshold by more than that error.
MARGIN_TICKS_PER_CPU, MARGIN_TICKS = 1, 2
# An SM clock under this share of the device's max clock is a slowdown, unless the power cap (normal
# for GEMM: an H200 runs 1250-1650 MHz of its 1980 at 700 W) or an idle GPU explains it.
LOW_CLOCK_FRACTION = 0.7

# NVML clock-event (throttle) reason bits, from nvml.h (stable ABI, unlike pynvml's constant names).
REASONS = {
    0x1: "gpu_idle", 0x2: "applications_clocks", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
    0x10: "sync_boost", 0x20: "sw_thermal", 0x40: "hw_thermal", 0x80: "hw_power_brake",
    0x100: "display_clock", 0x200: "board_limit", 0x400: "reliability",
}
THERMAL = {"sw_thermal", "hw_thermal"}
EXPLAINS_LOW_CLOCK = {"sw_power_cap", "gpu_idle"}

GPU_COLUMNS = ("sm_clock_mhz", "mem_clock_mhz", "power_w", "temperature_c", "throttle_reasons",
               "energy_j", "gpu_other_processes")
CPU_COLUMNS = ("cpu_freq_mhz", "other_cpu_share", "steal_share", "team_off_cpu_share")
FLAGS = ("contended", "throttled")
COLUMNS = GPU_COLUMNS + CPU_COLUMNS + FLAGS


# -- NVML -------------------------------------------------------------------------------------

_HANDLES: dict[int, tuple] = {}
# (id(nvml), id(handle)) -> (nvml, handle, max SM MHz, power W), Conditions._limits: by id, as
# ctypes handles do not hash; the entry holds both, so neither id is reused while it stands
_LIMITS: dict[tuple, tuple] = {}


def nvml_handle(index: int):
    """(pynvml, handle) of torch's GPU `index`, or (None, None). Cached: nvmlInit and the UUID
    lookup cost more than a poll."""
    if index not in _HANDLES:
        from experiments.core.device import nvml_handle as by_uuid  # CUDA_VISIBLE_DEVICES-safe

        _HANDLES[index] = by_uuid(index)
    return _HANDLES[index]


def reason_names(mask: int) -> list[str]:
    return [REASONS.get(bit, f"bit_{bit:#x}") for bit in (1 << i for i in range(32)) if mask & bit]


class _Nvml:
    """NVML reads that return None when the call fails, and stop asking once it has failed."""

    def __init__(self, nvml, handle):
        self.nvml, self.handle, self.dead = nvml, handle, set()

    def call(self, name: str, *args):
        if self.nvml is None or name in self.dead:
            return None
        fn = getattr(self.nvml, name, None)
        if fn is None:
            self.dead.add(name)
            return None
        try:
            return fn(self.handle, *args)
        except Exception:  # NVMLError_NotSupported, NoPermission, GpuIsLost...: null, never a crash
            self.dead.add(name)
            return None

    def reasons(self):
        # renamed from "throttle" to "clocks event" reasons in driver 535; older pynvml lacks it
        value = self.call("nvmlDeviceGetCurrentClocksEventReasons")
        return value if value is not None else self.call(
            "nvmlDeviceGetCurrentClocksThrottleReasons")

    def const(self, name: str, default: int) -> int:
        return getattr(self.nvml, name, default)

    def sample(self) -> dict:
        sm = self.call("nvmlDeviceGetClockInfo", self.const("NVML_CLOCK_SM", 1))
        mem = self.call("nvmlDeviceGetClockInfo", self.const("NVML_CLOCK_MEM", 2))
        power = self.call("nvmlDeviceGetPowerUsage")  # mW
        temp = self.call("nvmlDeviceGetTemperature", self.const("NVML_TEMPERATURE_GPU", 0))
        return {"sm": sm, "mem": mem, "power": None if power is None else power / 1000,
                "temp": temp, "reasons": self.reasons(), "energy": self.energy_mj()}

    def energy_mj(self):
        return self.call("nvmlDeviceGetTotalEnergyConsumption")  # mJ since the driver loaded

    def power_limit_w(self):
        mw = self.call("nvmlDeviceGetEnforcedPowerLimit")
        return None if mw is None else mw / 1000


# -- the window ---------------------------------------------------------------------------------

def _median(values):
    values = [v for v in values if v is not None]
    return float(statistics.median(values)) if values else None


class Conditions:
    """Samples what a device runs under between __enter__ and __exit__; summary() gives the columns."""

    def __init__(self, device, *, poll_s: float | None = None, clock=time.perf_counter):
        import torch  # here, not at the top: the analysis imports this module for its thresholds

        self.device = torch.device(device)
        self.gpu = self.device.type == "cuda"
        self.poll_s = poll_s or (GPU_POLL_S if self.gpu else CPU_POLL_S)
        self.clock = clock
        self.nvml = _Nvml(*nvml_handle(self.device.index or 0)) if self.gpu else _Nvml(None, None)
        self.max_sm_mhz, self.power_limit_w = self._limits() if self.gpu else (None, None)
        if self.power_limit_w:
            POWER_LIMITS_W[self.device.index or 0] = self.power_limit_w
        self.energy_note = ""  # why power and energy are null, when they are
        self.samples: list[dict] = []
        self.freqs: list[float] = []
        self._stop = threading.Event()
        self._thread = None

    def _limits(self) -> tuple:
        """(max SM clock, enforced power limit) of this GPU, read once per handle: each NVML read
        costs a few ms, paid by every window otherwise."""
        n = self.nvml
        if (key := (id(n.nvml), id(n.handle))) not in _LIMITS:
            _LIMITS[key] = (n.nvml, n.handle, n.call("nvmlDeviceGetMaxClockInfo",
                                                     n.const("NVML_CLOCK_SM", 1)), n.power_limit_w())
        return _LIMITS[key][2:]

    # sampling
    def _sample(self, with_freq: bool):
        if self.gpu:
            reading = self.nvml.sample() | {"t": self.clock()}
            if with_freq:  # who else is on the GPU, at the CPU frequency's slower pace
                before = time.time() - cotenants.BEFORE_S
                reading |= {"pids": cotenants.listed(self.nvml),
                            "busy": cotenants.busy_since(self.nvml, before)}
            self.samples.append(reading)
        if with_freq:
            freq = cpu_freq_mhz()
            if freq is not None:
                self.freqs.append(freq)

    def _poll(self):
        every = max(1, round(CPU_POLL_S / self.poll_s))  # the CPU frequency at most every 0.1 s
        i = 0
        if self.gpu:  # at once; a GPU window's ends read nothing (a reading at each end, the
            self._sample(with_freq=True)  # energy counter's, the wait for the poller: ~50 ms)
        while not self._stop.wait(self.poll_s):
            i += 1
            self._sample(with_freq=i % every == 0)

    def __enter__(self):
        if not self.gpu:
            self._sample(with_freq=True)
        self._thread = threading.Thread(target=self._poll, name="rooflab-conditions", daemon=True)
        self._thread.start()
        # the counters last: the window as close to the timed run as can be; other processes
        # counted on this process's own CPUs (GPU jobs pinned beside it)
        self.cpus = own_cpus()
        self.stat0, self.self0 = proc_stat(cpus=self.cpus), self_ticks()
        self.t0 = self.clock()
        return self

    def __exit__(self, *exc):
        self.t1 = self.clock()
        self.self1, self.stat1 = self_ticks(), proc_stat(cpus=self.cpus)
        self._stop.set()
        if not self.gpu:
            self._thread.join()
            self._sample(with_freq=True)
        elif not self.samples:  # over before the poller's first reading
            self._sample(with_freq=True)
        return False  # a GPU's poller ends after its reading (some ms), unwaited

    # what it saw
    @property
    def window_s(self) -> float:
        return self.t1 - self.t0

    def window_samples(self) -> list[dict]:
        """The GPU polls inside the window; a run shorter than one poll, the ones around it."""
        return [s for s in self.samples if self.t0 <= s["t"] <= self.t1] or self.samples

    def cpu_shares(self) -> tuple[float | None, float | None, float | None]:
        """(other processes' share of the machine's CPU time, its jiffy error, steal share) over
        the window; Nones where /proc is missing or the window is shorter than its error."""
        s0, s1, p0, p1 = self.stat0, self.stat1, self.self0, self.self1
        if s0 is None or s1 is None or p0 is None or p1 is None:
            return None, None, None
        ticks = self.window_s * _hz() * s1["ncpu"]
        error = (MARGIN_TICKS_PER_CPU * s1["ncpu"] + MARGIN_TICKS) / ticks if ticks > 0 else math.inf
        if error >= 1:
            return None, None, None
        other = (s1["busy"] - s0["busy"]) - (p1 - p0)
        share = min(1.0, max(0.0, other / ticks))  # clipped: tick sampling can over/undershoot
        total = s1["total"] - s0["total"]
        steal = (s1["steal"] - s0["steal"]) / total if total > 0 else None
        return share, error, steal

    def other_processes(self) -> int | None:
        """The most other processes seen busy on the GPU in one of the window's readings (or just
        before it); None where NVML could not tell."""
        seen = [s for s in self.samples if "pids" in s]
        # the window's readings, or else the one just before it (a window shorter than a poll)
        window = [s for s in seen if self.t0 <= s["t"] <= self.t1] or seen[:1]
        own = cotenants.own_pids() if any(s["pids"] for s in window) else set()
        counts = [n for s in window
                  if (n := cotenants.others(s["pids"], s["busy"], own)) is not None]
        return max(counts) if counts else None

    def mean_power_w(self) -> float | None:
        """The window's mean power, where the counter or the readings resolve it (power.py), else
        None with the reason in `energy_note`."""
        power, self.energy_note = window_power(self.window_samples(), self.window_s, self.poll_s,
                                               self.power_limit_w)
        return power

    def energy_j(self, time_s: float | None) -> float | None:
        """Joules per call: the window's energy times the share of the window that one call took
        (time_s / window), i.e. the window's mean power times the call's median time. The window
        also holds the timer's set-up (a graph capture, one warm replay): a few % of a 0.5 s
        budget, at a power at most the calls'. Without the counter (or if it did not advance),
        the median sampled power times time_s."""
        if time_s is None or not time_s > 0 or not self.window_s > 0:
            return None
        power = self.mean_power_w()
        return power * time_s if power is not None else None

    def summary(self, time_s: float | None = None,
                contention_threshold: float | None = None,
                team_off: float | None = None) -> dict:
        """The row's condition columns; `time_s` (one call's median) apportions the energy;
        `contention_threshold` None: config/job.yaml's; `team_off`: the share of the fastest
        sample's time that its CPU team was kept off its CPUs (timer.measure, cpu_time.py),
        None without a team."""
        if contention_threshold is None:
            from experiments.core.config import Settings
            contention_threshold = Settings.defaults().contention_threshold
        share, error, steal = self.cpu_shares()
        out = dict.fromkeys(COLUMNS)
        out |= {"cpu_freq_mhz": _median(self.freqs), "other_cpu_share": share,
                "steal_share": steal, "team_off_cpu_share": team_off}
        if self.gpu:
            samples = self.window_samples()
            masks = [int(s["reasons"]) for s in samples if s["reasons"] is not None]
            seen = reason_names(functools.reduce(operator.or_, masks)) if masks else None
            temps = [s["temp"] for s in samples if s["temp"] is not None]
            out |= {
                "sm_clock_mhz": _median(s["sm"] for s in samples),
                "mem_clock_mhz": _median(s["mem"] for s in samples),
                "power_w": self.mean_power_w(),
                "temperature_c": float(max(temps)) if temps else None,
                "throttle_reasons": ",".join(seen) if seen is not None else None,
                "energy_j": self.energy_j(time_s),
            }
            out["throttled"] = throttled(out["sm_clock_mhz"], self.max_sm_mhz, seen)
            # another process ran on the GPU: its points are steady and slow, so they must be
            # flagged here rather than left to the spread filter
            out["gpu_other_processes"] = self.other_processes()
            out["contended"] = None if out["gpu_other_processes"] is None \
                else out["gpu_other_processes"] > 0
        else:
            # the contention policy is for CPU points: their own cores are what others take,
            # other processes here or, in a VM, its host (steal: the host ran something else on
            # the guest's CPUs, a share of every point's time that slows it measurably). Flagged
            # only when a share is above the threshold by more than its jiffy error. A team's
            # off-CPU share is read in ns, with no jiffy error: judged as it is (a quiet
            # machine's stays well under the threshold).
            seen = [] if share is None else [
                share - error > contention_threshold
                or (steal is not None and steal - error > contention_threshold)]
            if team_off is not None:
                seen.append(team_off > contention_threshold)
            out["contended"] = any(seen) if seen else None
        return out


def throttled(sm_mhz, max_sm_mhz, reasons: list[str] | None) -> bool | None:
    """A thermal slowdown, or an SM clock far below max that the power cap or idling does not
    explain. None when neither the reasons nor the clocks could be read."""
    if reasons is None and (sm_mhz is None or not max_sm_mhz):
        return None
    seen = set(reasons or ())
    if seen & THERMAL:
        return True
    if sm_mhz is not None and max_sm_mhz and sm_mhz < LOW_CLOCK_FRACTION * max_sm_mhz:
        return not (seen & EXPLAINS_LOW_CLOCK)
    return False


def job_conditions(rows: list[dict], contention_threshold: float, loadavg_start,
                   loadavg_end) -> dict:
    """The file's summary of its points' conditions (metadata key `conditions`)."""
    def values(key):
        return [r[key] for r in rows if r.get(key) is not None
                and not (isinstance(r[key], float) and math.isnan(r[key]))]

    reasons = sorted({name for text in values("throttle_reasons") for name in text.split(",")
                      if name})
    contended, throttled_ = values("contended"), values("throttled")
    sm, power, temp = values("sm_clock_mhz"), values("power_w"), values("temperature_c")
    share, steal = values("other_cpu_share"), values("steal_share")
    team_off, others = values("team_off_cpu_share"), values("gpu_other_processes")
    return {
        "contention_threshold": contention_threshold,
        "loadavg_start": loadavg_start, "loadavg_end": loadavg_end,
        "max_other_cpu_share": max(share) if share else None,
        "max_steal_share": max(steal) if steal else None,
        "max_team_off_cpu_share": max(team_off) if team_off else None,
        "max_gpu_other_processes": max(others) if others else None,
        "points_judged_contended": len(contended), "points_contended": sum(contended),
        "points_judged_throttled": len(throttled_), "points_throttled": sum(throttled_),
        "any_contended": any(contended), "any_throttled": any(throttled_),
        "throttle_reasons_seen": reasons,
        "sm_clock_mhz_min": min(sm) if sm else None,
        "sm_clock_mhz_median": _median(sm),
        "power_w_max": max(power) if power else None,
        # the enforced limit power is checked against (rows above it by POWER_TOLERANCE are null)
        "power_limit_w": max(POWER_LIMITS_W.values()) if POWER_LIMITS_W else None,
        "temperature_c_max": max(temp) if temp else None,
    }
