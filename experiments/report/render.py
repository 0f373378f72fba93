"""The report: one self-contained HTML file (figures inlined as SVG), in the article's order.

Everything shown is computed here from the merged rows, the fitted ceilings and the datasheets.
Jinja2 autoescapes every value, so text from configs and device names cannot inject markup.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

import jinja2
import pandas as pd

from experiments import experiment_names
from experiments.analysis import claims as claims_mod
from experiments.analysis import datasheets, health, placements, roofline
from experiments.report import svg_roofline
from experiments.report.catalog import FIGURES
from experiments.analysis.dataset import Dataset
from experiments.analysis.units import binary, finite, si

EXPERIMENTS = experiment_names()

METHOD = (
    "Ceilings are fitted from the rows, per system (host, device). Bandwidth: the bandwidth "
    "experiment's bytes/s against working-set size is cut into windows by the cache sizes in "
    f"the device facts (resident: at most {roofline.RESIDENT:g} of a CPU cache, "
    f"{roofline.RESIDENT_GPU:g} of a GPU's L2; past a level: at "
    f"least {roofline.PAST:g}x its size; DRAM: at least {roofline.DRAM_PAST:g}x the last-level "
    "cache); in each window the plateau is the points within "
    f"{1 - roofline.TOP:.0%} of the window's 90th percentile, and the ceiling is their median. "
    f"A cache level is reported only if its plateau stands {roofline.STEP - 1:.0%} above the "
    "next level's. GEMM (matrix) ceilings: "
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


def _svg(path: Path) -> str | None:
    """A figure's SVG to inline, without its XML prolog: text stays text (the browser's fonts
    draw any CJK), and points keep their hover titles."""
    if not path.exists():
        return None
    svg = path.read_text(encoding="utf-8")
    return svg[svg.index("<svg"):]


def _inliner(figures: dict):
    """inline(name): the figure's SVG with its ids prefixed, so that several SVGs (or the same
    one twice: a figure can serve two sections) share one page without clashing ids."""
    copies = Counter()

    def inline(name: str) -> str:
        copies[name] += 1
        return re.sub(r'(\bid="|url\(#|href="#)', rf"\1{name}{copies[name]}-", figures[name]["svg"])
    return inline


def _provenance(ds: Dataset) -> list[dict]:
    """Per system: device facts, versions, commits, config hashes, device state at start/end."""
    out = []
    for _, s in ds.systems().iterrows():
        metas = ds.file_metas(s.system)
        facts = ds.facts(s.system)
        commits = Counter((m.get("git") or {}).get("commit", "")[:12] + (
            " (dirty)" if (m.get("git") or {}).get("dirty") else "") for m in metas)
        packages = next((m.get("packages") for m in metas if m.get("packages")), {})
        starts = [m.get("device_state_start") for m in metas if m.get("device_state_start")]
        ends = [m.get("device_state_end") for m in metas if m.get("device_state_end")]
        rows = ds.rows[ds.rows.system == s.system]
        # a pool's jobs ran on its GPUs: say which ran how many (files before pools: `device`)
        ran_on = Counter(m.get("measured_on") or m.get("device") for m in metas)
        out.append({
            "system": s.system, "source": s.source, "host": s.host, "device": s.device,
            "kind": s.device_kind, "name": s.device_name,
            "facts": [(k, _fmt_fact(k, v)) for k, v in facts.items()
                      if v not in (None, "", {}) and k not in ("device", "host", "name")],
            "packages": sorted(packages.items()),
            "commits": ", ".join(f"{c or 'unknown'} x{n}" for c, n in commits.items()),
            "configs": ", ".join(sorted({m.get("config_hash", "?") for m in metas})),
            "files": len(metas), "rows": len(rows),
            "ran_on": ", ".join(f"{d} ({n} files)" for d, n in sorted(ran_on.items()))
            if set(ran_on) != {s.device} else "",
            "experiments": ", ".join(sorted(rows.experiment.unique())),
            "state_start": starts[0] if starts else {}, "state_end": ends[-1] if ends else {},
            "measured": _span(rows.measured_at),
        })
    return out


def _fmt_fact(key, value):
    size = binary if key in ("llc_bytes", "cache_bytes") else (lambda v: si(v, "B"))
    if key.endswith("bytes") and isinstance(value, (int, float)):
        return size(value)
    if isinstance(value, dict):
        return ", ".join(f"{k} {size(v) if 'bytes' in key else v}" for k, v in value.items())
    return str(value)


def _span(times: pd.Series) -> str:
    t = pd.to_datetime(times.dropna())
    return "" if t.empty else f"{t.min():%Y-%m-%d %H:%M} to {t.max():%Y-%m-%d %H:%M} UTC"


def _reference(c, sheet) -> float | None:
    """The datasheet's number for one fitted ceiling row, if the sheet has it."""
    if sheet is None:
        return None
    dtype = c["dtype"] if isinstance(c["dtype"], str) else None
    if c["ceiling"] in ("matrix_flops", "vector_flops") and dtype:
        return sheet.peak("matrix" if c["ceiling"] == "matrix_flops" else "vector", dtype)
    if c["ceiling"] == "dram_bw":
        return sheet.bandwidth_Bps
    if c["ceiling"].startswith("ridge") and dtype:
        return sheet.ridge("matrix" if c["ceiling"] == "ridge_matrix" else "vector", dtype)
    return None


