"""A signal to `rooflab run` stops the whole tree: Snakemake, the fork server and the jobs; it
leaves no Snakemake lock, no socket folder and no partial file, says so in one line, and the next
run goes on from there (experiments/cli/stopping.py)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.conftest import wait_for
from tests.workflow_copy import copy_repo, python

pytestmark = [pytest.mark.system,  # runs sweeps and other processes
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")]

ROW = re.compile(r"bandwidth \w+ \w+ n=\d+:")  # a job's log line for one measured point
# two CPU jobs of six points, a second or more each: one is caught measuring
SWEEP = {"bandwidth": {"dtypes": ["float32", "float64"],
                       "cpu": {"sizes": [16384, 65536, 262144], "ops": ["copy", "add"]}}}


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, parent, process group) of a process; None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[0], int(fields[1]), int(fields[2])


def _processes() -> dict[int, tuple[str, int, int]]:
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (st := _stat(int(entry.name))):
            found[int(entry.name)] = st
    return found


def _tree(root: int) -> set[int]:
    """Every live descendant of `root`."""
    procs, tree, grew = _processes(), {root}, True
    while grew:
        more = {pid for pid, (state, ppid, _) in procs.items() if ppid in tree and state != "Z"}
        grew = bool(more - tree)
        tree |= more
    return tree - {root}


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _alive(pids) -> list[str]:
    return [f"{pid}: {_cmdline(pid)[:120]}" for pid in pids
            if (st := _stat(pid)) and st[0] != "Z"]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT],
                         ids=lambda s: signal.Signals(s).name)
def test_a_signal_stops_the_whole_run_and_the_next_run_goes_on(tmp_path, request, signum):
    repo = copy_repo(tmp_path / "repo", job={"cpu": {"point_budget_s": 0.3}}, experiments=SWEEP)
    # the fork server's socket folder lands here, and nothing else's; short: a socket's path
    # has at most 107 bytes
    temp = Path(tempfile.mkdtemp(prefix="rl-", dir="/tmp"))
    request.addfinalizer(lambda: shutil.rmtree(temp, ignore_errors=True))
    env = os.environ | {"PYTHONPATH": str(repo), "PYTHONUNBUFFERED": "1", "TMPDIR": str(temp)}
    logs = repo / "results" / "logs" / "ci" / "cpu" / "bandwidth"
    run = subprocess.Popen([sys.executable, "-m", "experiments.cli.rooflab", "run", "--cores",
                            "2"], cwd=repo, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        def measuring():  # a job's log shows a point, and that job still runs
            return any(ROW.search(log.read_text()) for log in logs.glob("*.log")) \
                and any("experiment=bandwidth" in _cmdline(p) for p in _tree(run.pid))
        assert wait_for(measuring, timeout=60, poll_s=0.1), "no job was caught measuring"
        tree = _tree(run.pid)
        kinds = {"snakemake": "-m snakemake", "the fork server": "experiments.sweep.forkserver",
                 "a job": "experiment=bandwidth"}
        assert all(any(mark in _cmdline(p) for p in tree) for mark in kinds.values()), [
            _cmdline(p)[:100] for p in tree]
        snakemake = next(p for p in tree if "-m snakemake" in _cmdline(p))
        run.send_signal(signum)
        out, _ = run.communicate(timeout=45)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
    assert run.returncode == 128 + signum, out[-3000:]
    name = signal.Signals(signum).name
    assert out.rstrip().splitlines()[-1] == (
        f"rooflab: stopped by {name}; the next `rooflab run` picks up where this one stopped")
    assert "Traceback" not in out and "KeyboardInterrupt" not in out, out[-3000:]
    # nothing of the tree runs: not one process it had, none in Snakemake's group
    assert not _alive(tree), _alive(tree)
    assert not [p for p, (state, _, group) in _processes().items()
                if group == snakemake and state != "Z"]
    assert not list((repo / ".snakemake" / "locks").glob("*"))
    assert not list(temp.glob("rooflab-forkserver-*"))
    results = repo / "results"
    assert not list(results.rglob("*.tmp")), list(results.rglob("*.tmp"))
    for data in (results / "measurements").rglob("*.parquet"):  # a finished job's, whole
        assert data.stat().st_size > 0

    again = python(repo, "-m", "experiments.cli.rooflab", "run", "--cores", "2", timeout=180,
                   env={"PYTHONPATH": str(repo), "TMPDIR": str(temp)})
    assert again.returncode == 0, again.stdout[-4000:]
    assert (results / "report.html").is_file()
    assert not list(temp.glob("rooflab-forkserver-*"))


def test_the_fork_server_ends_with_its_launcher_even_while_it_loads(tmp_path):
    """A server still importing when its Snakemake is killed (-9, no onerror): it ends too, and
    its socket folder goes."""
    (tmp_path / "slow_import.py").write_text("import time\ntime.sleep(30)\n")
    launcher = (
        "import sys, tempfile, time\n"
        f"tempfile.tempdir = {str(tmp_path)!r}\n"
        "from experiments.sweep import forkserver\n"
        "forkserver.launch(modules=('slow_import',))\n"
        "time.sleep(60)\n")
    root = Path(__file__).resolve().parents[3]
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(tmp_path), str(root)])}
    env.pop("ROOFLAB_FORKSERVER", None)
    proc = subprocess.Popen([sys.executable, "-c", launcher], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert wait_for(lambda: _tree(proc.pid), timeout=10)
        server = next(iter(_tree(proc.pid)))
        assert "experiments.sweep.forkserver" in _cmdline(server)
        assert list(tmp_path.glob(f"rooflab-forkserver-{proc.pid}-*"))
        time.sleep(1.0)  # in its imports
        proc.kill()
        proc.wait()
        assert wait_for(lambda: not _alive([server]), timeout=10), "outlived its launcher"
        assert wait_for(lambda: not list(tmp_path.glob("rooflab-forkserver-*")), timeout=5)
    finally:
        proc.kill()
        proc.wait()


# A Snakemake that ignores SIGTERM, with a job that does too: both are killed past the grace
# time, and what they left is removed, but only what this run made.
STUBBORN = """
import os, signal, tempfile, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
open('.snakemake/locks/0.input.lock', 'w').close()
open('results/.bw.parquet.x1y2.tmp', 'w').close()
os.mkdir(os.path.join(tempfile.gettempdir(), f'rooflab-forkserver-{os.getpid()}-ab'))
if os.fork() == 0:
    open('job.pid', 'w').write(str(os.getpid()))
    time.sleep(60)
