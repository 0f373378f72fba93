"""The report: one self-contained HTML file (figures inlined as SVG, the interactive roofline's
script inlined), in the article's order after a first screen that answers.

What the steps before it wrote is read, never recomputed: the ceilings, the decode knees, the
claims, and the placements step's files (every workload call and op placed, their batch knees,
each call on the datasheet devices). glance, workloads and provenance lay them out beside the
merged rows and the datasheets. Jinja2 autoescapes every value, so text from configs and
device names cannot inject markup.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

import jinja2
import pandas as pd

from experiments.analysis import claims as claims_mod
from experiments.analysis import datasheets, health, roofline
from experiments.analysis.compute import Placed
from experiments.analysis.dataset import Dataset
from experiments.analysis.units import binary, finite, interval, num, qty, share
from experiments.report import glance, interactive, provenance, workloads
from experiments.core import layout
from experiments.core.store import write_text_atomic
from experiments.report.catalog import FIGURES
from experiments.report.figures.common import CJK


METHOD = (
    "Ceilings are fitted from the rows, per system (host, device). Bandwidth: the bandwidth "
    "experiment's bytes/s against working-set size is cut into windows by the cache sizes in "
    f"the device facts (resident: at most {roofline.RESIDENT:g} of a CPU cache, "
    f"{roofline.RESIDENT_GPU:g} of a GPU's L2; past a level: at "
    f"least {roofline.PAST:g}x its size; DRAM: at least {roofline.DRAM_PAST:g}x the last-level "
    "cache); in each window the plateau is the points within "
    f"{1 - roofline.TOP:.0%} of the window's 90th percentile, and the ceiling is their median. "
    f"A cache level is reported where its plateau stands {roofline.STEP - 1:.0%} above the "
    f"next level's, or runs at its rate (at least {roofline.AT_RATE:.0%} of it) and as far above "
    "DRAM's (noted: no step). "
    "GEMM (matrix) ceilings: "
    "the same top-plateau median of the matmul experiment's FLOP/s, per dtype. Vector ceilings: "
    "a robust (soft-L1) least-squares fit of log min(P, B x I) to the intensity sweep places the "
    "ridge, per dtype; each roof is then the top-plateau median of the points on its side (a real "
    "curve rounds off near the ridge, which would pull a one-stage fit below the plateaus), kept "
    "only when at least two points lie on each roof. Ridge = compute ceiling / DRAM "
    "bandwidth. Intervals are 95 % percentile bootstraps of the medians (1000 resamples); under "
    "10 points, the range of the points (coverage 1 - 2^(1-n)), as a bootstrap undercovers there; "
    "a ridge's interval combines its ceilings' bounds. "
    "The decode prediction is time(b) = max(bytes(b)/B, FLOPs(b)/P) with the work counted in "
    "each row, B the bandwidth of the level that holds W and P the dtype's GEMM ceiling; its knee "
    "b* = (W/B) / (f1/P - b1/B) (about ridge x itemsize / 2); the measured knee is t0 / c from a "
    "robust fit of time = max(t0, c b).")


# matplotlib writes coordinates to a millionth of a point; a hundredth draws the same and keeps
# the page small
DECIMALS = re.compile(r"(-?\d+\.\d\d)\d+")
GEOMETRY = re.compile(r'\b(d|x|y|transform)="([^"]*)"')  # never a text or a title


def _svg(path: Path) -> str | None:
    """A figure's SVG to inline, without its XML prolog: text stays text, points keep their
    hover titles."""
    if not path.exists():
        return None
    svg = path.read_text(encoding="utf-8")
    return GEOMETRY.sub(lambda m: m[1] + '="' + DECIMALS.sub(r"\1", m[2]) + '"',
                        svg[svg.index("<svg"):])


def _inliner(figures: dict):
    """inline(name): the figure's SVG with its ids prefixed, so that several SVGs share one page
    without clashing ids."""
    copies = Counter()

    def inline(name: str) -> str:
        copies[name] += 1
        return re.sub(r'(\bid="|url\(#|href="#)', rf"\1{name}{copies[name]}-", figures[name]["svg"])
    return inline


INTERNAL = re.compile(r"\s*\((?:seed|results|measurements)/[^)\s]*\)")  # "(seed/000_....txt)"
SCIENTIFIC = re.compile(r"(?<![\w.])(\d+(?:\.(\d+))?)e([+-]?\d+)\b( B\b)?")


CONDITIONS = re.compile(r" \[([^\[\]]*of points throttled[^\[\]]*)\]$")
CEILING_KEYS = re.compile(r"\b(?:dram_bw\w*|l[123]_bw|intensity_bw|(?:matrix|vector)_flops|"
                          r"ridge_(?:matrix|vector))\b")  # the fit's names: a reader's instead
CLOCKS = re.compile(r"\b(?:host_sync|host_nosync|cuda_event)\b")  # timing's variants, named


def _conditions_note(m) -> str:
    """A verdict's appended conditions, cut to what matters: the load, when there was one
    (the clocks and power are on the first screen once)."""
    load = [p for p in m.group(1).split("; ") if "under load" in p]
    return f" [{'; '.join(load)}]" if load else ""


def plain(text) -> str:
    """Text for a table cell: numbers in scientific notation written out (1.374e+11 ->
    137,400,000,000; 3.8e-02 -> 0.038), CJK left out (a reader's browser may lack the font)."""
    if not isinstance(text, str):
        return ""
    text = SCIENTIFIC.sub(lambda m: qty(float(m.group(1) + "e" + m.group(3)), "B") if m.group(4)
                          else num(float(m.group(0)), max(1, len(m.group(2) or "") + 1)), text)
    text = INTERNAL.sub("", CJK.sub("", text)).replace(" n/a", " not measured")
    text = CEILING_KEYS.sub(lambda m: roofline.label(m[0]), text)
    text = CLOCKS.sub(lambda m: {"host_sync": "the synced host clock", "cuda_event": "CUDA events",
                                 "host_nosync": "the unsynced host clock"}[m[0]], text)
    text = CONDITIONS.sub(_conditions_note, text)
    return re.sub(r"\s{2,}", " ", re.sub(r"[\"“”「」]\s*[\"“”「」]|\(\s*\)", "", text)).strip()


def _conditions(c) -> str:
    parts = []
    if finite(c.get("sm_clock_mhz")):
        parts.append(f"{c['sm_clock_mhz']:.0f} MHz")
    if finite(c.get("cpu_freq_mhz")):
        parts.append(f"CPU {c['cpu_freq_mhz']:.0f} MHz")
    if finite(c.get("power_w")):
        parts.append(f"{c['power_w']:.0f} W")
    return ", ".join(parts)


def _ceiling_table(ceilings: pd.DataFrame, shown: list[str], sheets) -> tuple[list, list]:
    """(fitted ceilings, those not fitted with the reason) of the systems that measured any."""
    rows, unfitted = [], []
    for c in ceilings[ceilings.system.isin(shown)].to_dict("records"):
        dtype = c["dtype"] if isinstance(c["dtype"], str) else ""
        if not finite(c["value"]):
            unfitted.append({"system": c["system"], "ceiling": roofline.label(c["ceiling"]),
                             "dtype": dtype, "note": plain(c["note"])})
            continue
        ref = glance._reference(c, sheets)
        if ref is None and c["ceiling"].startswith("ridge") and dtype:
            sheet = datasheets.find(sheets, c["device_name"])
            ref = sheet.ridge("matrix" if c["ceiling"] == "ridge_matrix" else "vector",
                              dtype) if sheet else None
        silicon = ref is None and finite(c.get("physical_peak"))  # a CPU's FMA or GEMM
        rows.append({
            "system": c["system"], "ceiling": roofline.label(c["ceiling"]), "dtype": dtype,
            "value": interval(c["value"], c["ci_low"], c["ci_high"], c["unit"]),
            "n": int(c["n_points"]) if finite(c["n_points"]) else 0,
            "method": plain(c["method"]), "note": "; ".join(filter(None, (
                plain(c["note"]), glance.silicon_note(c), glance.beside_dram(ceilings, c)))),
            "datasheet": f"silicon {qty(c['physical_peak'], c['unit'])}" if silicon
            else qty(ref, c["unit"]) if ref else "",
            "efficiency": share(c["of_physical_peak"]) if silicon
            else share(c["value"] / ref) if ref else "",
            "conditions": _conditions(c),
            "v": {k: f"{x:.6g}" if finite(x) else "" for k, x in (
                ("value", c["value"]), ("datasheet", c["physical_peak"] if silicon else ref),
                ("efficiency", c["of_physical_peak"] if silicon else c["value"] / ref
                 if ref else None))}})
    return rows, unfitted


def _statuses(ds: Dataset) -> list[dict]:
    rows = ds.rows
    odd = rows[(rows.status != "ok") | rows.noisy.fillna(False).astype(bool)]
    out = []
    for (system, exp, status), g in odd.assign(
            status=odd.status.where(odd.status != "ok", "ok but noisy")).groupby(
            ["system", "experiment", "status"]):
        msgs = g.message.dropna()
        msgs = msgs[msgs != ""]
        example = plain(msgs.iloc[0]) if len(msgs) else ""
        out.append({"system": system, "experiment": exp, "status": status.replace("_", " "),
                    "count": len(g), "ops": ", ".join(sorted(g.op.unique())),
                    "example": example, "short": _fold(example)})
    return out


def _short(path) -> str:
    """A file as a reader knows it: from `measurements/` or `published/` on, not the full path."""
    parts = Path(str(path)).parts
    for anchor in ("measurements", "published"):
        if anchor in parts:
            return "/".join(parts[parts.index(anchor):])
    return Path(str(path)).name


ANNOUNCED = "(Section announced, no text) "


def _claim_sections(table: pd.DataFrame, reference=()) -> list[dict]:
    """The article's sections in order, each with its claims and their verdict rows."""
    out = []
    for sec in claims_mod.SECTIONS:
        items = []
        for c in (c for c in claims_mod.CLAIMS.values() if c.section is sec):
            rows = table[table.claim == c.id]
            # the texts as judged (claims.parquet); the registry's only for a claim it lacks
            t = rows.iloc[0] if len(rows) else pd.Series(
                {"text_en": c.en, "text_zh": c.zh, "prediction": c.prediction,
                 "fails_if": c.fails_if, "experiments": ", ".join(c.experiments)})
            en = t.text_en
            announced = en.startswith(ANNOUNCED)
            items.append({"id": c.id, "en": plain(en.removeprefix(ANNOUNCED).capitalize()
                                                  if announced else en),
                          "announced": announced, "zh": t.text_zh,
                          "prediction": plain(t.prediction),
                          "fails_if": plain(next((f for f in rows.fails_if if f), t.fails_if)),
                          "experiments": t.get("experiments", ", ".join(c.experiments)),
                          "worked": _records(rows[rows.kind == claims_mod.WORKED]),
                          "measured": _records(rows[rows.kind == claims_mod.MEASURED],
                                               reference)})
        out.append({"anchor": sec.anchor, "title": sec.title, "figure": sec.figure,
                    "claims": items})
    return out


FOLD = 160  # characters: a longer text shows its first clause; the rest is a click away


def _fold(text) -> str | None:
    """The visible start of a long text (its first clause, at most ~120 characters), or None
    when the text is short enough to show whole."""
    if not isinstance(text, str) or len(text) <= FOLD:
        return None
    head = text.split("; ")[0]
    return head if len(head) <= 120 else head[:120].rsplit(" ", 1)[0]


def _value_text(r) -> tuple[str, str]:
    """(the metric's value, the threshold) as a reader takes them: a share as a percentage, and
    "= 1" (every check) as 100 %."""
    v, threshold = r["value"], plain(r["threshold"])
    if r["kind"] != claims_mod.MEASURED:
        return (qty(v) if finite(v) else ""), threshold
    if str(r["metric"]).startswith(("share of", "held-out points")) and finite(v) and 0 <= v <= 1:
        return share(v), re.sub(r"^= 1\b", "= 100 %", threshold)
    return num(v), threshold


def _records(rows: pd.DataFrame, reference=()) -> list[dict]:
    """Rows for the template, with numbers as text (never 'nan'), long texts folded; this run's
    systems before the published sets' (`reference`), which are marked."""
    out = []
    rows = rows.assign(reference=rows.system.isin(list(reference))).sort_values(
        "reference", kind="stable")
    for r in rows.to_dict("records"):
        r["measurement"], r["reason"] = plain(r["measurement"]), plain(r["reason"])
        r["metric"], r["used"] = plain(r["metric"]), plain(r["used"])
        r["short"] = _fold(r["measurement"])
        r["value_text"], r["threshold"] = _value_text(r)
        r["verdict_class"] = r["verdict"].replace(" ", "-")
        out.append(r)
    return out


def _notes(frame: pd.DataFrame) -> list[dict]:
    """Records with their text notes made plain (no scientific notation, no paths)."""
    return [{k: plain(v) if k.endswith(("_note", "_ceiling")) else v for k, v in r.items()}
            for r in frame.to_dict("records")]


def _energy(ds: Dataset) -> list[dict]:
    """pJ per FLOP (GEMM, FMA) and per DRAM byte, with the clock and power they ran at."""
    facts = {s: ds.facts(s) for s in ds.systems().system}
    table = health.energy_table(ds.rows, facts)
    table = table[table.value.notna()]
    return [{"system": r["system"], "dtype": r["dtype"], "what": plain(r["note"]),
             "value": f"{num(r['value'])} {r['unit']}", "points": int(r["points"]),
             # the clock, then the power's spread over the plateau (issue 21: beside the clock)
             "conditions": ", ".join(x for x in (
                 f"{r['sm_clock_mhz']:.0f} MHz" if finite(r.get("sm_clock_mhz")) else "",
                 r.get("power") or _conditions(r)) if x)} for r in table.to_dict("records")]


QUANTITIES = {"memory_bytes": "memory capacity", "bandwidth_Bps": "memory bandwidth",
              "host_link_Bps": "host link (PCIe)", "vector_flops": "vector compute",
              "matrix_flops": "matrix (Tensor Core) compute"}


def _datasheet_rows(sheets) -> list[dict]:
    return [{"device": r["device"], "quantity": QUANTITIES.get(r["quantity"], r["quantity"]),
             "dtype": r["dtype"] if isinstance(r["dtype"], str) else "",
             "value": qty(r["value"], r["unit"]), "source": plain(r["source"])}
            for r in datasheets.table(sheets).to_dict("records")]


def gpu2gpu(ds: Dataset) -> dict:
    """The "GPU to GPU" section: per system with ok peer_copy or collectives rows, the best one-way
    and two-way copy GB/s per link type, the 4 KiB copy's latency and the all-reduce's busbw at
    its largest size; else why nothing was measured (one GPU, a CPU)."""
    from experiments.analysis.dataset import ok, param

    rows = ds.rows[ds.rows.experiment.isin(["peer_copy", "collectives"])]
    good = ok(rows)
    table = []
    for system in [s for s in ds.systems().system if (good.system == s).any()]:
        r = good[good.system == system]
        cp = r[(r.experiment == "peer_copy") & (r.byte_per_s > 0)]
        cp = cp.assign(link=param(cp, "link").fillna("unknown"))
        ar = r[(r.experiment == "collectives") & (r.op == "all_reduce")]
        ar = ar[ar.bytes == ar.bytes.max()]
        busbw = param(ar, "busbw_Bps").max() if len(ar) else None
        world = param(r, "world_size").max() if "collectives" in set(r.experiment) else None
        for link in sorted(cp.link.unique()) or [""]:
            c = cp[cp.link == link]
            small = c[(c.variant == "uni") & (c.op == "copy_engine")]
            small = small[small.bytes == small.bytes.min()]
            best = {v: c[c.variant == v].byte_per_s.max() for v in ("uni", "bi")}
            table.append({
                "system": system, "link": link,
                "uni": qty(best["uni"], "B/s") if len(c) else "",
                "bi": qty(best["bi"], "B/s") if len(c) else "",
                "latency": f"{qty(small.time_s.median(), 's')} ({binary(small.bytes.iloc[0])})"
                if len(small) else "",
                "allreduce": f"{qty(busbw, 'B/s')} at {binary(ar.bytes.iloc[0])}, {world:.0f} GPUs"
                if busbw is not None and finite(busbw) else ""})
    reasons = sorted(set(rows[rows.status == "not_applicable"].message.dropna()))
    return {"rows": table, "not_measurable": [] if table else reasons or
            ["no peer_copy or collectives rows"]}


def roofline_plot(ds: Dataset, ceilings: pd.DataFrame, points: list, title: str = ""):
    """(the interactive roofline of every system with ceilings and every workload point, its
    legend's groups); (None, []) without Bokeh (the page says so, keeps its tables and figures).
    This run's systems come first, the published sets' start hidden."""
    if not interactive.available():
        return None, []
    ref = glance.reference_systems(ds)
    systems = sorted(ds.systems().system, key=lambda s: s in ref)
    return interactive.build(glance.roofs(ceilings, systems, ref), points, title)


def interactive_parts(ds: Dataset, ceilings: pd.DataFrame, placed: Placed) -> dict:
    """The interactive roofline as the page embeds it, {"script", "divs", "legend"} (Bokeh's
    components, the legend's groups as plain data): its own step (experiments/steps/
    pipeline.py), so that it is built beside the figures and the claims, not after them (on a
    small CPU it is over half of the report step)."""
    mine = workloads.section(placed, glance.reference_systems(ds))
    fig, legend = roofline_plot(ds, ceilings, mine.get("points", []))
    script, divs = interactive.embed({"roofline": fig})
    return {"script": script, "divs": divs,
            "legend": [dataclasses.asdict(g) for g in legend] if divs else []}


def render(ds: Dataset, ceilings: pd.DataFrame, sheets: list, figures_dir,
           table: pd.DataFrame, knees: pd.DataFrame, placed: Placed, out=None,
           plot: dict | None = None) -> str:
    """Render the report from the claims table, decode knees and workloads (`placed`: the
    placements step's files, Placed.read) the workflow wrote; writes `out`. `plot`: the
    interactive roofline's parts (interactive_parts) where a step built them, else built here."""
    figures_dir = Path(figures_dir)
    index = figures_dir / layout.FIGURE_INDEX
    placeholders = json.loads(index.read_text()) if index.exists() else {}
    figures = {name: {"svg": _svg(figures_dir / f"{name}.svg"), "title": fig.caption,
                      "category": fig.category, "missing": placeholders.get(name)}
               for name, fig in FIGURES.items()}
    ref = glance.reference_systems(ds)
    first = glance.glance(ds, ceilings, table, sheets, ref)
    shown = [s["system"] for s in first["systems"] + first["references"]]
    mine = workloads.section(placed, ref)
    if mine:
        mine["knees"] = _notes(mine["knees"])
    plot = plot if plot is not None else interactive_parts(ds, ceilings, placed)
    plot_script, divs = plot["script"], plot["divs"]
    fitted, unfitted = _ceiling_table(ceilings, shown, sheets)
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(Path(__file__).parent),
                             autoescape=True, undefined=jinja2.StrictUndefined)
    html = env.get_template("report.html.j2").render(
        generated=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        n_rows=len(ds.rows), systems=list(ds.systems().system),
        sources=sorted(ds.rows.source.unique()), glance=first,
        bokeh_js=interactive.packed_script() if divs else "", bokeh=interactive.available(),
        plot_script=interactive.deferred(plot_script), unpack_js=interactive.UNPACK_JS,
        plots=divs, legend=plot.get("legend", []),
        energy=_energy(ds), workloads=mine,
        sections=_claim_sections(table, ref), all_claims=_records(table, ref), figures=figures,
        inline=_inliner(figures), shown=[],
        provenance=provenance.provenance(ds), ceilings=fitted, unfitted=unfitted,
        knees=_notes(knees), statuses=_statuses(ds),
        ignored=[(_short(p), plain(why)) for p, why in sorted(ds.ignored.items())],
        duplicates=[{"kept": _short(d.get("kept")), "dropped": _short(d.get("dropped")),
                     "rows": d.get("rows")} for d in ds.duplicates],
        refused=[{"file": _short(r.get("file")), "rows": r.get("rows"), "why": ", ".join(
            f"{why} ({n})" for why, n in (r.get("why") or {}).items())} for r in ds.refused],
        datasheet=_datasheet_rows(sheets), gpu2gpu=gpu2gpu(ds),
        method=METHOD, qty=qty, num=num, interval=interval, isfinite=finite,
        tables_js=(Path(__file__).parent / "tables.js").read_text())
    if out is not None:
        write_text_atomic(out, html)
    return html
