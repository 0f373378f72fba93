"""CPU time as Linux counts it, for the conditions of a CPU point (core/conditions.py): jiffies
of /proc/stat and /proc/self/stat, the CPUs this process may use, their frequency, the load
average, and the time a CPU team's threads spent off their CPUs (kernels/cpu_team.py). Anything
unreadable (off Linux) is None."""

from __future__ import annotations

import math
import os
import time
from pathlib import Path


def _hz() -> int:
    try:
        return os.sysconf("SC_CLK_TCK")
    except (ValueError, OSError, AttributeError):
        return 100


def own_cpus() -> set[int] | None:
    """The CPUs this process may run on (a job pinned beside GPU jobs has fewer than all)."""
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


def proc_stat(path: str = "/proc/stat", cpus: set[int] | None = None) -> dict | None:
    """Jiffies of the given CPUs (all of them when None): busy (user, nice, system, irq,
    softirq), steal, total, and the CPU count. None off Linux."""
    try:
        lines = Path(path).read_text().splitlines()
    except OSError:
        return None
    if not lines or lines[0].split()[0] != "cpu":
        return None
    per_cpu = {int(line.split()[0][3:]): line.split() for line in lines
               if line.startswith("cpu") and line[3:4].isdigit()}
    chosen = [per_cpu[c] for c in sorted(cpus or ()) if c in per_cpu] if cpus else []
    rows = chosen or [lines[0].split()]  # the first line sums every CPU
    # user nice system idle iowait irq softirq steal (guest time is already inside user and nice)
    v = [sum(int(r[i]) if i < len(r) else 0 for r in rows) for i in range(1, 9)]
    ncpu = len(chosen) or len(per_cpu) or os.cpu_count() or 1
    return {"busy": v[0] + v[1] + v[2] + v[5] + v[6], "steal": v[7], "total": sum(v),
            "ncpu": ncpu}


def stat_fields(path) -> list[str] | None:
    """A /proc/<pid>/stat's fields from the state on (field 3 of proc(5) is [0]); None where the
    process is gone. Split after the command name's last ')': the name may hold spaces."""
    try:
        text = Path(path).read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2:].split()


def process_stats(proc: Path = Path("/proc")):
    """(pid, stat_fields) of every process there is."""
    for stat in proc.glob("[0-9]*/stat"):
        if (fields := stat_fields(stat)) is not None:
            yield int(stat.parent.name), fields


def self_ticks(path: str = "/proc/self/stat") -> int | None:
    """utime + stime of this process, all its threads, in jiffies."""
    fields = stat_fields(path)
    return None if fields is None else int(fields[11]) + int(fields[12])  # proc(5)'s 14, 15


# Where a CPU point's clock comes from (cpu_clock), best first, and whether it is the cores'
# counted cycles on any CPU: cpufreq's cpuinfo_avg_freq is (APERF/MPERF, ARM's AMU). The others
# are where the CPU has APERF/MPERF (x86's "aperfmperf" flag: the kernel's rate over the last
# tick); without them scaling_cur_freq is the driver's request and cpuinfo's "cpu MHz" a fixed
# estimate of the nominal clock (most VMs).
CLOCK_SOURCES = {"cpuinfo_avg_freq": True, "scaling_cur_freq": False, "cpuinfo": False}
CPUFREQ = "/sys/devices/system/cpu"


def _own_cpus() -> list[int]:
    mine = own_cpus()
    return sorted(mine) if mine else list(range(os.cpu_count() or 1))


def _cpufreq_khz(cpus, name: str, root: str) -> list[int] | None:
    khz = []
    for cpu in cpus:
        try:
            khz.append(int(Path(f"{root}/cpu{cpu}/cpufreq/{name}").read_text()))
        except (OSError, ValueError):
            return None
    return khz or None


def cpuinfo_mhz(cpus, path: str = "/proc/cpuinfo") -> list[float] | None:
    """"cpu MHz" of each of `cpus` (a block per CPU, its "processor" line first), None where
    cpuinfo has none (ARM) or is unreadable."""
    try:
        lines = Path(path).read_text().splitlines()
    except OSError:
        return None
    wanted, cpu, mhz = set(cpus), None, []
    for line in lines:
        key, _, value = line.partition(":")
        key = key.strip()
        try:
            if key == "processor":
                cpu = int(value)
            elif key == "cpu MHz" and cpu in wanted:
                mhz.append(float(value))
        except ValueError:
            return None
    return mhz or None


