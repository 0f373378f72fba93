"""The report's figures and interactive roofline as a reader sees them: text size, hover names,
CJK, each workload's colour."""

import os
import re

import numpy as np
import pandas as pd
import pytest

from experiments.report.catalog import FIGURES
from tests import analysis_fixtures as fx
from tests.system.report.test_analysis_report import rendered  # noqa: F401 (rendered: a fixture)
from tests.unit.report.test_report_figures import (ODD_CPU, ODD_GPU, ODD_WORKLOAD,
                                                  _draw_with_chinese, _pid, _svg_texts)


@pytest.mark.system
def test_figure_text_is_readable_on_a_narrow_screen(rendered):
    """At 800 px (764 px of text column) no figure text is under 10 px: panels stack rather than
    shrink, and the smallest font is big enough for the scale the page applies."""
    _, figures, _ = rendered
    for name in FIGURES:
        svg = (figures / f"{name}.svg").read_text()
        width_px = float(re.search(r'<svg[^>]* width="([\d.]+)pt"', svg).group(1)) * 96 / 72
        smallest_pt = min(map(float, re.findall(r"font-size: ([\d.]+)px", svg)))  # user units
        shown = smallest_pt * 96 / 72 * min(1.0, 764 / width_px)
        assert shown >= 10, (name, smallest_pt, width_px)


@pytest.mark.system
def test_roofline_points_are_named_on_hover(rendered):
    html, figures, _ = rendered
    svg = (figures / "roofline.svg").read_text()
    rows = pd.read_parquet(figures.parent / "measurements.parquet")
    # this run's points (the CPUs): the published GPU's are in its own report
    drawn = rows[(rows.status == "ok") & rows.experiment.isin(FIGURES["roofline"].experiments)
                 & (rows.intensity > 0) & (rows.flop_per_s > 0) & (rows.source == "run")]
    titles = re.findall(r"<title>([^<]+)</title>", svg)
    assert len(titles) == len(drawn) and "rooflab-tip" not in svg
    assert any(t.startswith("matmul gemm float32 n 2048:") and "GFLOP/s" in t for t in titles)
    assert not any("bfloat16" in t for t in titles)
    block = html[html.index('<figure id="fig-roofline">'):]
    assert "<title>matmul gemm float32 n 2048:" in block[:block.index("</figure>")]


def test_figures_drawn_on_forked_workers_match_those_drawn_in_one_process(tmp_path, monkeypatch):
    """draw_all spreads the figures over forked workers (experiments/core/parallel.py): the
    files do not depend on how many CPUs drew them."""
    from experiments.core import parallel
    monkeypatch.setattr(parallel, "cpus", lambda: 4)
    assert os.getpid() not in parallel.fork_map(_pid, range(4))  # each drawn in a worker
    _draw_with_chinese(tmp_path / "forked")
    monkeypatch.setattr(parallel, "cpus", lambda: 1)
    _draw_with_chinese(tmp_path / "one")
    for name in FIGURES:
        one = (tmp_path / "one" / f"{name}.svg").read_bytes()
        assert (tmp_path / "forked" / f"{name}.svg").read_bytes() == one, name


def test_names_with_mathtext_triggers_are_drawn_as_written(tmp_path):
    """Text from users or devices never reaches mathtext (issue 59): every figure draws, each
    system's name and the datasheet's read in the SVG as written, the workload's beside them."""
    from experiments.analysis import compute
    from experiments.analysis.dataset import from_rows
    from experiments.analysis.datasheets import Datasheet
    from experiments.report import figures

    gpu = [r | ODD_GPU for rows in fx.gpu_rows().values() for r in rows]
    cpu = [r | ODD_CPU for rows in fx.cpu_rows().values() for r in rows]
    workload = [r | {"experiment": "workload", "op": ODD_WORKLOAD, "variant": None}
                for r in gpu[:1] + cpu[:1]]
    ds = from_rows(gpu + cpu + workload)
    sheet = Datasheet("Ref $x_1_2$ sheet", "cuda", ["Acme"], bandwidth_Bps=5e12,
                      matrix={"bfloat16": 1e15})
    ceilings = compute.fit_ceilings(ds)
    knees, per_row = compute.decode_knees(ds, ceilings)
    status = figures.draw_all(figures.Inputs(ds, ceilings, [sheet], per_row, knees), tmp_path)
    assert status == dict.fromkeys(FIGURES), status
    systems = list(ds.systems().system)
    assert systems == ["Acme $x$ GPU \\alpha_1^2 $y^2^3 @ lab$", "Zen \\$ 5 $a_b_c$ @ h$st$"]
    for name in FIGURES:
        texts = _svg_texts((tmp_path / f"{name}.svg").read_text())
        assert systems[0] in texts, (name, [t for t in texts if "$" in t])
    assert "datasheet: Ref $x_1_2$ sheet" in _svg_texts((tmp_path / "roofline.svg").read_text())
    assert systems[1] in _svg_texts((tmp_path / "bandwidth.svg").read_text())


def test_the_timing_legend_names_each_clock_in_words(tmp_path):
    """The methods' legend reads as units.words names them, never host_nosync or cuda_event."""
    from experiments.analysis.dataset import from_rows
    from experiments.analysis.units import words
    from experiments.report import figures
    rows = fx.timing_rows(fx.GPU, np.random.default_rng(0))
    empty = pd.DataFrame(columns=["system", "value", "ceiling", "unit", "dtype"])
    status = figures.draw_all(figures.Inputs(from_rows(rows), empty, [], pd.DataFrame(),
                                             pd.DataFrame()), tmp_path)
    assert status["timing"] is None
    texts = _svg_texts((tmp_path / "timing.svg").read_text())
    assert not any(re.search(r"host_(no)?sync|cuda_event", t) for t in texts), texts
    assert {words("host_nosync"), words("host_sync"), words("cuda_event")} <= set(texts)


def test_the_report_renders_without_bokeh(tmp_path, monkeypatch):
    """Bokeh missing (a bare environment, the GPU image's offline wheels): the report still
    renders, says how to get the interactive roofline, and embeds no plot."""
    from experiments.analysis import compute, dataset
    from experiments.report import interactive, render

    monkeypatch.setattr(interactive, "available", lambda: False)
    ds = dataset.from_rows([r for rows in fx.gpu_rows().values() for r in rows])
    ceilings, knees, claims = compute.judged(ds, [])
    html = render.render(ds, ceilings, [], tmp_path, claims, knees, compute.placed(ds, ceilings))
    assert "needs Bokeh" in html and "Bokeh.embed" not in html
