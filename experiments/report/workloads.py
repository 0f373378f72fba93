"""The report's "Your workloads": each call and its aten ops as points for the interactive
roofline, the placement and op tables, the model's error, the knees, and each workload predicted
on the datasheet devices; all from the placements step's files (analysis.compute.Placed: the
knees and the datasheet predictions are computed there, never here)."""

from __future__ import annotations

import pandas as pd

from experiments.analysis import bounds, placements, prediction, validation
from experiments.analysis.compute import Placed
from experiments.analysis.units import finite, num, qty, share
from experiments.report.interactive import Point

LEVEL_KINDS = (("dram_bytes", "DRAM"), ("l2_bytes", "L2"), ("l1_bytes", "L1"))


def _pct(v) -> str:
    return f"{v:+.0%}".replace("%", " %") if finite(v) else ""


def group(r) -> str:
    return f"{r['workload']} {r['dtype']}"


def points(calls: pd.DataFrame, ops: pd.DataFrame, reference=()) -> list[Point]:
    """Whole calls, and each aten op at its counted intensity and again at FLOPs / the bytes ncu
    measured at DRAM, L2 and L1 (the hierarchical roofline); the hover text names it and its
    machine, a published set's as a reference (the systems in `reference`)."""
    out = []

    def point(r, kind, x, y, text):
        ref = r["system"] in reference
        out.append(Point(group(r), kind, x, y, f"{r['system']}{' (reference)' if ref else ''}: "
                         f"{text}", system=r["system"], reference=ref))
    for r in calls.to_dict("records"):
        roof = f"{share(r['fraction_of_roof'])} of the roof, " if finite(r["fraction_of_roof"]) \
            else ""
        point(r, "whole call", r["intensity"], r["attained_flop_per_s"],
                         f"{r['workload']} {r['dtype']} batch {r['batch']:.0f}: "
                         f"{qty(r['attained_flop_per_s'], 'FLOP/s')} at {num(r['intensity'])} "
                         f"FLOP/B, {roof}{r['bound'] or 'no'}-bound; "
                         f"{qty(r['measured_time_s'], 's')} measured, "
                         f"{qty(r['predicted_time_s'], 's')} predicted")
    for r in ops.to_dict("records"):
        if not (finite(r["flops"]) and r["flops"] > 0 and r["time_s"] > 0):
            continue  # no FLOPs: not on a FLOP/s roofline (the table lists it)
        rate = r["flops"] / r["time_s"]
        where = (f"{r['workload']} {r['dtype']} batch {r['batch']:.0f}: {r['aten_op']} "
                 f"{r['input_shapes']}")
        traffic = "; ".join(f"{level} {qty(r[key], 'B')}" for key, level in LEVEL_KINDS
                            if finite(r.get(key)) and r[key] > 0)
        point(r, "aten op", r["intensity"], rate,
                         f"{where}: {qty(r['time_s'], 's')}, {qty(rate, 'FLOP/s')} at "
                         f"{num(r['intensity'])} FLOP/B counted, {r['bound'] or 'no'}-bound"
                         + (f"; its kernels moved {traffic} (ncu)" if traffic else ""))
        for key, level in LEVEL_KINDS:
            if finite(r.get(key)) and r[key] > 0:
                point(r, f"op at {level} bytes (ncu)", r["flops"] / r[key], rate,
                      f"{where}: {qty(r[key], 'B')} of {level} traffic measured by ncu, "
                      f"{num(r['flops'] / r[key])} FLOP/B")
    return out


OVER = 1.05  # above the roof by more than its own noise: the page says why


def _fraction(r) -> tuple[str, str]:
    """(the share of the roof, why it is above 100 %: the level whose bandwidth explains a
    memory-bound call, or a compute ceiling the call beat; "" under it)."""
    f = r["fraction_of_roof"]
    if not (finite(f) and f > OVER):
        return share(f), ""
    if r["bound"] == "memory":
        level = r.get("level") if isinstance(r.get("level"), str) else "DRAM"
        return (f"{share(f)} (a cache above {level})",
                f"faster than {level} allows: part of its compulsory bytes came from a cache "
                f"level above {level} (resident between calls)")
    return (f"{share(f)} (above the fitted ceiling)",
            "faster than the fitted compute ceiling: its kernels beat the sweep's plateau, or "
            "the FLOPs counted exceed those run (a counting error)")


def _raw(**values) -> dict:
    """Raw numbers for the CSV and for sorting (data-v): finite ones only."""
    return {k: f"{float(v):.6g}" for k, v in values.items() if finite(v)}


def _text(v) -> str:
    return v if isinstance(v, str) else ""


