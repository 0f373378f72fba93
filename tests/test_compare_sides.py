"""`rooflab compare` on two results folders built from fixtures: what differs first, workloads
matched by system and device, one-sided systems in a line, both sides told apart on the plot."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import analysis_fixtures as fx
from experiments.analysis import dataset
from experiments.cli import rooflab as cli
from experiments.report import compare as cmp

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
    # a change of 3 % with narrow spreads: the intervals part, the change stays under 5 %
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


@pytest.mark.system
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


@pytest.mark.system
def test_a_one_sided_system_takes_one_line(shown):
    text, html, _ = shown
    one = [line for line in text.splitlines() if "NVIDIA H200 @ h200wl" in line]
    assert one == ["only on B: NVIDIA H200 @ h200wl (cuda:0): workload rows only; its workloads "
                   "are compared beside NVIDIA H200 @ h200-ref"]
    assert "not measurable on one side" not in text  # no claims section for it
    assert html.count("only on B: NVIDIA H200 @ h200wl") == 1
    assert "<h2>NVIDIA H200 @ h200ref" not in html and "vs NVIDIA H200 @ h200wl" not in html


@pytest.mark.system
def test_workloads_are_matched_by_system_and_device(shown):
    text, html, rows = shown
    w = rows[rows.kind == "workload"].set_index(["device_a", "name"])
    # the CPU's mlp and the GPU's mlp: two rows, each its own device's time
    assert float(w.loc[("cpu", "mlp"), "value_a"]) == pytest.approx(MLP["cpu"])
    assert float(w.loc[("cuda:0", "mlp"), "value_a"]) == pytest.approx(MLP["cuda:0"])
    assert float(w.loc[("cuda:0", "mlp"), "ratio"]) == pytest.approx(1.3)
    assert w.loc[("cuda:0", "mlp"), "call"] == "differs"
    assert w.loc[("cpu", "mlp"), "call"] == "within noise"
    # apart beyond both spreads but by 3 %: not a difference
    assert float(w.loc[("cpu", "conv"), "ratio"]) == pytest.approx(1.03)
    assert w.loc[("cpu", "conv"), "call"] == cmp.SMALL
    # the workload-only system's attention is compared beside B's GPU
    assert w.loc[("cuda:0", "attention"), "system_b"] == "NVIDIA H200 @ h200wl"
    assert w.loc[("cuda:0", "attention"), "device_b"] == "cuda:0"
    assert (rows.kind == "ceiling").any() and (rows.kind == "claim").any()
    section = html[html.index('id="workloads"'):]
    assert re.search(r"<td>cpu</td><td>mlp</td><td>float32</td><td class=\"num\">1</td>"
                     r"<td class=\"num\">621 µs \[609, 633\]</td>", section)
    assert "192 µs" in section and "Workloads measured on both (4; 2 differ" in text


@pytest.mark.system
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


def _side(path, *devs):
    rows = [r for dev, rows in devs for rs in rows.values() for r in rs]
    return cmp.Side(Path(path), dataset.from_rows(rows), None, None)


def test_labels_tell_two_folders_of_one_name_apart(tmp_path):
    gpu = (fx.GPU, {"launch": fx.launch_rows(fx.GPU, np.random.default_rng(0))})
    a = _side("/x/run1/results/measurements.parquet", gpu)
    b = _side("/x/run2/results/measurements.parquet", gpu)
    assert cmp.labels(a, b) == ("run1/results (h200-ref)", "run2/results (h200-ref)")
    assert cmp.labels(a, a) == ("results (h200-ref)", "results (h200-ref)")
    c = _side("/y/other.parquet", gpu)
    assert cmp.labels(a, c)[1] == "other.parquet (h200-ref)"


def test_differs_needs_both_apart_intervals_and_the_minimum_change():
    row = {"value_a": 1.0, "value_b": 1.03, "ci_low_a": 0.995, "ci_high_a": 1.005,
           "ci_low_b": 1.025, "ci_high_b": 1.035}
    assert cmp.call(row) == cmp.SMALL  # apart, but 3 %
    assert cmp.call(row | {"value_b": 1.2, "ci_low_b": 1.19, "ci_high_b": 1.21}) == cmp.DIFFERS
    assert cmp.call(row | {"value_b": 0.8, "ci_low_b": 0.79, "ci_high_b": 0.81}) == cmp.DIFFERS
    assert cmp.call(row | {"value_b": 1.2, "ci_low_b": 0.9, "ci_high_b": 1.3}) == cmp.WITHIN
    assert cmp.apart(1.0, 1.05) and cmp.apart(1.05, 1.0) and not cmp.apart(1.0, 1.049)


def test_the_plot_gives_each_side_its_marker_colours_and_labels():
    from experiments.report import compare_plot
    from experiments.report.interactive import Point, Roofs

    def side(scale):
        roofs = [Roofs("GPU @ x", [("DRAM", 4e12 * scale), ("L2", 9e12 * scale)],
                       [("GEMM bfloat16", 760e12 * scale), ("GEMM float16", 780e12 * scale)])]
        points = [Point(g, "whole call", 10.0, 1e12 * scale, f"GPU @ x: {g}")
                  for g in ("mlp float32", "conv float32")]
        return roofs, points

    def texts(fig):
        return [t for r in fig.renderers if type(r.glyph).__name__ == "Text"
                for t in r.data_source.data["text"]]

    fig = compare_plot.figure({"A": ("run1", *side(1)), "B": ("run2", *side(0.5))})
    for tag in ("A", "B"):  # every roof labelled, close ones too
        for what in ("DRAM", "L2", "GEMM bfloat16", "GEMM float16"):
            assert sum(t.startswith(f"{tag}: {what} ") for t in texts(fig)) == 1, (tag, what)
    # the same roofs 10 % apart: one label each, naming both values
    near = compare_plot.figure({"A": ("run1", *side(1)), "B": ("run2", *side(0.9))})
    assert "GEMM bfloat16: A 760, B 684 TFLOP/s" in texts(near)
    assert "DRAM: A 4, B 3.6 TB/s" in texts(near) and len(texts(near)) == 4
    scatters = [r for r in fig.renderers if type(r.glyph).__name__ == "Scatter"
                and len(r.data_source.data["x"])]
    by_side = {t[0]: r.glyph for r in scatters for t in r.data_source.data["text"][:1]}
    assert by_side["A"].marker == "circle" and by_side["B"].marker == "square"
    assert by_side["B"].fill_color is None and by_side["A"].fill_color is not None
    first = {r: r.data_source.data["text"][0] for r in scatters}
    colours = {(t[:1], t.split(": ")[-1]): r.glyph.line_color for r, t in first.items()}
    assert colours["A", "mlp float32"] == colours["B", "mlp float32"]  # one workload, one colour
    assert colours["A", "mlp float32"] != colours["A", "conv float32"]
    legend = [item.label.value for item in fig.legend[0].items]
    assert legend[:2] == ["A: run1", "B: run2"] and "mlp float32" in legend


def test_roof_labels_take_free_places():
    from experiments.report.compare_plot import Labels, _place
    labels = Labels((0.01, 1e4), (1e9, 1e16), 620)
    for k in range(4):  # four roofs within 10 %: later ones step along x, then under the line
        _place(labels, {"kind": "compute", "value": 1e15 * 1.03 ** k, "end": 300.0,
                        "text": f"GEMM dtype{k}: A 1, B 1.1 PFLOP/s", "colour": "#000"})
    _place(labels, {"kind": "memory", "value": 4e12, "end": 250.0, "text": "DRAM: A 4, B 4 TB/s",
                    "colour": "#000"})
    boxes = labels.boxes
    assert len(boxes) == 5
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            assert not (a[0] < b[1] and b[0] < a[1] and a[2] < b[3] and b[2] < a[3]), (a, b)


def test_labels_of_a_folder_inside_the_other():
    gpu = (fx.GPU, {"launch": fx.launch_rows(fx.GPU, np.random.default_rng(0))})
    a = _side("/x/measurements.parquet", gpu)
    b = _side("/y/x/measurements.parquet", gpu)
    assert cmp.labels(a, b) == ("x (h200-ref)", "y/x (h200-ref)")
