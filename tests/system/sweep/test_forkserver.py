"""The fork server: a job run through it behaves as the same job run as its own process."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import wait_for
from experiments.sweep import forkserver
from tests.unit.sweep.test_forkserver import (  # noqa: F401 (fixtures)
    CLIENT, JOB, WRITER, server, start_server)

pytestmark = pytest.mark.skipif(not hasattr(os, "pidfd_open") or not sys.platform.startswith(
    "linux"), reason="fork server: Linux only")

ROOT = Path(__file__).resolve().parents[3]

# The job: reports what it ran with, to its own stdout/stderr, and exits with a chosen status.
# The client, as experiments/__main__.py starts: delegate, else run here.


# A job that writes a measurement file the way every job does (core/store.py), then ends as told.


def run_client(env, cwd, *args, **kw):
    return subprocess.Popen([sys.executable, str(cwd.parent / "client.py"), *args], cwd=cwd,
                            env=env, stdout=kw.pop("stdout", subprocess.PIPE),
                            stderr=subprocess.PIPE, text=True, **kw)


@pytest.mark.system
def test_a_job_runs_in_the_server_with_the_clients_streams_directory_and_status(
        server, tmp_path):
    env, proc = server
    work = tmp_path / "work"
    work.mkdir()
    client = run_client(env | {"JOB_VALUE": "v1"}, work, "3", "a b")
    out, err = client.communicate(timeout=30)
    assert client.returncode == 3
    assert "ran in the client itself" not in out
    assert f"cwd {work}" in out
    assert "argv ['3', 'a b']" in out
    # the job sees the client's environment, less the server's address (ncu's children run alone)
    assert "env v1 None" in out
    assert "to stderr" in err
    pid = int(out.split("pid ")[1].split()[0])
    assert pid != client.pid  # forked by the server, not run by the client


@pytest.mark.system
def test_without_a_server_the_job_runs_in_the_client(server, tmp_path):
    env, proc = server
    work = tmp_path / "work"
    work.mkdir()
    for gone in ({forkserver.ENV: ""}, {forkserver.ENV: "another-host:/x"},
                 {forkserver.ENV: f"{socket.gethostname()}:{tmp_path}/no-such.sock"}):
        out, _ = run_client(env | gone, work, "0").communicate(timeout=30)
        assert "ran in the client itself" in out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead: the server reaps it (and may, between the two reads or during the
    # second: the read then fails with ESRCH)
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


@pytest.mark.system
@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_ending_the_client_ends_its_job(server, tmp_path, how):
    """Snakemake stops a job by signalling its shell's processes: the forked job must go too,
    whether the client forwards the signal (SIGTERM) or just dies (SIGKILL)."""
    env, proc = server
    work = tmp_path / "work"
    work.mkdir()
    pidfile = tmp_path / "job.pid"
    client = run_client(env, work, "0", "sleep", str(pidfile))
    assert wait_for(lambda: pidfile.exists() and pidfile.read_text())
    job = int(pidfile.read_text())
    assert _alive(job)
    client.send_signal(getattr(signal, how))
    client.wait(timeout=15)
    if how == "SIGTERM":
        assert client.returncode == 128 + signal.SIGTERM  # the job's end, as a shell reports it
    assert wait_for(lambda: not _alive(job)), "the job outlived its client"
    assert proc.poll() is None  # the server goes on


@pytest.mark.system
def test_the_server_ends_with_its_parent(tmp_path):
    """A Snakemake run killed outright never runs onerror: its server must not linger."""
    path = tmp_path / "s.sock"
    parent = subprocess.Popen(
        [sys.executable, "-c", "import subprocess, sys, time\n"
         f"p = subprocess.Popen([sys.executable, '-m', 'experiments.sweep.forkserver', "
         f"{str(path)!r}, 'json'], stdout=subprocess.PIPE, text=True)\n"
         "p.stdout.readline(); print(p.pid, flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True, cwd=ROOT)
    server_pid = int(parent.stdout.readline())
    assert _alive(server_pid) and path.exists()
    parent.kill()
    parent.wait()
    assert wait_for(lambda: not _alive(server_pid))
    assert wait_for(lambda: not path.exists())


@pytest.mark.system
def test_start_and_stop_from_the_workflow(monkeypatch):
    monkeypatch.delenv(forkserver.ENV, raising=False)
    monkeypatch.chdir(ROOT)
    proc = forkserver.start(modules=("json",))
    assert proc is not None
    path = forkserver.address()
    assert path and Path(path).exists()
    forkserver.stop()
    assert proc.poll() is not None
    assert forkserver.ENV not in os.environ and not Path(path).exists()
    monkeypatch.setenv(forkserver.ENV, "off")
    assert forkserver.start(modules=("json",)) is None


@pytest.mark.system
def test_start_waits_past_what_the_imports_print(monkeypatch, tmp_path):
    """A preloaded module that prints before the server's "ready" must not make start() give up
    (or wait out its timeout): the jobs would then run without the server."""
    (tmp_path / "noisy_module.py").write_text("print('a warning from an import')\nprint('more')\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), str(ROOT)]))
    monkeypatch.delenv(forkserver.ENV, raising=False)
    monkeypatch.chdir(ROOT)
    t0 = time.monotonic()
    proc = forkserver.start(modules=("noisy_module",))
    try:
        assert proc is not None and forkserver.address()
        assert time.monotonic() - t0 < 20
    finally:
        forkserver.stop()


def _writer(env, tmp_path, mode):
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    out, pidfile = work / f"{mode}.parquet", tmp_path / f"{mode}.pid"
    client = run_client(env | {"JOB_MODULE": "writer_job"}, work, mode, str(out), str(pidfile))
    return client, out, pidfile


@pytest.mark.system
def test_a_jobs_file_is_in_place_only_once_it_ended_well(server, tmp_path):
    env, _ = server
    for mode, status in (("ok", 0), ("fail", 4)):
        client, out, _ = _writer(env, tmp_path, mode)
        client.communicate(timeout=60)
        assert client.returncode == status
        assert out.exists() is (status == 0), mode
    assert not list((tmp_path / "work").glob(".*.tmp"))  # the failed job's temp file is gone


@pytest.mark.system
def test_a_file_handed_over_by_a_job_whose_client_was_killed_is_never_accepted(server, tmp_path):
    env, proc = server
    client, out, pidfile = _writer(env, tmp_path, "hang")
    assert wait_for(lambda: list(out.parent.glob(".*.tmp")), timeout=60)  # written, handed over
    job = int(pidfile.read_text())
    client.kill()  # Snakemake gave up on the job: it is failed
    client.wait(timeout=15)
    assert wait_for(lambda: not _alive(job)), "the job outlived its client"
    time.sleep(0.5)
    assert not out.exists() and proc.poll() is None


@pytest.mark.system
def test_kill_9_on_the_server_ends_its_jobs_and_their_late_files(server, tmp_path):
    """The issue's case: the job went on measuring beside the next one, and wrote its file 2 s
    after its failure was logged; the rerun took that file as done."""
    env, proc = server
    client, out, pidfile = _writer(env, tmp_path, "late")
    assert wait_for(lambda: pidfile.exists() and pidfile.read_text(), timeout=60)
    job = int(pidfile.read_text())
    proc.kill()
    proc.wait()
    _, err = client.communicate(timeout=30)
    assert client.returncode == 1 and "the fork server stopped while the job ran" in err
    assert wait_for(lambda: not _alive(job)), "the job outlived its killed server"
    time.sleep(4)  # past the moment it would have written
    assert not out.exists() and not list(out.parent.glob(".*.tmp"))


@pytest.mark.system
def test_a_job_runs_the_code_on_disk_when_it_starts(tmp_path):
    """Code edited while a sweep runs (normal while developing an experiment): the next job
    forked by the server runs the edit, not what the server imported."""
    copy = tmp_path / "src"
    shutil.copytree(ROOT / "experiments", copy / "experiments",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "probe.py").write_text(
        "import experiments.core.devicenames as d\nprint('edited', hasattr(d, 'EDITED'))\n")
    env, proc = start_server(tmp_path, root=copy, modules=("experiments.core.devicenames",))
    try:
        assert proc.stdout.readline().strip() == "ready"
        env |= {"JOB_MODULE": "probe"}
        work = tmp_path / "work"
        work.mkdir()
        out, _ = run_client(env, work).communicate(timeout=60)
        assert "edited False" in out, out
        source = copy / "experiments" / "core" / "devicenames.py"
        source.write_text(source.read_text() + "\nEDITED = 1\n")
        out, _ = run_client(env, work).communicate(timeout=60)
        assert "edited True" in out, out
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.mark.system
def test_ctrl_c_leaves_the_server_quiet_and_its_end_clean(tmp_path):
    """Ctrl-C reaches the whole process group: the server, busy importing, printed a 50-line
    KeyboardInterrupt traceback, and at its end 'Exception ignored in atexit callback'."""
    env, proc = start_server(tmp_path, modules=("torch", "pandas"), stderr=subprocess.PIPE)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)  # while it imports
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGINT)
    time.sleep(0.3)
    assert proc.poll() is None
    proc.terminate()
    assert proc.wait(timeout=10) == 0
    assert proc.stderr.read() == ""
    assert not (tmp_path / "server.sock").exists()


STEPPER = """
import os, time
def steps():
    while True:  # one timestamp a step, as long as the server takes steps
        with open(os.environ["STEP_LOG"], "a") as f:
            f.write(f"{time.time()}\\n")
        time.sleep(0.01)
        yield
