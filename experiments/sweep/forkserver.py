"""Jobs forked from a process that has already imported torch: the sweep's start-up cost, paid once.

A job (`python -m experiments ...`, `python -m experiments.steps ...`) spends a second or
more of a small CPU's time importing torch, pandas, Hydra and the experiments before it measures
anything; over the ~60 jobs of a sweep that is most of the quick preset. The Snakefile launches
one server per run while Snakemake parses (`launch()`; onstart waits for it, `start()`); it
imports all that once, and for each job forks a child that runs the job's module as `python -m`
would, in the job's directory, environment and standard streams. Each job is still its own
process (fork: a fresh copy, nothing carried from one job to the next), the server never
touches a GPU (CUDA does not survive a fork), and the child drops the server's address from its
environment so processes it starts (ncu's) run for themselves.

    python -m experiments ...      # `delegate()` at the top of each __main__: with ROOFLAB_FORKSERVER
                                   # set and its server on this host, the job runs there;
                                   # otherwise (a cluster node, no server) right here, as before

The client forwards SIGINT/SIGTERM/SIGHUP to the forked job and exits with its status; a client
that dies (killed by Snakemake) takes its job with it, and so does a server that dies (the job's
parent-death signal, child.py). A job's files are put in place by its client once it ended well:
one declared failed never has its file accepted. Each job takes the code on disk when it starts
(child.fresh_code). The server exits when its parent (the Snakemake run) does, or after
IDLE_EXIT_S with nothing to do. Linux only (fd passing, pidfd); elsewhere jobs run as plain
processes.
"""

from __future__ import annotations

import atexit
import gc
import json
import os
import select
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from experiments.core.forked import on_parent_death
from experiments.sweep import child
from experiments.sweep.warm import plan, preload, steps

ENV = "ROOFLAB_FORKSERVER"  # "hostname:socket path" of this run's server
# The launcher's PID, set by launch() where the thread starting the server is the main one: the
# parent-death signal follows the thread that forked, so from another one it could end it early.
DIE_WITH_PARENT = "ROOFLAB_FORKSERVER_DIE_WITH_PARENT"
FOLDER = "rooflab-forkserver-"  # + the launching process's PID + "-": its socket's folder
MAX_MESSAGE = 1 << 20
IDLE_EXIT_S = 600.0  # no job running nor asked for this long: nobody will (a dry run's server)
START_TIMEOUT_S = 60.0


# -- client -------------------------------------------------------------------------------------

def address() -> str | None:
    """This host's server socket from the environment, or None."""
    host, _, path = os.environ.get(ENV, "").partition(":")
    return path if path and host == socket.gethostname() else None


def delegate(module: str) -> None:
    """Run `python -m module` (this process's arguments) in the fork server and exit with its
    status; return at once when there is none, so the caller runs the job itself."""
    path = address()
    if path is None or not hasattr(socket, "send_fds"):
        return
    try:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(path)
    except OSError:
        return  # the run's server is gone: run here
    sys.exit(_client(conn, module, sys.argv[1:]))


def _client(conn: socket.socket, module: str, args: list[str]) -> int:
    """Run the job in the server; its files become visible only here, once it ended well: a job
    whose client or server died never puts a file in place (_commit)."""
    request = {"module": module, "argv": args, "cwd": os.getcwd(), "env": dict(os.environ)}
    pending, handed = os.pipe()  # the job writes "temp\0final" per file here (core/store.py)
    socket.send_fds(conn, [json.dumps(request).encode() + b"\n"], [0, 1, 2, handed])
    os.close(handed)
    reader = conn.makefile("rb")
    line = reader.readline()
    if not line:
        print(f"rooflab: the fork server at {address()} closed without running the job",
              file=sys.stderr)
        return _commit(pending, False) or 1
    pid = json.loads(line)["pid"]

    def forward(signum, _frame):
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, forward)
    line = reader.readline()
    if not line:
        print("rooflab: the fork server stopped while the job ran", file=sys.stderr)
        return _commit(pending, False) or 1
    status = int(json.loads(line)["status"])
    return _commit(pending, status == 0) or status


def _commit(pending: int, ok: bool) -> int:
    """Put the job's finished files in place (ok), or remove them; 1 where one could not be."""
    os.set_blocking(pending, False)  # the job has ended: what it handed over is in the pipe
    data = b""
    try:
        while chunk := os.read(pending, 1 << 16):
            data += chunk
    except BlockingIOError:
        pass
    os.close(pending)
    failed = 0
    for line in data.decode(errors="replace").splitlines():
        temp, _, final = line.partition("\0")
        try:
            os.replace(temp, final) if ok else os.unlink(temp)
        except OSError as exc:
            print(f"rooflab: {final}: {exc.strerror or exc}", file=sys.stderr)
            failed = 1
    return failed


