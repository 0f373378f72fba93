"""Faults provoked on purpose: a killed job, a bad file in the dataset, points past memory or past
what the device supports, noisy timings, hostile config values. Each must end in a clean state,
a row that says what happened, or an error that names the cause."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from experiments.core import store
from experiments.core.device import device_facts
from experiments.core.provenance import config_hash
from experiments.core.runner import Context
from experiments.core.schema import to_table
from tests.workflow_copy import ROOT
from experiments.core.config import Settings

CPU = torch.device("cpu")


# -- a corrupt or foreign file in the dataset ------------------------------------------------

def _measurement_table():
    row = {"experiment": "bandwidth", "op": "copy", "host": "ci", "device": "cpu",
           "device_kind": "cpu", "dtype": "float32", "status": "ok", "time_s": 1e-6}
    return to_table([row], {"run_id": "r1"})


@pytest.mark.parametrize("kind", ["corrupt", "foreign"])
def test_bad_file_stops_collect_naming_it(tmp_path, capsys, kind):
    from experiments.steps.command import main

    good = store.write_atomic(_measurement_table(), tmp_path / "good.parquet")
    bad = tmp_path / f"{kind}.parquet"
    if kind == "corrupt":  # a file cut short, as a copy interrupted halfway leaves it
        bad.write_bytes(good.read_bytes()[:200])
    else:  # valid Parquet, but not ours
        pq.write_table(pa.table({"x": [1, 2]}), bad)
    out = tmp_path / "measurements.parquet"
    assert main(["collect", str(out), str(good), str(bad)]) == 2
    assert str(bad) in capsys.readouterr().err
    assert not out.exists()


# -- out of memory, unsupported ---------------------------------------------------------------

def _mem_total() -> int:
    with open("/proc/meminfo") as f:
        return int(next(line for line in f if line.startswith("MemTotal")).split()[1]) * 1024


def test_point_past_memory_is_an_oom_row_and_the_sweep_goes_on(run_experiment):
    past = 2 * _mem_total()
    rows = run_experiment("bandwidth", "float32",
                          [f"experiment.sizes=[16384,{past},65536]", "experiment.ops=[copy]"])
    assert list(rows.status) == ["ok", "oom", "ok"], rows[["n", "status", "message"]]
    assert "out of memory" in rows.message[1]


@pytest.mark.skipif(Path("/proc/sys/vm/overcommit_memory").read_text().strip() == "1",
                    reason="with overcommit always on, a huge allocation succeeds and the "
                           "kernel's OOM killer ends the process instead")
def test_allocation_the_allocator_refuses_is_an_oom_row(run_experiment):
    n = 1 << 20  # a 4 TiB matrix: torch's CPU allocator raises, nothing is touched
    rows = run_experiment("matmul", "float32", [f"experiment.sizes=[{n}]"])
    assert list(rows.status) == ["oom"], rows[["n", "status", "message"]]


def test_dtypes_the_cpu_lacks_are_rows_not_crashes(run_experiment):
    tf32 = run_experiment("matmul", "tf32", ["experiment.sizes=[64,128]"])
    assert list(tf32.status) == ["unsupported", "unsupported"]
    assert "TF32" in tf32.message[0]
    # torch 2.13 runs fp8 GEMMs (_scaled_mm) on a CPU, so fp8 is measured here; older builds
    # raise "not implemented", which becomes `unsupported`
    fp8 = run_experiment("matmul", "float8_e4m3", ["experiment.sizes=[64]"])
    assert list(fp8.status) in (["ok"], ["unsupported"]), fp8[["status", "message"]]


# -- a noisy point ----------------------------------------------------------------------------

class FakeTimer:
    """Hands out prepared per-call samples, one batch per timed run, and counts the runs."""

    name = "fake"

    def __init__(self, *batches):
        self.batches, self.runs = [np.asarray(b, dtype=float) for b in batches], 0

    def sync(self):
        pass

    def run(self, fn, inner, samples):
        self.runs += 1
        return self.batches[min(self.runs, len(self.batches)) - 1]


NOISY, QUIET = [1.0, 1.0, 5.0, 1.0, 9.0], [1.0, 1.01, 0.99, 1.0, 1.0]


@pytest.mark.parametrize("batches, runs, noisy, median", [
    ((NOISY,), 2, True, 1.0),  # measured again, still noisy: flagged
    ((NOISY, QUIET), 2, False, 1.0),  # measured again, quiet: the quiet run is kept
    ((QUIET,), 1, False, 1.0),  # quiet the first time: measured once
])
def test_noisy_point_is_measured_again_then_flagged(batches, runs, noisy, median):
    # every sample in one run: the runs count the retries
    ctx = Context(device=CPU, dtype="float32", facts=device_facts(CPU),
                  settings=Settings.defaults().but(cv_threshold=0.1, retries=1, precision=0.0))
    timer = FakeTimer(*batches)
    stats = ctx.time(lambda i: None, timer=timer)
    assert timer.runs == runs
    assert stats["noisy"] is noisy and stats["time_s"] == median
    assert (stats["cv"] > 0.1) is noisy


# -- what reproduces a file -------------------------------------------------------------------

def test_file_records_what_reproduces_it(run_experiment, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # the job reads git state from its working directory
    rows = run_experiment("bandwidth", "float32", ["experiment.sizes=[16384]", "experiment.ops=[copy]"])
    meta = store.read_metadata(tmp_path / "bandwidth-float32.parquet")
    assert {"git", "config", "config_hash", "packages", "device_facts", "device_state_start",
            "device_state_end", "started", "wall_s", "run_id", "host"} <= set(meta)
    assert set(meta["git"]) == {"commit", "dirty"}
    if (ROOT / ".git").exists():
        assert re.fullmatch(r"[0-9a-f]{40}", meta["git"]["commit"])
        assert isinstance(meta["git"]["dirty"], bool)
    assert meta["config_hash"] == config_hash(meta["config"])
    job = meta["config"]["job"]
    assert job["experiment"]["sizes"] == [16384] and job["dtype"] == "float32"
    assert {"python", "torch", "numpy", "pandas", "pyarrow", "hydra-core"} <= set(meta["packages"])
    assert meta["device_facts"]["name"] and meta["device_facts"]["compute_units"] >= 1
    # the device's clocks (and load) at the start and at the end of the job
    assert meta["device_state_start"] and meta["device_state_start"].keys() == meta["device_state_end"].keys()
    assert (rows.run_id == meta["run_id"]).all() and (rows.git_commit == meta["git"]["commit"]).all()
    json.dumps(meta)  # plain JSON, readable without rooflab


# -- values the sweep's schema and the experiments' dataclasses refuse ------------------------

NAN, INF = float("nan"), float("inf")
