"""`rooflab validate` measuring real draws on this CPU (a job per device, each draw a workload
config of its own): every draw becomes a row with its status, the calls ok."""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd

from experiments.cli import validate


def test_held_out_draws_are_measured_into_one_job_file(tmp_path):
    opts = {"seed": 31, "count": 2, "max_copies": {"cpu": 2}, "calibrate": {}}
    assert validate.measure(SimpleNamespace(host="ci"), opts, ["cpu"], tmp_path) == 0
    files = validate.job_files(tmp_path)
    assert [f.name for f in files] == ["cpu-float32.parquet"]
    rows = pd.read_parquet(files[0])
    calls = rows[rows.variant.isna()]  # a call's row; its ops' rows carry variant aten_op
    assert len(calls) == 2 and (calls.status == "ok").all(), calls[["op", "status", "message"]]
    assert (calls.time_s > 0).all() and (calls.host == "ci").all()
