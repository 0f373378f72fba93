"""User code under a time limit, its crash turned into rows: a workload's factory and call, a
`place` target (experiments/workload.py, experiments/cli/place.py).

A job that runs user code forks a worker before it touches a device (`supervise`); the worker
does the whole job as usual and tells its supervisor, through a pipe, which user phase it enters
and for how long at most (`phase`: a few messages a point, none while calls are timed). A phase
past its limit has the worker killed; a worker that dies inside a phase (a signal, os._exit, a C
library's exit) is reported the same way. Either way the supervisor forks a new worker that
writes that point as a `timeout` or `crashed` row without running it again, and measures the
rest: the sweep goes on and its report is written. sys.exit in user code is caught in-process.
Built-in experiments never fork: only a module with USER_CODE = True is supervised.
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys
import time
from contextlib import contextmanager
from typing import Callable

from experiments.core.forked import on_parent_death, run_then_exit

_pipe: int | None = None  # a worker's pipe to its supervisor; None: nobody watches
_failed: dict[str, tuple[str, str]] = {}  # phase key -> (status, message) from an earlier worker


class UserCodeFailed(Exception):
    """User code that timed out or crashed the process; `status`: the row's status."""

    def __init__(self, status: str, message: str):
        super().__init__(message)
        self.status = status


def _send(message: dict) -> None:
    if _pipe is not None:
        os.write(_pipe, json.dumps(message).encode() + b"\n")


@contextmanager
def phase(key: str, what: str, limit_s: float, why: str = "call_timeout_s"):
    """Run the body as user code: `key` names the point (its rows), `what` the code ("the
    factory"), `why` the setting the limit comes from. A point that failed in an earlier worker
    raises its failure at once instead of running again."""
    if key in _failed:
        raise UserCodeFailed(*_failed[key])
    _send({"key": key, "what": what, "limit_s": limit_s, "why": why})
    try:
        yield
    except SystemExit as exc:  # BaseException: it would end the job without a row
        raise UserCodeFailed("crashed", f"{what} called sys.exit({exc.code!r})") from None
    finally:
        _send({"end": key})


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def supervise(body: Callable[[], int], log=None) -> int:
    """body() in a forked worker, watched (see the module's doc); its exit status. Where fork is
    missing, body() runs here unwatched."""
    log = log or (lambda line: print(line, file=sys.stderr, flush=True))
    if not hasattr(os, "fork"):
        return body()
    failed: dict[str, tuple[str, str]] = {}
    while True:
        read, write = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            _work(body, write, failed)  # never returns
        os.close(write)
        ended = _watch(pid, read)
        os.close(read)
        if ended[0] == "exit":
            code, current = ended[1], ended[2]
            if code == 0 or current is None:
                if code < 0:
                    log(f"rooflab: the job's process was killed by {signal_name(-code)} "
                        "outside user code")
                return 128 - code if code < 0 else code
            how = (f"killed the process with {signal_name(-code)}" if code < 0 else
                   f"ended the process with exit code {code} (os._exit or a C library's exit)")
            failed[current["key"]] = ("crashed", f"{current['what']} {how}")
        else:
            current = ended[1]
            failed[current["key"]] = ("timeout", f"{current['what']} did not return within "
                                      f"{current['limit_s']:.3g} s ({current['why']}); its "
                                      "process was stopped")
        log(f"rooflab: {current['key']}: {failed[current['key']][1]}; the job goes on in a "
            "new process")


def _watch(pid: int, read: int) -> tuple:
    """Follow the worker's phases until it exits ("exit", status, open phase or None) or one
    runs past its limit ("timeout", that phase: the worker is killed)."""
    current, deadline, buffer = None, None, b""
    while True:
        wait = None if deadline is None else max(0.0, deadline - time.monotonic())
        ready, _, _ = select.select([read], [], [], wait)
        if not ready:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return "timeout", current
        chunk = os.read(read, 1 << 16)
        if not chunk:  # the worker's end closed: it exited
            _, status = os.waitpid(pid, 0)
            return "exit", os.waitstatus_to_exitcode(status), current
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            message = json.loads(line)
            if "end" in message:
                current, deadline = None, None
            else:
                current, deadline = message, time.monotonic() + message["limit_s"]


def _work(body: Callable[[], int], write: int, failed: dict) -> None:
    """The worker: dies with its supervisor, hands its files over as the job would, runs body."""
    def work():
        global _pipe, _failed
        on_parent_death(signal.SIGKILL)
        # the fork server's pipe for finished files belongs to the job: the worker is the job now
        from experiments.core.store import COMMIT_FD

        owner, sep, fd = os.environ.get(COMMIT_FD, "").partition(":")
        if sep and owner == str(os.getppid()):
            os.environ[COMMIT_FD] = f"{os.getpid()}:{fd}"
        if hasattr(sys.stdout, "reconfigure"):  # a killed worker's log lines are kept
            sys.stdout.reconfigure(line_buffering=True)
        _pipe, _failed = write, failed
        return body()

    run_then_exit(work)
