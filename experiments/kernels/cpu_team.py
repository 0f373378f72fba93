"""A team of worker threads, one per CPU it is given, each pinned to its CPU, that run a
GIL-free (numba nogil) kernel on their own slice of the work, all at once.

Why not numba's prange or torch's pool: neither says which core a thread runs on, and the CPU
roofline wants one thread per physical core, pinned (cores and SMT siblings are recorded per row).
Linux pins the calling thread with sched_setaffinity(0); elsewhere the threads run unpinned.
A worker first-touches its slice of every array it fills, so the pages lie in its NUMA node.
"""

from __future__ import annotations

import atexit
import os
import threading
import time

from experiments.core.cpu_time import record_team_call

# params scope of a point run on a team's first CPU alone, beside the team's own (intensity.py)
ONE_CPU = "one_cpu"


class Team:
    """Worker i runs on cpus[i]; run() hands worker i its arguments and waits for all."""

    def __init__(self, cpus):
        self.cpus = list(cpus)
        size = len(self.cpus) + 1  # the workers and the caller
        self._start, self._done = threading.Barrier(size), threading.Barrier(size)
        self._job = None
        self._errors: list[BaseException] = []
        self._took = [(0, 0)] * len(self.cpus)  # each worker's last part: (wall ns, CPU ns)
        self.tids = [0] * len(self.cpus)  # the workers' thread ids (core/cpu_time.py reads them)
        self._threads = [threading.Thread(target=self._work, args=(i,), daemon=True,
                                          name=f"rooflab-cpu{cpu}")
                         for i, cpu in enumerate(self.cpus)]
        for t in self._threads:
            t.start()

    def _work(self, i: int) -> None:
        self.tids[i] = threading.get_native_id()
        if hasattr(os, "sched_setaffinity"):
            try:
                os.sched_setaffinity(0, {self.cpus[i]})  # 0: this thread (Linux)
            except OSError:
                pass
        while True:
            self._start.wait()
            if self._job is None:
                return
            fn, parts = self._job
            w0, c0 = time.perf_counter_ns(), time.thread_time_ns()
            try:
                fn(*parts[i])
            except BaseException as exc:  # re-raised by run() in the caller
                self._errors.append(exc)
            c1 = time.thread_time_ns()
            self._took[i] = (time.perf_counter_ns() - w0, c1 - c0)
            self._done.wait()

    def run(self, fn, parts) -> None:
        """fn(*parts[i]) on worker i, all at once; returns when every worker is done."""
        if len(parts) != len(self.cpus):
            raise ValueError(f"{len(parts)} parts for a team of {len(self.cpus)}")
        self._job, self._errors = (fn, parts), []
        self._start.wait()
        self._done.wait()
        if self._errors:
            raise self._errors[0]
        # the call's wall time and its most delayed thread's time off its CPU (core/cpu_time.py)
        record_team_call(self, max(w for w, _ in self._took),
                         max(max(0, w - c) for w, c in self._took))

    def close(self) -> None:
        if self._threads:
            self._job = None
            self._start.wait()
            for t in self._threads:
                t.join()
            self._threads = []


def split(n: int, workers: int, align: int) -> list[tuple[int, int]]:
    """[lo, hi) ranges of n items for each worker, boundaries on multiples of `align`."""
    blocks = -(-n // align)
    bounds = [min(n, (blocks * i // workers) * align) for i in range(workers + 1)]
    return list(zip(bounds[:-1], bounds[1:]))


def job_cpus(ctx) -> list[int]:
    """The CPUs of a CPU job's team: one per physical core (device facts `team`), else the
    CPUs this process may run on."""
    return list((ctx.facts.extra or {}).get("team") or []) or sorted(os.sched_getaffinity(0))


_TEAMS: dict[tuple, Team] = {}


def team(cpus) -> Team:
    """The team of these CPUs, started once per process."""
    key = tuple(cpus)
    if key not in _TEAMS:
        _TEAMS[key] = Team(key)
    return _TEAMS[key]


@atexit.register
def _close_all() -> None:
    for t in _TEAMS.values():
        t.close()
