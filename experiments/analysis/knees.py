"""Decode prediction: where the time per step of y = x @ W leaves its flat part.

With the work counted in each row, time(b) = max(L, bytes(b) / B, flops(b) / P), L the device's
latency floor (a graph-replayed launch, from the timing experiment), B the bandwidth of
the level that holds W (DRAM unless W fits a fitted cache level) and P the dtype's matrix ceiling.
bytes(b) = b0 + b1*b (W, then x and y per sequence) and flops(b) = f1*b (2 C^2 per sequence), so
the knee is b* = (b0 / B) / (f1 / P - b1 / B); with W dominant, b* ~ ridge * itemsize / 2.
The measured knee comes from a robust fit of log time = log max(t0, c*b): b = t0 / c.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import optimize

from experiments.analysis import roofline, sweeps
from experiments.analysis.dataset import Dataset, ok, param, reading
from experiments.analysis.units import qty
from experiments.core.parallel import fork_map

N_BOOT = 200
SEED = 0
KNEE_COLUMNS = ["system", "dtype", "C", "bandwidth_Bps", "bandwidth_ceiling", "compute_flops",
                "compute_ceiling", "weights_bytes", "measured", "measured_low", "measured_high",
                "measured_note", "predicted", "predicted_low", "predicted_high",
                "predicted_note"]


def gemv_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """The decode experiment's x @ W rows (op gemv_gemm, or any decode op with a batch)."""
    d = ok(rows[rows.experiment == "decode"])
    d = d[d.batch.notna() & (d.time_s > 0) & d.flops.notna() & d.bytes.notna()
          & (d.op != sweeps.NARROW)]  # narrow weights: the op model's, not a decode step's
    pick = d.op.str.contains("gemv|gemm", case=False)
    return d[pick] if pick.any() else d[~d.op.str.startswith("block")]


def bandwidth_for(ceilings: pd.DataFrame, system: str, nbytes: float):
    """(B/s, ceiling name) of the smallest fitted level that holds `nbytes` (no more than the
    largest working set on its plateau), else DRAM."""
    c = ceilings[(ceilings.system == system) & ceilings.value.notna()
                 & ceilings.ceiling.str.endswith("_bw") & (ceilings.ceiling != "intensity_bw")]
    caches = c[c.capacity_bytes.notna() & (c.ws_max >= nbytes)]
    if not caches.empty:
        best = caches.sort_values("capacity_bytes").iloc[0]
        return float(best.value), best.ceiling
    dram = c[c.ceiling == "dram_bw"]
    return (float(dram.value.iloc[0]), "dram_bw") if not dram.empty else (None, None)


def compute_for(ceilings: pd.DataFrame, system: str, dtype: str):
    for name in ("matrix_flops", "vector_flops"):
        v = roofline.value(ceilings, system, name, dtype)
        if v:
            return v, name
    return None, None


def _knee_fit(b, t, start=None):
    lb, lt = np.log(b), np.log(t)
    if start is None:
        start = [lt.min(), (lt - lb).min()]  # flat at the fastest time, slope of the largest b
    res = optimize.least_squares(lambda p: np.maximum(p[0], p[1] + lb) - lt, start,
                                 loss="soft_l1", f_scale=0.05)
    return res.x


def measured_knee(b, t):
    """(knee, ci_low, ci_high, note) of the flat-then-rising time curve."""
    b, t = np.asarray(b, float), np.asarray(t, float)
    if np.unique(b).size < 3:
        return math.nan, math.nan, math.nan, "fewer than 3 batch sizes"
    theta = _knee_fit(b, t)
    knee = math.exp(theta[0] - theta[1])
    if knee > b.max():
        return math.nan, math.nan, math.nan, f"flat up to the largest batch ({b.max():.0f})"
    if knee < b.min():
        return math.nan, math.nan, math.nan, "rising from the smallest batch"
    rng = np.random.default_rng(SEED)
    boot = []
    for _ in range(N_BOOT):
        i = rng.integers(0, len(b), len(b))
        if np.unique(b[i]).size >= 3:
            p = _knee_fit(b[i], t[i], theta)
            boot.append(math.exp(p[0] - p[1]))
    lo, hi = np.percentile(boot, [2.5, 97.5]) if boot else (math.nan, math.nan)
    return knee, float(lo), float(hi), None


def _measured_knee(curve):
    return measured_knee(*curve)


def _bounds(ceilings, system, name, value, dtype=None) -> tuple[float, float]:
    row = roofline.lookup(ceilings, system, name, dtype)
    if row is None or pd.isna(row.ci_low) or pd.isna(row.ci_high):
        return value, value
    return float(row.ci_low), float(row.ci_high)


# a predicted knee under 1 (zero up to rounding, or below it): no batch size has a knee
NO_KNEE = "compute-bound from the smallest batch: no knee"


def knee_of(b0, b1, f1, B, P) -> float:
    """b* where bytes(b) / B = flops(b) / P; inf when the FLOPs never catch up."""
    denom = f1 / P - b1 / B
    return (b0 / B) / denom if denom > 0 else math.inf