def _conditions(c) -> str:
    parts = []
    if finite(c.get("sm_clock_mhz")):
        parts.append(f"{c['sm_clock_mhz']:.0f} MHz")
    if finite(c.get("power_w")):
        parts.append(f"{c['power_w']:.0f} W")
    return ", ".join(parts)


def _ceiling_table(ceilings: pd.DataFrame, sheets) -> list[dict]:
    rows = []
    for c in ceilings.to_dict("records"):
        ref = _reference(c, datasheets.find(sheets, c["device_name"]))
        fitted = finite(c["value"])
        rows.append({
            "system": c["system"], "ceiling": roofline.label(c["ceiling"]),
            "dtype": c["dtype"] if isinstance(c["dtype"], str) else "",
            "value": si(c["value"], c["unit"]) if fitted else "not fitted",
            "ci": f"{si(c['ci_low'], c['unit'])} to {si(c['ci_high'], c['unit'])}"
            if fitted and finite(c["ci_low"]) else "",
            "n": int(c["n_points"]) if finite(c["n_points"]) else 0,
            "method": c["method"] if isinstance(c["method"], str) else "",
            "note": c["note"] if isinstance(c["note"], str) else "",
            "datasheet": si(ref, c["unit"]) if ref else "",
            "efficiency": f"{c['value'] / ref:.0%}" if ref and fitted else "",
            "conditions": _conditions(c)})
    return rows


def _comparison(ceilings: pd.DataFrame, ds: Dataset, sheets) -> dict | None:
    """Quantities x systems, when the dataset holds more than one system."""
    systems = list(ds.systems().system)
    if len(systems) < 2:
        return None
    fitted = ceilings[ceilings.value.notna()]
    keys = fitted[["ceiling", "dtype"]].drop_duplicates().itertuples(index=False)
    order = {"dram_bw": 0, "l3_bw": 1, "l2_bw": 2, "l1_bw": 3, "matrix_flops": 4,
             "vector_flops": 5, "intensity_bw": 6, "ridge_matrix": 7, "ridge_vector": 8}
    table = []
    for ceiling, dtype in sorted(keys, key=lambda k: (order.get(k[0], 9), str(k[1]))):
        cells = []
        for s in systems:
            c = fitted[(fitted.system == s) & (fitted.ceiling == ceiling)
                       & ((fitted.dtype == dtype) if isinstance(dtype, str) else True)]
            cond = _conditions(c.iloc[0].to_dict()) if len(c) else ""
            cells.append(si(c.value.iloc[0], c.unit.iloc[0]) + (f" at {cond}" if cond else "")
                         if len(c) else "-")
        table.append({"quantity": roofline.label(ceiling)
                      + (f" {dtype}" if isinstance(dtype, str) else ""), "cells": cells})
    names = []
    for s in systems:
        name = ds.systems().set_index("system").loc[s].device_name
        sheet = datasheets.find(sheets, name)
        names.append(sheet.name if sheet else "no datasheet entry")
    mem = [si(ds.facts(s).get("memory_bytes"), "B") for s in systems]
    table.insert(0, {"quantity": "memory capacity (device facts)", "cells": mem})
    table.insert(1, {"quantity": "datasheet match", "cells": names})
    return {"systems": systems, "rows": table}


