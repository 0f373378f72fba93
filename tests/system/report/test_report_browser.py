"""The report as a reader's browser shows it: headless Chromium through playwright, at a wide
(1400x900) and a narrow (800x1000) window, on a default run's report (this run's GPU and CPU with
the published sets merged in, as config/config.yaml's `published:` does).

Needs Debian's chromium and the playwright package (.ci/run installs both). Without them the
tests are skipped with the reason; in CI (ROOFLAB_REQUIRE_BROWSER=1) that is a failure.
"""

from __future__ import annotations

import csv
import io
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from tests import analysis_fixtures as fx
from experiments.steps import pipeline
from experiments.steps.command import main

pytestmark = pytest.mark.system

ROOT = Path(__file__).resolve().parents[3]
REQUIRED = os.environ.get("ROOFLAB_REQUIRE_BROWSER") == "1"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# a browser that reaches nothing: no sync, no updates, no QUIC probes, no first-run pages
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
WIDTHS = {"wide": (1400, 900), "narrow": (800, 1000)}
H100 = fx.GPU | {"host": "myhost", "device_name": "NVIDIA H100 80GB HBM3",
                 "memory_bytes": 85_520_809_984}
PUBLISHED = [ROOT / "results" / "published" / "h200" / f
             for f in ("measurements.parquet", "workloads.parquet", "modules.parquet")] \
    + [ROOT / "results" / "published" / "h200x2" / "measurements.parquet"]


def _skip_or_fail(reason: str):
    if REQUIRED:
        pytest.fail(f"ROOFLAB_REQUIRE_BROWSER=1, but {reason}")
    pytest.skip(reason)


def _mlp(dev, dtype, batches, d, rate, bw, timer):
    return [fx._row(dev, "workload", "mlp", dtype, max(2 * b * d * d / rate, 4 * d * d / bw),
                    2 * b * d * d, 4 * d * d + 8 * b * d, batch=b, timer=timer)
            for b in batches]


def default_run(folder: Path) -> Path:
    """A default run's report: one H100 and its host CPU, each with a workload, and the published
    sets merged in; built by the workflow's steps."""
    gpu = fx.gpu_rows(seed=0, host=H100["host"], device_name=H100["device_name"],
                      memory_bytes=H100["memory_bytes"])
    gpu["workload"] = _mlp(H100, "bfloat16", (1, 8, 64, 512, 4096), 4096, 760e12, 4.2e12,
                           "cuda_event_graph")
    cpu = fx.CPU | {"host": H100["host"]}
    cpu_rows = {k: [r | {"host": cpu["host"]} for r in v] for k, v in fx.cpu_rows().items()}
    cpu_rows["workload"] = _mlp(cpu, "float32", (1, 8, 64), 1024, 200e9, 40e9, "perf_counter")
    run = fx.write_files(folder / "gpu", gpu, H100) + fx.write_files(folder / "cpu", cpu_rows, cpu)
    data = folder / "measurements.parquet"
    assert main(["collect", str(data), *map(str, run), "--published", *map(str, PUBLISHED)]) == 0
    files = pipeline.Files.under(folder).but(dataset=str(data))
    for step in pipeline.AFTER_COLLECT:
        assert main(pipeline.STEPS[step].argv(files)) == 0, step
    return Path(files.report)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    return default_run(tmp_path_factory.mktemp("browser"))


@pytest.fixture(scope="module")
def browser():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _skip_or_fail("the playwright package is not installed (pip install playwright)")
    if not Path(CHROMIUM).is_file():
        _skip_or_fail("no chromium (Debian: apt-get install chromium)")
    with sync_playwright() as p, tempfile.TemporaryDirectory() as profiles:
        # a new, empty profile per window: nothing from a reader's browser, no lock shared
        yield lambda size: p.chromium.launch_persistent_context(
            tempfile.mkdtemp(dir=profiles), executable_path=CHROMIUM, args=ARGS, headless=True,
            viewport={"width": size[0], "height": size[1]}, accept_downloads=True)


def opened(browser, path: Path) -> dict:
    """Each width's page of the file at `path`, opened once and its plot drawn: {width: (page,
    {"requests": every URL it asked for, "errors": every script error}, size)}."""
    out = {}
    for name, size in WIDTHS.items():
        ctx = browser(size)
        page = ctx.new_page()
        seen = {"requests": [], "errors": []}
        page.on("request", lambda r, seen=seen: seen["requests"].append(r.url))
        page.on("pageerror", lambda e, seen=seen: seen["errors"].append(str(e)))
        page.goto(path.as_uri())
        page.wait_for_function("() => window.Bokeh && Bokeh.index && "
                               "Bokeh.index.all_views().some((v) => v.glyph && v.glyph.sx)")
        out[name] = (page, seen, size)
    return out


