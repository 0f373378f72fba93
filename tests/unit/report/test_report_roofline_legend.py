"""The interactive roofline tells machines apart: each system its marker and colour family,
every fitted roof drawn and labelled, tooltips that wrap, a published set hidden until ticked
and marked as a reference; no browser needed (tests/test_report_browser.py opens the page)."""

from __future__ import annotations

import math

from experiments.report import interactive as bk

GPU = bk.Roofs("H100 @ me", [("DRAM", 3.3e12), ("L2", 9e12)],
               [("GEMM float8_e4m3", 1.4e15), ("GEMM bfloat16", 7.6e14),
                ("GEMM float16", 7.8e14), ("FMA float32", 6e13), ("GEMM tf32", 3.8e14)])
REF = bk.Roofs("H200 @ h200 [published:h200]", [("DRAM", 4.3e12)], [("GEMM bfloat16", 6.9e14)],
               reference=True)


def _points():
    mine = [bk.Point(f"w{i % 2} bfloat16", "whole call", 10.0 ** (i / 2), 1e12 * (i + 1),
                     f"H100 @ me: w{i % 2} point {i}", system="H100 @ me") for i in range(6)]
    ref = [bk.Point(f"m{i % 3} bfloat16", kind, 10.0 ** (i / 3), 2e12 * (i + 1),
                    f"H200 (reference): point {i}", system=REF.name, reference=True)
           for i, kind in enumerate(["whole call", "aten op"] * 3)]
    return mine + ref


def _scatters(fig):
    return [r for r in fig.renderers if r.glyph.__class__.__name__ == "Scatter"
            and len(r.data_source.data.get("x", []))]


def test_each_system_has_its_marker_and_colours_and_the_reference_starts_hidden():
    fig, legend = bk.build([GPU, REF], _points())
    by_system = {}
    for r in _scatters(fig):
        system = "ref" if "reference" in r.data_source.data["text"][0] else "mine"
        by_system.setdefault(system, []).append(r)
    markers = {k: {r.glyph.marker.removesuffix("_dot") for r in rs} for k, rs in by_system.items()}
    assert len(markers["mine"]) == 1 and markers["mine"] != markers["ref"]
    colours = [r.glyph.line_color for r in by_system["mine"]]
    assert len(set(colours)) == 2  # one per workload, from the system's family
    assert all(r.visible for r in by_system["mine"])
    assert not any(r.visible for r in by_system["ref"])
    # the legend: this run's system first, each workload an entry; the reference folded to one
    assert [g.system for g in legend[:2]] == [GPU.name, REF.name]
    assert [e.label for e in legend[0].entries] == ["roofs", "w0 bfloat16", "w1 bfloat16"]
    assert legend[1].reference and [e.label for e in legend[1].entries] == [
        "roofs", "workloads (3)"]
    assert not any(e.on for e in legend[1].entries)
    assert legend[-1].system == "" and {e.label for e in legend[-1].entries} == {
        "whole call", "aten op"}


def test_every_fitted_roof_is_drawn_and_labelled_apart():
    fig, _ = bk.build([GPU], _points()[:6])
    texts = [r for r in fig.renderers if r.glyph.__class__.__name__ == "Text"]
    labels = [t for r in texts for t in r.data_source.data["text"]]
    for name, value in GPU.memory + GPU.compute:
        assert any(t.startswith(name + " ") for t in labels), name
    assert any(t == "GEMM float8_e4m3 1.4 PFLOP/s" for t in labels)
    # close roofs (float16 783 T, bfloat16 764 T) stack their labels: no two compute labels'
    # boxes overlap, in the screen pixels the frame gives the y range
    data = texts[0].data_source.data
    per_decade = (fig.height - 110) / math.log10(fig.y_range.end / fig.y_range.start)
    bottoms = sorted(math.log10(fig.y_range.end / y) * per_decade + dy
                     for t, y, dy in zip(data["text"], data["y"], data["dy"]) if "FLOP/s" in t)
    assert len(bottoms) == len(GPU.compute)
    assert all(b - a >= bk.LABEL_PX for a, b in zip(bottoms, bottoms[1:])), bottoms


def test_tooltips_wrap_and_name_the_machine():
    from bokeh.models import HoverTool
    fig, _ = bk.build([GPU, REF], _points())
    tips = [t.tooltips for t in fig.tools if isinstance(t, HoverTool)]
    assert tips and all("max-width" in t and "white-space:normal" in t for t in tips)
    texts = [t for r in _scatters(fig) for t in r.data_source.data["text"]]
    assert all(t.startswith(("H100 @ me:", "H200 (reference):")) for t in texts)