def _statuses(ds: Dataset) -> list[dict]:
    rows = ds.rows
    odd = rows[(rows.status != "ok") | rows.noisy.fillna(False).astype(bool)]
    out = []
    for (system, exp, status), g in odd.assign(
            status=odd.status.where(odd.status != "ok", "ok but noisy")).groupby(
            ["system", "experiment", "status"]):
        msgs = g.message.dropna()
        msgs = msgs[msgs != ""]
        out.append({"system": system, "experiment": exp, "status": status, "count": len(g),
                    "ops": ", ".join(sorted(g.op.unique())),
                    "example": msgs.iloc[0] if len(msgs) else "",
                    "short": _fold(msgs.iloc[0]) if len(msgs) else None})
    return out


def _short(path) -> str:
    """A file as a reader knows it: from `measurements/` or `published/` on, not the full path."""
    parts = Path(str(path)).parts
    for anchor in ("measurements", "published"):
        if anchor in parts:
            return "/".join(parts[parts.index(anchor):])
    return Path(str(path)).name


def _claim_sections(table: pd.DataFrame) -> list[dict]:
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
            items.append({"id": c.id, "en": t.text_en, "zh": t.text_zh,
                          "prediction": t.prediction,
                          "fails_if": next((f for f in rows.fails_if if f), t.fails_if),
                          "experiments": t.get("experiments", ", ".join(c.experiments)),
                          "worked": _records(rows[rows.kind == claims_mod.WORKED]),
                          "measured": _records(rows[rows.kind == claims_mod.MEASURED])})
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


def _records(rows: pd.DataFrame) -> list[dict]:
    """Rows for the template, with numbers as text (never 'nan'), long texts folded."""
    out = []
    for r in rows.to_dict("records"):
        r["short"] = _fold(r["measurement"])
        v = r["value"]
        r["value_text"] = (f"{v:.3g}" if finite(v) else "") if r["kind"] == claims_mod.MEASURED \
            else (si(v) if finite(v) else "")
        r["verdict_class"] = r["verdict"].replace(" ", "-")
        out.append(r)
    return out


def _energy(ds: Dataset) -> list[dict]:
    """pJ per FLOP (GEMM, FMA) and per DRAM byte, with the clock and power they ran at."""
    facts = {s: ds.facts(s) for s in ds.systems().system}
    table = health.energy_table(ds.rows, facts)
    table = table[table.value.notna()]
    return [{"system": r["system"], "dtype": r["dtype"], "what": r["note"],
             "value": f"{r['value']:.3g} {r['unit']}", "points": int(r["points"]),
             # the clock, then the power's spread over the plateau (issue 21: beside the clock)
             "conditions": ", ".join(x for x in (
                 f"{r['sm_clock_mhz']:.0f} MHz" if finite(r.get("sm_clock_mhz")) else "",
                 r.get("power") or _conditions(r)) if x)} for r in table.to_dict("records")]