# -- server -------------------------------------------------------------------------------------

def serve(path: str, modules=None, later=None) -> None:
    """Listen on `path`; fork one child per request, after loading `modules` (and `later` between
    requests; both default to warm.plan()'s). Returns when the parent process exits or on
    SIGTERM, ending the jobs still running."""
    if modules is None:
        modules, later = plan()
    later = () if later is None else later
    parent, jobs = os.getppid(), {}  # jobs: pid -> (client connection, pidfd)
    cpu_jobs: set[int] = set()  # jobs measuring on the CPU: no loading beside them

    def end(*_):  # stop(): its jobs die with it (PR_SET_PDEATHSIG), its socket and folder go
        _remove(path)
        os._exit(0)

    signal.signal(signal.SIGTERM, end)
    if launcher := os.environ.pop(DIE_WITH_PARENT, None):  # ends while it preloads too (seconds)
        on_parent_death(signal.SIGTERM)
        if str(parent) != launcher:  # the launcher died before prctl took effect
            end()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is Snakemake's to report, and the jobs'
    preload(modules)
    later = steps(later)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ, None)
    print("ready", flush=True)  # start() waits for this line
    os.dup2(2, 1)  # whatever a later import prints goes to stderr: nobody reads the pipe now
    try:
        idle_since = time.monotonic()
        while os.getppid() == parent:
            # a step of loading beside a CPU job's points is other load on its cores: it would
            # be measured as contention (and the point retried), so steps wait for its end
            stepping = later is not None and not cpu_jobs & jobs.keys()
            events = sel.select(timeout=0 if stepping else 0.5)
            if events or jobs:
                idle_since = time.monotonic()
            elif time.monotonic() - idle_since > IDLE_EXIT_S:
                break
            if not events and stepping and next(later, None) is None:
                later = None  # idle: one step of loading what some jobs need, till all are in
            for key, _ in events:
                if key.data is None:
                    pid, argv = _accept(listener, sel, jobs)
                    cpu_jobs |= {pid} if "device=cpu" in argv else set()
                    continue
                kind, pid = key.data
                if pid not in jobs:
                    continue
                conn, pidfd = jobs[pid]
                if kind == "exit":  # report its status, then forget it
                    _, status = os.waitpid(pid, 0)
                    code = os.waitstatus_to_exitcode(status)  # -N: killed by signal N
                    _reply(conn, {"status": 128 - code if code < 0 else code})  # as a shell says
                    _forget(sel, jobs, pid)
                    cpu_jobs.discard(pid)
                else:  # the client hung up before its job ended (killed): end the job too
                    sel.unregister(conn)
                    _kill(pid)
    finally:
        for pid in list(jobs):
            _kill(pid)
            os.waitpid(pid, 0)
            _forget(sel, jobs, pid)
        listener.close()
        _remove(path)
        gc.unfreeze()  # a normal exit frees what it froze (nanobind, Triton's, reports leaks)


def _accept(listener, sel, jobs) -> tuple[int | None, list]:
    """Fork the job a client asks for: (its pid, its arguments); (None, []) for a bad request."""
    conn, _ = listener.accept()
    conn.settimeout(10)
    try:
        data, fds, _, _ = socket.recv_fds(conn, MAX_MESSAGE, 4)
        while data and not data.endswith(b"\n") and len(data) < MAX_MESSAGE:
            more = conn.recv(MAX_MESSAGE)
            if not more:
                break
            data += more
        request = json.loads(data)
    except (OSError, ValueError):
        conn.close()
        return None, []
    sys.stdout.flush()
    sys.stderr.flush()
    server = os.getpid()
    # What the server loaded is never garbage: frozen, out of the collector's sight, it is not
    # walked by a job's full collections (core/runner.py frozen_heap's first: a few tenths of a
    # second of every job on a small CPU), and its pages stay shared (CPython's advice for a fork
    # without exec).
    gc.freeze()
    pid = os.fork()
    if pid == 0:
        child.die_with(server)
        sel.close()
        listener.close()
        conn.close()
        child.run(request, fds, ENV)  # never returns
    for fd in fds:
        os.close(fd)
    conn.settimeout(None)
    _reply(conn, {"pid": pid})
    pidfd = os.pidfd_open(pid)
    jobs[pid] = (conn, pidfd)
    sel.register(pidfd, selectors.EVENT_READ, ("exit", pid))
    sel.register(conn, selectors.EVENT_READ, ("client", pid))
    return pid, list(request.get("argv") or [])


def _forget(sel, jobs, pid: int) -> None:
    conn, pidfd = jobs.pop(pid)
    for fileobj in (conn, pidfd):
        try:
            sel.unregister(fileobj)
        except (KeyError, ValueError):
            pass
    conn.close()
    os.close(pidfd)


