"""What a job forked by the fork server (forkserver.py) does first: die with its server, take the
code on disk, become the job its client asked for (streams, directory, environment, arguments),
then run its module as `python -m` would."""

from __future__ import annotations

import os
import signal
import sys

from experiments.core.forked import on_parent_death, run_then_exit


def die_with(server: int) -> None:
    """A forked job is killed when its server dies (kill -9 included): no job outlives the run
    that asked for it, measuring beside the next one."""
    on_parent_death(signal.SIGKILL)
    if os.getppid() != server:  # it died before prctl took effect
        os._exit(1)


def fresh_code() -> None:
    """A job runs the code on disk when it starts: where an `experiments` module the server
    loaded was edited since, the job drops them all and imports them anew."""
    if any(_stamp(name) != stamp for name, stamp in _STAMPS.items()):
        for name in [n for n in sys.modules if n == "experiments" or n.startswith("experiments.")]:
            del sys.modules[name]


def _stamp(name: str):
    try:
        st = os.stat(sys.modules[name].__file__)
    except (KeyError, AttributeError, TypeError, OSError):
        return None
    return st.st_mtime_ns, st.st_size


def stamp_loaded() -> None:
    for name in list(sys.modules):
        if (name == "experiments" or name.startswith("experiments.")) and name not in _STAMPS:
            _STAMPS[name] = _stamp(name)


_STAMPS: dict = {}  # module -> (mtime, size) of its file when the server imported it


def run(request: dict, fds: list[int], server_env: str) -> None:
    """Become the job: its streams, directory, environment and arguments; then `python -m`."""
    def job():
        for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
            signal.signal(signum, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C: KeyboardInterrupt
        for target, fd in zip((0, 1, 2), fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update({k: v for k, v in request["env"].items() if k != server_env})
        if len(fds) > 3:  # where the job hands its finished files to the client
            os.set_inheritable(fds[3], False)
            from experiments.core.store import COMMIT_FD  # loaded in the server already

            os.environ[COMMIT_FD] = f"{os.getpid()}:{fds[3]}"
        fresh_code()
        import random

        random.seed()  # as a fresh process would be, not the server's state
        sys.argv = [request["module"], *request["argv"]]
        import runpy

        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)

    run_then_exit(job)
