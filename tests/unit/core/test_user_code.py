"""User code that hangs or crashes (experiments/core/isolate.py): a workload job still ends, each
point a row that says why (`timeout`, `crashed`), the job's log kept; and a sweep with such a
workload still writes its report."""

from __future__ import annotations

import textwrap

import pandas as pd
import pytest

from tests.workflow_copy import ROOT, python

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


def _job(tmp_path, user_file, name: str, batches: str):
    out = tmp_path / f"{name}.parquet"
    run = python(ROOT, "-m", "experiments", "experiment=workload", f"experiment.workload={name}",
                 f"experiment.target={user_file}:make_{name}", f"experiment.batches={batches}",
                 "device=cpu", f"out={out}", "point_budget_s=0.02", "call_timeout_s=1",
                 "factory_timeout_s=1", timeout=120)
    assert run.returncode == 0, run.stdout[-3000:]
    return pd.read_parquet(out).set_index("batch"), run.stdout


CASES = [
    ("hang", "[2,3]", {2: "timeout", 3: "ok"},
     "the call did not return within 1 s (call_timeout_s); its process was stopped"),
    ("slow", "[1,2]", {1: "timeout", 2: "timeout"},
     "the factory did not return within 1 s (factory_timeout_s); its process was stopped"),
    ("segv", "[1,2]", {1: "crashed", 2: "crashed"}, "the factory killed the process with SIGSEGV"),
    ("abort", "[1]", {1: "crashed"}, "the factory killed the process with SIGABRT"),
    ("exit", "[1,2]", {1: "crashed", 2: "crashed"}, "the factory called sys.exit(3)"),
]


@pytest.mark.parametrize("name, batches, statuses, message", CASES, ids=[c[0] for c in CASES])
def test_user_code_that_hangs_or_crashes_becomes_rows(tmp_path, user_file, name, batches,
                                                       statuses, message):
    rows, log = _job(tmp_path, user_file, name, batches)
    assert rows.status.to_dict() == statuses
    failed = rows[rows.status != "ok"]
    assert (failed.message == message).all(), failed.message.tolist()
    assert f"wrote {tmp_path / name}.parquet" in log  # the job's log says what happened
    if name != "exit":  # caught in the process: no new one
        assert f"{message}; the job goes on in a new process" in log


def test_job_settings_bound_user_code():
    from experiments.core.config import ConfigError, job_default, job_config
    from experiments.workload import WorkloadConfig

    assert job_default("call_timeout_s") == 60 and job_default("factory_timeout_s") == 120
    cfg = WorkloadConfig(workload="w", target="m:make_w", kwargs={}, batches=[1], max_call_s=1.0,
                         rotate_bytes_factor=1.0, max_copies=1, profile_batches=[],
                         ncu_batches=[])
    with pytest.raises(ConfigError, match="call_timeout_s=0"):
        job_config(cfg, device="cpu", dtype="float32", out="/tmp/x.parquet", call_timeout_s=0)
