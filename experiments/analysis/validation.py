"""The op model judged out of sample: held-out workloads (experiments/models/heldout.py, drawn
from a seed, never calibration points) placed like any workload, and their error per class and
device (`rooflab validate`, experiments/cli/validate.py; docs/placement.md "Out of sample").

judge(): one row per held-out call (`kind` call, `class` the module kind it was drawn as) and
per profiled op (`kind` op, `class` its op-rate class, experiments/placement/opclass.py, else
its aten op), with abs_error = |measured / predicted - 1|. summary(): per system, dtype, kind
and class (and `all` over the classes), n, the median and 90th percentile of abs_error. text():
that summary as a table for people. band(): the calls' `all` row of a system and dtype, the
error band the report shows beside a predicted time.
"""

from __future__ import annotations

import pandas as pd

from experiments.analysis import placements
from experiments.analysis.units import share
from experiments.placement import opclass

ALL = "all"
SUMMARY_COLUMNS = ["system", "dtype", "kind", "class", "n", "median_abs_error",
                   "p90_abs_error", "disturbed", "seed"]
# `disturbed`: the call was timed contended (other processes on its CPU or GPU) or noisy
JUDGED_COLUMNS = ["system", "dtype", "kind", "class", "workload", "batch", "aten_op",
                  "input_shapes", "measured_time_s", "predicted_time_s", "model_error",
                  "abs_error", "bound", "predicted_from", "failed_term", "disturbed", "seed"]
KEYS = ["system", "workload", "dtype", "batch"]


def kind_of(workload: str) -> str:
    """The module kind a held-out workload was drawn as (heldout.name's prefix)."""
    return str(workload).split("-b", 1)[0]


def op_class_of(op: str, shapes) -> str:
    """An op's class: its op-rate class key, else the aten op itself."""
    found = opclass.op_class(str(op or ""), shapes)
    return found[0] if found else str(op or "")


def disturbed(rows: pd.DataFrame) -> pd.DataFrame:
    """KEYS and `disturbed` of each held-out call row (workload rows that are not aten ops)."""
    calls = rows[(rows.experiment == "workload") & (rows.get("variant").fillna("") != "aten_op")]
    flags = calls.contended.fillna(False).astype(bool) | calls.noisy.fillna(False).astype(bool)
    return calls.assign(workload=calls.op, disturbed=flags)[KEYS + ["disturbed"]]


def judge(table: pd.DataFrame, seed: int, rows: pd.DataFrame | None = None) -> pd.DataFrame:
    """Held-out placements (placements.placement_table over their rows) as judged rows; `rows`
    (the held-out measurements) mark each call and its ops `disturbed` where it was timed so."""
    if table.empty:
        return pd.DataFrame(columns=JUDGED_COLUMNS)
    calls, ops = placements.read_placements(table)
    calls = calls.assign(kind="call", aten_op=None, input_shapes=None,
                         **{"class": [kind_of(w) for w in calls.workload]})
    ops = ops.assign(kind="op", measured_time_s=ops.time_s,
                     **{"class": [op_class_of(o, s) for o, s in
                                  zip(ops.aten_op, ops.input_shapes)]})
    out = pd.concat([f for f in (calls, ops) if len(f)], ignore_index=True)
    out["model_error"] = out.measured_time_s / out.predicted_time_s - 1
    out["abs_error"] = out.model_error.abs()
    out["seed"] = int(seed)
    if rows is not None and len(rows):
        out = out.merge(disturbed(rows).drop_duplicates(KEYS), on=KEYS, how="left")
    out["disturbed"] = out.get("disturbed", pd.Series(False, index=out.index)).fillna(False)
    return out.reindex(columns=JUDGED_COLUMNS)


def summary(judged: pd.DataFrame) -> pd.DataFrame:
    """Per system, dtype, kind (call, op) and class, plus `all` classes: n, median and p90."""
    out = []
    ok = judged[judged.abs_error.notna()]
    for (system, dtype, kind), g in ok.groupby(["system", "dtype", "kind"], sort=True):
        groups = [(c, part) for c, part in g.groupby("class", sort=True)] + [(ALL, g)]
        for cls, part in groups:
            e = part.abs_error
            out.append({"system": system, "dtype": dtype, "kind": kind, "class": cls,
                        "n": int(e.size), "median_abs_error": float(e.median()),
                        "p90_abs_error": float(e.quantile(0.9)),
                        "disturbed": int(part.disturbed.astype(bool).sum()),
                        "seed": int(part.seed.iloc[0])})
    return pd.DataFrame(out, columns=SUMMARY_COLUMNS)


def text(table: pd.DataFrame) -> str:
    """summary() as aligned text: one block per system and dtype, calls then ops."""
    lines = []
    for (system, dtype), g in table.groupby(["system", "dtype"], sort=True):
        lines.append(f"{system}, {dtype} (seed {int(g.seed.iloc[0])}): "
                     "|measured / predicted - 1| of held-out work")
        width = max(len(str(c)) for c in g["class"])
        lines.append(f"  {'kind':<5} {'class':<{width}}  {'n':>3}  {'median':>7}  {'p90':>7}"
                     "  disturbed (timed contended or noisy)")
        order = g.sort_values(["kind", "class"], key=lambda s: s.where(s != ALL, "~"))
        for r in order.to_dict("records"):
            lines.append(f"  {r['kind']:<5} {r['class']:<{width}}  {r['n']:>3}  "
                         f"{share(r['median_abs_error']):>7}  {share(r['p90_abs_error']):>7}"
                         f"  {r['disturbed']}")
        lines.append("")
    return "\n".join(lines) or "no held-out rows were placed\n"


def band(table: pd.DataFrame | None, system: str, dtype: str) -> str:
    """'held out: median X %, p90 Y % (n calls)' for a system and dtype, '' without one (the
    system's own, else the same device's under another host label: the name before ' @ ')."""
    if table is None or table.empty:
        return ""
    calls = table[(table.kind == "call") & (table["class"] == ALL) & (table.dtype == dtype)]
    mine = calls[calls.system == system]
    if mine.empty:
        device = str(system).split(" @ ")[0]
        mine = calls[calls.system.str.split(" @ ").str[0] == device]
    if mine.empty or not mine.n.iloc[0]:
        return ""
    r = mine.iloc[0]
    return (f"held out: median {share(r.median_abs_error)}, p90 {share(r.p90_abs_error)} "
            f"({int(r.n)} calls)")

