"""The report: one self-contained HTML file (figures embedded as PNG data), in the article's order.

Everything shown is computed here from the merged rows, the fitted ceilings and the datasheets.
Jinja2 autoescapes every value, so text from configs and device names cannot inject markup.
"""

from __future__ import annotations

import base64
import json
import math
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

import jinja2
import pandas as pd

from . import claims as claims_mod
from . import datasheets, decode, roofline
from .catalog import FIGURES
from .claims import NOT_MEASURABLE, si
from .dataset import Dataset

EXPERIMENTS = ("timing", "transfer", "bandwidth", "matmul", "intensity", "decode", "launch")

# The article's order: (anchor, title, claims, figure shown there, what it is about)
SECTIONS = [
    ("host", "The CPU drives the GPU: asynchronous launches, streams, clocks",
     ["C1", "C5", "C6", "C7"], "timing"),
    ("tensors", "Where tensors live: host-device copies", ["C2", "C3", "C4"], "transfer"),
    ("numbers", "Capacity, bandwidth, compute: the three numbers", ["C8", "C9"], "bandwidth"),
    ("intensity", "Arithmetic intensity: x + 1 against a 4096^3 GEMM", ["C10", "C11"], "matmul"),
    ("roofline", "The roofline", ["C12", "C13"], "roofline"),
    ("decode", "Decode: why batching raises utilisation", ["C14", "C15", "C16", "C17", "C18"],
     "decode"),
    ("precision", "FP32, FP16, BF16 and Tensor Cores", ["C19"], None),
    ("launch", "Kernel, thread, warp, block, SM", ["C20"], "launch"),
]

METHOD = (
    "Ceilings are fitted from the rows, per system (host, device). Bandwidth: the bandwidth "
    "experiment's bytes/s against working-set size is cut into windows by the cache sizes in "
    f"the device facts (resident: at most {roofline.RESIDENT:g} of a cache; past a level: at "
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


def _png(path: Path) -> str | None:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode() \
        if path.exists() else None


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
            "missing": [e for e in EXPERIMENTS if e not in set(rows.experiment)],
            "not_ok": {e: ", ".join(sorted(g.status.unique())) for e, g in
                       rows.groupby("experiment") if not (g.status == "ok").any()},
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


def binary(nbytes) -> str:
    """Cache sizes in KiB/MiB, as vendors state them."""
    for unit, f in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= f:
            return f"{nbytes / f:.3g} {unit}"
    return f"{nbytes:.0f} B"


def _span(times: pd.Series) -> str:
    t = pd.to_datetime(times.dropna())
    return "" if t.empty else f"{t.min():%Y-%m-%d %H:%M} to {t.max():%Y-%m-%d %H:%M} UTC"


def _ceiling_table(ceilings: pd.DataFrame, sheets) -> list[dict]:
    rows = []
    for _, c in ceilings.iterrows():
        sheet = datasheets.find(sheets, c.device_name)
        ref = None
        if sheet is not None and isinstance(c.dtype, str) and c.ceiling.endswith("flops"):
            ref = sheet.peak("matrix" if c.ceiling == "matrix_flops" else "vector", c.dtype)
        elif sheet is not None and c.ceiling == "dram_bw":
            ref = sheet.bandwidth_Bps
        elif sheet is not None and c.ceiling.startswith("ridge") and isinstance(c.dtype, str):
            ref = sheet.ridge("matrix" if c.ceiling == "ridge_matrix" else "vector", c.dtype)
        fitted = not math.isnan(c.value)
        rows.append({
            "system": c.system, "ceiling": c.ceiling,
            "dtype": c.dtype if isinstance(c.dtype, str) else "",
            "value": si(c.value, c.unit) if fitted else "not fitted",
            "ci": f"{si(c.ci_low, c.unit)} to {si(c.ci_high, c.unit)}" if fitted and not
            math.isnan(c.ci_low) else "",
            "n": int(c.n_points), "method": c.method, "note": c.note if isinstance(c.note, str)
            else "", "datasheet": si(ref, c.unit) if ref else "",
            "efficiency": f"{c.value / ref:.0%}" if ref and fitted else ""})
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
            cells.append(si(c.value.iloc[0], c.unit.iloc[0]) if len(c) else "-")
        table.append({"quantity": ceiling + (f" {dtype}" if isinstance(dtype, str) else ""),
                      "cells": cells})
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
                    "example": msgs.iloc[0] if len(msgs) else ""})
    return out


