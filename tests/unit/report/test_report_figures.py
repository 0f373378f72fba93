"""The report's figures and interactive roofline as a reader sees them: text size, hover names,
CJK, each workload's colour."""

import os
import re

import numpy as np
import pandas as pd
import pytest

from tests import analysis_fixtures as fx
from experiments.report.figures import common as figures_common
from experiments.report.catalog import FIGURES


def _svg_texts(svg: str) -> list[str]:
    return re.findall(r"<text[^>]*>([^<]*)</text>", svg)


def test_without_a_cjk_font_no_figure_text_is_cjk(tmp_path, monkeypatch):
    """Matplotlib draws CJK it has no font for as empty boxes: then CJK text reads [CJK]."""
    monkeypatch.setattr(figures_common, "cjk_font", lambda: None)
    _draw_with_chinese(tmp_path)
    for svg in tmp_path.glob("*.svg"):
        assert not any(figures_common.CJK.search(t) for t in _svg_texts(svg.read_text())), svg
    assert "[CJK]" in (tmp_path / "bandwidth.svg").read_text()


def test_with_a_cjk_font_figures_keep_the_chinese(tmp_path):
    if figures_common.cjk_font() is None:
        pytest.skip("no CJK font on this machine")
    _draw_with_chinese(tmp_path)
    assert any("拷贝" in t for t in _svg_texts((tmp_path / "bandwidth.svg").read_text()))


def test_a_figure_is_declared_once_in_the_catalog_and_drawn_by_one_module(monkeypatch):
    """catalog.FIGURES is the figures' one declaration: every declared figure has a module of
    its name that draws it, @figure refuses a module the catalog does not declare (or a figure
    drawn already), and draw_all refuses to run while a declared figure has no drawing function."""
    from experiments.report import figures
    from experiments.report.catalog import Figure

    def drawn_in(module):
        def draw(g):
            pass
        draw.__module__ = f"experiments.report.figures.{module}"
        return draw

    assert list(figures.DRAW) and set(figures.DRAW) == set(FIGURES)
    assert all(figures.DRAW[name].__module__.endswith(f".{name}") for name in FIGURES)
    with pytest.raises(ValueError, match="'sparkline' is not declared in experiments/report/cat"):
        figures_common.figure()(drawn_in("sparkline"))
    with pytest.raises(ValueError, match="'roofline' already drawn by .*figures.roofline"):
        figures_common.figure()(drawn_in("roofline"))
    assert set(figures.DRAW) == set(FIGURES)  # a refused function registers nothing
    monkeypatch.setitem(FIGURES, "sparkline", Figure("sparkline", "Memory", "a sketch", ("l1",)))
    with pytest.raises(LookupError, match="sparkline are declared in experiments/report/cat"):
        figures.draw_all(None, "unused")


def _pid(_):
    return os.getpid()


def _draw_with_chinese(outdir):
    from experiments.report import figures
    from experiments.analysis.dataset import from_rows
    rows = [r | {"op": "拷贝" if r["op"] == "copy" else r["op"], "host": "实验室"}
            for r in fx.bandwidth_rows(fx.CPU, np.random.default_rng(0), ("float32",))]
    empty = pd.DataFrame(columns=["system", "value", "ceiling", "unit", "dtype"])
    status = figures.draw_all(figures.Inputs(from_rows(rows), empty, [], pd.DataFrame(),
                                             pd.DataFrame()), outdir)
    assert status["bandwidth"] is None


def test_the_roofline_colours_each_workload_and_keeps_its_legend_off_the_roofs():
    """Each workload its own colour, the legend below the plot (never over a roof's label), the
    y axis titled, its ticks SI-prefixed FLOP/s, hover on every point."""
    from bokeh.models import HoverTool, Legend
    from experiments.report import interactive as bk

    pts = [bk.Point(f"w{i % 3} bfloat16", kind, 10.0 ** (i / 2), 1e12 * (i + 1), f"p{i}")
           for i, kind in enumerate(["whole call", "aten op", "op at DRAM bytes (ncu)"] * 3)]
    fig = bk.figure([bk.Roofs("gpu", [("DRAM", 4e12), ("L2", 6e12)],
                              [("GEMM bfloat16", 7e14), ("GEMM float32", 5e13)])], pts)
    colours = {r.glyph.line_color for r in fig.renderers if hasattr(r.data_source.data, "get")
               and "text" in r.data_source.data and "x" in r.data_source.data
               and r.glyph.__class__.__name__ == "Scatter"}
    assert len(colours) == 3
    legend = [x for x in fig.below if isinstance(x, Legend)]
    assert legend and not [x for x in fig.center if isinstance(x, Legend)]
    assert [i.label.value for i in legend[0].items][:4] == ["gpu: roofs", "w0 bfloat16",
                                                           "w1 bfloat16", "w2 bfloat16"]
    assert fig.yaxis[0].axis_label == "attained FLOP/s" and "FLOP/s" in fig.yaxis[0].formatter.code
    hovered = [r for t in fig.tools if isinstance(t, HoverTool) for r in t.renderers]
    assert len(hovered) == 3 + 1  # every point's renderer (one per group here), and the roofs


# Names with every mathtext trigger: a pair of `$` (math), a lone `$`, an escaped `\$`, a
# backslash command, `_` and `^` (twice over: math that mathtext cannot parse, and raises on)
ODD_GPU = {"device_name": "Acme $x$ GPU \\alpha_1^2 $y^2^3", "host": "lab$"}
ODD_CPU = {"device_name": "Zen \\$ 5 $a_b_c$", "host": "h$st$"}
ODD_WORKLOAD = "mlp $x^2^3$ \\_"
