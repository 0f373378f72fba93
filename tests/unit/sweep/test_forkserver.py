"""The fork server: a job run through it behaves as the same job run as its own process."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from experiments.sweep import forkserver

pytestmark = pytest.mark.skipif(not hasattr(os, "pidfd_open") or not sys.platform.startswith(
    "linux"), reason="fork server: Linux only")

ROOT = Path(__file__).resolve().parents[3]

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
import os, sys
from experiments.sweep.forkserver import delegate
delegate(os.environ.get("JOB_MODULE", "job_module"))
print("ran in the client itself")
sys.exit(99)
"""


# A job that writes a measurement file the way every job does (core/store.py), then ends as told.
WRITER = """
import os, sys, time
import pyarrow as pa
from experiments.core.store import write_atomic
mode, out, pidfile = sys.argv[1:4]
open(pidfile, "w").write(str(os.getpid()))
if mode == "late":
    time.sleep(3)
write_atomic(pa.table({"x": [1]}), out)
if mode == "hang":
    time.sleep(60)
sys.exit(4 if mode == "fail" else 0)
"""


def start_server(tmp_path, root=ROOT, modules=("json",), stderr=None):
    (tmp_path / "job_module.py").write_text(JOB)
    (tmp_path / "writer_job.py").write_text(WRITER)
    (tmp_path / "client.py").write_text(CLIENT)
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(tmp_path), str(root)])}
    path = str(tmp_path / "server.sock")
    proc = subprocess.Popen([sys.executable, "-m", "experiments.sweep.forkserver", path,
                             *modules], stdout=subprocess.PIPE, stderr=stderr, text=True, env=env,
                            cwd=tmp_path)  # not the checkout: `root` is the code it imports
    return env | {forkserver.ENV: f"{socket.gethostname()}:{path}"}, proc


@pytest.fixture
def server(tmp_path):
    env, proc = start_server(tmp_path)
    assert proc.stdout.readline().strip() == "ready"
    yield env, proc
    proc.terminate()
    proc.wait(timeout=10)


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


def test_nothing_is_left_in_the_temp_dir(monkeypatch, tmp_path):
    """A run's server folder goes when the run ends, however it ends: stopped, or its parent
    gone before onstart (a refused run: the Snakefile launched the server while parsing)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.delenv(forkserver.ENV, raising=False)
    forkserver.launch(modules=("json",))
    assert list(tmp_path.glob("rooflab-forkserver-*"))
    forkserver.stop()
    assert not list(tmp_path.glob("rooflab-forkserver-*"))
    # the atexit hook of a run that never started: a process that only launches, then exits
    run = subprocess.run([sys.executable, "-c", "import tempfile, sys\n"
                          f"tempfile.tempdir = {str(tmp_path)!r}\n"
                          "from experiments.sweep import forkserver\n"
                          "forkserver.launch(modules=('json',))\nsys.exit(1)"],
                         cwd=ROOT, env=os.environ | {"PYTHONPATH": str(ROOT)}, timeout=60)
    assert run.returncode == 1
    assert not list(tmp_path.glob("rooflab-forkserver-*"))
