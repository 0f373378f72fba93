"""`rooflab compare`'s page as a reader's browser shows it: headless Chromium through playwright,
at 1400x900 and 800x1000, on two default runs' results folders (the published sets merged in,
as the report's browser test builds them). Skipped without Chromium or playwright; a failure
under ROOFLAB_REQUIRE_BROWSER=1, as the report's."""

from __future__ import annotations

import contextlib
import csv
import io
import shutil

import pytest

from experiments.cli import rooflab as cli
from tests.system.report.test_report_browser import (WIDTHS, box, browser, default_run,  # noqa
                                                     downloads, hover_tips, opened, overlap,
                                                     point_positions, requests_outside)

pytestmark = pytest.mark.system


@pytest.fixture(scope="module")
def page_file(tmp_path_factory):
    """A: run1/results, a default run; B: run2/results, the same run copied."""
    tmp = tmp_path_factory.mktemp("cmp-browser")
    a = tmp / "run1" / "results"
    default_run(a)
    b = shutil.copytree(a, tmp / "run2" / "results")
    out = tmp / "compare.html"
    with contextlib.redirect_stdout(io.StringIO()):
        assert cli.main(["compare", str(a), str(b), "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def pages(browser, page_file):  # noqa: F811
    out = opened(browser, page_file)
    yield out
    for page, _, _ in out.values():
        page.context.close()


def _legend_and_frame(page) -> list[dict]:
    """The plot's frame and its legend, as page boxes (Bokeh draws both on one canvas)."""
    return page.evaluate("""() => {
      const out = [];
      for (const v of Bokeh.index.all_views()) {
        if (!v.frame || !v.canvas_view) continue;
        const c = v.canvas_view.el.getBoundingClientRect();
        const f = v.frame.bbox;
        out.push({x: c.left + f.left, y: c.top + f.top, width: f.width, height: f.height});
        for (const r of v.renderer_views ? v.renderer_views.values() : []) {
          if (r.model.type !== "Legend" || !r.bbox) continue;
          out.push({x: c.left + r.bbox.left, y: c.top + r.bbox.top, width: r.bbox.width,
                    height: r.bbox.height});
        }
      }
      return out;
    }""")


@pytest.mark.parametrize("width", WIDTHS)
def test_header_what_differs_plot_and_legend_do_not_overlap(pages, width):
    page, seen, (w, _) = pages[width]
    boxes = {s: box(page, s) for s in ("p.sides", "#differs")}
    frame_legend = _legend_and_frame(page)
    assert len(frame_legend) == 2, frame_legend  # the frame, then the legend under it
    boxes |= {"frame": frame_legend[0], "legend": frame_legend[1]}
    names = list(boxes)
    for i, a in enumerate(names):
        assert boxes[a]["x"] >= 0 and boxes[a]["x"] + boxes[a]["width"] <= w + 1, (a, boxes[a])
        for b in names[i + 1:]:
            assert not overlap(boxes[a], boxes[b]), (a, boxes[a], b, boxes[b])
    assert page.evaluate("() => document.documentElement.scrollWidth") <= w
    assert not seen["errors"]


@pytest.mark.parametrize("width", WIDTHS)
def test_tooltips_name_side_and_machine_inside_the_window(pages, width):
    page, _, (w, _) = pages[width]
    page.locator(".plot").first.scroll_into_view_if_needed()
    points = point_positions(page)
    assert len(points) >= 4
    texts = hover_tips(page, w, points)
    assert texts and all(t[:3] in ("A: ", "B: ") for t in texts), texts


def test_a_header_click_sorts_the_workloads_by_number(pages):
    page, _, _ = pages["wide"]
    table = page.locator("table[data-name='workloads']")
    heads = table.locator("thead th").all_inner_texts()
    values = "(t) => Array.from(t.tBodies[0].rows).map((r) => parseFloat(r.cells[%d].dataset.v))"
    for name in ("A", "batch"):
        table.locator(f"thead th:text-is('{name}')").click()
        up = [v for v in table.evaluate(values % heads.index(name)) if v == v]
        assert len(up) > 3 and up == sorted(up), name
        table.locator(f"thead th:text-is('{name}')").click()
        down = [v for v in table.evaluate(values % heads.index(name)) if v == v]
        assert down == sorted(down, reverse=True), name


def test_csv_holds_raw_numbers_the_same_at_every_width(pages):
    got = {name: downloads(page) for name, (page, _, _) in pages.items()}
    assert got["wide"] == got["narrow"]
    tables = got["wide"]
    assert {"workloads.csv", "ceilings.csv"} <= {name for name, _ in tables}
    for name, text in tables:
        assert "…" not in text and "nan" not in text.lower().split(","), name
    for name, text in tables:
        if name not in ("workloads.csv", "ceilings.csv"):
            continue
        rows = list(csv.DictReader(io.StringIO(text)))
        assert rows, name
        for r in rows:  # raw numbers where a value is: seconds and ratios, not "32.6 µs [...]"
            for key in ("A", "B", "B/A"):
                assert r[key] == "" or float(r[key]) > 0, (name, key, r[key])
        assert any(r["A"] for r in rows), name


def test_the_page_requests_nothing_outside_its_file(pages, page_file):
    for page, seen, _ in pages.values():
        assert not requests_outside(page, seen, page_file)
