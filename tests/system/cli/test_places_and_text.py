"""Where rooflab writes and what users hand it: a read-only or full place, bytes that are not
UTF-8, a file of the user's that shadows the standard library. Each is one line naming the
problem and what moves it, before anything is measured where it can be, and no row is lost.

The read-only and full places are small tmpfs mounts; where the machine does not allow mounting
(not root, no CAP_SYS_ADMIN), those tests skip saying so."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from tests.workflow_copy import ROOT
from tests.unit.cli.test_places_and_text import BAD_BYTES, full, mounted  # noqa: F401 (fixtures)


def _place(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "experiments", "place", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300, env=env)


@pytest.mark.system
def test_place_keeps_the_row_of_a_factory_whose_message_has_bad_bytes(tmp_path):
    (tmp_path / "factories.py").write_text(BAD_BYTES)
    run = _place(tmp_path, "./factories.py:make_badbytes", "--device", "cpu", "--out", "r.parquet")
    assert run.returncode == 1 and "UnicodeEncodeError" not in run.stderr, run.stderr[-2000:]
    row = pd.read_parquet(tmp_path / "r.parquet").iloc[0]
    assert row.status == "error" and "weights-\\udcff.bin" in row.message
    assert "weights-\\udcff.bin" in run.stdout + run.stderr


@pytest.mark.system
def test_a_random_py_or_json_py_beside_it_shadows_nothing(tmp_path):
    (tmp_path / "random.py").write_text("raise SystemExit('the user random.py was imported')\n")
    (tmp_path / "json.py").write_text("raise SystemExit('the user json.py was imported')\n")
    run = _place(tmp_path, "experiments.models:make_mlp", "--device", "cpu", "--batch", "1",
                 "--out", "r.parquet", "--point-budget-s", "0.02",
                 "--kwargs", '{"d_model": 16, "hidden": 32}')
    assert run.returncode == 0, run.stderr[-2000:]
    assert pd.read_parquet(tmp_path / "r.parquet").status.tolist() == ["ok"]


@pytest.mark.system
def test_run_beside_a_random_py_plans_its_sweep(tmp_path):
    """Snakemake's process imports tempfile (which imports random): it runs with -P, so the
    working directory's random.py stays out of its way."""
    (tmp_path / "random.py").write_text("raise SystemExit('the user random.py was imported')\n")
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    run = subprocess.run([sys.executable, "-m", "experiments.cli.rooflab", "run", "--quick",
                          "-n"], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                         env=env)
    assert run.returncode == 0 and "This was a dry-run" in run.stdout, run.stderr[-2000:]
