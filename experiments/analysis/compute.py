"""What the aggregate steps compute, in memory. The steps (experiments/steps/pipeline.py) write
each result to a file and the report only reads those files; `rooflab compare` and the tests
chain these functions without files.

    fit_ceilings   dataset -> ceilings
    decode_knees   dataset, ceilings -> decode knees, the prediction per decode row
    judge_claims   dataset, ceilings, datasheets, decode knees -> the claims table
    placed         dataset, ceilings, datasheets -> Placed: every workload call and op placed,
                   the workloads' batch knees, each call predicted on the datasheet devices

Nothing heavy is imported at the top (the workflow's steps import this only when they run).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# results/datasheet_predictions.parquet: each workload call (workload, dtype, batch) predicted
# on each datasheet device from the datasheet's bandwidth and matrix rate alone (no latency floor)
ON_DATASHEET_COLUMNS = ["device", "workload", "dtype", "batch", "flops", "bytes",
                        "bandwidth_Bps", "compute_flops", "time_s"]


def fit_ceilings(ds):
    from experiments.analysis import roofline
    return roofline.fit(ds)


def decode_knees(ds, ceilings):
    """(knees per decode curve, the prediction per decode row)."""
    from experiments.analysis import knees
    per_row, table = knees.predict(ds, ceilings, knees.reused(ds, "knees", ["dtype", "C"]))
    return table.reindex(columns=knees.KNEE_COLUMNS), per_row


def judge_claims(ds, ceilings, sheets, knees):
    from experiments.analysis import claims
    return claims.evaluate(ds, ceilings, sheets, knees)


def judged(ds, sheets):
    """roofline, decode and claims on a dataset in memory: (ceilings, knees, claims table)."""
    ceilings = fit_ceilings(ds)
    knees, _ = decode_knees(ds, ceilings)
    return ceilings, knees, judge_claims(ds, ceilings, sheets, knees)


# ---- your workloads ----------------------------------------------------------------------------

def place_calls(ds, ceilings):
    """(whole calls, ops) placed on the fitted roofline, as results/placements.parquet holds them."""
    from experiments.analysis import placements
    return placements.read_placements(placements.placement_table(ds, ceilings))


def workload_knees(ds, ceilings):
    """results/workload_knees.parquet: per (system, workload, dtype) with >= 3 batch sizes, the
    measured batch knee (bootstrapped interval) and the predicted one."""
    from experiments.analysis import knees, placements
    return placements.knees(ds, ceilings, knees.reused(ds, "workload_knees",
                                                       ["workload", "dtype"]))


def on_datasheets(calls, sheets):
    """Each placed call (workload, dtype, batch: its first system's FLOPs and bytes) predicted on
    each datasheet device with a bandwidth and a rate for its dtype: max(FLOPs / matrix rate,
    bytes / bandwidth), the roofline on the datasheet's numbers alone (no latency floor)."""
    import pandas as pd

    out = []
    for sheet in sheets:
        if not sheet.bandwidth_Bps:
            continue
        for r in calls.drop_duplicates(["workload", "dtype", "batch"]).to_dict("records"):
            peak = sheet.peak("matrix", r["dtype"])
            if peak:
                out.append({"device": sheet.name, "workload": r["workload"], "dtype": r["dtype"],
                            "batch": r["batch"], "flops": r["flops"], "bytes": r["bytes"],
                            "bandwidth_Bps": sheet.bandwidth_Bps, "compute_flops": peak,
                            "time_s": max(r["flops"] / peak, r["bytes"] / sheet.bandwidth_Bps)})
    return pd.DataFrame(out, columns=ON_DATASHEET_COLUMNS)


@dataclass(frozen=True)
class Placed:
    """What the report's "Your workloads" shows: the placements step's three files."""

    calls: object  # DataFrame, placements.PLACEMENT_COLUMNS
    ops: object  # DataFrame, placements.OP_COLUMNS
    knees: object  # DataFrame, placements.KNEE_COLUMNS
    on_datasheets: object  # DataFrame, ON_DATASHEET_COLUMNS
    # DataFrame, validation.SUMMARY_COLUMNS: the out-of-sample error (`rooflab validate`), or None
    heldout: object = None

    @classmethod
    def read(cls, placements, knees, on_datasheets, heldout=None) -> "Placed":
        """From results/placements.parquet, workload_knees.parquet, datasheet_predictions.parquet
        and, where `rooflab validate` wrote it, validation/summary.parquet (`heldout`)."""
        import pandas as pd

        from experiments.analysis.placements import read_placements
        calls, ops = read_placements(placements)
        held = pd.read_parquet(heldout) if heldout and Path(heldout).is_file() else None
        return cls(calls, ops, pd.read_parquet(knees), pd.read_parquet(on_datasheets), held)


def placed(ds, ceilings, sheets=()) -> Placed:
    """The placements step in memory (a report rendered by hand, the tests)."""
    calls, ops = place_calls(ds, ceilings)
    return Placed(calls, ops, workload_knees(ds, ceilings), on_datasheets(calls, sheets))
