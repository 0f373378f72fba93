"""CPU lists ('0,4-7') and pinning a process to them. No torch here: a job pins itself before its
heavy imports, so even they run on its own cores (experiments/__main__.py)."""

from __future__ import annotations

import os


def parse_cpus(text) -> set[int]:
    """'0,4-7' -> {0, 4, 5, 6, 7}; '' or 'all' -> empty (no pinning). Raises ValueError."""
    cpus: set[int] = set()
    if str(text or "").strip() in ("", "all"):
        return cpus
    for part in filter(None, (p.strip() for p in str(text).split(","))):
        lo, _, hi = part.partition("-")
        lo, hi = int(lo), int(hi or lo)
        if lo < 0 or hi < lo:
            raise ValueError(part)
        cpus |= set(range(lo, hi + 1))
    return cpus


def pin_process(text) -> set[int]:
    """Pin this process to the CPUs of `text` that it may use (a Slurm allocation's may be fewer);
    threads started later inherit it. Returns the CPUs pinned to (empty: not pinned)."""
    try:
        wanted = parse_cpus(text)
    except ValueError:
        return set()  # the job's config check names the bad value
    if not wanted or not hasattr(os, "sched_setaffinity"):
        return set()
    allowed = wanted & set(os.sched_getaffinity(0))
    if allowed:
        os.sched_setaffinity(0, allowed)
    return allowed


def pin_from_argv(argv) -> None:
    """A job's `cpus=...` override, applied before anything else is imported."""
    for arg in argv:
        if arg.startswith("cpus="):
            pin_process(arg.split("=", 1)[1].strip("'\""))
