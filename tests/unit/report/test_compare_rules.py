"""`rooflab compare`'s rules without a fit: the labels that name each side, the call that needs
values outside each other's intervals and the minimum change, and the overlaid roofline's markers
and labels."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from experiments.analysis import dataset
from experiments.report import compare as cmp
from tests import analysis_fixtures as fx


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


def test_a_value_differs_past_the_larger_noise():
    """Two machines 3x apart, each ceiling's interval 2x each way (a shared host): the intervals
    overlap, yet each value lies outside the other's promise of where a repeat lands."""
    row = {"value_a": 1.0, "ci_low_a": 0.5, "ci_high_a": 2.0,
           "value_b": 3.0, "ci_low_b": 1.5, "ci_high_b": 6.0}
    assert cmp.call(row) == cmp.DIFFERS
    # a repeat inside one side's interval, though outside the other's: noise
    assert cmp.call(row | {"value_b": 1.8, "ci_low_b": 1.7, "ci_high_b": 1.9}) == cmp.WITHIN


def test_a_workload_s_interval_is_where_a_repeat_lands():
    """A call's 10-90 % spread within one run is widened to the run-to-run spread of its device
    kind's calls; a spread wider than that is kept."""
    from experiments.analysis.plateaus import RUN_TO_RUN
    calls = pd.DataFrame({"device_kind": ["cpu", "cuda", "cuda"], "value": [1.0, 1.0, 1.0],
                          "ci_low": [0.98, 0.99, 0.5], "ci_high": [1.02, 1.01, 3.0]})
    w = cmp.repeatable_calls(calls)
    f_cpu, f_gpu = RUN_TO_RUN["cpu"]["workload"], RUN_TO_RUN["gpu"]["workload"]
    assert w.ci_low.tolist() == pytest.approx([1 / (1 + f_cpu), 1 / (1 + f_gpu), 0.5])
    assert w.ci_high.tolist() == pytest.approx([1 + f_cpu, 1 + f_gpu, 3.0])
    # a GPU call 10 % slower in a repeat is noise; 30 % slower, past its floor, differs
    row = {"value_a": 1.0, "ci_low_a": 1 / (1 + f_gpu), "ci_high_a": 1 + f_gpu}
    assert cmp.call(row | {"value_b": 1.1, "ci_low_b": 1.1 / (1 + f_gpu),
                           "ci_high_b": 1.1 * (1 + f_gpu)}) == cmp.WITHIN
    assert cmp.call(row | {"value_b": 1.6, "ci_low_b": 1.6 / (1 + f_gpu),
                           "ci_high_b": 1.6 * (1 + f_gpu)}) == cmp.DIFFERS


def test_the_plot_gives_each_side_its_marker_colours_and_labels():
    from experiments.report import compare_plot
    from experiments.report.interactive import Point, Roofs

    def side(scale):
        roofs = [Roofs("GPU @ x", [("DRAM", 4e12 * scale), ("L2", 9e12 * scale)],
                       [("GEMM bfloat16", 760e12 * scale), ("GEMM float16", 780e12 * scale)])]
        points = [Point(g, "whole call", 10.0, 1e12 * scale, f"GPU @ x: {g}", system="GPU @ x")
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
    colours = {(t[:1], t.split(": ")[-1]): c for r in scatters
               for t, c in zip(r.data_source.data["text"], r.data_source.data["c"])}
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


def test_a_machines_points_share_its_roofs_colour_family():
    """Two machines a side: each machine's points take its roofs' colour family (A's GPU and
    B's GPU one family, the CPUs another); the side is the marker and the dash."""
    from experiments.report import compare_plot
    from experiments.report.interactive import FAMILIES, Point, Roofs

    def side(scale):
        roofs = [Roofs(n, [("DRAM", bw * scale)], [("GEMM float32", p * scale)])
                 for n, bw, p in (("GPU @ x", 4e12, 500e12), ("CPU @ x", 1e11, 2e12))]
        points = [Point("mlp float32", "whole call", 10.0, p * scale, f"{n}: mlp float32",
                        system=n) for n, p in (("GPU @ x", 1e13), ("CPU @ x", 5e11))]
        return roofs, points

    fig = compare_plot.figure({"A": ("run1", *side(1)), "B": ("run2", *side(0.5))})
    family = {}  # (side, machine) -> the family of its roofs, then of its points
    for r in fig.renderers:
        data, name = r.data_source.data, type(r.glyph).__name__
        if name == "MultiLine":
            for label in data["label"]:
                tag, machine = label.split(": ")[:2]
                family.setdefault((tag, machine), set()).add(r.glyph.line_color)
        elif name == "Scatter" and len(data["x"]):
            colours = data.get("c") or [r.glyph.line_color] * len(data["x"])
            for text, c in zip(data["text"], colours):
                tag, machine = text.split(": ")[:2]
                family.setdefault((tag, machine), set()).add(c)
    index = {c: i for i, f in enumerate(FAMILIES) for c in f}
    shares = {k: {index.get(c) for c in v} for k, v in family.items()}
    assert len(shares) == 4 and all(len(v) == 1 and None not in v for v in shares.values()), \
        family
    assert shares["A", "GPU @ x"] == shares["B", "GPU @ x"] != shares["A", "CPU @ x"]


def test_only_verdicts_judged_apart_on_both_sides_differ_on_the_first_screen():
    """holds -> does not hold differs; a side undecided or unable to judge is unsettled, not a
    difference (the first screen does not call coverage a change)."""
    import pandas as pd

    from experiments.report import compare, compare_text

    table = pd.DataFrame({"system_a": "x", "system_b": "y",
                          "claim": ["C1", "C2", "C3", "C4"],
                          "verdict_a": ["holds", "holds", "", "holds"],
                          "verdict_b": ["does not hold", "undecided", "holds", "holds"]})
    table["differ"] = table.verdict_a != table.verdict_b
    table["why"] = [compare.why(a, b) if d else "" for a, b, d in
                    zip(table.verdict_a, table.verdict_b, table["differ"])]
    (d,) = compare_text.differences(pd.DataFrame(columns=["system_a", "system_b"]), table)
    assert d["verdicts"] == ["C1 (holds -> does not hold)"]
    assert d["unsettled"] == ["C2 (holds -> undecided)", "C3 (not judged -> holds)"]