def _workloads(ds: Dataset, ceilings: pd.DataFrame, sheets, table=None) -> dict:
    """Your workloads: each system's roofline (inline SVG, a tooltip per point), the placement
    table (results/placements.parquet where given), the model's error, the knees, and each
    workload predicted on the datasheet devices."""
    placed, ops = placements.read_placements(table) if table else (
        placements.placements(ds, ceilings), placements.op_placements(ds, ceilings))
    if placed.empty:
        return {}
    figures, rows = [], []
    for system, g in placed.groupby("system", sort=False):
        roof = g.roofline_of.iloc[0]  # its own, or the same device model's (roofline_systems)
        c = ceilings[(ceilings.system == roof) & ceilings.value.notna()]
        cs = c.to_dict("records")  # records: a row's "dtype" is its value, not the frame's
        roofs = [(roofline.label(r["ceiling"]).replace(" bandwidth", ""), float(r["value"]))
                 for r in cs if r["ceiling"].endswith("_bw") and r["ceiling"] != "intensity_bw"]
        peaks = [(f"{r['dtype']} GEMM", float(r["value"])) for r in cs
                 if r["ceiling"] == "matrix_flops" and r["dtype"] in set(g["dtype"])]
        g = g.to_dict("records")
        points = [{"name": f"{r['workload']} b={r['batch']:.0f}", "intensity": r["intensity"],
                   "flop_per_s": r["attained_flop_per_s"], "kind": "workload",
                   "text": f"{r['workload']} {r['dtype']} batch {r['batch']:.0f}: "
                           f"{si(r['attained_flop_per_s'], 'FLOP/s')} at {r['intensity']:.3g} "
                           f"FLOP/B, " + (f"{r['fraction_of_roof']:.0%} of the roof, "
                                          if finite(r["fraction_of_roof"]) else "")
                           + f"{r['bound'] or 'no'}-bound; {si(r['measured_time_s'], 's')} "
                           f"measured, {si(r['predicted_time_s'], 's')} predicted"} for r in g]
        points += _op_points(ops[ops.system == system])
        figures.append({"system": system if roof == system else
                        f"{system}, placed on the roofline of {roof} (the same device model)",
                        "svg": svg_roofline.draw(f"Workloads on the roofline of {roof}", roofs,
                                                 peaks, points)})
        for r in g:
            rows.append({"system": system, "workload": r["workload"], "dtype": r["dtype"],
                         "batch": f"{r['batch']:.0f}", "time": si(r["measured_time_s"], "s"),
                         "flops": si(r["attained_flop_per_s"], "FLOP/s"),
                         "bytes": si(r["attained_byte_per_s"], "B/s"),
                         "intensity": f"{r['intensity']:.3g}",
                         "fraction": f"{r['fraction_of_roof']:.0%}"
                         if finite(r["fraction_of_roof"]) else "", "bound": r["bound"] or "",
                         "predicted": si(r["predicted_time_s"], "s"),
                         "error": (f"{r['model_error']:+.0%}" if finite(r["model_error"])
                                   else "") + (f" ({r['failed_term']})" if r.get("failed_term")
                                               else "")})
    errors = [e | {"what": "whole calls"} for e in
              placements.model_error_summary(placed).to_dict("records")]
    op_err = ops.assign(model_error=ops.time_s / ops.predicted_time_s - 1)
    errors += [e | {"what": "aten ops"} for e in
               placements.model_error_summary(op_err).to_dict("records")]
    calls = placements.call_from_ops(ops, placed)
    knees = placements.knees(ds, ceilings).to_dict("records")
    sheet_rows = []
    for sheet in sheets:  # the same model on the datasheets' numbers alone (no latency floor)
        if not sheet.bandwidth_Bps:
            continue
        for r in placed.drop_duplicates(["workload", "dtype", "batch"]).to_dict("records"):
            peak = sheet.peak("matrix", r["dtype"])
            if not peak:
                continue
            t = max(r["flops"] / peak, r["bytes"] / sheet.bandwidth_Bps)
            sheet_rows.append({"device": sheet.name, "workload": r["workload"],
                               "dtype": r["dtype"], "batch": f"{r['batch']:.0f}",
                               "time": si(t, "s")})
    return {"figures": figures, "rows": rows, "errors": errors, "knees": knees,
            "sheets": sheet_rows, "ops": _op_rows(ops), "calls": [
                {"system": c["system"], "workload": c["workload"], "dtype": c["dtype"],
                 "batch": f"{c['batch']:.0f}", "ops": c["ops"],
                 "measured": si(c["measured_time_s"], "s"), "ops_time": si(c["ops_time_s"], "s"),
                 "predicted": si(c["ops_predicted_time_s"], "s"),
                 "error": f"{c['model_error']:+.0%}" if finite(c["model_error"]) else ""}
                for c in calls.to_dict("records")]}


LEVEL_KINDS = (("dram_bytes", "DRAM"), ("l2_bytes", "L2"), ("l1_bytes", "L1"))


def _op_points(ops: pd.DataFrame) -> list[dict]:
    """An aten op's point at its counted intensity, and where ncu measured its traffic, one point
    per memory level at FLOPs / that level's bytes (the hierarchical roofline)."""
    out = []
    for r in ops.to_dict("records"):
        if not (finite(r["flops"]) and r["flops"] > 0 and r["time_s"] > 0):
            continue  # no FLOPs: not on a FLOP/s roofline (the table lists it)
        rate = r["flops"] / r["time_s"]
        where = f"{r['workload']} {r['dtype']} b={r['batch']:.0f}: {r['aten_op']} {r['input_shapes']}"
        out.append({"name": r["aten_op"], "intensity": r["intensity"], "flop_per_s": rate,
                    "kind": "kernel", "text": f"{where}: {si(r['time_s'], 's')}, "
                    f"{si(rate, 'FLOP/s')} at {r['intensity']:.3g} FLOP/B counted, "
                    f"{r['bound'] or 'no'}-bound"})
        for key, level in LEVEL_KINDS:
            if finite(r.get(key)) and r[key] > 0:
                out.append({"name": f"{r['aten_op']} ({level})", "intensity": r["flops"] / r[key],
                            "flop_per_s": rate, "kind": level,
                            "text": f"{where}: {si(r[key], 'B')} of {level} traffic measured by "
                            f"ncu, {r['flops'] / r[key]:.3g} FLOP/B"})
    return out


