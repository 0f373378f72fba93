"""Every valid input runs, every bad one is refused in one clear line before any work (issue 23):
sizes past a row, nested --config values, read-only or full results, host labels, stray files,
published sets of another format, and a refused run leaving nothing in the temp dir."""

from __future__ import annotations

import errno
import json
import math
import os
import tempfile

import pyarrow.parquet as pq
import pytest
import torch

from experiments.core import schema, store
from experiments.core.device import device_facts
from experiments.core.runner import Context
from experiments.sweep import checks

from tests.workflow_copy import ROOT

PUBLISHED = ["results/published/h200/measurements.parquet",
             "results/published/h200/workloads.parquet",
             "results/published/h200x2/measurements.parquet"]


def _row(**extra):
    return {"experiment": "matmul", "op": "gemm", "host": "h", "device": "cpu",
            "device_kind": "cpu", "dtype": "float32", "status": "ok"} | extra


def test_a_size_past_int64_is_refused_before_measuring_and_the_file_is_still_written():
    ctx = Context(device=torch.device("cpu"), dtype="float32",
                  facts=device_facts(torch.device("cpu")))
    n = 2_000_000_000
    base = _row(n=n, working_set_bytes=3 * n * n * 4)
    row = ctx.point(base, lambda: pytest.fail("a point no row can hold was measured"))
    assert row["status"] == "skipped" and row["working_set_bytes"] is None
    assert "working_set_bytes=4.8e+19 is past what a row holds (int64" in row["message"]
    # a row that skipped Context.point (an experiment's own skip guard) still writes
    table = schema.to_table([_row(status="skipped", n=n, working_set_bytes=3 * n * n * 4,
                                  message="predicted 9 s per call")], {})
    got = table.to_pylist()[0]
    assert got["n"] == n and got["working_set_bytes"] is None
    assert got["message"].startswith("predicted 9 s per call; not measured: working_set_bytes")


def test_nested_config_values_are_coerced_from_text():
    given = {"cpu": {"point_budget_s": "0.5", "retries": "2", "use_graph": "false"},
             "cuda": {"sizes": ["256", "1e3"], "ops": ["copy"], "x": "-.5e-3"}}
    assert checks.coerce_nested(given) == {
        "cpu": {"point_budget_s": 0.5, "retries": 2, "use_graph": False},
        "cuda": {"sizes": [256, 1000.0], "ops": ["copy"], "x": -0.0005}}


@pytest.mark.parametrize("code, words", [(errno.EROFS, "is on a read-only file system"),
                                         (errno.ENOSPC, "has no space left on its disk")])
def test_read_only_or_full_results_are_refused_in_one_line(monkeypatch, tmp_path, code, words):
    checks.check_results(str(tmp_path / "results"))  # writable: passes, leaves nothing
    assert list(tmp_path.iterdir()) == []

    def refuse(*args, **kwargs):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    with pytest.raises(checks.ConfigError) as exc:
        checks.check_results(str(tmp_path / "results"))
    text = str(exc.value)
    assert words in text and str(tmp_path / "results") in text and "\n" not in text
    assert checks.results_problem(str(tmp_path / "results")) == text  # the onerror line


@pytest.mark.parametrize("label, ok", [("ci", True), ("'node-7.lab_2'", True), ("", True),
                                       ("<script>alert(1)</script>", False), ("a/b", False),
                                       ("..", False), ("'a b'", False)])
def test_host_labels_say_what_is_allowed(label, ok):
    why = checks.host_error(["experiment=timing", f"host={label}"])
    assert (why is None) is ok, why
    if not ok:
        assert "letters, digits, '.', '_' and '-' only" in why


def test_published_sets_carry_their_format_and_another_is_refused_naming_the_file(tmp_path):
    for name in PUBLISHED:
        meta = store.read_metadata(ROOT / name)
        assert meta["schema_version"] == schema.SCHEMA_VERSION and meta["time_unit"] == "s", name
        store.read_measurements(ROOT / name)
    table = pq.read_table(ROOT / PUBLISHED[1])
    meta = json.loads(table.schema.metadata[schema.METADATA_KEY])
    for key, value in (("schema_version", 99), ("time_unit", "ms")):
        path = tmp_path / f"{key}.parquet"
        pq.write_table(table.replace_schema_metadata(
            {schema.METADATA_KEY: json.dumps(meta | {key: value})}), path)
        with pytest.raises(store.DatasetError, match=rf"{path}: its metadata says {key}="):
            store.read_measurements(path)


def test_every_file_written_carries_the_format(tmp_path):
    path = store.write_atomic(schema.to_table([_row(n=8)], {"run_id": "r"}), tmp_path / "f.parquet")
    meta = store.read_metadata(path)
    assert meta == {"run_id": "r", **schema.FORMAT}
    assert not math.isnan(store.read_measurements(path).column("n")[0].as_py())