def section(placed: Placed, reference=()) -> dict:
    """The tables of "Your workloads" ({} without workload rows), and the points to plot. Each
    row says whether it is a reference set's (a system in `reference`): the page folds those."""
    calls, ops = placed.calls, placed.ops
    if calls.empty:
        return {}
    rows = [{"system": r["system"] if r["roofline_of"] == r["system"]
             else f"{r['system']} (on the roofline of {r['roofline_of']})",
             "reference": r["system"] in reference,
             "workload": r["workload"], "dtype": r["dtype"], "batch": f"{r['batch']:.0f}",
             "time": qty(r["measured_time_s"], "s"),
             "flops": qty(r["attained_flop_per_s"], "FLOP/s"),
             "bytes": qty(r["attained_byte_per_s"], "B/s") + _beyond_dram(r),
             "intensity": num(r["intensity"]),
             "fraction": _fraction(r)[0], "over": _fraction(r)[1], "bound": _text(r["bound"]),
             "predicted": _predicted(r) + _band(placed, r),
             "error": _pct(r["model_error"]) + (f" ({r['failed_term']})" if _text(
                 r.get("failed_term")) else ""),
             "v": _raw(batch=r["batch"], time=r["measured_time_s"],
                       flops=r["attained_flop_per_s"], bytes=r["attained_byte_per_s"],
                       intensity=r["intensity"], fraction=r["fraction_of_roof"],
                       predicted=r["predicted_time_s"], error=r["model_error"])}
            for r in calls.to_dict("records")]
    errors = [e | {"what": "whole calls"} for e in
              placements.model_error_summary(calls).to_dict("records")]
    op_err = ops.assign(model_error=ops.time_s / ops.predicted_time_s - 1)
    errors += [e | {"what": "aten ops"} for e in
               placements.model_error_summary(op_err).to_dict("records")]
    for e in errors:
        e["reference"] = e["system"] in reference
    summed = placements.call_from_ops(ops, calls)
    knees = placed.knees.assign(reference=placed.knees.system.isin(list(reference))) \
        if "system" in placed.knees else placed.knees
    # the knees as read: the renderer makes their notes plain
    return {"rows": rows, "errors": errors, "knees": knees,
            "points": points(calls, ops, reference),
            "sheets": _on_datasheets(placed.on_datasheets), "ops": _op_rows(ops, reference),
            "calls": [{"system": c["system"], "reference": c["system"] in reference,
                       "workload": c["workload"], "dtype": c["dtype"],
                       "batch": f"{c['batch']:.0f}", "ops": c["ops"],
                       "measured": qty(c["measured_time_s"], "s"),
                       "ops_time": qty(c["ops_time_s"], "s"),
                       "predicted": qty(c["ops_predicted_time_s"], "s"),
                       "error": _pct(c["model_error"]),
                       "v": _raw(batch=c["batch"], measured=c["measured_time_s"],
                                 ops_time=c["ops_time_s"], predicted=c["ops_predicted_time_s"],
                                 error=c["model_error"])}
                      for c in summed.to_dict("records")]}


def _predicted(r) -> str:
    """The predicted time; one read outside every calibrated range says so, with what, and
    is marked approximate (~)."""
    text = r.get("predicted_from")
    _, found, what = text.partition(prediction.OUTSIDE) if isinstance(text, str) else ("", "", "")
    if not found:
        return qty(r["predicted_time_s"], "s")
    what = what if len(what) <= 120 else what[:117] + "..."
    return f"~{qty(r['predicted_time_s'], 's')} ({prediction.OUTSIDE}{what})"


def _beyond_dram(r) -> str:
    """Where a call's bandwidth is above the DRAM ceiling: the cache level that explains it,
    or the flag that it cannot be (analysis/bounds.py)."""
    level = r.get("bandwidth_level")
    if not isinstance(level, str) or not level:
        return ""
    return f" (flagged: {level})" if level == bounds.ABOVE else f" (above DRAM: {level})"


def _band(placed: Placed, r) -> str:
    """The out-of-sample error band of the row's system and dtype (`rooflab validate`)."""
    band = validation.band(getattr(placed, "heldout", None), r["roofline_of"], r["dtype"])
    return f" ({band})" if band else ""


def _on_datasheets(predicted: pd.DataFrame) -> list[dict]:
    """The same model on the datasheets' numbers alone (results/datasheet_predictions.parquet)."""
    return [{"device": r["device"], "workload": r["workload"], "dtype": r["dtype"],
             "batch": f"{r['batch']:.0f}", "time": qty(r["time_s"], "s")}
            for r in predicted.to_dict("records")]


def _op_rows(ops: pd.DataFrame, reference=()) -> list[dict]:
    return [{"system": r["system"], "reference": r["system"] in reference,
             "workload": r["workload"], "dtype": r["dtype"],
             "batch": f"{r['batch']:.0f}", "op": r["aten_op"], "shapes": r["input_shapes"],
             "time": qty(r["time_s"], "s"), "share": share(r["share_of_call"]),
             "flops": qty(r["attained_flop_per_s"], "FLOP/s") if r["flops"] else "",
             "bytes": qty(r["attained_byte_per_s"], "B/s"),
             "intensity": num(r["intensity"]) if r["flops"] else "",
             "fraction": _fraction(r)[0], "over": _fraction(r)[1], "bound": _text(r["bound"]),
             "source": _text(r["bytes_source"]), "dram": qty(r["dram_bytes"], "B"),
             "l2": qty(r["l2_bytes"], "B"), "l1": qty(r["l1_bytes"], "B"),
             "measured_bound": _text(r["measured_bound"]),
             "v": _raw(batch=r["batch"], time=r["time_s"], share=r["share_of_call"],
                       flops=r["attained_flop_per_s"] if r["flops"] else None,
                       bytes=r["attained_byte_per_s"],
                       intensity=r["intensity"] if r["flops"] else None,
                       fraction=r["fraction_of_roof"], dram=r["dram_bytes"], l2=r["l2_bytes"],
                       l1=r["l1_bytes"])} for r in ops.to_dict("records")]
