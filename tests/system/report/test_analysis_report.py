"""The report renders from a small fixture through the command line the workflow runs."""

import json
import re
from pathlib import Path
from markupsafe import escape as html_escape  # as Jinja escapes

import numpy as np
import pandas as pd
import pytest

from tests import analysis_fixtures as fx
from experiments.report import render as report
from experiments.steps import pipeline
from experiments.steps.command import main
from experiments.report.catalog import FIGURES
from experiments.analysis.claims import CLAIM_IDS

EVIL = "<script>alert(1)</script>"


# Every test that runs the whole chain (_pipeline, rendered: fit, knees, claims, figures, report)
# is marked `system`: 2-10 s each on 2 cores.
def _plot_data(html: str) -> str:
    """The interactive roofline's document (Bokeh's JSON in the page's script)."""
    return html[html.index("const docs_json"):]


def _plotted(folder):
    """The points the report's roofline plots, from the files the pipeline wrote in a folder."""
    from experiments.analysis.compute import Placed
    from experiments.report import workloads
    f = pipeline.Files.under(folder)
    return workloads.section(Placed.read(f.placements, f.workload_knees,
                                         f.datasheet_predictions))["points"]


def _pipeline(tmp_path, run_files, published=()):
    data = tmp_path / "measurements.parquet"
    assert main(["collect", str(data), *map(str, run_files), "--published",
                 *map(str, published)]) == 0
    return _pipeline_from(tmp_path, data)


def _pipeline_from(tmp_path, data):
    """roofline, decode, claims, figures and report from a collected dataset, by the command
    lines the workflow runs (the steps: experiments/steps/pipeline.py)."""
    files = pipeline.Files.under(tmp_path).but(dataset=str(data))
    for step in pipeline.AFTER_COLLECT:
        assert main(pipeline.STEPS[step].argv(files)) == 0, step
    figures, html, ceilings = Path(files.figures), Path(files.report), Path(files.ceilings)
    return html.read_text(), figures, ceilings


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("report")
    cpu = fx.CPU | {"host": f"lab{EVIL}", "device_name": f"Test CPU {EVIL}"}
    run = fx.write_files(tmp / "run", fx.cpu_rows() | {"bandwidth": [
        r | {"host": cpu["host"], "device_name": cpu["device_name"]}
        for r in fx.bandwidth_rows(cpu, np.random.default_rng(0), ("float32",))]}, cpu)
    gpu = fx.write_files(tmp / "gpu", fx.gpu_rows(seed=0), fx.GPU)
    published = tmp / "published" / "h200" / "measurements.parquet"
    assert main(["collect", str(published), *map(str, gpu)]) == 0
    return _pipeline(tmp, run, [published])


@pytest.mark.system
def test_report_holds_every_claim_and_every_figure(rendered):
    html, figures, _ = rendered
    for cid in CLAIM_IDS:
        assert f'id="{cid}"' in html and f'href="#{cid}"' in html
    for name in FIGURES:
        assert (figures / f"{name}.svg").stat().st_size > 0
        assert re.search(rf'<figure id="fig-{name}">\s*<svg', html)  # inlined: text, tooltips
    # a figure serving two sections is drawn once, the second section links to it
    assert all(html.count(f'<figure id="fig-{name}">') == 1 for name in FIGURES)
    # tables sort and export (the inline script), offline: nothing fetched at view time
    assert html.count('<table class="data"') >= 5 and "text/csv" in html
    assert not re.search(r'<script[^>]+src=|<link[^>]+href="http', html)
    # two systems: one column each on the first screen, side by side
    first = html[html.index('id="summary"'):html.index('id="systems"')]
    assert first.count('<span class="machine">') == 3  # two CPUs and the published GPU
    assert "NVIDIA H200 SXM" in html  # the datasheet matched by name


@pytest.mark.system
def test_report_escapes_text_from_devices_and_configs(rendered):
    html, _, _ = rendered
    assert EVIL not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


@pytest.mark.system
def test_report_says_what_is_missing(rendered):
    html, figures, _ = rendered
    # per system, the experiments it has no rows of (the first screen's note): the CPU run's two
    # systems lack decode, intensity, transfer and launch; the GPU set every experiment but workload
    missing = [set(m.split(", ")) for m in re.findall(r"has no rows from ([^:<]+):", html)]
    gpu = [m for m in missing if "decode" not in m]
    assert gpu == [{"workload"}], missing
    assert len(missing) == 3 and all({"decode", "intensity", "transfer", "launch"} <= m
                                     for m in missing if m not in gpu), missing
    status = json.loads((figures / "index.json").read_text())
    assert set(status) == set(FIGURES) and all(v is None for v in status.values())