time.sleep(60)
"""


def test_what_ignores_sigterm_is_killed_and_what_it_left_removed(tmp_path, monkeypatch):
    import threading

    from experiments.cli import stopping

    monkeypatch.setattr(stopping, "GRACE_S", 1.0)
    monkeypatch.chdir(tmp_path)  # Snakemake runs where rooflab does
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "temp"))
    (tmp_path / "temp").mkdir()
    (tmp_path / "results").mkdir()
    (tmp_path / ".snakemake" / "locks").mkdir(parents=True)
    other = tmp_path / ".snakemake" / "locks" / "9.output.lock"  # another run's: kept
    other.touch()
    job = tmp_path / "job.pid"
    threading.Thread(target=lambda: wait_for(job.exists) and os.kill(os.getpid(),
                                                                     signal.SIGTERM)).start()
    t0 = time.monotonic()
    status, signum = stopping.call([sys.executable, "-c", STUBBORN],
                                   os.environ | {"TMPDIR": str(tmp_path / "temp")},
                                   tmp_path, tmp_path / "results")
    assert (status, signum) == (-signal.SIGKILL, signal.SIGTERM)
    assert time.monotonic() - t0 < 20
    assert not _alive([int(job.read_text())])
    assert list((tmp_path / ".snakemake" / "locks").iterdir()) == [other]
    assert not list((tmp_path / "temp").iterdir())
    assert not list((tmp_path / "results").iterdir())
    assert stopping.message(signum).startswith("rooflab: stopped by SIGTERM; the next")
