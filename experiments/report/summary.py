"""What `rooflab run` and `rooflab report` print when they finish: one screen with the machine,
its headline ceilings, the claims tally and where the report is; each claim's line on request."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

from experiments.analysis import claims as claims_mod
from experiments.analysis.units import finite, interval
from experiments.report import glance

WIDTH = 100  # a claim's detail line is cut here
# what health.shared_gpus reads of the rows (a few columns: the whole set takes seconds)
SHARED_COLUMNS = ["source", "host", "device", "device_kind", "device_name", "experiment",
                  "status", "gpu_other_processes", "time_s", "samples", "inner_reps",
                  "measured_at"]


def _first(results: Path, *names: str) -> Path | None:
    return next((results / n for n in names if (results / n).is_file()), None)


def summary(results, detail: bool = False) -> str:
    """The summary of a results folder (the workflow's layout, or a published folder's)."""
    from experiments.analysis.health import shared_gpus

    results = Path(results)
    ceilings_file = _first(results, "roofline/ceilings.parquet", "ceilings.parquet")
    claims_file = _first(results, "claims.parquet")
    if ceilings_file is None or claims_file is None:
        return f"rooflab: no ceilings or claims under {results} yet"
    report = results / "report.html"
    rows = _first(results, "measurements.parquet")
    have = set(pq.read_schema(rows).names) if rows else set()
    shared = shared_gpus(pd.read_parquet(rows, columns=[c for c in SHARED_COLUMNS if c in have])) \
        if "gpu_other_processes" in have else []
    return text(pd.read_parquet(ceilings_file), pd.read_parquet(claims_file),
                report if report.is_file() else None, detail, shared)


def text(ceilings: pd.DataFrame, table: pd.DataFrame, report: Path | None,
         detail: bool = False, shared: list[str] = ()) -> str:
    """The summary of these ceilings and claims (the report step writes it beside the report,
    so that `rooflab run` prints it without loading the analysis again, seconds on a small CPU);
    `shared` (health.shared_gpus): the GPUs another process used, said first."""
    own = ceilings[ceilings.source == "run"] if "source" in ceilings else ceilings
    base = own if len(own) else ceilings
    head = glance.headline(base)
    # the systems with a headline; where none has one (every point dropped), every system
    systems = list(dict.fromkeys(head.system)) or list(dict.fromkeys(base.system))
    lines = [*shared, ""] if shared else []
    for s in systems:
        r = base[base.system == s].iloc[0]
        lines.append(f"{r.device_name}  ({r.host}, {r.device})")
    if head.empty:
        lines.append("no ceilings fitted (see the report's notes)")
    else:
        rows = {}
        for r in head.to_dict("records"):
            cell = interval(r["value"], r["ci_low"], r["ci_high"], r["unit"])
            # a CPU's FMA or GEMM against the silicon; past 100 % the recorded clock is not the
            # cores' (a fixed estimate without APERF/MPERF): the report says so
            if finite(r.get("of_physical_peak")) and r["of_physical_peak"] <= 1:
                cell += f", {glance.silicon_share(r)}"
            rows.setdefault(glance.name(r["ceiling"], r["dtype"]), {})[r["system"]] = cell
        grid = pd.DataFrame(rows).T.reindex(columns=systems).fillna("")
        grid.columns = [s.split(" @ ")[-1] for s in systems]  # the host: short, and unique
        lines += ["", *grid.to_string().splitlines()]
    measured = table[(table.kind == claims_mod.MEASURED) & table.system.isin(systems)]
    lines.append("")
    for s in systems:
        mine = measured[measured.system == s]
        parts = []
        for verdict in glance.VERDICTS:
            ids = list(mine[mine.verdict == verdict].claim)
            if ids:
                # which do not hold, always; which are not measurable, when they are few
                named = verdict == claims_mod.FAILS or (verdict != claims_mod.HOLDS
                                                        and len(ids) <= 5)
                parts.append(f"{verdict} {len(ids)}" + (f" ({', '.join(ids)})" if named else ""))
        lines.append(f"claims on {s.split(' @ ')[-1]}: " + ("; ".join(parts) or "none judged"))
        loaded = mine[mine.under_load.fillna(False).astype(bool)] if "under_load" in mine \
            else mine.iloc[:0]
        if len(loaded):  # a busy machine: its verdicts read points other processes slowed
            lines.append(f"  under load: {len(loaded)} claims read points other processes slowed "
                         f"(up to {int(loaded.points_contended.max())} a claim); see the report")
        if detail:
            for r in mine.itertuples():
                text = r.measurement or r.reason or ""
                lines.append(f"  {r.claim:<4} {r.verdict:<20} {text}"[:WIDTH])
    if report is not None:
        lines += ["", f"report: {report}"]
    if not detail:
        lines.append("each claim's numbers: --claims")
    return "\n".join(lines)
