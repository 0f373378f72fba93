"""Other processes on a GPU while a point measures it: a steady co-tenant makes steady, slow points
that pass every spread filter, so it must be seen, not inferred from the times.

NVML lists the processes with a context on the GPU (compute and graphics) and, where the driver
keeps them, per-process SM utilization samples. A process of this run (the job's process and its
descendants, a collective's ranks; the run's other jobs) is ours; any other process that NVML saw busy on the SM since
just before the point is a co-tenant. Where NVML keeps no per-process samples, every other listed
process counts. Where none of the listed pids is ours, NVML numbers them in another pid namespace
(a container): all but one (ours) are others.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

from experiments.core.cpu_time import process_stats

BEFORE_S = 1.0  # the per-process samples from this long before the window: "just before it"
_ROOT = {"pid": None}  # the job's process, where it is not this one (a collective's rank)
# "hostname:pid" of the run's Snakemake process, set in its environment (workflow/rules/
# common.smk): its jobs are all its descendants, and a job ending as the next starts is no
# co-tenant of it; on another host (a cluster job) the pid means nothing
RUN = "ROOFLAB_RUN"


def mark_run() -> None:
    """Name this process the run's root for the jobs it starts (their environment inherits it)."""
    os.environ[RUN] = f"{socket.gethostname()}:{os.getpid()}"


def _run_root() -> int | None:
    host, _, pid = os.environ.get(RUN, "").partition(":")
    return int(pid) if host == socket.gethostname() and pid.isdigit() else None


def job_process_is(pid: int) -> None:
    """Count `pid` and its descendants as this job's own (a spawned rank calls it with its
    parent's pid, so that its sibling ranks are not taken for co-tenants)."""
    _ROOT["pid"] = pid


def _children(proc: Path = Path("/proc")) -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for pid, fields in process_stats(proc):
        kids.setdefault(int(fields[1]), []).append(pid)  # [1]: the parent's pid
    return kids


def own_pids(proc: Path = Path("/proc")) -> set[int]:
    """This run's processes: this process, its job's root (this process unless job_process_is
    said otherwise) and the run's (mark_run), and every descendant of those roots."""
    roots = {_ROOT["pid"] or os.getpid(), _run_root()} - {None}
    kids, own, todo = _children(proc), roots | {os.getpid()}, list(roots)
    while todo:
        for child in kids.get(todo.pop(), ()):
            if child not in own:
                own.add(child)
                todo.append(child)
    return own


def others(pids: list[int] | None, busy: set[int] | None, own: set[int]) -> int | None:
    """How many other processes used the GPU: NVML's `pids` not in `own` and seen busy
    (`busy`: pids with SM utilization above 0; None where NVML keeps no per-process samples,
    then every other listed one counts). None where NVML could not list them, or listed none
    (this job holds a context, so NVML hides the processes)."""
    if not pids:  # we hold a context: an empty list means NVML shows no processes here
        return None
    theirs = [p for p in pids if p not in own]
    if len(theirs) == len(pids):  # none is ours: another pid namespace's numbers
        return len(pids) - 1
    if busy is None:
        return len(theirs)
    return sum(p in busy for p in theirs)


def listed(nvml) -> list[int] | None:
    """PIDs with a compute or graphics context on the GPU (`nvml`: conditions' _Nvml), None
    where neither list can be read."""
    lists = [nvml.call(name) for name in ("nvmlDeviceGetComputeRunningProcesses",
                                          "nvmlDeviceGetGraphicsRunningProcesses")]
    if all(x is None for x in lists):
        return None
    return sorted({p.pid for x in lists if x for p in x})


def busy_since(nvml, since_s: float) -> set[int] | None:
    """PIDs whose SM utilization NVML sampled above 0 since `since_s` (epoch seconds); None where
    the driver keeps no per-process samples. No sample since then is an empty set, not None."""
    fn = getattr(nvml.nvml, "nvmlDeviceGetProcessUtilization", None)
    if fn is None or "process_utilization" in nvml.dead:
        return None
    try:
        samples = fn(nvml.handle, int(since_s * 1e6))  # NVML's timestamps are in us
    except Exception as e:  # pynvml's error classes are made at import: match by name
        if type(e).__name__ == "NVMLError_NotFound":
            return set()
        nvml.dead.add("process_utilization")
        return None
    return {s.pid for s in samples if s.smUtil > 0}


__all__ = ["BEFORE_S", "RUN", "mark_run", "job_process_is", "own_pids", "others", "listed", "busy_since"]
