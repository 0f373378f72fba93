"""The article's claims C1-C20, one module per article section, judged on every system.

`evaluate` gives the claims table (one row per claim and system, plus the article's worked
examples); the workflow's `claims` rule writes it to results/claims.parquet, and the report and
figures read that file: nothing is judged while rendering.
"""

from __future__ import annotations

import math
import sys

import numpy as np
import pandas as pd

from experiments.analysis import datasheets, roofline
from experiments.analysis.dataset import Dataset, ok
from experiments.analysis.health import host_clocked
from experiments.core.config import job_default
from experiments.analysis.claims import (host_async, tensors, three_numbers, intensity_roofline,  # noqa: F401  (register,
               decode_batching, precision, launch_geometry)  # in the article's order)
from experiments.analysis.claims.base import (ANALYSIS_ERROR, ARTICLE, CLAIMS, FAILS, HOLDS, MEASURED, NOT_MEASURABLE,
                   SECTIONS, UNDECIDED, VERDICTS, WORKED, WORKED_EXAMPLES, NotMeasurable, System)
from experiments.analysis.claims.launch_geometry import launch_waves

CLAIM_IDS = tuple(CLAIMS)
COLUMNS = ["claim", "section", "system", "kind", "verdict", "metric", "value", "threshold",
           "measurement", "reason", "fails_if", "used", "rows_used", "prediction", "text_en",
           "text_zh", "figure", "experiments", "under_load", "points_contended"]


def by_experiment() -> dict[str, tuple[str, ...]]:
    """Experiment -> the claims that read its rows (each claim's `experiments=`), in claim
    order: the one link between them (`python -m experiments --list`, the rows' `claims`)."""
    out: dict[str, tuple[str, ...]] = {}
    for c in CLAIMS.values():
        for e in c.experiments:
            out[e] = out.get(e, ()) + (c.id,)
    return out


def systems(ds: Dataset, ceilings: pd.DataFrame, sheets: list,
            knees: pd.DataFrame | None = None) -> list[System]:
    out = []
    for _, row in ds.systems().iterrows():
        k = knees[knees.system == row.system] if knees is not None and not knees.empty else \
            pd.DataFrame()
        out.append(System(row.system, row.device_kind, row.device_name or row.device,
                          roofline.fit_view(ds.rows[ds.rows.system == row.system]),
                          ceilings[ceilings.system == row.system] if "system" in ceilings
                          else ceilings, ds.facts(row.system),
                          datasheets.find(sheets, row.device_name), sheets, k))
    return out


def _base(c) -> dict:
    return {"claim": c.id, "section": c.section.anchor, "prediction": c.prediction,
            "text_en": c.en, "text_zh": c.zh, "figure": c.figure or "", "fails_if": c.fails_if,
            "experiments": ", ".join(c.experiments)}


def under_load(conditions: dict) -> str:
    """The system's load line when other processes disturbed its points, else ''."""
    hit = [conditions.get(k) for k in ("contended_share", "loaded_share")]
    return conditions.get("summary", "") if any(v and v > 0 for v in hit) else ""


def contended(rows: pd.DataFrame, threshold: float | None = None) -> pd.Series:
    """Per row: other processes disturbed it. Its `contended` flag where the job judged one (a
    CPU's load; on a GPU, another process on it). A point timed by the host's clock (a GPU's
    launches and host-side timings; a CPU point no flag judged) counts also where other
    processes' share of its CPUs was above the threshold; a point timed on the GPU's own clock
    (events, the profiler) is not disturbed by a busy host CPU. `threshold` None:
    config/job.yaml's contention_threshold."""
    if threshold is None:
        threshold = job_default("contention_threshold")
    flag = rows["contended"] if "contended" in rows else pd.Series(None, index=rows.index)
    share = pd.to_numeric(rows.get("other_cpu_share", pd.Series(math.nan, index=rows.index)),
                          errors="coerce")
    host_load = (share > threshold) & host_clocked(rows)
    judged = flag.map(lambda v: isinstance(v, (bool, np.bool_)))
    flagged = flag.where(judged, False).fillna(False).astype(bool)
    # a GPU point's flag says another process used the GPU; a busy host CPU slows it as well
    gpu = rows["device_kind"].ne("cpu") if "device_kind" in rows else ~judged
    return flagged.where(judged & ~gpu, flagged | host_load).astype(bool)


def load_of(c, s: System) -> tuple[int, int]:
    """(contended, all) ok points of the experiments claim `c` reads, on system `s`."""
    hit = n = 0
    for e in c.experiments:
        rows = ok(s.experiment_rows(e))
        hit, n = hit + int(contended(rows).sum()), n + len(rows)
    return hit, n


