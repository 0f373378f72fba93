"""The report renders from a small fixture through the command line the workflow runs."""

import re

import numpy as np

from tests import analysis_fixtures as fx
from experiments.steps.command import main


def test_a_failing_step_states_its_error(tmp_path, capsys):
    from experiments.steps.command import run
    data = tmp_path / "measurements.parquet"
    run_files = fx.write_files(tmp_path / "run", {"bandwidth": fx.bandwidth_rows(
        fx.CPU, np.random.default_rng(0), ("float32",))}, fx.CPU)
    assert main(["collect", str(data), *map(str, run_files)]) == 0
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the ceilings' folder should be")
    assert run(["roofline", str(data), "--out", str(blocker / "ceilings.parquet")]) == 1
    err = capsys.readouterr().err
    assert f"rooflab: roofline failed on {data}:" in err and "not-a-dir" in err


def test_a_step_that_breaks_on_rows_names_them(tmp_path, capsys, monkeypatch):
    """The error line names the step, its input file and the rows it was reading; the traceback
    follows it (the step's log)."""
    from experiments.analysis import roofline
    from experiments.steps.command import run
    data = tmp_path / "measurements.parquet"
    run_files = fx.write_files(tmp_path / "run", {"bandwidth": fx.bandwidth_rows(
        fx.CPU, np.random.default_rng(0), ("float32",))}, fx.CPU)
    assert main(["collect", str(data), *map(str, run_files)]) == 0

    def broken(rows, facts, pooled=False):
        raise ValueError("a shape this fit does not know")

    monkeypatch.setattr(roofline, "fit_bandwidth", broken)
    capsys.readouterr()  # collect's line
    assert run(["roofline", str(data), "--out", str(tmp_path / "c.parquet")]) == 1
    first, *rest = capsys.readouterr().err.strip().splitlines()
    assert re.fullmatch(rf"rooflab: roofline failed on {re.escape(str(data))}, reading the "
                        r"bandwidth rows \(\d+ ok\) of .+ @ .+: ValueError: a shape this fit does "
                        r"not know", first), first
    assert rest[0].startswith("Traceback") and not (tmp_path / "c.parquet").exists()