def _op_rows(ops: pd.DataFrame) -> list[dict]:
    def size(v, unit="B"):
        return si(v, unit) if finite(v) else ""

    return [{"system": r["system"], "workload": r["workload"], "dtype": r["dtype"],
             "batch": f"{r['batch']:.0f}", "op": r["aten_op"], "shapes": r["input_shapes"],
             "time": si(r["time_s"], "s"), "share": f"{r['share_of_call']:.0%}",
             "flops": size(r["attained_flop_per_s"], "FLOP/s") if r["flops"] else "",
             "bytes": size(r["attained_byte_per_s"], "B/s"),
             "intensity": f"{r['intensity']:.3g}" if finite(r["intensity"]) and r["flops"] else "",
             "fraction": f"{r['fraction_of_roof']:.0%}" if finite(r["fraction_of_roof"]) else "",
             "bound": r["bound"] or "", "source": r["bytes_source"],
             "dram": size(r["dram_bytes"]), "l2": size(r["l2_bytes"]), "l1": size(r["l1_bytes"]),
             "measured_bound": r["measured_bound"] or ""} for r in ops.to_dict("records")]


def _duration(seconds: float) -> str:
    return (f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min" if seconds < 5400
            else f"{seconds / 3600:.1f} h")


def _took(ds: Dataset, system: str, rows: pd.DataFrame) -> str:
    """How long the system's jobs ran: their summed wall time and the span from the first start
    to the last end (file metadata), else the span of the rows' timestamps."""
    metas = [m for m in ds.file_metas(system) if m.get("started") and finite(m.get("wall_s"))]
    if not metas:
        return _span(rows.measured_at)
    start = pd.to_datetime([m["started"] for m in metas], utc=True)
    end = start + pd.to_timedelta([m["wall_s"] for m in metas], unit="s")
    wall = sum(m["wall_s"] for m in metas)
    span = f"{start.min():%Y-%m-%d %H:%M} to {end.max():%H:%M} UTC" \
        if start.min().date() == end.max().date() else _span(pd.Series([start.min(), end.max()]))
    return (f"{len(metas)} jobs, {_duration(wall)} of job time; {span} "
            f"({_duration((end.max() - start.min()).total_seconds())})")


def _problems(rows: pd.DataFrame) -> list[str]:
    """What went wrong in the rows: each status that is not ok (with its experiments), and the
    points flagged noisy, contended or throttled."""
    out = [f"{len(g)} {status} ({', '.join(sorted(g.experiment.unique()))})"
           for status, g in rows[rows.status != "ok"].groupby("status")]
    flagged = {f: int(rows[f].fillna(False).astype(bool).sum())
               for f in ("noisy", "contended", "throttled") if f in rows}
    out += [f"{n} {flag} points" for flag, n in flagged.items() if n]
    none_ok = sorted(e for e, g in rows.groupby("experiment") if not (g.status == "ok").any())
    if none_ok:  # one line for all of them: on a CPU these are most GPU experiments
        out.append(f"no ok row in {', '.join(none_ok)}: the claims that need them are not "
                   "measurable here")
    return out


