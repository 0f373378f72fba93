"""What `rooflab run` and `rooflab report` print when they finish: one screen with the machine,
its headline ceilings, the claims tally and where the report is; each claim's line on request."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

from experiments.analysis import claims as claims_mod, silicon
from experiments.analysis.units import finite, interval
from experiments.core import layout
from experiments.report import glance

WIDTH = 100  # a claim's detail line is cut here
# what health.shared_gpus reads of the rows (a few columns: the whole set takes seconds)
SHARED_COLUMNS = ["source", "host", "device", "device_kind", "device_name", "experiment",
                  "status", "gpu_other_processes", "time_s", "samples", "inner_reps",
                  "measured_at"]


# what a ceiling's interval is, by its fit's method (analysis/plateaus.py): the first that matches
INTERVALS = (("best point", "best point [the plateau's range]"),
             ("median", "median [95 % interval]"))
KINDS = {"cuda": "GPU", "cpu": "CPU"}


def model(device_name: str) -> str:
    """A device's model for a column's head: "Intel(R) Xeon(R) Gold 6430 CPU @ 2.10GHz" ->
    "Intel Xeon Gold 6430"."""
    name = re.sub(r"\((R|TM)\)", "", str(device_name), flags=re.I)
    name = re.sub(r"\s+(CPU\s*)?@.*$", "", name)
    return re.sub(r"\s+", " ", name).strip()


def column_heads(ceilings: pd.DataFrame, systems: list[str]) -> dict[str, str]:
    """system -> its column's head: device kind and model ("GPU NVIDIA H100 80GB HBM3"); where
    two would read the same, the device, then the host, told apart."""
    first = ceilings.drop_duplicates("system").set_index("system")
    heads = {}
    for s in systems:
        r = first.loc[s]
        kind = r.get("device_kind")
        if not isinstance(kind, str) or not kind:  # tables without it: the device says
            kind = str(r.device).split(":")[0]
        heads[s] = f"{KINDS.get(kind, str(kind).upper())} {model(r.device_name)}"
    for extra in (lambda r: f" ({r.device})", lambda r: f" @ {r.host}"):
        names = list(heads.values())
        heads = {s: h + extra(first.loc[s]) if names.count(h) > 1 else h
                 for s, h in heads.items()}
    return heads


def meaning(head: pd.DataFrame, heads: dict[str, str]) -> str:
    """One line: what each column's intervals are, as its ceilings were fitted; said once per
    device kind where all its columns agree ("GPU: median [95 % interval]")."""
    said = {}
    for s, h in heads.items():
        methods = " ".join(head[head.system == s].method.astype(str)) if "method" in head else ""
        said[h] = " or ".join(text for key, text in INTERVALS if key in methods)
    kinds = {}
    for h, text in said.items():
        kinds.setdefault(h.split()[0], set()).add(text)
    parts = dict.fromkeys(f"{h.split()[0] if len(kinds[h.split()[0]]) == 1 else h}: {text}"
                          for h, text in said.items() if text)
    line = ("intervals: " + "; ".join(parts) + "; each widened to at least the run-to-run "
            "spread") if parts else "intervals: as fitted (see the report)"
    return textwrap.fill(line, WIDTH, subsequent_indent="  ")


def _joined(head: str, parts: list[str]) -> list[str]:
    """`head` and the parts joined by "; ", a new indented line where WIDTH would be passed."""
    lines = [head + parts[0]]
    for part in parts[1:]:
        if len(lines[-1]) + 2 + len(part) > WIDTH:
            lines[-1] += ";"
            lines.append("  " + part)
        else:
            lines[-1] += "; " + part
    return lines


def grid_lines(cells: pd.DataFrame) -> list[str]:
    """The ceilings' grid: row names left, each column right-aligned under its head, two spaces
    apart."""
    table = [["", *cells.columns]] + [[str(i), *map(str, r)] for i, r in
                                      zip(cells.index, cells.values.tolist())]
    widths = [max(len(row[k]) for row in table) for k in range(len(table[0]))]
    return ["  ".join([row[0].ljust(widths[0])] + [c.rjust(w) for c, w in
                                                     zip(row[1:], widths[1:])]).rstrip()
            for row in table]


def _first(*paths: Path) -> Path | None:
    return next((p for p in paths if p.is_file()), None)


def summary(results, detail: bool = False) -> str:
    """The summary of a results folder (the workflow's layout, or a published folder's)."""
    from experiments.analysis.health import shared_gpus

    results = Path(results)
    ceilings_file = _first(layout.file(results, "ceilings"),
                           layout.published_file(results, "ceilings"))
    claims_file = _first(layout.file(results, "claims"))
    if ceilings_file is None or claims_file is None:
        return f"rooflab: no ceilings or claims under {results} yet"
    report = layout.file(results, "report")
    rows = _first(layout.file(results, "dataset"))
    have = set(pq.read_schema(rows).names) if rows else set()
    shared = shared_gpus(pd.read_parquet(rows, columns=[c for c in SHARED_COLUMNS if c in have])) \
        if "gpu_other_processes" in have else []
    return text(pd.read_parquet(ceilings_file), pd.read_parquet(claims_file),
                report if report.is_file() else None, detail, shared)


def text(ceilings: pd.DataFrame, table: pd.DataFrame, report: Path | None,
         detail: bool = False, shared: list[str] = ()) -> str:
    """The summary of these ceilings and claims (the report step writes it beside the report,
    so that `rooflab run` prints it without loading the analysis again, seconds on a small CPU);
    `shared` (health.shared_gpus): the GPUs another process used, said first, then the CPUs
    whose cores another tenant shared (silicon.shared_cpus)."""
    own = ceilings[ceilings.source == "run"] if "source" in ceilings else ceilings
    base = own if len(own) else ceilings
    head = glance.headline(base)
    # the systems with a headline; where none has one (every point dropped), every system
    systems = list(dict.fromkeys(head.system)) or list(dict.fromkeys(base.system))
    shared = [*shared, *silicon.shared_cpus(base)]
    lines = [*shared, ""] if shared else []
    for s in systems:
        r = base[base.system == s].iloc[0]
        lines.append(f"{r.device_name}  ({r.host}, {r.device})")
    heads = column_heads(base, systems)
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
        grid.columns = [heads[s] for s in systems]
        lines += ["", *grid_lines(grid), *meaning(head, heads).splitlines()]
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
        lines += _joined(f"claims on {heads[s]}: ", parts or ["none judged"])
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
