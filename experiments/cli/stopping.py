"""`rooflab run`'s Snakemake, stopped whole by a signal to rooflab.

Snakemake runs in a session of its own, with the fork server and every job in its process group:
a Ctrl-C in the terminal (SIGINT), a SIGTERM or a closed terminal (SIGHUP) reaches rooflab only
(and so does Ctrl-Z, passed on to the group as SIGSTOP, then SIGCONT).
rooflab then sends SIGTERM to the whole group: Snakemake stops scheduling and removes its lock,
each job's client and job end, the fork server removes its socket. What still runs after GRACE_S
is killed (SIGKILL), and what a killed process could not remove is removed here: the Snakemake
locks this run wrote, the fork server's socket folder, temp files beside the results. A second
signal kills at once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from experiments.core.cpu_time import process_stats
from experiments.sweep import forkserver

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
GRACE_S = 20.0  # a job's SIGTERM ends it at once; Snakemake's own stop takes a second or two
POLL_S = 0.1


def call(cmd: list[str], env: dict, workdir: Path, results: Path) -> tuple[int, int | None]:
    """Run `cmd` (Snakemake) and wait for it: (its exit status, None), or, where a signal of
    SIGNALS came meanwhile, (its status, that signal) once the whole group is gone and cleaned."""
    received: list[int] = []
    group: list[int] = []  # Snakemake's process group, once it runs
    locks = set(_locks(workdir))

    def on_signal(signum, _frame):
        received.append(signum)

    def on_suspend(_signum, _frame):  # Ctrl-Z: the whole tree stops, and goes on with rooflab
        for pid in group:
            _signal(pid, signal.SIGSTOP)
        signal.signal(signal.SIGTSTP, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTSTP)  # stopped here until SIGCONT (fg, bg)
        signal.signal(signal.SIGTSTP, on_suspend)
        for pid in group:
            _signal(pid, signal.SIGCONT)

    before = {s: signal.signal(s, on_signal) for s in SIGNALS}
    before[signal.SIGTSTP] = signal.signal(signal.SIGTSTP, on_suspend)
    try:
        started = time.time()
        proc = subprocess.Popen(cmd, env=env, start_new_session=True)
        group.append(proc.pid)
        status, deadline = None, None
        while status is None:
            if received and deadline is None:
                _signal(proc.pid, signal.SIGTERM)
                _signal(proc.pid, signal.SIGCONT)  # a tree stopped by Ctrl-Z acts on it too
                deadline = time.monotonic() + GRACE_S
            if deadline is not None and (len(received) > 1 or time.monotonic() > deadline):
                _signal(proc.pid, signal.SIGKILL)
            try:
                status = proc.wait(timeout=POLL_S)
            except subprocess.TimeoutExpired:
                pass
        if not received:
            return status, None
        _signal(proc.pid, signal.SIGTERM)  # what Snakemake started after the first one
        _wait_gone(proc.pid, deadline or time.monotonic() + GRACE_S, received)
        for path in set(_locks(workdir)) - locks:  # a killed Snakemake's: the next run's way
            path.unlink(missing_ok=True)
        forkserver.remove_folders(proc.pid)
        _remove_temp_files(results, started)
        return status, received[0]
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)


def message(signum: int, run: bool = True) -> str:
    """The one line rooflab ends with when a signal stopped it."""
    resume = "; the next `rooflab run` picks up where this one stopped" if run else ""
    return f"rooflab: stopped by {signal.Signals(signum).name}{resume}"


def _signal(group: int, signum: int) -> None:
    try:
        os.killpg(group, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _wait_gone(group: int, deadline: float, received: list[int]) -> None:
    """Wait until no process of `group` runs (the fork server sees its parent gone within half a
    second, then ends its jobs), killing what is left past `deadline`, or at a second signal."""
    killed = None
    while _members(group):
        if killed is None and (len(received) > 1 or time.monotonic() > deadline):
            _signal(group, signal.SIGKILL)
            killed = time.monotonic()
        elif killed is not None and time.monotonic() > killed + 5:
            return  # unkillable (a process in the kernel's uninterruptible sleep): leave it
        time.sleep(POLL_S)


def _members(group: int) -> list[int]:
    """The live processes of process group `group` (zombies are gone for good: not counted)."""
    proc = Path("/proc")
    if not proc.is_dir():  # not Linux: whether any process of the group remains
        try:
            os.killpg(group, 0)
            return [group]
        except (ProcessLookupError, PermissionError):
            return []
    return [pid for pid, fields in process_stats(proc)
            if fields[0] != "Z" and int(fields[2]) == group]  # state, ppid, pgrp


def _locks(workdir: Path) -> list[Path]:
    folder = workdir / ".snakemake" / "locks"
    return list(folder.glob("*.lock")) if folder.is_dir() else []


def _remove_temp_files(results: Path, since: float) -> None:
    """The temp files (core/store.py's .NAME.XXXX.tmp) a killed job or step left in `results`:
    its results never are partial, and nothing is left beside them."""
    if not results.is_dir():
        return
    for path in results.rglob(".*.tmp"):
        try:
            if path.is_file() and path.stat().st_mtime >= since - 1:
                path.unlink()
        except OSError:
            pass
