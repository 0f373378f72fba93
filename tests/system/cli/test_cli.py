"""The `rooflab` command: compare two datasets, rebuild a report, the Snakemake command `run`
builds, the sweep from an empty directory, and one-line errors on bad input."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pandas as pd
import pytest
import yaml

from tests import analysis_fixtures as fx
from experiments.cli import rooflab as cli
from tests.workflow_copy import ROOT, SWEEP, python
from tests.unit.cli.test_cli import _results  # noqa: F401 (fixtures)


@pytest.fixture(scope="module")
def two_gpus(tmp_path_factory):
    """A: a GPU as the article says; B: the same with float32 GEMMs 10x slower (claim C11 fails)."""
    tmp = tmp_path_factory.mktemp("compare")
    a = _results(tmp / "a", fx.gpu_rows(seed=0), fx.GPU)
    slow = fx.gpu_rows(seed=0)
    for r in slow["matmul"]:
        if r["dtype"] == "float32":
            r["time_s"] *= 10
    b = _results(tmp / "b", slow, fx.GPU)
    return a, b / "measurements.parquet"  # a folder and a file: both are accepted


@pytest.mark.system
def test_compare_shows_ceilings_with_ratio_and_the_claims_that_differ(two_gpus, tmp_path, capsys):
    a, b = two_gpus
    assert cli.main(["compare", str(a), str(b), "--out", str(tmp_path / "cmp.html")]) == 0
    shown = capsys.readouterr().out
    assert "GEMM ceiling" in shown
    # float32 GEMM also sets the FP32 compute C8 compares and the float32 knee C17 predicts
    slow_gemm = ["C8", "C11", "C17"]
    differ = shown.split("Claims that differ, measured differently (3):")[1].splitlines()[1:]
    assert [line.split()[0] for line in differ] == slow_gemm
    # each ceiling with both intervals, the ratio's interval and a call
    gemm32 = next(line for line in shown.splitlines() if line.startswith("GEMM ceiling float32"))
    assert re.search(r"TFLOP/s \[[\d.]+, [\d.]+\] .* 0\.1\dx \[0\.\d\d, 0\.\d\d\]\s+differs$",
                     gemm32), gemm32
    assert not re.search(r"\de[+-]\d|\bnan\b|n/a", shown)

    rows = pd.read_csv(tmp_path / "cmp.csv", keep_default_na=False)  # written beside the page
    ceilings = rows[rows.kind == "ceiling"].set_index(["name", "dtype"])
    ratio = ceilings.ratio.astype(float)
    assert ratio["matrix_flops", "float32"] == pytest.approx(0.1, rel=0.1)
    assert ratio["matrix_flops", "bfloat16"] == pytest.approx(1, rel=0.01)
    assert ratio["dram_bw", ""] == pytest.approx(1, rel=0.01)
    assert ceilings.call["matrix_flops", "float32"] == "differs"
    assert ceilings.call["dram_bw", ""] == "within noise"  # the same rows: the same interval
    claims = rows[rows.kind == "claim"].set_index("name")
    assert (claims.verdict_a == "holds").all()
    assert (claims.loc[slow_gemm, "verdict_b"] == "does not hold").all()
    assert claims.index[claims.call != "same"].tolist() == slow_gemm
    assert set(claims.loc[slow_gemm, "call"]) == {"measured differently"}

    html = (tmp_path / "cmp.html").read_text()
    assert "GEMM ceiling float32" in html and "Claims measured differently (3)" in html
    assert "const docs_json" in html and "https://" not in html.split("const docs_json")[1]
    assert "A: " in html and "NVIDIA H200 (cuda:0)" in html  # the machines side by side
    assert cli.main(["compare", str(a), str(b), "--out", str(tmp_path / "only.csv")]) == 0
    assert not (tmp_path / "only.html").exists() and (tmp_path / "only.csv").is_file()


@pytest.mark.system
def test_compare_names_a_missing_file_in_one_line(two_gpus, tmp_path, capsys):
    a, _ = two_gpus
    assert cli.main(["compare", str(a), str(tmp_path / "nope.parquet")]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"rooflab compare: {tmp_path / 'nope.parquet'}: no such file or folder"
    assert cli.main(["compare", str(tmp_path), str(a)]) == 2  # a folder with no dataset
    assert f"{tmp_path / 'measurements.parquet'} not found" in capsys.readouterr().err
    assert cli.main(["compare", str(a), str(a), "--out", "x.pdf"]) == 2
    assert "give a .html or .csv file" in capsys.readouterr().err


@pytest.mark.system
def test_report_rebuilds_from_a_results_folder_without_measuring(tmp_path, capsys):
    res = _results(tmp_path / "res", fx.cpu_rows(), fx.CPU)
    assert cli.main(["report", "--results", str(res)]) == 0
    for name in ("roofline/ceilings.parquet", "roofline/knees.parquet", "claims.parquet",
                 "figures/index.json", "report.html"):
        assert (res / name).is_file(), name
    assert "Test CPU 9000" in (res / "report.html").read_text()
    # one screen on the terminal: the machine, its ceilings with intervals, the tally, the path
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "Test CPU 9000  (laptop, cpu)" and len(out) <= 40
    assert max(map(len, out)) <= 100, max(out, key=len)
    assert any(re.fullmatch(r"DRAM +[\d.]+ GB/s \[[\d.]+, [\d.]+\]", line) for line in out), out
    assert any(line.startswith("claims on CPU Test CPU 9000: holds ") for line in out)
    assert f"report: {res / 'report.html'}" in out and not any(" C4 " in line for line in out)
    assert cli.main(["report", "--results", str(res), "--claims"]) == 0  # each claim, on request
    detail = [line for line in capsys.readouterr().out.splitlines() if line.startswith("  C")]
    assert len(detail) >= 19 and max(map(len, detail)) <= 100
    assert cli.main(["report", "--results", str(tmp_path / "none")]) == 2
    assert "measurements.parquet not found" in capsys.readouterr().err


@pytest.mark.system
def test_run_ends_with_the_summary_of_what_it_wrote(tmp_path, monkeypatch, capsys):
    """After a sweep that succeeded, `run` prints the same one-screen summary as `report`."""
    res = _results(tmp_path / "res", fx.cpu_rows(), fx.CPU)
    assert cli.main(["report", "--results", str(res)]) == 0
    summary = capsys.readouterr().out
    monkeypatch.setattr(cli.stopping, "call", lambda *a: (0, None))  # the sweep, done
    assert cli.main(["run", "--results", str(res)]) == 0
    assert capsys.readouterr().out == summary
    # printed from the report step's summary.txt (no analysis loaded), while it is not older
    # than the report; an older one (a report rendered without it) is not trusted
    written = res / "summary.txt"
    assert written.read_text() == summary
    written.write_text("from the file\n")
    assert cli.main(["run", "--results", str(res)]) == 0
    assert capsys.readouterr().out == "from the file\n"
    os.utime(written, (1, 1))
    assert cli.main(["run", "--results", str(res)]) == 0
    assert capsys.readouterr().out == summary
    assert cli.main(["run", "--results", str(res), "-n"]) == 0  # a dry run: no summary
    assert capsys.readouterr().out == ""
    # the summary reads tables: it loads no torch (importing it took a 2-core VM a second)
    check = subprocess.run([sys.executable, "-c", "import sys; from experiments.report import "
                            "summary; print('torch' in sys.modules)"], cwd=ROOT,
                           capture_output=True, text=True)
    assert check.stdout.strip() == "False", check.stderr


@pytest.mark.system
def test_run_from_an_empty_directory_takes_its_config_and_writes_its_results(tmp_path):
    work = tmp_path / "work"
    (work / "config").mkdir(parents=True)  # the user's own sweep: the CI one, 2 tiny points
    (work / "config" / "config.yaml").write_text(yaml.safe_dump(yaml.safe_load(SWEEP.read_text())))
    run = python(work, "-m", "experiments.cli.rooflab", "run", "--cores", "2", "--results", "out",
                 timeout=600, env={"PYTHONPATH": str(ROOT)})  # this checkout's package
    assert run.returncode == 0, run.stdout[-4000:]
    assert f"--snakefile {ROOT / 'Snakefile'}" in run.stdout
    assert (work / "out" / "report.html").stat().st_size > 10_000
    rows = pd.read_parquet(work / "out" / "measurements" / "ci" / "cpu" / "bandwidth" /
                           "float32.parquet")
    assert set(rows.op) == {"copy"} and len(rows) == 2  # the sweep of ./config/config.yaml
    assert sorted(p.name for p in work.iterdir()) == [".snakemake", "config", "out"]
    log = (work / "out" / "logs" / "ci" / "cpu" / "bandwidth" / "float32.log").read_text()
    assert "\nbandwidth on cpu in float32: 2 points, at most about 1 s (an estimate" in "\n" + log
    assert "point/s" not in log  # no bar under Snakemake