def _article_numbers(sheets) -> list[dict]:
    """The article's worked numbers, recomputed from the datasheet file."""
    ref = datasheets.by_name(sheets, datasheets.ARTICLE_DEVICE)
    if ref is None or not ref.bandwidth_Bps:
        return []
    fp32 = ref.vector.get("float32")
    out = [{"claim": "C8", "what": "RTX 3090 capacity, bandwidth, FP32",
            "value": f"{si(ref.memory_bytes, 'B')}, {si(ref.bandwidth_Bps, 'B/s')}, "
                     f"{si(fp32, 'FLOP/s')}", "article": "24 GB, 936 GB/s, 35.6 TFLOPS"},
           {"claim": "C13", "what": "936 GB/s x 0.125 FLOP/B (x + 1 in FP32)",
            "value": si(ref.bandwidth_Bps * 0.125, "FLOP/s"), "article": "≈ 117 GFLOPS"}]
    if fp32:
        out.append({"claim": "C17", "what": "ridge = 35.6 TFLOP/s / 936 GB/s",
                    "value": f"{fp32 / ref.bandwidth_Bps:.1f} FLOP/B", "article": "≈ 38 FLOP/byte"})
    out.append({"claim": "C11", "what": "2 x 4096^3 FLOPs; FP32 intensity 2n^3 / (3 n^2 x 4 B)",
                "value": f"{2 * 4096**3:.4g} FLOPs; {2 * 4096**3 / (12 * 4096**2):.0f} FLOP/B",
                "article": "≈ 1374 亿 (1.374e11); intensity in the hundreds"})
    return out


def render(ds: Dataset, ceilings: pd.DataFrame, sheets: list, figures_dir, out=None) -> str:
    """Render the report; writes it to `out` when given."""
    per_row, knees = decode.predict(ds, ceilings)
    table = claims_mod.evaluate(ds, ceilings, sheets, knees)
    figures_dir = Path(figures_dir)
    index = figures_dir / "index.json"
    placeholders = json.loads(index.read_text()) if index.exists() else {}
    figures = {name: {"src": _png(figures_dir / f"{name}.png"), "title": info[1],
                      "category": info[0], "missing": placeholders.get(name)}
               for name, info in FIGURES.items()}
    by_claim = {cid: g.to_dict("records") for cid, g in table.groupby("claim", sort=False)}
    counts = table.groupby(["system", "verdict"]).size().unstack(fill_value=0)
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(Path(__file__).parent),
                             autoescape=True, undefined=jinja2.StrictUndefined)
    html = env.get_template("report.html.j2").render(
        generated=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        n_rows=len(ds.rows), systems=list(ds.systems().system),
        sources=sorted(ds.rows.source.unique()),
        counts=[{"system": s, **{v: int(counts.loc[s].get(v, 0)) for v in
                                 (claims_mod.HOLDS, claims_mod.FAILS, NOT_MEASURABLE)}}
                for s in counts.index],
        verdicts=(claims_mod.HOLDS, claims_mod.FAILS, NOT_MEASURABLE),
        sections=SECTIONS, claims=by_claim, claim_ids=list(claims_mod.CLAIMS),
        all_claims=table.to_dict("records"), figures=figures,
        provenance=_provenance(ds), comparison=_comparison(ceilings, ds, sheets),
        ceilings=_ceiling_table(ceilings, sheets), knees=knees.to_dict("records"),
        statuses=_statuses(ds), article=_article_numbers(sheets),
        datasheet=datasheets.table(sheets).assign(
            value=lambda d: [si(v, u) for v, u in zip(d.value, d.unit)]).to_dict("records"),
        method=METHOD, si=si, isfinite=lambda v: isinstance(v, (int, float)) and math.isfinite(v))
    if out is not None:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(html, encoding="utf-8")
    return html
