"""The published folder re-renders to itself: roofline -> decode -> claims on a copy of its own
measurements give the committed ceilings and verdicts, keyed to the same systems."""

import shutil
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from tests.conftest import ROOT
from experiments.steps import published

PUBLISHED = ROOT / "results" / "published" / "h200"


def _analysis(*args, cwd):
    subprocess.run([sys.executable, "-m", "experiments.steps", *map(str, args)], check=True,
                   cwd=cwd, capture_output=True)


@pytest.mark.system
def test_the_published_set_rerenders_to_its_committed_verdicts_and_ceilings(tmp_path):
    copy = tmp_path / "h200"
    shutil.copytree(PUBLISHED, copy)
    c, k = copy / "ceilings.parquet", copy / "knees.parquet"
    for derived in ("knees.parquet", "workload_knees.parquet"):  # computed again, never read
        (copy / derived).unlink()
    data = published.merged(copy, tmp_path / "merged.parquet")  # its own files, as rebuilt
    _analysis("roofline", data, "--out", c, cwd=ROOT)
    _analysis("decode", data, "--ceilings", c, "--out", k, "--points", tmp_path / "m.parquet",
              cwd=ROOT)
    _analysis("claims", data, "--ceilings", c, "--knees", k, "--out", copy / "claims.parquet",
              cwd=ROOT)
    _analysis("placements", data, "--ceilings", c, "--out", tmp_path / "placements.parquet",
              "--workload-knees", copy / "workload_knees.parquet", cwd=ROOT)
    # a run that merges this set reads its measured knees instead of bootstrapping them again
    # (analysis/knees.py reused): they must be what a render at this commit gives
    for name, key in (("knees.parquet", ["system", "dtype", "C"]),
                      ("workload_knees.parquet", ["system", "workload", "dtype"])):
        old, new = (pd.read_parquet(p / name).set_index(key).sort_index()
                    for p in (PUBLISHED, copy))
        assert list(old.index) == list(new.index), name
        for col in ("measured", "measured_low", "measured_high"):
            assert np.allclose(old[col], new[col], rtol=1e-9, equal_nan=True), (name, col)
        assert (old.measured_note.fillna("") == new.measured_note.fillna("")).all(), name
    key = ["claim", "system", "kind"]
    old, new = (pd.read_parquet(p / "claims.parquet").set_index(key).sort_index()
                for p in (PUBLISHED, copy))
    assert list(old.index) == list(new.index)  # the same systems: nothing keyed elsewhere
    assert (old.verdict == new.verdict).all(), new[old.verdict != new.verdict].verdict
    key = ["system", "ceiling", "dtype"]
    old, new = (pd.read_parquet(p / "ceilings.parquet").set_index(key).sort_index()
                for p in (PUBLISHED, copy))
    assert list(old.index) == list(new.index)
    assert np.allclose(old.value, new.value, rtol=1e-9, equal_nan=True)
    measured = pd.read_parquet(data, columns=["host", "device_name"]).drop_duplicates()
    assert set(old.index.get_level_values("system")) == {
        f"{n} @ {h}" for n, h in zip(measured.device_name, measured.host)}