@pytest.fixture(scope="module")
def pages(browser, report):
    """Each width's page, opened once, with every request it made and every script error."""
    out = opened(browser, report)
    yield out
    for page, _, _ in out.values():
        page.context.close()


def box(page, selector):
    b = page.locator(selector).first.bounding_box()
    assert b, f"{selector} is not on the page"
    return b


def overlap(a, b) -> bool:
    return (a["x"] < b["x"] + b["width"] - 1 and b["x"] < a["x"] + a["width"] - 1
            and a["y"] < b["y"] + b["height"] - 1 and b["y"] < a["y"] + a["height"] - 1)


@pytest.mark.parametrize("width", WIDTHS)
def test_the_first_screen_has_no_overlapping_boxes_and_no_sideways_scroll(pages, width):
    page, seen, (w, _) = pages[width]
    boxes = {s: box(page, s) for s in ("table.answer", ".plot .bk-Figure", ".rl-legend")}
    names = list(boxes)
    for i, a in enumerate(names):
        assert boxes[a]["x"] >= 0 and boxes[a]["x"] + boxes[a]["width"] <= w + 1, (a, boxes[a])
        for b in names[i + 1:]:
            assert not overlap(boxes[a], boxes[b]), (a, boxes[a], b, boxes[b])
    # the table's content stays inside the table's column (no cell drawn under the plot)
    assert page.evaluate("() => { const t = document.querySelector('table.answer');"
                         " return t.scrollWidth <= t.parentElement.clientWidth + 1; }")
    assert page.evaluate("() => document.documentElement.scrollWidth") <= w
    assert not seen["errors"]


def point_positions(page) -> list[tuple[float, float]]:
    """Page coordinates of the visible scatter points (Bokeh's own mapping to the canvas)."""
    return page.evaluate("""() => {
      const out = [];
      for (const v of Bokeh.index.all_views()) {
        if (!v.glyph || !v.glyph.sx || !v.model.visible || v.glyph.sx.length === 0) continue;
        if (v.model.glyph.type !== "Scatter") continue;
        const c = v.parent.canvas_view.el.getBoundingClientRect();
        for (let i = 0; i < v.glyph.sx.length; i++) {
          const x = c.left + v.glyph.sx[i], y = c.top + v.glyph.sy[i];
          const f = v.parent.frame.bbox;
          if (v.glyph.sx[i] > f.left + 4 && v.glyph.sx[i] < f.right - 4 &&
              v.glyph.sy[i] > f.top + 4 && v.glyph.sy[i] < f.bottom - 4) out.push([x, y]);
        }
      }
      return out;
    }""")


def hover_tips(page, w, points) -> list[str]:
    """Each point hovered: its tooltip's text, checked to lie inside the window, wrapped."""
    texts = []
    for x, y in points:
        page.mouse.move(x, y)
        tip = page.locator(".rl-tip").first
        try:
            tip.wait_for(state="visible", timeout=500)
        except Exception:  # a point under another glyph's edge: the next one
            continue
        # the box and the text read at once: the tooltip may go as the plot redraws
        x0, width, text = tip.evaluate("(e) => { const b = e.getBoundingClientRect();"
                                       " return [b.left, b.width, e.innerText]; }")
        if not width:
            continue
        assert x0 >= 0 and x0 + width <= w, (text, x0, width)
        assert width <= 420, (text, width)  # wrapped, not one 900 px line
        assert " @ " in text, text  # the machine: "device @ host"
        texts.append(text)
        page.mouse.move(1, 1)
    return texts


