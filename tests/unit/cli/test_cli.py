"""The `rooflab` command: compare two datasets, rebuild a report, the Snakemake command `run`
builds, the sweep from an empty directory, and one-line errors on bad input."""

from __future__ import annotations

import pytest

from tests import analysis_fixtures as fx
from experiments.cli import rooflab as cli
from experiments.analysis import dataset
from experiments.report import compare as cmp
from tests.workflow_copy import ROOT


def _results(folder, rows_by_experiment, dev):
    """A results folder as the workflow leaves it: job files collected into measurements.parquet."""
    files = fx.write_files(folder / "measurements", rows_by_experiment, dev)
    dataset.collect(files, out=folder / "measurements.parquet", log=lambda msg: None)
    return folder


def test_compare_groups_differing_verdicts_by_why():
    assert cmp.why("holds", "does not hold") == cmp.MEASURED_DIFFERENTLY
    assert cmp.why("holds", "not measurable here") == cmp.ONE_SIDE
    assert cmp.why("", "holds") == cmp.ONE_SIDE
    nan = float("nan")
    row = {"value_a": 1.0, "value_b": 1.1, "ci_low_a": 0.9, "ci_high_a": 1.05, "ci_low_b": 1.0,
           "ci_high_b": 1.2}
    assert cmp.call(row) == cmp.WITHIN
    assert cmp.call(row | {"ci_low_b": 1.06}) == cmp.DIFFERS
    assert cmp.call(row | {"value_b": nan}) == "fitted on A only"


@pytest.mark.parametrize("argv, message", [
    (["frobnicate"], "rooflab: argument COMMAND: invalid choice: 'frobnicate'"),
    (["report", "--bogus"], "rooflab report: unrecognized arguments: --bogus"),
    (["compare", "only-one"], "rooflab compare: the following arguments are required: B"),
    (["run", "--cores", "0"], "rooflab run: argument --cores: --cores '0': give a number > 0"),
])
def test_bad_input_is_one_line_and_exit_status_2(argv, message, capsys):
    with pytest.raises(SystemExit) as exit:
        cli.main(argv)
    err = capsys.readouterr().err
    assert exit.value.code == 2 and err.startswith(message) and err.count("\n") == 1, err


def test_report_names_a_failed_step_in_one_line_its_traceback_in_its_log(tmp_path, capsys,
                                                                         monkeypatch):
    from experiments.analysis import roofline
    res = _results(tmp_path / "res", fx.cpu_rows(), fx.CPU)

    def broken(rows, facts, pooled=False):
        raise ValueError("a shape this fit does not know")

    monkeypatch.setattr(roofline, "fit_bandwidth", broken)
    assert cli.main(["report", "--results", str(res)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    log = res / "logs" / "aggregate" / "roofline.log"
    assert len(err) == 1 and err[0].startswith(
        f"rooflab: roofline failed on {res / 'measurements.parquet'}, reading the bandwidth rows")
    assert err[0].endswith(f"ValueError: a shape this fit does not know (traceback: {log})")
    assert "Traceback (most recent call last)" in log.read_text()


def _args(*argv):
    args, extra = cli.parser().parse_known_args(["run", *argv])
    return cli.snakemake_args(args, extra, ROOT)


def test_run_builds_snakemakes_command_line():
    quick = str(ROOT / "config" / "presets" / "quick.yaml")
    cmd = _args("--quick", "--results", "out", "--cores", "3", "results/x.parquet", "--config",
                "host=a", "--", "-n")
    assert cmd[:2] == ["--snakefile", str(ROOT / "Snakefile")]
    assert cmd[cmd.index("--workflow-profile") + 1] == str(ROOT / "workflow/profiles/default")
    assert cmd[cmd.index("--cores") + 1] == "3"
    # targets before --config (its list runs to the next option); ours first in the user's list
    assert cmd.index("results/x.parquet") < cmd.index("--config")
    assert cmd[cmd.index("--config"):][:3] == ["--config", "results=out", "host=a"]
    assert cmd[-2:] == ["--configfile", quick] and "-n" in cmd and "--" not in cmd
    # a configfile of the user's own comes after the preset, so it wins
    cmd = _args("--full", "--configfile=mine.yaml", "--workflow-profile", "p")
    full = str(ROOT / "config" / "presets" / "full.yaml")
    assert cmd[cmd.index("--configfile"):][:3] == ["--configfile", full, "mine.yaml"]
    assert cmd.count("--workflow-profile") == 1 and cmd[cmd.index("--workflow-profile") + 1] == "p"
    with pytest.raises(SystemExit):
        _args("--quick", "--full")


def test_compare_pairs_systems_by_device_when_a_side_has_several():
    def side(*devs):
        rows = [r for dev, rows in devs for rs in rows.values() for r in rs]
        return cmp.Side(None, dataset.from_rows(rows), None, None)

    gpu, cpu = (fx.GPU, fx.gpu_rows()), (fx.CPU, fx.cpu_rows())
    assert cmp.pairs(side(gpu, cpu), side(gpu)) == [
        ("NVIDIA H200 @ h200-ref", "NVIDIA H200 @ h200-ref"), ("Test CPU 9000 @ laptop", None)]
    # one system a side: compared whatever their devices
    assert cmp.pairs(side(cpu), side(gpu)) == [("Test CPU 9000 @ laptop", "NVIDIA H200 @ h200-ref")]


def test_run_names_the_file_and_line_of_a_broken_configfile(tmp_path, capsys, monkeypatch):
    """Snakemake reads --configfile before the workflow and drops the parser's message; rooflab
    run says which file and line, before Snakemake starts."""
    bad = tmp_path / "mine.yaml"
    bad.write_text("experiments:\n  matmul: {dtypes: [float32\n")
    monkeypatch.setattr(cli.stopping, "call", lambda *a, **k: pytest.fail("Snakemake ran"))
    assert cli.main(["run", "--configfile", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}, line " in err and "not valid YAML" in err
    assert cli.main(["run", f"--configfile={tmp_path / 'none.yaml'}"]) == 2
    assert "none.yaml: no such file" in capsys.readouterr().err
    assert cli.config_files(["-n", "--configfile", "a.yaml", "b.yaml", "--cores", "2"]) == [
        "a.yaml", "b.yaml"]
