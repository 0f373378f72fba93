"""The fork server: a job run through it behaves as the same job run as its own process."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import wait_for
from experiments.sweep import forkserver

pytestmark = pytest.mark.skipif(not hasattr(os, "pidfd_open") or not sys.platform.startswith(
    "linux"), reason="fork server: Linux only")

ROOT = Path(__file__).resolve().parents[1]

# The job: reports what it ran with, to its own stdout/stderr, and exits with a chosen status.
JOB = """
import os, sys, time
print("cwd", os.getcwd())
print("argv", sys.argv[1:])
print("env", os.environ.get("JOB_VALUE"), os.environ.get("ROOFLAB_FORKSERVER"))
print("pid", os.getpid(), flush=True)
print("to stderr", file=sys.stderr)
if "sleep" in sys.argv:
    open(sys.argv[-1], "w").write(str(os.getpid()))
    time.sleep(60)
sys.exit(int(sys.argv[1]))
"""
# The client, as experiments/__main__.py starts: delegate, else run here.
CLIENT = """
import sys
from experiments.sweep.forkserver import delegate
delegate("job_module")
print("ran in the client itself")
sys.exit(99)
"""


@pytest.fixture
def server(tmp_path):
    (tmp_path / "job_module.py").write_text(JOB)
    (tmp_path / "client.py").write_text(CLIENT)
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    path = str(tmp_path / "server.sock")
    proc = subprocess.Popen([sys.executable, "-m", "experiments.sweep.forkserver", path, "json"],
                            stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout.readline().strip() == "ready"
    yield env | {forkserver.ENV: f"{socket.gethostname()}:{path}"}, proc
    proc.terminate()
    proc.wait(timeout=10)


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
    # a zombie is dead: the server reaps it
    return Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0] != "Z"


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


@pytest.mark.parametrize("argv, runs", [
    (["snakemake", "--cores", "all"], True),
    (["snakemake", "-c4", "-p", "--config", "host=x"], True),
    (["snakemake", "-n"], False),
    (["snakemake", "-np", "--cores", "1"], False),
    (["snakemake", "--dry-run"], False),
    (["snakemake", "--lint"], False),
    (["snakemake", "--dag"], False),
    (["snakemake", "--summary"], False),
])
def test_no_server_for_a_snakemake_run_without_jobs(argv, runs):
    assert forkserver.runs_jobs(argv) is runs


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