def cpu_clock(cpus=None, root: str = CPUFREQ, cpuinfo: str = "/proc/cpuinfo"
              ) -> tuple[float | None, str | None]:
    """(mean clock in MHz of `cpus`, default the CPUs this process may run on; its source, a
    key of CLOCK_SOURCES): the cores the job measures on, not the machine's."""
    cpus = _own_cpus() if cpus is None else sorted(cpus)
    for name in ("cpuinfo_avg_freq", "scaling_cur_freq"):
        khz = _cpufreq_khz(cpus, name, root)
        if khz:
            return sum(khz) / len(khz) / 1000, name
    mhz = cpuinfo_mhz(cpus, cpuinfo)
    return (sum(mhz) / len(mhz), "cpuinfo") if mhz else (None, None)


def cpu_freq_mhz() -> float | None:
    """Mean current clock of the CPUs this process may run on (cpu_clock says from where)."""
    return cpu_clock()[0]


def loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


# -- a CPU team's time off its CPUs -----------------------------------------------------------------
# A team kernel (kernels/cpu_team.py) waits for its slowest thread: one CPU of 16 taken by another
# process, or by a VM's host, slows every call while the machine-wide shares above read ~6 %
# (and jiffies cannot resolve a 0.1 s point's 16 CPUs anyway). Two clocks say where a sample's
# threads were kept from running, to the nanosecond:
# - schedstat's run_delay: the time a thread was ready but waited on its run queue (another task
#   on its CPU), waking at a call's start included. GIL and barrier waits are sleep, not counted;
# - within a call, each worker's wall time less its thread's CPU time: the CPU clock also leaves
#   out what a VM's host stole, where the guest's kernel accounts steal (the paravirtual steal
#   clock of KVM guests), which no run queue shows.
# A sample's off time: its most delayed worker's (the larger of the two readings), over the
# sample's wall time. Not the calling thread's run_delay: unpinned, it waits beside a worker
# while that worker computes (part of every sample, even on a quiet machine), which delays nothing.
_TEAM_NS = [0, 0]  # team calls' wall time, their most delayed worker's wall less CPU time
_LAST_TEAM = [None]  # the team that ran last: its `tids`, the workers' thread ids
_SCHEDSTAT: dict[int, int | None] = {}  # thread id -> an open schedstat file (pread re-reads it)


def record_team_call(team, call_ns: int, off_ns: int) -> None:
    _TEAM_NS[0] += call_ns
    _TEAM_NS[1] += off_ns
    _LAST_TEAM[0] = team


def team_ns() -> tuple[int, int]:
    """(wall ns of every team call so far, the part of it their most delayed thread was off
    its CPU by its wall and CPU clocks)."""
    return _TEAM_NS[0], _TEAM_NS[1]


def run_delay_ns(tids) -> list[int] | None:
    """Each thread's time so far waiting on a run queue (ns; /proc/self/task/TID/schedstat's
    second field), None where any is unreadable. The files stay open: a pread costs ~1 us."""
    out = []
    for tid in tids:
        if tid not in _SCHEDSTAT:
            try:
                _SCHEDSTAT[tid] = os.open(f"/proc/self/task/{tid}/schedstat", os.O_RDONLY)
            except OSError:
                _SCHEDSTAT[tid] = None
        try:
            out.append(int(os.pread(_SCHEDSTAT[tid], 64, 0).split()[1]))
        except (OSError, TypeError, ValueError, IndexError):
            return None
    return out


class SampleOffCpu:
    """Around one sample (start(), then stop()): the share of its wall time that the CPU team
    which ran in it was kept off its CPUs; NaN where no team ran (torch ops). stop() also
    starts the next sample, so back-to-back samples read the counters once between them."""

    def __init__(self, clock_ns=time.perf_counter_ns):
        self.clock_ns = clock_ns

    def _read(self):
        team = _LAST_TEAM[0]
        return team, run_delay_ns(getattr(team, "tids", ())), team_ns(), self.clock_ns()

    def start(self) -> None:
        self.before = self._read()

    def stop(self) -> float:
        (team0, delay0, (call0, off0), t0) = self.before
        self.before = (team1, delay1, (call1, off1), t1) = self._read()
        if call1 == call0 or t1 <= t0:
            return math.nan
        off = off1 - off0
        if team1 is team0 and delay0 and delay1:  # the same workers at both ends
            off = max(off, max(b - a for a, b in zip(delay0, delay1)))
        return off / (t1 - t0)