def _reply(conn, message: dict) -> None:
    try:
        conn.sendall(json.dumps(message).encode() + b"\n")
    except OSError:
        pass


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass


# -- the workflow's side ------------------------------------------------------------------------

# (process, socket path, time.monotonic() at launch) of the server launch() began
_SERVER: tuple | None = None

# Snakemake options under which it runs no job: no server for them. Short ones (-n, -l, -S, -D,
# -t) count inside a group such as -np too.
NO_JOBS = {"--dry-run", "--dryrun", "--lint", "--list", "--list-rules", "--summary",
           "--detailed-summary", "--dag", "--rulegraph", "--filegraph", "--unlock",
           "--cleanup-metadata", "--touch", "--list-changes", "--lc", "--report",
           "--archive", "--containerize", "--print-compilation", "--d3dag", "--version"}
NO_JOBS_SHORT = set("nlSDt")


def runs_jobs(argv: list[str]) -> bool:
    """Whether a Snakemake command line may run jobs (not a dry run, a listing, a report...)."""
    return not any(arg in NO_JOBS or (arg[:1] == "-" and arg[1:2] not in ("-", "")
                                      and NO_JOBS_SHORT & set(arg[1:])) for arg in argv[1:])


def usable() -> bool:
    return sys.platform.startswith("linux") and hasattr(os, "pidfd_open") and \
        os.environ.get(ENV) != "off"


def launch(python: str = sys.executable, modules: tuple = ()) -> None:
    """Start the server without waiting for it (the Snakefile, while Snakemake goes on parsing and
    building its DAG); `modules` to preload instead of warm.plan()'s."""
    global _SERVER
    if _SERVER is not None or not usable():
        return
    # named by this PID: whoever ran this process (`rooflab run`) finds what a kill left
    path = os.path.join(tempfile.mkdtemp(prefix=f"{FOLDER}{os.getpid()}-"), "socket")
    atexit.register(stop)  # a run refused before onstart never reaches onsuccess/onerror
    main = threading.current_thread() is threading.main_thread()
    # unbuffered: start() reads it line by line behind select(), which sees no Python buffer
    proc = subprocess.Popen([python, "-m", "experiments.sweep.forkserver", path, *modules],
                            stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, bufsize=0,
                            env=os.environ | ({DIE_WITH_PARENT: str(os.getpid())} if main else {}))
    _SERVER = (proc, path, time.monotonic())


def start(python: str = sys.executable, modules: tuple = ()) -> subprocess.Popen | None:
    """Wait until the server is ready (launching it if launch() did not; the Snakefile's onstart)
    and point jobs at it through the environment they inherit. None, and jobs run as plain
    processes, where fork servers cannot work, ROOFLAB_FORKSERVER=off, or it does not come up."""
    launch(python, modules)
    if _SERVER is None:
        return None
    proc, path, launched = _SERVER
    if os.environ.get(ENV, "").endswith(":" + path):
        return proc  # ready already
    # "ready" once its first imports are done (after whatever they print); a server that fails
    # or hangs leaves the jobs to run as plain processes
    waited = time.monotonic()
    deadline = waited + START_TIMEOUT_S
    line = b"-"
    while line and line.strip() != b"ready":
        ready, _, _ = select.select([proc.stdout], [], [], max(0.0, deadline - time.monotonic()))
        line = proc.stdout.readline() if ready else b""
    if not line:
        stop()
        return None
    os.environ[ENV] = f"{socket.gethostname()}:{path}"
    # the sweep's log says what its start-up waited for: the server's imports, or Snakemake's DAG
    print(f"rooflab: fork server ready {time.monotonic() - launched:.1f} s after its launch, "
          f"{time.monotonic() - waited:.1f} s of them waited for here", file=sys.stderr)
    return proc


def stop() -> None:
    """End the server start() began (the Snakefile's onsuccess/onerror) and remove its socket."""
    global _SERVER
    if _SERVER is None:
        return
    (proc, path, _), _SERVER = _SERVER, None
    os.environ.pop(ENV, None)
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    _remove(path)


def remove_folders(pid: int) -> None:
    """Remove the socket folders of the servers process `pid` launched, once it and they are
    gone (killed: nobody ran stop())."""
    for folder in Path(tempfile.gettempdir()).glob(f"{FOLDER}{pid}-*"):
        _remove(str(folder / "socket"))


def _remove(path: str) -> None:
    """The socket, and the folder launch() made for it (nothing is left in the temp dir)."""
    Path(path).unlink(missing_ok=True)
    if Path(path).parent.name.startswith(FOLDER):
        try:
            Path(path).parent.rmdir()
        except OSError:
            pass


if __name__ == "__main__":  # python -m experiments.sweep.forkserver SOCKET [MODULE ...]
    serve(sys.argv[1], *((sys.argv[2:], ()) if sys.argv[2:] else ()))