@pytest.mark.parametrize("width", WIDTHS)
def test_tooltips_wrap_name_their_machine_and_stay_inside_the_window(pages, width):
    """This run's points first; then a reference set ticked in the legend: its points show,
    and their tooltips say they are a reference."""
    page, _, (w, _) = pages[width]
    page.locator(".plot").first.scroll_into_view_if_needed()
    mine = point_positions(page)
    assert len(mine) >= 5
    texts = hover_tips(page, w, mine)
    assert len(texts) >= 3 and not any("(reference)" in t for t in texts)
    legend = page.locator(".rl-legend")
    legend.locator("details > summary").click()
    box = legend.locator("details fieldset", has_text="h200 [published:h200]").first
    box.locator("legend input").check()
    page.wait_for_timeout(300)
    shown = [p for p in point_positions(page) if p not in mine]
    assert len(shown) > 10
    texts = hover_tips(page, w, shown[:: max(1, len(shown) // 12)])
    assert texts and all("(reference)" in t for t in texts)
    page.locator(".plot").first.scroll_into_view_if_needed()
    box.locator("legend input").uncheck()
    legend.locator("details > summary").click()


def downloads(page) -> list[tuple[str, str]]:
    """Every table's CSV button clicked: (file name, its text) in the page's order. Chromium
    lets a page start ten downloads in a row, so the page is opened again after every eight."""
    out, n = [], None
    while n is None or len(out) < n:
        page.reload()
        page.locator("details").evaluate_all("(ds) => ds.forEach((d) => { d.open = true; })")
        buttons = page.locator(".tablebar button:text-is('CSV')").all()
        n = len(buttons)
        for button in buttons[len(out):len(out) + 8]:
            with page.expect_download() as d:
                button.click()
            out.append((d.value.suggested_filename,
                        Path(d.value.path()).read_text(encoding="utf-8")))
    return out


def test_csv_holds_raw_numbers_and_full_text_the_same_at_every_width(pages):
    got = {name: dict(downloads(page)) for name, (page, _, _) in pages.items()}
    assert got["wide"] == got["narrow"]
    tables = got["wide"]
    assert {"workloads.csv", "ceilings.csv", "claims.csv"} <= set(tables)
    for name, text in tables.items():
        assert "…" not in text and "nan" not in text.lower().split(","), name
    # a folded text whole, with what follows it in its cell (the claim's reason)
    claims = list(csv.DictReader(io.StringIO(tables["claims.csv"])))
    page, _, _ = pages["wide"]
    cells = page.locator("table[data-name='claims'] td:has(details)")
    assert cells.count()
    for cell in cells.all()[:20]:
        body, reason = cell.evaluate("(c) => [c.querySelector('details').lastChild.textContent"
                                     ".trim(), (c.querySelector('i') || {}).textContent || '']")
        assert any(body in r["numbers / reason"] and reason.strip() in r["numbers / reason"]
                   for r in claims), (body, reason)
    rows = list(csv.DictReader(io.StringIO(tables["workloads.csv"])))
    assert rows and all(float(r["time"]) > 0 for r in rows)  # seconds, not "32.6 µs"
    assert all(float(r["batch"]) == int(float(r["batch"])) for r in rows)
    assert any("NVIDIA H100 80GB HBM3 @ myhost" == r["system"] for r in rows)


def test_a_header_click_sorts_numbers_as_numbers(pages):
    page, _, _ = pages["wide"]
    table = page.locator("table[data-name='ceilings']")
    header = table.locator("thead th", has_text="value")
    values = "(t) => Array.from(t.tBodies[0].rows).map((r) => parseFloat(r.cells[%d].dataset.v))"
    column = table.locator("thead th").all_inner_texts().index(header.inner_text())
    header.click()
    up = [v for v in table.evaluate(values % column) if v == v]
    assert len(up) > 5 and up == sorted(up)
    header.click()
    down = [v for v in table.evaluate(values % column) if v == v]
    assert down == sorted(down, reverse=True)


def requests_outside(page, seen: dict, path: Path) -> list[str]:
    """With every <details> opened, the requests the page made beyond its own file (data: and
    blob: URLs are inside it); asserts it made some, so an empty list is a finding."""
    page.locator("details").evaluate_all("(ds) => ds.forEach((d) => { d.open = true; })")
    page.wait_for_timeout(200)
    assert seen["requests"]
    return [u for u in seen["requests"]
            if not u.startswith(("data:", "blob:")) and u != path.as_uri()]


def test_the_page_requests_nothing_outside_its_file(pages, report):
    for page, seen, _ in pages.values():
        assert not requests_outside(page, seen, report)


def test_the_file_is_small_and_opens_on_this_run(pages, report):
    """At most 2 MiB with the published sets merged; the first screen's table is this run's
    machines, the published sets a click away and marked as such."""
    assert report.stat().st_size <= 2 * 2**20
    page, _, _ = pages["wide"]
    page.reload()
    heads = page.locator("table.answer").first.locator("thead th").all_inner_texts()
    assert any("NVIDIA H100 80GB HBM3" in h for h in heads)
    assert not any("published" in h or "H200" in h for h in heads)
    refs = page.locator(".glance details.refs")
    assert not refs.evaluate("(d) => d.open")
    refs.locator("summary").click()
    inner = refs.locator("table.answer thead th").all_inner_texts()
    assert any("NVIDIA H200" in h and "reference" in h for h in inner)
