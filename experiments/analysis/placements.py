"""Workloads on the roofline: each measured call placed against the fitted ceilings (its
bandwidth bounded: bounds.py), the batch where each workload turns compute-bound (measured and
predicted), and how far the model is off.

A row's prediction is experiments/analysis/prediction.py's: a call is the sum over its ops of
max(compute, memory traffic at the level its working set fits, latency floor), with Nsight
Compute's bytes where they were measured. A call measured before its ops were recorded (no `ops`
in its params) falls back to one roof for the whole call: max(latency, bytes / B, FLOPs / P).
model_error = measured / predicted - 1: above 0 the call is slower than the roofline allows, below
0 faster; above MISS in size, `failed_term` says which term failed.

placement_table(): results/placements.parquet, every call and profiled op (`kind` call, op), read
back by read_placements().

The predicted knee: bytes(b) = b0 + b1 b and FLOPs(b) = f0 + f1 b fitted (least squares) over the
measured batches, b* = (b0 / B - f0 / P) / (f1 / P - b1 / B), where FLOPs(b) / P overtakes
bytes(b) / B. The measured knee is decode.measured_knee's fit of time = max(t0, c b).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd

from experiments.analysis import bounds, prediction, roofline
from experiments.analysis.dataset import reading
from experiments.analysis.knees import NO_KNEE, compute_for, measured_knee
from experiments.placement.formulas import MATRIX_OPS

KNEE_AGREES = 2.0  # a predicted knee within this factor of the measured one agrees
LEVELS = (("l1_bytes", "l1_bw", "L1"), ("l2_bytes", "l2_bw", "L2"), ("dram_bytes", "dram_bw", "DRAM"))
OP_COLUMNS = ["system", "workload", "dtype", "batch", "aten_op", "input_shapes", "time_s",
              "share_of_call", "flops", "bytes", "intensity", "attained_flop_per_s",
              "attained_byte_per_s", "roof_flop_per_s", "fraction_of_roof", "bound",
              "predicted_time_s", "bytes_source", "dram_bytes", "l2_bytes", "l1_bytes",
              "measured_bound", "level", "compute_s", "memory_s", "latency_s", "model_error",
              "failed_term", "flops_source", "predicted_from"]
PLACEMENT_COLUMNS = ["system", "workload", "dtype", "batch", "flops", "bytes", "intensity",
                     "measured_time_s", "timer", "attained_flop_per_s", "attained_byte_per_s",
                     "roof_flop_per_s", "fraction_of_roof", "bound", "level", "predicted_time_s",
                     "compute_s", "memory_s", "latency_s", "model_error", "failed_term",
                     "predicted_from", "missing", "roofline_of", "bandwidth_level"]
KNEE_COLUMNS = ["system", "workload", "dtype", "batches", "bandwidth_Bps", "compute_flops",
                "measured", "measured_low", "measured_high", "measured_note", "predicted",
                "predicted_note", "ratio", "agrees"]


def _params(row) -> dict:
    p = row.get("params") if hasattr(row, "get") else None
    return p if isinstance(p, dict) else json.loads(p or "{}") if isinstance(p, str) else {}


def place_row(row, ceilings: pd.DataFrame, system: str, rows=None) -> dict:
    """One measured call against `system`'s ceilings (a row of the schema, dict or Series):
    summed over its ops where the row lists them, else one roof for the whole call. `rows`
    (the dataset's) give the model the system's GEMM and bandwidth curves."""
    flops, nbytes, t = float(row["flops"]), float(row["bytes"]), float(row["time_s"])
    # device times (graph replay, an op in the profiler): the graph floor; host-timed: eager
    graph = row.get("timer") in ("cuda_event_graph", "torch_profiler")
    nbytes, _ = bounds.compulsory_bytes(nbytes, _params(row), row["dtype"])
    pred = roofline.predict(ceilings, system, row["dtype"], flops, nbytes, graph=graph)
    ops = _params(row).get("ops")
    found = {"predicted_from": "whole call", "level": "DRAM" if pred["bound"] == "memory"
             else None}
    if ops:
        r = _roofs(ceilings, system, row["dtype"], graph, rows, row.get("system"))
        found = prediction.predict_call(r, ops)
        found = {k: found[k] for k in ("predicted_time_s", "compute_s", "memory_s", "latency_s",
                                       "bound", "level", "top_op", "top_curve")} | {
            "predicted_from": prediction.with_curves(
                f"sum over {found['launches']} ops ({found['ops']} distinct)", found["curves"],
                found["outside"])}
        pred = pred | {k: found[k] for k in ("predicted_time_s", "bound")}
        pred["time_s"] = found["predicted_time_s"]
    attained, roof, predicted = flops / t if t > 0 else math.nan, pred["roof_flops"], pred["time_s"]
    error = t / predicted - 1 if predicted and predicted > 0 else math.nan
    r = _roofs(ceilings, system, row["dtype"], graph, rows, row.get("system"))
    return {"system": system, "attained_flop_per_s": attained, "bytes": nbytes,
            "attained_byte_per_s": nbytes / t if t > 0 else math.nan,
            "bandwidth_level": bounds.bandwidth_level(r, nbytes, nbytes / t if t > 0
                                                      else math.nan),
            "intensity": flops / nbytes if nbytes else math.nan,
            "roof_flop_per_s": roof if roof else math.nan,
            "fraction_of_roof": attained / roof if roof else math.nan,
            "bound": pred["bound"], "predicted_time_s": predicted, "measured_time_s": t,
            "compute_s": found.get("compute_s", pred.get("compute_s")),
            "memory_s": found.get("memory_s", pred.get("memory_s")),
            "latency_s": found.get("latency_s", pred.get("latency_s")),
            "level": found["level"], "predicted_from": found["predicted_from"],
            "model_error": error,
            "failed_term": prediction.failed_term(error, pred["bound"], found["level"],
                                                  found.get("top_op", ""),
                                                  found.get("top_curve", "")),
            "missing": ", ".join(pred["missing"])}


_ROOFS: dict = {}  # prediction.roofs by its arguments' identity


def _roofs(ceilings, system, dtype, graph, rows, own=None):
    """prediction.roofs, once per (tables, system, dtype, timer) in a process; the curves from
    the roofline's system and the placed row's own (`own`)."""
    key = (id(ceilings), id(rows), system, own, dtype, graph)
    if key not in _ROOFS:
        _ROOFS[key] = prediction.roofs(ceilings, system, dtype, graph, rows,
                                       also=(own,) if own else ())
    return _ROOFS[key]


def _all_rows(ds):
    return ds.rows if hasattr(ds, "rows") else ds


def _rows(ds, ops: bool = False) -> pd.DataFrame:
    """ok workload rows: whole calls, or with ops=True their aten ops (variant aten_op)."""
    rows = _all_rows(ds)
    w = rows[(rows.experiment == "workload") & (rows.status == "ok")]
    variant = w["variant"].fillna("") if "variant" in w else pd.Series("", index=w.index)
    w = w[(variant == "aten_op") == ops]
    return w[w.time_s.notna() & (w.time_s > 0) & (w.bytes > 0) & (w.flops >= 0)]


def roofline_systems(rows: pd.DataFrame, ceilings: pd.DataFrame) -> dict:
    """system -> the system whose fitted ceilings place its rows: its own, else those of a system
    of the same device model in the dataset (a workload measured under another host label, e.g.
    a run of its own under Nsight Compute); systems with neither are left out."""
    fitted = ceilings[ceilings.value.notna()] if ceilings is not None and not ceilings.empty \
        else pd.DataFrame(columns=["system", "device_name"])
    own = set(fitted.system)
    by_model = {}
    if "device_name" in fitted:
        for system, name in fitted[["system", "device_name"]].drop_duplicates().itertuples(
                index=False):
            by_model.setdefault(name, system)
    out = {}
    for system, name in rows[["system", "device_name"]].drop_duplicates().itertuples(index=False) \
            if "device_name" in rows else ((s, None) for s in rows.system.unique()):
        if system in own:
            out[system] = system
        elif name in by_model:
            out[system] = by_model[name]
    return out


def placements(ds, ceilings: pd.DataFrame) -> pd.DataFrame:
    """Per ok workload row of a system with fitted ceilings: where it sits on the roofline."""
    out = []
    rows = _rows(ds)
    roof_of = roofline_systems(rows, ceilings)
    for _, row in rows.iterrows():
        if row.system not in roof_of:
            continue
        with reading(f"the {row['op']} call at batch {row['batch']:g} of {row.system}"):
            out.append({"workload": row["op"], "dtype": row["dtype"], "batch": row["batch"],
                        "flops": row.flops, "bytes": row.bytes, "timer": row.timer}
                       | place_row(row, ceilings, roof_of[row.system], _all_rows(ds))
                       | {"system": row.system, "roofline_of": roof_of[row.system]})
    return pd.DataFrame(out, columns=PLACEMENT_COLUMNS)


def measured_bound(ceilings, system: str, dtype: str, flops: float, levels: dict) -> str | None:
    """Which level bounds an op by the traffic ncu measured at each level: the largest of
    bytes_level / B_level and FLOPs / P (levels without a fitted ceiling are left out)."""
    terms = {}
    for key, ceiling, name in LEVELS:
        B = roofline.value(ceilings, system, ceiling)
        if B and levels.get(key) == levels.get(key) and levels.get(key):
            terms[name] = levels[key] / B
    P, _ = compute_for(ceilings, system, dtype)
    if P and flops:
        terms["compute"] = flops / P
    if set(terms) <= {"compute"}:
        return None  # no measured traffic (or no ceiling for it): nothing to say
    return max(terms, key=terms.get)


def op_placements(ds, ceilings: pd.DataFrame) -> pd.DataFrame:
    """Per aten op of a profiled call: its device time (torch.profiler), counted work, place on
    the roofline and, where ncu measured them, its DRAM/L2/L1 bytes and the level they say bounds
    it. share_of_call: the op's time over the sum of the call's op times."""
    out = []
    rows = _rows(ds, ops=True)
    roof_of = roofline_systems(rows, ceilings)
    for _, row in rows.iterrows():
        if row.system not in roof_of:
            continue
        with reading(f"the {row['op']} op row at batch {row['batch']:g} of {row.system}"):
            p = row.params if isinstance(row.params, dict) else json.loads(row.params or "{}")
            levels = {key: p.get(key, math.nan) for key, _, _ in LEVELS}
            roof = roof_of[row.system]
            placed = place_row(row, ceilings, roof) | {"system": row.system}
            r = _roofs(ceilings, roof, row["dtype"], True, _all_rows(ds), row.system)
            kind = p.get("kind") or ("matrix" if str(p.get("aten_op")).removeprefix("aten::")
                                     in MATRIX_OPS else "vector")  # rows before `kind` was kept
            op = prediction.predict_op(r, row.flops, row.bytes, p.get("cold_bytes"), kind,
                                       p.get("calls_per_step") or 1,
                                       levels if p.get("bytes_source") == "ncu" else None,
                                       exponentials=p.get("exponentials") or 0.0,
                                       op=p.get("aten_op") or "", shapes=p.get("input_shapes"),
                                       kernels=p.get("kernels") or 0)
            t = op["predicted_time_s"]
            error = row.time_s / t - 1 if t > 0 else math.nan
            out.append({"workload": row["op"], "dtype": row["dtype"], "batch": row["batch"],
                        "aten_op": p.get("aten_op"), "input_shapes": p.get("input_shapes"),
                        "time_s": row.time_s, "flops": row.flops, "bytes": row.bytes,
                        "bytes_source": "gathered rows (shapes)" if "gathered" in op["note"]
                        else p.get("bytes_source", "counted"), **levels,
                        "flops_source": p.get("flops_source"),
                        "measured_bound": measured_bound(ceilings, roof, row["dtype"],
                                                         row.flops, levels)}
                       | {k: placed[k] for k in ("system", "intensity", "attained_flop_per_s",
                                                 "attained_byte_per_s", "roof_flop_per_s",
                                                 "fraction_of_roof")}
                       | {k: op[k] for k in ("bound", "level", "predicted_time_s", "compute_s",
                                             "memory_s", "latency_s")}
                       | {"model_error": error,
                          "predicted_from": prediction.with_curves("", [op["curve"]],
                                                                   op["outside"]),
                          "failed_term": prediction.failed_term(
                              error, op["bound"], op["level"], p.get("aten_op") or "",
                              op["curve"])})
    table = pd.DataFrame(out, columns=OP_COLUMNS)
    if len(table):
        call = table.groupby(["system", "workload", "dtype", "batch"]).time_s.transform("sum")
        table["share_of_call"] = table.time_s / call
    return table.sort_values(["system", "workload", "dtype", "batch", "time_s"],
                             ascending=[True, True, True, True, False], ignore_index=True)


def call_from_ops(ops: pd.DataFrame, placed: pd.DataFrame) -> pd.DataFrame:
    """Per profiled call: the measured whole-call time beside the sum of its ops' device times
    and the sum of their roofline predictions (the model summed over kernels)."""
    cols = ["system", "workload", "dtype", "batch", "ops", "measured_time_s", "ops_time_s",
            "ops_predicted_time_s", "model_error"]
    if ops.empty:
        return pd.DataFrame(columns=cols)
    g = ops.groupby(["system", "workload", "dtype", "batch"], as_index=False).agg(
        ops=("aten_op", "size"), ops_time_s=("time_s", "sum"),
        ops_predicted_time_s=("predicted_time_s", "sum"))
    whole = placed[["system", "workload", "dtype", "batch", "measured_time_s"]]
    g = g.merge(whole, on=["system", "workload", "dtype", "batch"], how="left")
    g["model_error"] = g.measured_time_s / g.ops_predicted_time_s - 1
    return g.reindex(columns=cols)


def predicted_knee(b, flops, nbytes, B: float, P: float) -> tuple[float, str]:
    """(b*, note) where FLOPs(b) / P overtakes bytes(b) / B, both fitted linearly in b."""
    b = np.asarray(b, float)
    f1, f0 = np.polyfit(b, np.asarray(flops, float), 1)
    b1, b0 = np.polyfit(b, np.asarray(nbytes, float), 1)
    denom = f1 / P - b1 / B
    if denom <= 0:
        return math.inf, "never compute-bound: each added batch's bytes take longer than its FLOPs"
    knee = (b0 / B - f0 / P) / denom
    if knee < 1:
        return math.nan, NO_KNEE
    return float(knee), ""


def knees(ds, ceilings: pd.DataFrame, known: dict | None = None) -> pd.DataFrame:
    """Per (system, workload, dtype) with >= 3 batch sizes: measured and predicted knees. `known`:
    measured knees already computed ({(system, workload, dtype): ...}, knees.reused)."""
    known, out = known or {}, []
    w = _rows(ds)
    roof_of = roofline_systems(w, ceilings)
    for (system, name, dtype), g in w.groupby(["system", "op", "dtype"], sort=True):
        with reading(f"the {name} {dtype} calls of {system}"):
            roof = roof_of.get(system, system)
            g = g.sort_values("batch")
            b = g.batch.to_numpy(float)
            if np.unique(b).size < 3:
                continue
            k, lo, hi, note = known.get((system, name, dtype)) or measured_knee(
                b, g.time_s.to_numpy(float))
            B = roofline.value(ceilings, roof, "dram_bw")
            P, _ = compute_for(ceilings, roof, dtype)
            pk, pnote = (predicted_knee(b, g.flops, g.bytes, B, P) if B and P else (
                math.nan, f"no fitted {'DRAM bandwidth' if not B else dtype + ' compute'}"))
            ratio = k / pk if k == k and pk == pk and 0 < pk < math.inf else math.nan
            agrees = bool(1 / KNEE_AGREES <= ratio <= KNEE_AGREES) if ratio == ratio else None
            out.append({"system": system, "workload": name, "dtype": dtype,
                        "batches": int(np.unique(b).size), "bandwidth_Bps": B, "compute_flops": P,
                        "measured": k, "measured_low": lo, "measured_high": hi,
                        "measured_note": note or "", "predicted": pk, "predicted_note": pnote,
                        "ratio": ratio, "agrees": agrees})
    return pd.DataFrame(out, columns=KNEE_COLUMNS)


def model_error_summary(placements: pd.DataFrame) -> pd.DataFrame:
    """Per system: how many rows, the median and 90th percentile of |measured/predicted - 1|."""
    cols = ["system", "rows", "median_abs_error", "p90_abs_error"]
    p = placements[placements.model_error.notna()]
    out = [{"system": s, "rows": len(g), "median_abs_error": float(g.model_error.abs().median()),
            "p90_abs_error": float(g.model_error.abs().quantile(0.9))}
           for s, g in p.groupby("system", sort=True)]
    return pd.DataFrame(out, columns=cols)


TABLE_COLUMNS = ["kind", *PLACEMENT_COLUMNS, *[c for c in OP_COLUMNS if c not in PLACEMENT_COLUMNS]]


def with_measured_bytes(calls: pd.DataFrame, ops: pd.DataFrame) -> pd.DataFrame:
    """Calls whose ops Nsight Compute measured: predicted as the sum of those ops' predictions
    (each on its measured DRAM/L2/L1 traffic) instead of their counted bytes."""
    keys = ["system", "workload", "dtype", "batch"]
    measured = ops[ops.bytes_source == "ncu"]
    if calls.empty or measured.empty:
        return calls
    mine = ops[ops.set_index(keys).index.isin(measured.set_index(keys).index)]
    mine = mine.assign(curve=[(prediction.curves_of(f) or [""])[0] for f in mine.predicted_from])
    sums = mine.groupby(keys).agg(ncu_predicted=("predicted_time_s", "sum"),
                                  n=("aten_op", "size"), curves=("curve", list)).reset_index()
    top = mine.loc[mine.groupby(keys).predicted_time_s.idxmax(), keys + ["aten_op", "curve"]]
    sums = sums.merge(top.rename(columns={"aten_op": "top_op"}), on=keys, how="left")
    out = calls.merge(sums, on=keys, how="left")
    hit = out.ncu_predicted.notna() & (out.ncu_predicted > 0)
    out.loc[hit, "predicted_time_s"] = out.ncu_predicted[hit]
    out.loc[hit, "predicted_from"] = [prediction.with_curves(f"sum over {int(n)} profiled ops, "
                                                             "ncu bytes", c)
                                      for n, c in zip(out.n[hit], out.curves[hit])]
    out.loc[hit, "model_error"] = out.measured_time_s[hit] / out.ncu_predicted[hit] - 1
    out.loc[hit, "failed_term"] = [prediction.failed_term(*a) for a in zip(
        out.model_error[hit], out.bound[hit], out.level[hit], out.top_op[hit], out.curve[hit])]
    return out.drop(columns=["ncu_predicted", "n", "top_op", "curve", "curves"])


def placement_table(ds, ceilings: pd.DataFrame) -> pd.DataFrame:
    """results/placements.parquet: every placed whole call (kind `call`) and op (kind `op`):
    measured, predicted, error, the bound and level, and the term that failed on a miss."""
    ops = op_placements(ds, ceilings).assign(kind="op")
    calls = with_measured_bytes(placements(ds, ceilings), ops).assign(kind="call")
    ops = ops.assign(measured_time_s=ops.time_s)
    frames = [f for f in (calls, ops) if len(f)]
    table = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    table = table.reindex(columns=TABLE_COLUMNS)
    for col in ("input_shapes", "aten_op", "failed_term", "level", "missing", "flops_source",
                "bytes_source", "measured_bound", "predicted_from", "timer", "roofline_of",
                "bandwidth_level"):
        table[col] = table[col].astype(object).where(table[col].notna(), None)
    return table


def read_placements(path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(whole calls, ops) from results/placements.parquet (or that table), with the columns
    placements() and op_placements() give; the report reads this, never recomputes it."""
    table = path if isinstance(path, pd.DataFrame) else pd.read_parquet(path)
    calls = table[table.kind == "call"].reindex(columns=PLACEMENT_COLUMNS)
    ops = table[table.kind == "op"].reindex(columns=OP_COLUMNS)
    return calls.reset_index(drop=True), ops.reset_index(drop=True)


def error_stats(table: pd.DataFrame) -> dict:
    """Median and 90th percentile of |error| over whole calls, over ops, and over both."""
    out = {}
    for name, part in (("calls", table[table.kind == "call"]), ("ops", table[table.kind == "op"]),
                       ("all", table)):
        e = part.model_error.dropna().abs()
        out[name] = {"n": int(e.size), "median": float(e.median()) if e.size else math.nan,
                     "p90": float(e.quantile(0.9)) if e.size else math.nan}
    return out