def judge(c, s: System) -> dict:
    """One measured verdict of claim `c` on system `s`. It is "under load" only where points it
    reads were contended, and says how many."""
    hit, n = load_of(c, s)
    load = f"under load: {hit} of the {n} points it reads were contended" if hit else ""
    row = _base(c) | {"system": s.name, "kind": MEASURED, "metric": "", "value": math.nan,
                      "threshold": "", "used": "", "rows_used": 0, "reason": "",
                      "measurement": "", "under_load": bool(hit), "points_contended": hit}
    try:
        r = c.check(s)
        verdict = UNDECIDED if r.undecided else HOLDS if r.holds else FAILS
        measurement = r.measurement + (
            f"; undecided: {r.what} {abs(r.margin):.1%} {'inside' if r.holds else 'outside'} "
            f"its bound, within its {r.noise:.1%} run-to-run noise" if r.undecided else "")
        row |= {"verdict": verdict, "measurement": measurement,
                "metric": r.metric, "value": float(r.value), "threshold": r.threshold,
                "used": r.used, "rows_used": int(r.rows_used)}
    except NotMeasurable as exc:
        row |= {"verdict": NOT_MEASURABLE, "measurement": exc.measurement, "reason": str(exc)}
    except Exception as exc:  # rows in a shape this check does not know: say so, go on
        row |= {"verdict": NOT_MEASURABLE,
                "reason": f"{ANALYSIS_ERROR}: {type(exc).__name__}: {exc}"}
        print(f"rooflab: {c.id} on {s.name}: {row['reason']}", file=sys.stderr)
    if load and row["verdict"] in (HOLDS, FAILS, UNDECIDED):
        row["measurement"] += f" [{load}]"
    return row


def worked(c, sheets) -> list[dict]:
    """The article's arithmetic for claim `c`, recomputed from the datasheets."""
    out = []
    for w in WORKED_EXAMPLES.get(c.id, []):
        row = _base(c) | {"system": ARTICLE, "kind": WORKED, "verdict": WORKED,
                          "metric": "", "threshold": f"the article: {w.article}",
                          "used": "config/datasheets.yaml" if callable(w.what) else
                          "the definition", "rows_used": 0, "reason": "", "fails_if": "",
                          "under_load": False, "points_contended": 0}
        try:
            row["metric"] = what = w.what(sheets) if callable(w.what) else w.what
            value, shown = w.compute(sheets)
            same = math.isclose(value, w.expected, rel_tol=w.rel_tol)
            row |= {"value": float(value), "measurement": f"{what} = {shown}" + (
                "; as the article says" if same else f"; the article says {w.article}")}
        except NotMeasurable as exc:
            row |= {"value": math.nan, "measurement": "", "reason": str(exc)}
        out.append(row)
    return out


PLACED = {"workload", "op_rates"}  # rows of callables placed on another system's roofline


def evaluate(ds: Dataset, ceilings: pd.DataFrame, sheets: list,
             knees: pd.DataFrame | None = None) -> pd.DataFrame:
    """The claims table: worked examples once, then one row per measured claim and system. A
    system with rows of none of the claims' experiments (a GPU-to-GPU set alone) is left out:
    every verdict there would be "not measurable here"; one with only placed workloads (a
    published set of workloads or torch's modules) keeps only the claims its rows judged."""
    read = {e for c in CLAIMS.values() for e in c.experiments}
    sys_list = [s for s in systems(ds, ceilings, sheets, knees)
                if s.rows.experiment.isin(read).any()]
    placed_only = {s.name for s in sys_list if set(s.rows.experiment) <= PLACED}
    out = []
    for c in CLAIMS.values():
        out += worked(c, sheets)
        if c.check is not None:
            out += [r for r in (judge(c, s) for s in sys_list)
                    if r["verdict"] != NOT_MEASURABLE or r["system"] not in placed_only]
    return pd.DataFrame(out, columns=COLUMNS)


__all__ = ["by_experiment", "under_load", "contended", "load_of", "evaluate", "systems", "judge", "worked",
           "CLAIMS", "CLAIM_IDS", "SECTIONS",
           "WORKED_EXAMPLES", "HOLDS", "FAILS", "UNDECIDED", "NOT_MEASURABLE", "WORKED", "MEASURED", "ARTICLE",
           "VERDICTS", "COLUMNS", "ANALYSIS_ERROR", "NotMeasurable", "System", "launch_waves"]