@pytest.mark.system
def test_figures_without_data_are_placeholders_naming_the_experiment(tmp_path):
    run = fx.write_files(tmp_path / "run", {"bandwidth": fx.bandwidth_rows(
        fx.CPU, np.random.default_rng(0), ("float32",))}, fx.CPU)
    html, figures, ceilings = _pipeline(tmp_path, run)
    status = json.loads((figures / "index.json").read_text())
    assert status["bandwidth"] is None and status["roofline"] is None
    assert "no decode rows" in status["decode"] and "no matmul rows" in status["matmul"]
    assert "Not drawn: no decode rows" in html
    table = pd.read_parquet(ceilings)
    assert {"host", "device", "ceiling", "dtype", "value", "unit", "ci_low", "ci_high", "method",
            "n_points"} <= set(table.columns)


def reader_text(html: str) -> str:
    """What a reader reads: the page without scripts, styles and figures' SVG."""
    html = re.sub(r"<(script|style|svg)\b.*?</\1>", " ", html, flags=re.S)
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


@pytest.mark.system
def test_report_reads_like_a_report(rendered):
    """No 'nan', raw Python values, scientific notation or file paths where a reader looks; the
    article's own words."""
    html, _, _ = rendered
    text = reader_text(html)
    assert not re.search(r"\bnan\b", text, re.I), re.findall(r".{60}\bnan\b.{20}", text, re.I)
    assert "{'" not in text and "None" not in text and "n/a" not in text
    assert not re.search(r"\d\.?\d*e[+-]\d", text), re.findall(r".{40}\de[+-]\d.{10}", text)
    assert "/tmp" not in text and ".parquet::" not in text
    assert "如果数据不在同一个设备，计算会报错" in html  # C4 in the article's Chinese
    assert "worked example" in text and "It would fail if" in text
    assert re.search(r"Worked examples: \d+, of which \d+ give what the article says", text)


@pytest.mark.system
def test_a_contended_run_is_on_the_first_screen_and_in_its_verdicts(tmp_path):
    rows = fx.cpu_rows()
    # every point loaded; the first few still so after their retry (flagged: they leave the fit)
    rows["bandwidth"] = [r | {"other_cpu_share": 0.45, "contended": i < 3}
                         for i, r in enumerate(rows["bandwidth"])]
    run = fx.write_files(tmp_path / "run", rows, fx.CPU)
    html, _, _ = _pipeline(tmp_path, run)
    summary = html[html.index('id="summary"'):html.index('id="systems"')]
    assert "measured under load: 100 % of CPU points" in summary and "45 %" in summary
    table = pd.read_parquet(tmp_path / "claims.parquet")
    c10 = table[(table.claim == "C10") & (table.kind == "measured")].iloc[0]
    assert c10.under_load and "under load: 3 of the" in c10.measurement  # its own contended points


@pytest.mark.system
def test_ceilings_carry_the_clock_and_power_of_their_plateau(tmp_path):
    rows = fx.gpu_rows(seed=0)
    for r in rows["matmul"]:
        r |= {"sm_clock_mhz": 1500.0 if r["n"] >= 4096 else 1900.0, "power_w": 690.0,
              "energy_j": 690.0 * r["time_s"]}
    run = fx.write_files(tmp_path / "run", rows, fx.GPU)
    html, _, ceilings = _pipeline(tmp_path, run)
    table = pd.read_parquet(ceilings)
    bf16 = table[(table.ceiling == "matrix_flops") & (table.dtype == "bfloat16")].iloc[0]
    assert bf16.sm_clock_mhz == 1500.0 and bf16.power_w == 690.0
    assert "1500 MHz, 690 W" in html
    assert "pJ/FLOP" in html[html.index('id="energy"'):]


