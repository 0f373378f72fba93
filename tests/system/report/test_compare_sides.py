"""`rooflab compare` on two results folders built from fixtures: what differs first, workloads
matched by system and device, one-sided systems in a line, both sides told apart on the plot."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pandas as pd
import pytest

from experiments.analysis import dataset, plateaus
from experiments.cli import rooflab as cli
from experiments.report import compare as cmp
from tests import analysis_fixtures as fx

MLP = {"cpu": 621e-6, "cuda:0": 192e-6}  # mlp float32 batch 1: the CPU's time and the GPU's


def _workload(dev, name, t, spread=0.02, **extra):
    return fx._row(dev, "workload", name, "float32", t, 2e6, 1e6, batch=1,
                   time_s_q10=t * (1 - spread), time_s_q90=t * (1 + spread),
                   timer="perf_counter" if dev["device_kind"] == "cpu" else "cuda_event", **extra)


def _folder(folder: Path, gemm32=1.0, mlp_gpu=1.0, attention=1.0, workload_only=False) -> Path:
    """A results folder: a GPU and a CPU measured, each with workloads (mlp on both devices)."""
    gpu = fx.gpu_rows(seed=0)
    for r in gpu["matmul"]:
        if r["dtype"] == "float32":
            r["time_s"] *= gemm32
    gpu["workload"] = [_workload(fx.GPU, "mlp", MLP["cuda:0"] * mlp_gpu)] + (
        [] if workload_only else [_workload(fx.GPU, "attention", 40e-6)])
    cpu = fx.cpu_rows(seed=1)
    # a change of 3 % with narrow spreads: inside a CPU call's run-to-run spread
    cpu["workload"] = [_workload(fx.CPU, "mlp", MLP["cpu"]),
                       _workload(fx.CPU, "conv", 1e-3 * attention, spread=0.004)]
    files = fx.write_files(folder / "m", gpu, fx.GPU) + fx.write_files(folder / "m", cpu, fx.CPU)
    if workload_only:  # a published-style workload set: one GPU's workload rows alone
        wl = fx.GPU | {"host": "h200wl"}
        files += fx.write_files(folder / "m", {"workload": [
            _workload(wl, "attention", 50e-6)]}, wl)
    dataset.collect(files, out=folder / "measurements.parquet", log=lambda msg: None)
    return folder


@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    """A: run1/results; B: run2/results, float32 GEMMs 10x slower, the GPU's mlp 30 % slower,
    the CPU's conv 3 % slower, and a workload-only system beside."""
    tmp = tmp_path_factory.mktemp("cmp")
    a = _folder(tmp / "run1" / "results")
    b = _folder(tmp / "run2" / "results", gemm32=10, mlp_gpu=1.3, attention=1.03,
                workload_only=True)
    return a, b, tmp


@pytest.fixture(scope="module")
def shown(compared):
    a, b, tmp = compared
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.main(["compare", str(a), str(b), "--out", str(tmp / "cmp.html")]) == 0
    return out.getvalue(), (tmp / "cmp.html").read_text(), \
        pd.read_csv(tmp / "cmp.csv", keep_default_na=False)


def test_the_header_names_both_folders_and_what_differs_comes_first(shown):
    text, html, _ = shown
    lines = text.splitlines()
    assert lines[0].startswith("A: run1/results (") and lines[1].startswith("B: run2/results (")
    assert "measurements.parquet" not in text and "measurements.parquet" not in html
    first = html[:html.index("const docs_json")]  # before the plot: the first screen
    assert "A</b>: run1/results" in first and "B</b>: run2/results" in first
    differs = first[first.index('id="differs"'):]
    # which ceilings and verdicts, by name, before any table
    assert re.search(r"GEMM ceiling float32 0\.1\dx", differs)
    assert "C11 (holds -&gt; does not hold)" in differs
    gpu_line = next(line for line in lines if line.startswith("NVIDIA H200 @ h200-ref  vs"))
    assert re.match(r".*: [1-9]\d* of \d+ ceilings differ, [1-9]\d* verdicts differ$", gpu_line)
    cpu_line = next(line for line in lines if line.startswith("Test CPU 9000 @ laptop  vs"))
    assert cpu_line.endswith(": 0 of %s ceilings differ, 0 verdicts differ"
                             % cpu_line.split(" of ")[1].split()[0])
    # the rule is stated, with its minimum change
    assert "at least 5 % apart" in html and "at least 5 % apart" in text
    assert not re.search(r"\bnan\b|\bNone\b|\de[+-]\d", text)


