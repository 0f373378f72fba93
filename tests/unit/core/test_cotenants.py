"""A GPU shared with another process: NVML's process list and per-process samples (a fake NVML
here; the real one in test_a_second_process_on_the_gpu_is_seen, on a GPU), the points' flag,
their retry, the fits that leave them out and the summary's first line."""

import os
import signal
import socket
import subprocess
import sys
import time
from types import SimpleNamespace

import pandas as pd
import pytest
import torch

from experiments.analysis.claims import contended
from experiments.analysis.health import shared_gpus, system_conditions
from experiments.core import conditions, cotenants
from experiments.core.conditions import Conditions
from experiments.core.timer import measure
from experiments.report.summary import text

from tests.unit.core.test_conditions import FakeNvml, PhasedTimer, fake_nvml  # noqa: F401 (a fixture)

GPU = torch.device("cuda", 0)
ME = os.getpid()


class SharedNvml(FakeNvml):
    """A fake NVML that also lists processes (`pids`) and per-process SM samples (`busy`: pid ->
    smUtil; None: the driver keeps none)."""

    def __init__(self, pids=(ME,), busy=None, **kw):
        super().__init__(**kw)
        self.state |= {"pids": list(pids), "busy": busy}

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        return [SimpleNamespace(pid=p, usedGpuMemory=1 << 30) for p in self.state["pids"]]

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle):
        return []

    def nvmlDeviceGetProcessUtilization(self, handle, since_us):
        if self.state["busy"] is None:
            raise NotImplementedError("no per-process samples")
        return [SimpleNamespace(pid=p, smUtil=u, timeStamp=since_us + 1)
                for p, u in self.state["busy"].items()]


@pytest.fixture
def shared_nvml(fake_nvml):
    return lambda **kwargs: fake_nvml(cls=SharedNvml, **kwargs)


@pytest.mark.parametrize("pids, busy, expected", [
    ([ME], {ME: 90}, 0),                       # alone
    ([ME, 4242], {ME: 60, 4242: 40}, 1),       # a co-tenant at work
    ([ME, 4242], {ME: 90}, 0),                 # a co-tenant holding memory, idle
    ([ME, 4242, 4343], None, 2),               # no per-process samples: every other one
    ([7001, 7002], {7001: 50, 7002: 50}, 1),   # another pid namespace: all but ours
    ([7001], None, 0),                         # another pid namespace, alone
    ([], None, None),                          # NVML shows no process: cannot tell
    (None, None, None),                        # NVML cannot list them
])
def test_other_processes_are_counted_from_nvmls_lists(pids, busy, expected):
    busy_pids = None if busy is None else {p for p, u in busy.items() if u > 0}
    assert cotenants.others(pids, busy_pids, {ME}) == expected


def test_this_jobs_descendants_are_its_own(tmp_path, monkeypatch):
    """A collective's ranks are the job's children: a rank names its parent as the job, so its
    siblings are its own, and a process outside the job's tree is not."""
    monkeypatch.delenv(cotenants.RUN, raising=False)
    tree = {ME: 1, 500: ME, 501: 500, 900: 1, 700: 1, 701: 700, 702: 700}  # pid -> ppid
    for pid, ppid in tree.items():
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(f"{pid} (py (x) y) S {ppid} 1 1 0")
    assert cotenants.own_pids(tmp_path) == {ME, 500, 501}
    monkeypatch.setitem(cotenants._ROOT, "pid", 500)  # as job_process_is(500) in a rank
    assert cotenants.own_pids(tmp_path) == {ME, 500, 501}
    assert 900 not in cotenants.own_pids(tmp_path)
    # 700: the run's Snakemake; 701, 702 its jobs (one ending as the other starts): ours
    monkeypatch.setenv(cotenants.RUN, f"{socket.gethostname()}:700")
    assert cotenants.own_pids(tmp_path) == {ME, 500, 501, 700, 701, 702}
    monkeypatch.setenv(cotenants.RUN, "another-host:700")  # a cluster job: the pid means nothing
    assert 701 not in cotenants.own_pids(tmp_path)


def test_a_point_beside_a_busy_process_is_flagged_contended(shared_nvml):
    shared_nvml(pids=[ME, 4242], busy={ME: 50, 4242: 50})
    with Conditions(GPU) as c:
        time.sleep(0.12)  # past one process reading
    out = c.summary(1e-3)
    assert out["gpu_other_processes"] == 1 and out["contended"] is True


def test_a_point_alone_on_the_gpu_is_not_flagged(shared_nvml):
    shared_nvml(pids=[ME], busy={ME: 99})
    with Conditions(GPU) as c:
        time.sleep(0.12)
    out = c.summary(1e-3)
    assert out["gpu_other_processes"] == 0 and out["contended"] is False