@pytest.mark.system
def test_duplicates_and_ignored_files_are_shown(tmp_path):
    """A host folder copied twice is counted once, a stray file is listed, both in the report."""
    root = tmp_path / "measurements"
    first = fx.write_files(root / "lab" / "cpu", fx.cpu_rows(), fx.CPU)
    again = []
    for f in first:  # the same files again under another device folder name
        copy = root / "lab" / "cpu-copy" / f.relative_to(root / "lab" / "cpu")
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_bytes(f.read_bytes())
        again.append(copy)
    stray = root / "stray.parquet"
    stray.write_bytes(first[0].read_bytes())
    data = tmp_path / "measurements.parquet"
    assert main(["collect", str(data), *map(str, first + again), "--scan", str(root)]) == 0
    html, _, _ = _pipeline_from(tmp_path, data)
    assert "The same rows were found twice" in html and "cpu-copy" in html
    assert "Files left out" in html and "measurements/stray.parquet" in html
    assert str(tmp_path) not in re.sub(r'src="data:[^"]+"', "", html)  # no full paths


@pytest.mark.system
def test_report_has_the_gpu_to_gpu_section(rendered):
    html, _, _ = rendered
    section = html[html.index('<h2 id="gpu2gpu">'):html.index('<h2 id="claims">')]
    assert "<td>nvlink</td>" in section and "all-reduce busbw" in section
    assert 'id="fig-peer_copy"' in section and 'id="fig-collectives"' in section
    assert "Not measurable here" not in section


@pytest.mark.system
def test_workloads_are_placed_on_the_roofline_in_the_report(tmp_path):
    rows = fx.gpu_rows(seed=0)
    rows["workload"] = [fx._row(fx.GPU, "workload", "mlp", "bfloat16",
                                max(2 * b * 4096**2 * 2 / fx.GPU["matrix"]["bfloat16"],
                                    2 * 4096**2 * 2 / fx.GPU["dram_bw"]),
                                2 * b * 4096**2 * 2, 2 * 4096**2 * 2 + 4 * b * 4096,
                                batch=b, timer="cuda_event_graph") for b in (1, 8, 64, 512, 4096)]
    run = fx.write_files(tmp_path / "run", rows, fx.GPU)
    html, _, _ = _pipeline(tmp_path, run)
    section = html[html.index('id="workloads"'):html.index('id="claims"')]
    points = _plotted(tmp_path)
    assert [p.kind for p in points] == ["whole call"] * 5
    assert any(p.text.startswith("NVIDIA H200 @ h200-ref: mlp bfloat16 batch 64:") for p in points)
    assert "mlp bfloat16 batch 64:" in _plot_data(html)  # the plot on the first screen has them
    assert "How well the roofline predicts" in section and "NVIDIA GeForce RTX 3090" in section


@pytest.mark.system
def test_a_workload_without_a_compute_roof_reads_without_nan(tmp_path):
    rows = {"bandwidth": fx.bandwidth_rows(fx.CPU, np.random.default_rng(0), ("float32",)),
            "workload": [fx._row(fx.CPU, "workload", "mlp", "float32", 1e-3, 2e6, 1e6, batch=1,
                                 timer="perf_counter")]}
    run = fx.write_files(tmp_path / "run", rows, fx.CPU)
    html, _, _ = _pipeline(tmp_path, run)
    section = html[html.index('id="workloads"'):html.index('id="claims"')]
    assert len(_plotted(tmp_path)) == 1 and "mlp float32 batch 1:" in _plot_data(html)
    assert not re.search(r"\bnan\b", section, re.I)


# --- what a person reads: fonts, sizes, folds, the first screen -----------------------------------


@pytest.mark.system
def test_long_claim_numbers_are_folded_short_ones_shown(rendered):
    html, figures, _ = rendered
    table = pd.read_parquet(figures.parent / "claims.parquet")
    texts = [t for t in table.measurement.dropna() if t]
    long = [t for t in texts if len(t) > report.FOLD]
    assert long and len(long) < len(texts)
    for text in texts:
        at = html.index(str(html_escape(report.plain(text))))
        folded = html.rfind("<details>", 0, at) > html.rfind("</details>", 0, at)
        assert folded == (text in long), text