def test_a_one_sided_system_takes_one_line(shown):
    text, html, _ = shown
    one = [line for line in text.splitlines() if "NVIDIA H200 @ h200wl" in line]
    assert one == ["only on B: NVIDIA H200 @ h200wl (cuda:0): workload rows only; its workloads "
                   "are compared beside NVIDIA H200 @ h200-ref"]
    assert "not measurable on one side" not in text  # no claims section for it
    assert html.count("only on B: NVIDIA H200 @ h200wl") == 1
    assert "<h2>NVIDIA H200 @ h200ref" not in html and "vs NVIDIA H200 @ h200wl" not in html


def test_workloads_are_matched_by_system_and_device(shown):
    text, html, rows = shown
    w = rows[rows.kind == "workload"].set_index(["device_a", "name"])
    # the CPU's mlp and the GPU's mlp: two rows, each its own device's time
    assert float(w.loc[("cpu", "mlp"), "value_a"]) == pytest.approx(MLP["cpu"])
    assert float(w.loc[("cuda:0", "mlp"), "value_a"]) == pytest.approx(MLP["cuda:0"])
    assert float(w.loc[("cuda:0", "mlp"), "ratio"]) == pytest.approx(1.3)
    assert w.loc[("cuda:0", "mlp"), "call"] == "differs"
    assert w.loc[("cpu", "mlp"), "call"] == "within noise"
    # apart beyond both spreads within the run, by 3 %: where a repeat lands
    assert float(w.loc[("cpu", "conv"), "ratio"]) == pytest.approx(1.03)
    assert w.loc[("cpu", "conv"), "call"] == cmp.WITHIN
    # the workload-only system's attention is compared beside B's GPU
    assert w.loc[("cuda:0", "attention"), "system_b"] == "NVIDIA H200 @ h200wl"
    assert w.loc[("cuda:0", "attention"), "device_b"] == "cuda:0"
    assert (rows.kind == "ceiling").any() and (rows.kind == "claim").any()
    section = html[html.index('id="workloads"'):]
    # the cells as read, and the raw numbers behind them (sorting, CSV)
    assert re.search(r"<td>cpu</td><td>mlp</td><td>float32</td><td class=\"num\" data-v=\"1.0\">"
                     r"1</td><td class=\"num\" data-v=\"0.000621\">621 µs \[289, 1,335\]</td>",
                     section)
    # its 10-90 % spread [609, 633] widened to a CPU call's run-to-run spread
    f = plateaus.RUN_TO_RUN["cpu"]["workload"]
    assert float(w.loc[("cpu", "mlp"), "ci_low_a"]) == pytest.approx(MLP["cpu"] / (1 + f))
    assert float(w.loc[("cpu", "mlp"), "ci_high_a"]) == pytest.approx(MLP["cpu"] * (1 + f))
    assert "192 µs" in section and "Workloads measured on both (4; 2 differ" in text


def test_the_overlaid_roofline_tells_a_from_b(shown):
    _, html, _ = shown
    plot = html[html.index("const docs_json"):]
    # every roof of both sides labelled: apart, each its side's; the same on both, one label
    assert re.search(r'"A: GEMM float32 [\d.]+ TFLOP/s"', plot)
    assert re.search(r'"B: GEMM float32 [\d.]+ TFLOP/s"', plot)
    assert re.search(r'"DRAM: A [\d.]+, B [\d.]+ TB/s"', plot)
    for side in ("A", "B"):  # every hover names its side and machine
        assert re.search(rf'"{side}: NVIDIA H200 @ h200-ref: mlp float32 batch 1', plot)
    assert '"marker":{"type":"value","value":"square"}' in plot  # B's (A's: the default)
    assert "A: run1/results" in plot and "B: run2/results" in plot  # the legend names the sides


def test_every_csv_row_names_its_devices(shown):
    _, _, rows = shown
    assert set(rows.device_a) == {"cpu", "cuda:0"} and set(rows.device_b) == {"cpu", "cuda:0"}
    gemm = rows[(rows.kind == "ceiling") & (rows.name == "matrix_flops")]
    assert set(zip(gemm.system_a, gemm.device_a)) == {("NVIDIA H200 @ h200-ref", "cuda:0"),
                                                      ("Test CPU 9000 @ laptop", "cpu")}


def test_the_page_packs_bokeh_as_the_report_does(shown):
    _, html, _ = shown
    assert 'id="bokeh-packed"' in html and 'type="text/x-after-bokeh"' in html
    assert len(html.encode()) < 800_000  # Bokeh inline as text alone is 1.3 MB