def test_a_shared_point_is_measured_again_and_the_quiet_retry_kept(shared_nvml):
    """The first run sees a co-tenant, the retry does not: two runs, the clean one kept."""
    fake = shared_nvml(pids=[ME, 4242], busy={4242: 80})
    quiet = {"pids": [ME], "busy": {}}
    t = PhasedTimer(fake, [{}, quiet], polls=100)  # process readings come every 0.1 s
    stats = measure(lambda i: None, GPU, 0.01, timer=t, retries=1, precision=0).stats
    assert t.runs == 2 and stats["contended"] is False and stats["gpu_other_processes"] == 0


def _gpu_rows(shared: int, of: int) -> pd.DataFrame:
    rows = pd.DataFrame({
        "source": "run", "host": "node", "device": "cuda:0", "device_kind": "cuda",
        "device_name": "NVIDIA H100", "experiment": "bandwidth", "status": "ok",
        "timer": "cuda_event", "time_s": 1e-3, "samples": 50, "inner_reps": 10,
        "other_cpu_share": 0.0, "gpu_other_processes": [1] * shared + [0] * (of - shared),
        "contended": [True] * shared + [False] * (of - shared),
        "measured_at": pd.Timestamp("2026-12-05 12:00", tz="UTC")}, index=range(of))
    return rows


def test_the_summary_says_first_which_gpu_was_shared_and_for_how_long():
    rows = _gpu_rows(shared=6, of=10)
    lines = shared_gpus(rows)
    assert lines == ["shared GPU: NVIDIA H100 (cuda:0 @ node) ran beside another process in 6 "
                     "of 10 points (3.0 s timed, 12:00:00-12:00:00 UTC); ceilings leave those "
                     "points out"]
    ceilings = pd.DataFrame({"source": ["run"], "system": ["NVIDIA H100 @ node"],
                             "device_name": ["NVIDIA H100"], "host": ["node"],
                             "device": ["cuda:0"], "ceiling": ["dram_bw"], "dtype": [None],
                             "value": [3e12], "ci_low": [2.9e12], "ci_high": [3.1e12],
                             "unit": ["B/s"]})
    claims = pd.DataFrame(columns=["kind", "system", "verdict", "claim"])
    assert text(ceilings, claims, None, shared=lines).splitlines()[0] == lines[0]
    assert shared_gpus(_gpu_rows(shared=0, of=10)) == []


def test_a_shared_gpus_points_put_its_claims_under_load():
    rows = _gpu_rows(shared=3, of=10)
    assert contended(rows).sum() == 3
    cond = system_conditions(rows)["NVIDIA H100 @ node"]
    assert cond["contended_share"] == pytest.approx(0.3)
    assert "another process ran on the GPU during 30 %" in cond["summary"]


def test_a_busy_host_still_counts_for_a_gpus_host_clocked_points():
    """The GPU flag (no co-tenant on the GPU) does not hide a busy CPU under a launch timing."""
    rows = _gpu_rows(shared=0, of=2).assign(timer="perf_counter_sync", other_cpu_share=0.6)
    assert contended(rows).all()


HOG = ("import sys, torch, time\nx = torch.randn(8192, 8192, device='cuda', "
       "dtype=torch.bfloat16)\nopen(sys.argv[1], 'w').write('ready')\nt = time.time()\n"
       "while time.time() - t < 60:\n    x @ x; torch.cuda.synchronize()\n")


def _point(x):
    """A GPU point of 300 products and its conditions, with the process readings it took."""
    with Conditions(GPU) as c:
        for _ in range(300):
            x @ x
        torch.cuda.synchronize()
        time.sleep(0.3)
    seen = [(s["t"] - c.t0, s["pids"], s["busy"]) for s in c.samples if "pids" in s]
    return c.summary(1e-3), seen


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_a_second_process_on_the_gpu_is_seen(tmp_path):
    """The real NVML: a bfloat16 matmul loop in another process (not one of ours: started by a
    shell that exits, as another user's job) flags a point; once it is gone, a point is clean."""
    x = torch.randn(4096, 4096, device="cuda")
    ready = tmp_path / "ready"
    script = tmp_path / "hog.py"
    script.write_text(HOG)
    pid = int(subprocess.run(["sh", "-c", f"{sys.executable} {script} {ready} >/dev/null 2>&1 &"
                              " echo $!"], capture_output=True, text=True, check=True).stdout)
    try:
        deadline = time.time() + 60
        while not ready.exists() and time.time() < deadline:
            time.sleep(0.1)
        time.sleep(2)
        beside, seen = _point(x)
    finally:
        os.kill(pid, signal.SIGKILL)
    time.sleep(1 + 2 * cotenants.BEFORE_S)  # its context gone, past the samples' look-back
    alone, _ = _point(x)
    assert beside["contended"] is True and beside["gpu_other_processes"] >= 1, (beside, seen)
    assert alone["contended"] is False, alone
