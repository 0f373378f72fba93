"""The report's figures and interactive roofline as a reader sees them: text size, hover names,
CJK, each workload's colour."""

import re

import pandas as pd
import pytest

from experiments.report.catalog import FIGURES


from tests.system.report.test_analysis_report import rendered  # noqa: F401 (rendered: a fixture)


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
