"""The report's "Your workloads": each call and its aten ops as points for the interactive
roofline, the placement and op tables, the model's error, the knees, and each workload predicted
on the datasheet devices; all from the placements step's files (analysis.compute.Placed: the
knees and the datasheet predictions are computed there, never here)."""

from __future__ import annotations

import pandas as pd

from experiments.analysis import placements
from experiments.analysis.compute import Placed
from experiments.analysis.units import finite, num, qty, share
from experiments.report.interactive import Point

LEVEL_KINDS = (("dram_bytes", "DRAM"), ("l2_bytes", "L2"), ("l1_bytes", "L1"))


def _pct(v) -> str:
    return f"{v:+.0%}".replace("%", " %") if finite(v) else ""


def group(r) -> str:
    return f"{r['workload']} {r['dtype']}"


def points(calls: pd.DataFrame, ops: pd.DataFrame) -> list[Point]:
    """Whole calls, and each aten op at its counted intensity and again at FLOPs / the bytes ncu
    measured at DRAM, L2 and L1 (the hierarchical roofline); the hover text names it."""
    out = []
    for r in calls.to_dict("records"):
        roof = f"{share(r['fraction_of_roof'])} of the roof, " if finite(r["fraction_of_roof"]) \
            else ""
        out.append(Point(group(r), "whole call", r["intensity"], r["attained_flop_per_s"],
                         f"{r['system']}: {r['workload']} {r['dtype']} batch {r['batch']:.0f}: "
                         f"{qty(r['attained_flop_per_s'], 'FLOP/s')} at {num(r['intensity'])} "
                         f"FLOP/B, {roof}{r['bound'] or 'no'}-bound; "
                         f"{qty(r['measured_time_s'], 's')} measured, "
                         f"{qty(r['predicted_time_s'], 's')} predicted"))
    for r in ops.to_dict("records"):
        if not (finite(r["flops"]) and r["flops"] > 0 and r["time_s"] > 0):
            continue  # no FLOPs: not on a FLOP/s roofline (the table lists it)
        rate = r["flops"] / r["time_s"]
        where = (f"{r['workload']} {r['dtype']} batch {r['batch']:.0f}: {r['aten_op']} "
                 f"{r['input_shapes']}")
        traffic = "; ".join(f"{level} {qty(r[key], 'B')}" for key, level in LEVEL_KINDS
                            if finite(r.get(key)) and r[key] > 0)
        out.append(Point(group(r), "aten op", r["intensity"], rate,
                         f"{where}: {qty(r['time_s'], 's')}, {qty(rate, 'FLOP/s')} at "
                         f"{num(r['intensity'])} FLOP/B counted, {r['bound'] or 'no'}-bound"
                         + (f"; its kernels moved {traffic} (ncu)" if traffic else "")))
        for key, level in LEVEL_KINDS:
            if finite(r.get(key)) and r[key] > 0:
                out.append(Point(group(r), f"op at {level} bytes (ncu)", r["flops"] / r[key], rate,
                                 f"{where}: {qty(r[key], 'B')} of {level} traffic measured by "
                                 f"ncu, {num(r['flops'] / r[key])} FLOP/B"))
    return out


def section(placed: Placed) -> dict:
    """The tables of "Your workloads" ({} without workload rows), and the points to plot."""
    calls, ops = placed.calls, placed.ops
    if calls.empty:
        return {}
    rows = [{"system": r["system"] if r["roofline_of"] == r["system"]
             else f"{r['system']} (on the roofline of {r['roofline_of']})",
             "workload": r["workload"], "dtype": r["dtype"], "batch": f"{r['batch']:.0f}",
             "time": qty(r["measured_time_s"], "s"),
             "flops": qty(r["attained_flop_per_s"], "FLOP/s"),
             "bytes": qty(r["attained_byte_per_s"], "B/s"), "intensity": num(r["intensity"]),
             "fraction": share(r["fraction_of_roof"]), "bound": r["bound"] or "",
             "predicted": qty(r["predicted_time_s"], "s"),
             "error": _pct(r["model_error"]) + (f" ({r['failed_term']})" if r.get("failed_term")
                                                 else "")}
            for r in calls.to_dict("records")]
    errors = [e | {"what": "whole calls"} for e in
              placements.model_error_summary(calls).to_dict("records")]
    op_err = ops.assign(model_error=ops.time_s / ops.predicted_time_s - 1)
    errors += [e | {"what": "aten ops"} for e in
               placements.model_error_summary(op_err).to_dict("records")]
    summed = placements.call_from_ops(ops, calls)
    # the knees as read: the renderer makes their notes plain
    return {"rows": rows, "errors": errors, "knees": placed.knees, "points": points(calls, ops),
            "sheets": _on_datasheets(placed.on_datasheets), "ops": _op_rows(ops),
            "calls": [{"system": c["system"], "workload": c["workload"], "dtype": c["dtype"],
                       "batch": f"{c['batch']:.0f}", "ops": c["ops"],
                       "measured": qty(c["measured_time_s"], "s"),
                       "ops_time": qty(c["ops_time_s"], "s"),
                       "predicted": qty(c["ops_predicted_time_s"], "s"),
                       "error": _pct(c["model_error"])} for c in summed.to_dict("records")]}


def _on_datasheets(predicted: pd.DataFrame) -> list[dict]:
    """The same model on the datasheets' numbers alone (results/datasheet_predictions.parquet)."""
    return [{"device": r["device"], "workload": r["workload"], "dtype": r["dtype"],
             "batch": f"{r['batch']:.0f}", "time": qty(r["time_s"], "s")}
            for r in predicted.to_dict("records")]


def _op_rows(ops: pd.DataFrame) -> list[dict]:
    return [{"system": r["system"], "workload": r["workload"], "dtype": r["dtype"],
             "batch": f"{r['batch']:.0f}", "op": r["aten_op"], "shapes": r["input_shapes"],
             "time": qty(r["time_s"], "s"), "share": share(r["share_of_call"]),
             "flops": qty(r["attained_flop_per_s"], "FLOP/s") if r["flops"] else "",
             "bytes": qty(r["attained_byte_per_s"], "B/s"),
             "intensity": num(r["intensity"]) if r["flops"] else "",
             "fraction": share(r["fraction_of_roof"]), "bound": r["bound"] or "",
             "source": r["bytes_source"], "dram": qty(r["dram_bytes"], "B"),
             "l2": qty(r["l2_bytes"], "B"), "l1": qty(r["l1_bytes"], "B"),
             "measured_bound": r["measured_bound"] or ""} for r in ops.to_dict("records")]
