"""User code that hangs or crashes (experiments/core/isolate.py): a workload job still ends, each
point a row that says why (`timeout`, `crashed`), the job's log kept; and a sweep with such a
workload still writes its report."""

from __future__ import annotations

import textwrap

import pandas as pd
import pytest
import yaml

from tests.workflow_copy import ROOT, SWEEP, python

USER = '''
import os, signal, sys, time
import torch

def _linear(batch, dtype, device, generator):
    lin = torch.nn.Linear(4, 4).to(device=device, dtype=dtype)
    return lin, (torch.randn(batch, 4, generator=generator, device=device, dtype=dtype),)

def make_hang(batch, dtype, device, generator):
    lin, args = _linear(batch, dtype, device, generator)
    def fn(x):
        if x.shape[0] == 2:  # batch 2 never returns; batch 3 after it is measured
            time.sleep(3600)
        return lin(x)
    return fn, args

def make_slow(batch, dtype, device, generator):
    time.sleep(3600)

def make_segv(batch, dtype, device, generator):
    os.kill(os.getpid(), signal.SIGSEGV)

def make_exit(batch, dtype, device, generator):
    sys.exit(3)

def make_abort(batch, dtype, device, generator):
    os.abort()
'''


@pytest.fixture
def user_file(tmp_path):
    path = tmp_path / "mine.py"
    path.write_text(textwrap.dedent(USER))
    return path


@pytest.mark.system
def test_a_sweep_with_a_hanging_and_a_crashing_workload_writes_its_report(tmp_path, user_file):
    work = tmp_path / "work"
    (work / "config").mkdir(parents=True)
    sweep = yaml.safe_load(SWEEP.read_text())
    sweep["job"]["cpu"] |= {"call_timeout_s": 1, "factory_timeout_s": 1}
    sweep["workloads"] = {
        "hang": {"target": f"{user_file}:make_hang", "dtypes": ["float32"],
                 "cpu": {"batches": [2, 3]}},
        "segv": {"target": f"{user_file}:make_segv", "dtypes": ["float32"],
                 "cpu": {"batches": [1]}}}
    (work / "config" / "config.yaml").write_text(yaml.safe_dump(sweep))
    run = python(work, "-m", "experiments.cli.rooflab", "run", "--cores", "2", "--results", "out",
                 timeout=600, env={"PYTHONPATH": str(ROOT)})
    assert run.returncode == 0, run.stdout[-4000:]
    assert (work / "out" / "report.html").stat().st_size > 10_000
    jobs = work / "out" / "measurements" / "ci" / "cpu" / "workload"
    hang = pd.read_parquet(jobs / "hang-float32.parquet").set_index("batch")
    assert hang.status.to_dict() == {2: "timeout", 3: "ok"}
    segv = pd.read_parquet(jobs / "segv-float32.parquet")
    assert segv.status.tolist() == ["crashed"]
    assert segv.message.tolist() == ["the factory killed the process with SIGSEGV"]
    log = (work / "out" / "logs" / "ci" / "cpu" / "workload" / "segv-float32.log").read_text()
    assert "the factory killed the process with SIGSEGV; the job goes on" in log


def _job(tmp_path, user_file, name: str, batches: str):
    out = tmp_path / f"{name}.parquet"
    run = python(ROOT, "-m", "experiments", "experiment=workload", f"experiment.workload={name}",
                 f"experiment.target={user_file}:make_{name}", f"experiment.batches={batches}",
                 "device=cpu", f"out={out}", "point_budget_s=0.02", "call_timeout_s=5",
                 "factory_timeout_s=5", timeout=120)
    assert run.returncode == 0, run.stdout[-3000:]
    return pd.read_parquet(out).set_index("batch"), run.stdout


CASES = [
    ("hang", "[2,3]", {2: "timeout", 3: "ok"},
     "the call did not return within 5 s (call_timeout_s); its process was stopped"),
    ("slow", "[1,2]", {1: "timeout", 2: "timeout"},
     "the factory did not return within 5 s (factory_timeout_s); its process was stopped"),
    ("segv", "[1,2]", {1: "crashed", 2: "crashed"}, "the factory killed the process with SIGSEGV"),
    ("abort", "[1]", {1: "crashed"}, "the factory killed the process with SIGABRT"),
    ("exit", "[1,2]", {1: "crashed", 2: "crashed"}, "the factory called sys.exit(3)"),
]


@pytest.mark.parametrize("name, batches, statuses, message", CASES, ids=[c[0] for c in CASES])
def test_user_code_that_hangs_or_crashes_becomes_rows(tmp_path, user_file, name, batches,
                                                       statuses, message):
    # 5 s, not 1: a loaded machine can take a second for the first call in a new process
    rows, log = _job(tmp_path, user_file, name, batches)
    assert rows.status.to_dict() == statuses
    failed = rows[rows.status != "ok"]
    assert (failed.message == message).all(), failed.message.tolist()
    assert f"wrote {tmp_path / name}.parquet" in log  # the job's log says what happened
    if name != "exit":  # caught in the process: no new one
        assert f"{message}; the job goes on in a new process" in log