def _predicted(b0, b1, f1, B, P, B_ci, P_ci) -> dict:
    """The predicted knee with the range the ceilings' intervals allow (more bandwidth or less
    compute moves it down), or not fitted with the reason when it is degenerate."""
    knee = knee_of(b0, b1, f1, B, P)
    low, high = knee_of(b0, b1, f1, B_ci[1], P_ci[0]), knee_of(b0, b1, f1, B_ci[0], P_ci[1])
    if math.isinf(knee):
        return {"predicted": math.inf, "predicted_low": low, "predicted_high": high,
                "predicted_note": "never compute-bound: each sequence's bytes take longer than "
                                  "its FLOPs"}
    if knee < 1:
        return {"predicted": math.nan, "predicted_low": math.nan, "predicted_high": math.nan,
                "predicted_note": f"{NO_KNEE} (compute at {qty(P, 'FLOP/s')} takes longer "
                                  "than streaming the weights at every batch)"}
    return {"predicted": knee, "predicted_low": low, "predicted_high": high,
            "predicted_note": ""}


MEASURED = ("measured", "measured_low", "measured_high", "measured_note")


def reused(ds: Dataset, table: str, key: list[str]) -> dict:
    """{(system, *key): the measured knee's columns} from the `table` file ("knees",
    "workload_knees": layout.AGGREGATE keys) of each published set's folder, for the systems of the dataset that
    came from it. A measured knee is a bootstrap of its curve alone (N_BOOT resamples, SEED):
    a published set's own render made the same one from the same rows, and the published folder
    re-renders to its files at every commit (tests/system/steps/test_published_rerender.py), so a
    run reads them instead of bootstrapping them again (seconds of a small CPU's steps)."""
    from experiments.analysis.dataset import RUN, published_folder
    from experiments.core.layout import published_file

    out, read = {}, {}
    for system, source in ds.systems().set_index("system").source.items():
        folder = published_folder(ds, source) if source != RUN else None
        path = published_file(folder, table) if folder is not None else None
        if path is None or not path.is_file():
            continue
        if path not in read:
            read[path] = pd.read_parquet(path)
        own = read[path][read[path].system == system.removesuffix(f" [{source}]")]
        for r in own.to_dict("records"):
            out[(system, *(r[k] for k in key))] = tuple(r[m] for m in MEASURED)
    return out


def predict(ds: Dataset, ceilings: pd.DataFrame, known: dict | None = None):
    """(per-row prediction, per-(system, dtype, C) knees) for every decode x @ W curve. `known`:
    measured knees already computed ({(system, dtype, C): MEASURED's values}, `reused`)."""
    known = dict(known or {})
    rows, knees = [], []
    curves = [((system, dtype, int(c)), g.sort_values("batch")) for (system, dtype, c), g in
              gemv_rows(ds.rows).groupby(["system", "dtype", "n"])]
    todo = [(key, g) for key, g in curves if key not in known]
    # each curve's bootstrap (N_BOOT robust fits, most of a second) on its own CPU
    known |= dict(zip([key for key, _ in todo], fork_map(_measured_knee, [
        (g.batch.to_numpy(float), g.time_s.to_numpy(float)) for _, g in todo])))
    for (system, dtype, c), g in curves:
        with reading(f"the {dtype} decode curve at C = {c} ({len(g)} rows) of {system}"):
            b = g.batch.to_numpy(float)
            # bytes(b) = b0 + b1 b: W once, then x and y per sequence
            b1, b0 = (np.polyfit(b, g.bytes.to_numpy(float), 1) if np.unique(b).size > 1
                      else (0.0, float(g.bytes.iloc[0])))
            f1 = float(np.mean(g.flops / g.batch))
            # the experiment rotates copies of W so that each step streams it: they must all fit
            copies = param(g, "weight_copies").fillna(1).max()
            B, bw_name = bandwidth_for(ceilings, system, b0 * copies)
            P, p_name = compute_for(ceilings, system, dtype)
            knee = {"system": system, "dtype": dtype, "C": int(c), "bandwidth_Bps": B,
                    "bandwidth_ceiling": bw_name, "compute_flops": P, "compute_ceiling": p_name,
                    "weights_bytes": b0}
            k, lo, hi, note = known[(system, dtype, c)]
            knee |= {"measured": k, "measured_low": lo, "measured_high": hi,
                     "measured_note": note or ""}
            if B and P:
                knee |= _predicted(b0, b1, f1, B, P, _bounds(ceilings, system, bw_name, B),
                                   _bounds(ceilings, system, p_name, P, dtype))
                # the floor of a call: graph-replayed steps cost at least one replayed launch
                L = roofline.value(ceilings, system, "latency_graph") or 0.0
                mem, cmp_ = (g.bytes / B).to_numpy(float), (g.flops / P).to_numpy(float)
                t_pred = np.maximum(L, np.maximum(mem, cmp_))
                rows.append(pd.DataFrame({
                    "system": system, "dtype": dtype, "C": int(c), "batch": b,
                    "time_s": g.time_s.to_numpy(float), "time_pred": t_pred,
                    "tokens_s": b / g.time_s.to_numpy(float), "tokens_pred": b / t_pred,
                    "bound": np.where(L >= np.maximum(mem, cmp_), "latency",
                                      np.where(mem >= cmp_, "memory", "compute"))}))
            else:
                knee |= {"predicted": math.nan, "predicted_low": math.nan,
                         "predicted_high": math.nan,
                         "predicted_note": "no " + ("bandwidth" if not B else f"{dtype} compute")
                         + " ceiling fitted"}
            knees.append(knee)
    cols = ["system", "dtype", "C", "batch", "time_s", "time_pred", "tokens_s", "tokens_pred",
            "bound"]
    per_row = pd.concat(rows, ignore_index=True) if rows else pd.DataFrame(columns=cols)
    return per_row, pd.DataFrame(knees, columns=KNEE_COLUMNS)