def _summary(table: pd.DataFrame, ds: Dataset) -> dict:
    """The first screen, per system: what was measured, how long it took, what went wrong and
    its measured verdicts; the conditions they ran under; the worked examples counted apart."""
    conds = health.system_conditions(ds.rows)
    measured = table[table.kind == claims_mod.MEASURED]
    verdicts = (claims_mod.HOLDS, claims_mod.FAILS, claims_mod.NOT_MEASURABLE)
    systems = []
    for s in ds.systems().system:
        rows = ds.rows[ds.rows.system == s]
        mine = measured[measured.system == s]
        systems.append({
            "system": s, "rows": len(rows), "experiments": sorted(rows.experiment.unique()),
            "missing": [e for e in EXPERIMENTS if e not in set(rows.experiment)],
            "took": _took(ds, s, rows), "problems": _problems(rows),
            "judged": len(mine), **{v: int((mine.verdict == v).sum()) for v in verdicts},
            "failed": sorted(mine[mine.verdict == claims_mod.FAILS].claim),
            "errors": sorted(mine[mine.reason.fillna("").str.contains(
                claims_mod.ANALYSIS_ERROR, regex=False)].claim),
            "conditions": conds.get(s, {}).get("summary", ""),
            "under_load": claims_mod.under_load(conds.get(s, {}))})
    worked = table[table.kind == claims_mod.WORKED]
    same = worked.measurement.str.endswith("as the article says")
    return {"verdicts": verdicts, "systems": systems, "worked": len(worked),
            "worked_same": int(same.sum())}


QUANTITIES = {"memory_bytes": "memory capacity", "bandwidth_Bps": "memory bandwidth",
              "host_link_Bps": "host link (PCIe)", "vector_flops": "vector compute",
              "matrix_flops": "matrix (Tensor Core) compute"}


def _datasheet_rows(sheets) -> list[dict]:
    return [{"device": r["device"], "quantity": QUANTITIES.get(r["quantity"], r["quantity"]),
             "dtype": r["dtype"] if isinstance(r["dtype"], str) else "",
             "value": si(r["value"], r["unit"]), "source": r["source"]}
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
        links = sorted(cp.link.unique()) or [""]
        for link in links:
            c = cp[cp.link == link]
            small = c[(c.variant == "uni") & (c.op == "copy_engine")]
            small = small[small.bytes == small.bytes.min()]
            best = {v: c[c.variant == v].byte_per_s.max() for v in ("uni", "bi")}
            table.append({
                "system": system, "link": link or "-",
                "uni": si(best["uni"], "B/s") if len(c) and finite(best["uni"]) else "-",
                "bi": si(best["bi"], "B/s") if len(c) and finite(best["bi"]) else "-",
                "latency": f"{si(small.time_s.median(), 's')} ({binary(small.bytes.iloc[0])})"
                if len(small) else "-",
                "allreduce": f"{si(busbw, 'B/s')} at {binary(ar.bytes.iloc[0])}, {world:.0f} GPUs"
                if busbw is not None and finite(busbw) else "-"})
    reasons = sorted(set(rows[rows.status == "not_applicable"].message.dropna()))
    return {"rows": table, "not_measurable": [] if table else reasons or
            ["no peer_copy or collectives rows"]}


def render(ds: Dataset, ceilings: pd.DataFrame, sheets: list, figures_dir,
           table: pd.DataFrame, knees: pd.DataFrame, out=None, placements=None) -> str:
    """Render the report from the claims table, knees and placements (results/placements.parquet)
    the workflow wrote; writes `out`."""
    figures_dir = Path(figures_dir)
    index = figures_dir / "index.json"
    placeholders = json.loads(index.read_text()) if index.exists() else {}
    figures = {name: {"svg": _svg(figures_dir / f"{name}.svg"), "title": info[1],
                      "category": info[0], "missing": placeholders.get(name)}
               for name, info in FIGURES.items()}
    systems = list(ds.systems().system)
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(Path(__file__).parent),
                             autoescape=True, undefined=jinja2.StrictUndefined)
    html = env.get_template("report.html.j2").render(
        generated=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        n_rows=len(ds.rows), systems=systems,
        sources=sorted(ds.rows.source.unique()), summary=_summary(table, ds),
        energy=_energy(ds), workloads=_workloads(ds, ceilings, sheets, placements),
        sections=_claim_sections(table), all_claims=_records(table), figures=figures,
        inline=_inliner(figures), shown=[],
        provenance=_provenance(ds), comparison=_comparison(ceilings, ds, sheets),
        ceilings=_ceiling_table(ceilings, sheets), knees=knees.to_dict("records"),
        statuses=_statuses(ds), ignored=[(_short(p), why) for p, why in sorted(ds.ignored.items())],
        duplicates=[{"kept": _short(d.get("kept")), "dropped": _short(d.get("dropped")),
                     "rows": d.get("rows")} for d in ds.duplicates],
        datasheet=_datasheet_rows(sheets), gpu2gpu=gpu2gpu(ds),
        method=METHOD, si=si, isfinite=finite)
    if out is not None:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(html, encoding="utf-8")
    return html