@pytest.mark.system
def test_the_first_screen_says_what_ran_how_long_and_what_went_wrong(tmp_path):
    rows = fx.gpu_rows(seed=0)
    for r in rows["decode"]:
        if r["op"] == "block_decode":  # C18 does not hold (see test_analysis_claims)
            r["time_s"] *= 10
    for r in rows["bandwidth"][:3]:
        r["noisy"] = True
    failed = "RuntimeError: CUDA error: an illegal memory access was encountered. " * 5
    rows["launch"][0] |= {"status": "error", "time_s": None, "message": failed}
    for name in ("timing", "l1"):  # experiments with no ok row: one line names them all
        for r in rows[name]:
            r |= {"status": "not_applicable", "time_s": None}
    run = fx.write_files(tmp_path / "run", rows, fx.GPU)
    html, _, _ = _pipeline(tmp_path, run)
    first = re.sub(r"<[^>]+>", " ", html[html.index('id="summary"'):html.index('id="systems"')])
    first = re.sub(r"\s+", " ", first)
    n = sum(len(v) for v in rows.values())
    assert f"{n} rows of {len(rows)} experiments" in first
    # the fixture's jobs: 90 s each, all started at once
    assert f"{len(rows)} jobs, {len(rows) * 1.5:.1f} min of job time" in first
    assert "00:00 to 00:01 UTC (1.5 min)" in first
    oom = [r for rs in rows.values() for r in rs if r["status"] == "oom"]
    assert f"{len(oom)} oom ({', '.join(sorted({r['experiment'] for r in oom}))})" in first
    assert "1 error (launch)" in first and "3 noisy points" in first
    assert first.count("no ok row in") == 1
    assert "no ok row in l1, timing: the claims that need them are not measurable here" in first
    assert re.search(r"does not hold: 1 C18\b", first)
    assert not re.search(r"\b0 % of points", first)  # nothing that did not go wrong
    statuses = html[html.index('id="statuses"'):]
    assert "<details><summary>RuntimeError: CUDA error: an illegal memory access was " in statuses


@pytest.mark.system
def test_workload_ops_show_as_kernels_with_their_measured_traffic(tmp_path):
    """A profiled MLP step: its GEMM op lands on the roofline at its counted intensity and again
    at FLOPs / DRAM, L2 and L1 bytes ncu measured; the op table and the summed model show."""
    rows = fx.gpu_rows(seed=0)
    gemm_flops, gemm_bytes = 2 * 64 * 4096**2 * 2, 4096**2 * 2
    t = gemm_bytes / fx.GPU["dram_bw"]
    rows["workload"] = [
        fx._row(fx.GPU, "workload", "mlp", "bfloat16", 1.2 * t, gemm_flops, gemm_bytes, batch=64,
                timer="cuda_event_graph"),
        fx._row(fx.GPU, "workload", "mlp", "bfloat16", t, gemm_flops, gemm_bytes, batch=64,
                timer="torch_profiler", variant="aten_op",
                params={"aten_op": "aten::mm", "input_shapes": "[[64, 4096], [4096, 4096]]",
                        "bytes_source": "ncu", "dram_bytes": 1.05 * gemm_bytes,
                        "l2_bytes": 2 * gemm_bytes, "l1_bytes": 0.1 * gemm_bytes}),
        fx._row(fx.GPU, "workload", "mlp", "bfloat16", 0.2 * t, 0.0, 64 * 4096 * 4, batch=64,
                timer="torch_profiler", variant="aten_op",
                params={"aten_op": "aten::gelu", "input_shapes": "[[64, 4096]]",
                        "bytes_source": "counted"})]
    run = fx.write_files(tmp_path / "run", rows, fx.GPU)
    html, _, _ = _pipeline(tmp_path, run)
    section = html[html.index('id="workloads"'):html.index('id="claims"')]
    # one whole call, the GEMM op, and the op at DRAM, L2 and L1 bytes; gelu has no FLOPs
    points = _plotted(tmp_path)
    assert len(points) == 5, points
    assert sum("measured by ncu" in p.text for p in points) == 3
    op = next(p for p in points if p.kind == "aten op")  # its hover names its kernels' traffic
    assert "its kernels moved DRAM 35.2 MB; L2 67.1 MB; L1 3.36 MB (ncu)" in op.text
    data = _plot_data(html)
    legend = html[html.index('class="rl-legend"'):html.index('id="no-cjk"')]
    assert "op at L1 bytes (ncu)" in legend  # the legend names each kind of point
    assert "of DRAM traffic measured by ncu" in data and "aten op" in section
    ops = section[section.index("as their aten ops"):]
    assert "aten::gelu" in ops and "aten::mm" in ops and "ncu" in ops
    assert "summed over a call" in section