"""
TIMED_JOB = """
import sys, time
t0 = time.time()
time.sleep(1.0)
open(sys.argv[-1], "w").write(f"{t0} {time.time()}")
"""


@pytest.mark.system
def test_nothing_is_loaded_beside_a_cpu_jobs_points(tmp_path):
    """The server loads what later jobs need in steps between requests; beside a CPU job, whose
    points another process's work would disturb (and have retried as contended), it takes none;
    beside a GPU job it goes on."""
    (tmp_path / "stepper.py").write_text(STEPPER)
    (tmp_path / "job_module.py").write_text(TIMED_JOB)
    (tmp_path / "client.py").write_text(CLIENT)
    log = tmp_path / "steps.log"
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),
                        "STEP_LOG": str(log)}
    path = str(tmp_path / "server.sock")
    proc = subprocess.Popen([sys.executable, "-c", "import sys; from experiments.sweep import "
                             "forkserver; forkserver.serve(sys.argv[1], ('json',), "
                             "('stepper:steps',))", path], stdout=subprocess.PIPE, text=True,
                            env=env, cwd=tmp_path)
    env |= {forkserver.ENV: f"{socket.gethostname()}:{path}"}
    try:
        assert proc.stdout.readline().strip() == "ready"
        work = tmp_path / "work"
        work.mkdir()
        inside = {}
        for device in ("cpu", "cuda:0"):
            out = tmp_path / f"{device}.times"
            client = run_client(env, work, f"device={device}", str(out))
            client.communicate(timeout=60)
            t0, t1 = map(float, out.read_text().split())
            steps = [float(x) for x in log.read_text().split()]
            # a step under way when the job arrived may end just after its start
            inside[device] = sum(t0 + 0.1 < s < t1 for s in steps)
        assert inside["cpu"] == 0 and inside["cuda:0"] > 10, inside
    finally:
        proc.terminate()
        proc.wait(timeout=10)
