"""The article's claims C1-C20, each checked by one small function over the rows.

A check gets a `System` (one host/device's rows, its fitted ceilings, its datasheet) and returns
(verdict, measurement) or raises NotMeasurable(reason). Predictions come from the article's
arithmetic or the datasheets. `evaluate` runs every claim for every system; a claim whose
experiment has no rows is "not measurable here: no <experiment> rows".
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pandas as pd

from . import datasheets, roofline
from .catalog import CLAIM_IDS
from .dataset import Dataset, ok, param

HOLDS, FAILS, NOT_MEASURABLE = "holds", "does not hold", "not measurable here"
ANALYSIS_ERROR = "the check could not read these rows"


class NotMeasurable(Exception):
    """The claim cannot be checked on this system; `measurement` may still show numbers."""

    def __init__(self, reason: str, measurement: str = ""):
        super().__init__(reason)
        self.measurement = measurement


def si(value, unit="", digits=3) -> str:
    """4.31e12, 'B/s' -> '4.31 TB/s'."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    small = ((1e-3, "m"), (1e-6, "µ"), (1e-9, "n")) if unit == "s" else ()  # not "mFLOP/B"
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"),
                           (1, ""), *small):
        if abs(value) >= factor:
            return f"{value / factor:.{digits}g} {prefix}{unit}".strip()
    return f"{value:.{digits}g} {unit}".strip()


@dataclass
class System:
    name: str
    kind: str  # cpu | cuda
    device_name: str
    rows: pd.DataFrame  # every row of this system (all statuses)
    ceilings: pd.DataFrame
    facts: dict
    sheet: datasheets.Datasheet | None
    sheets: list = field(default_factory=list)
    knees: pd.DataFrame = field(default_factory=pd.DataFrame)

    def exp(self, name: str, op: str | None = None) -> pd.DataFrame:
        """ok rows of an experiment (and op); NotMeasurable says why there are none."""
        rows = self.rows[self.rows.experiment == name]
        if op is not None:
            rows = rows[rows.op.str.contains(op)]
        what = f"{name} rows" + (f" with op {op}" if op else "")
        if rows.empty:
            raise NotMeasurable(f"no {what}")
        good = ok(rows)
        if good.empty:
            why = rows.status.value_counts().to_dict()
            msg = next((m for m in rows.message.dropna() if m), "")
            raise NotMeasurable(f"no ok {what} (statuses {why})" + (f": {msg}" if msg else ""))
        return good

    def ceiling(self, name: str, dtype=None) -> float | None:
        return roofline.value(self.ceilings, self.name, name, dtype)

    def need_ceiling(self, name: str, dtype=None) -> float:
        v = self.ceiling(name, dtype)
        if v is None:
            c = self.ceilings[(self.ceilings.system == self.name)
                              & (self.ceilings.ceiling == name)]
            note = c.note.dropna().iloc[0] if not c.empty and c.note.notna().any() else ""
            raise NotMeasurable(f"no {name}{' ' + dtype if dtype else ''} fitted"
                                + (f" ({note})" if note else ""))
        return v

    def need_gpu(self, what: str):
        if self.kind != "cuda":
            raise NotMeasurable(f"{what}; this system is a CPU ({self.device_name})")

    @property
    def article(self) -> datasheets.Datasheet | None:
        return datasheets.by_name(self.sheets, datasheets.ARTICLE_DEVICE)


@dataclass
class Claim:
    id: str
    text: str
    prediction: str
    figure: str | None
    check: Callable[[System], tuple[str, str]]


CLAIMS: dict[str, Claim] = {}


def claim(cid: str, text: str, prediction: str, figure: str | None):
    def register(fn):
        CLAIMS[cid] = Claim(cid, text, prediction, figure, fn)
        return fn
    return register


def _verdict(condition: bool) -> str:
    return HOLDS if condition else FAILS


# --- C1, C5, C6, C7: the host drives the device asynchronously -------------------------------

def _timing(s: System) -> pd.DataFrame:
    """Kernel timing rows pivoted: one row per kernel size, one column per timing method."""
    s.need_gpu("host and device clocks differ only on a GPU, which runs kernels asynchronously")
    rows = s.exp("timing", "kernel")
    t = rows.pivot_table(index="n", columns="variant", values="time_s", aggfunc="median")
    cv = rows.pivot_table(index="n", columns="variant", values="cv", aggfunc="median")
    missing = {"host_nosync", "host_sync", "cuda_event"} - set(t.columns)
    if missing:
        raise NotMeasurable(f"timing rows lack variants {sorted(missing)}")
    t = t.dropna(subset=["host_nosync", "host_sync", "cuda_event"]).sort_values("cuda_event")
    return t.join(cv.add_suffix("_cv"))


@claim("C1", "Python runs on the CPU; PyTorch sees a CUDA tensor and calls a compiled kernel "
       "that the CPU submits to the GPU.",
       "The host returns from a kernel call before the kernel ends: for a long kernel the naive "
       "host clock reads far less than the kernel's event time.", "timing")
def c1(s):
    t = _timing(s).iloc[-1]
    ratio = t.host_nosync / t.cuda_event
    launch = s.rows[(s.rows.experiment == "timing") & (s.rows.op == "launch_overhead")
                    & (s.rows.status == "ok")]
    extra = "; ".join(f"{v} launch {si(x, 's')}" for v, x in zip(launch.variant, launch.time_s))
    return _verdict(ratio < 0.9), (
        f"longest kernel: host clock without sync {si(t.host_nosync, 's')} vs CUDA events "
        f"{si(t.cuda_event, 's')} (ratio {ratio:.2f})" + (f"; {extra}" if extra else ""))


@claim("C5", "Kernel launch is asynchronous: the CPU enqueues work on a stream and goes on; "
       "torch.cuda.synchronize() waits.",
       "naive host time / event time << 1 for kernels longer than a launch, and about 1 with a "
       "synchronize before reading the clock.", "timing")
def c5(s):
    t = _timing(s)
    naive = (t.host_nosync / t.cuda_event).iloc[-1]
    synced = (t.host_sync / t.cuda_event).iloc[-1]
    return _verdict(naive < 0.5 and 0.8 <= synced <= 1.5), (
        f"longest kernel ({si(t.cuda_event.iloc[-1], 's')}): no sync / events = {naive:.3f}, "
        f"with sync / events = {synced:.2f}")


@claim("C6", "CUDA events measure GPU work better than the CPU clock.",
       "for short kernels the synced host clock adds launch and sync overhead (bias > 10 %) "
       "or spreads more (CV) than events.", "timing")
def c6(s):
    t = _timing(s)
    short = t.iloc[0]
    bias = short.host_sync / short.cuda_event - 1
    cv_host, cv_event = t["host_sync_cv"].median(), t["cuda_event_cv"].median()
    return _verdict(bias > 0.1 or cv_host > cv_event), (
        f"shortest kernel ({si(short.cuda_event, 's')}): synced host clock {bias:+.0%} vs "
        f"events; median CV host {cv_host:.3f}, events {cv_event:.3f}")


@claim("C7", "A stream keeps the order of its tasks.",
       "two dependent kernels on one stream give the right result without a sync between them.",
       None)
def c7(s):
    s.need_gpu("a CPU has no streams: its ops run one after another as called")
    rows = s.rows[(s.rows.experiment == "timing") & s.rows.op.str.contains("stream")]
    if rows.empty:
        raise NotMeasurable("no timing rows with op stream_order")
    if (rows.status == "not_applicable").all():
        raise NotMeasurable(rows.message.dropna().iloc[0] if rows.message.notna().any()
                            else "stream_order not applicable")
    passed = bool((rows.status == "ok").all() and rows.check_passed.fillna(False).all())
    statuses = rows.status.value_counts().to_dict()
    return _verdict(passed), f"{len(rows)} check(s): statuses {statuses}"


# --- C2, C3, C4: where tensors live ---------------------------------------------------------

def _copies(s: System) -> pd.DataFrame:
    s.need_gpu("host-to-device copies need a GPU")
    rows = s.exp("transfer")
    label = (rows.op + " " + rows.variant.fillna("")).str.strip()
    return rows[label.str.contains("h2d|d2h") & (rows.byte_per_s > 0)].assign(label=label)


@claim("C2", "Tensors are created on the CPU by default; .to('cuda') copies them over PCIe and "
       "is expensive.",
       "host-to-device GB/s is a small fraction of device-memory GB/s (datasheet: host link / "
       "memory bandwidth).", "transfer")
def c2(s):
    rows = _copies(s)
    h2d = rows[rows.label.str.contains("h2d")]
    if h2d.empty:
        raise NotMeasurable("no ok h2d transfer rows")
    best = h2d.loc[h2d.byte_per_s.idxmax()]
    device_bw = s.ceiling("dram_bw")
    if device_bw is None:
        d2d = s.rows[(s.rows.op == "d2d_copy") & (s.rows.status == "ok")]
        device_bw = d2d.byte_per_s.max() if not d2d.empty else None
    if not device_bw:
        raise NotMeasurable("no device bandwidth measured (no dram_bw, no d2d_copy)")
    ratio = device_bw / best.byte_per_s
    sheet = ""
    if s.sheet and s.sheet.host_link_Bps and s.sheet.bandwidth_Bps:
        sheet = f"; datasheet {s.sheet.bandwidth_Bps / s.sheet.host_link_Bps:.0f}x"
    return _verdict(ratio >= 5), (
        f"best h2d {si(best.byte_per_s, 'B/s')} ({best.label}, {si(best.bytes, 'B')}) vs device "
        f"memory {si(device_bw, 'B/s')}: {ratio:.0f}x slower{sheet}")


@claim("C3", "Creating a tensor with device='cuda' allocates it in device memory directly and "
       "saves one transfer.",
       "create_then_move takes longer than create_on_device (ratio > 1.1 at the largest size).",
       "transfer")
def c3(s):
    s.need_gpu("creating on a device vs moving to it needs a GPU")
    rows = s.exp("transfer", "create")
    t = rows.pivot_table(index="n", columns="op", values="time_s", aggfunc="median").dropna()
    if not {"create_on_device", "create_then_move"} <= set(t.columns) or t.empty:
        raise NotMeasurable("need both create_on_device and create_then_move rows")
    last = t.iloc[-1]
    ratio = last.create_then_move / last.create_on_device
    return _verdict(ratio > 1.1), (
        f"n={t.index[-1]:.3g}: create_then_move {si(last.create_then_move, 's')} vs "
        f"create_on_device {si(last.create_on_device, 's')} (ratio {ratio:.1f})")


@claim("C4", "An operation on tensors on different devices raises an error.",
       "mixing a CPU and a CUDA tensor raises (RuntimeError).", None)
def c4(s):
    s.need_gpu("mixing devices needs a second device")
    rows = s.rows[(s.rows.experiment == "transfer") & s.rows.op.str.contains("cross")]
    if rows.empty:
        raise NotMeasurable("no transfer rows with op cross_device")
    if not (rows.status.isin(["ok", "wrong_result"])).any():
        raise NotMeasurable(f"cross_device statuses {rows.status.value_counts().to_dict()}")
    kinds = param(rows, "error_type").dropna().unique()
    passed = bool(rows.check_passed.fillna(False).all())
    return _verdict(passed), (f"{len(rows)} check(s), errors raised: "
                              f"{', '.join(map(str, kinds)) or 'none'}")


# --- C8, C9: the three numbers; OOM ----------------------------------------------------------

@claim("C8", "Three numbers describe a GPU: memory capacity, memory bandwidth, compute rate "
       "(RTX 3090: 24 GB, 936 GB/s, 35.6 TFLOP/s FP32).",
       "the datasheet's three numbers (matched by device name) are what this device attains: "
       "measured bandwidth and FP32 compute within 50-105 % of the datasheet.", "roofline")
def c8(s):
    capacity = s.facts.get("memory_bytes")
    bw = s.need_ceiling("dram_bw")
    fp32 = s.ceiling("matrix_flops", "float32") or s.ceiling("vector_flops", "float32")
    text = (f"capacity {si(capacity, 'B')} (device facts), bandwidth {si(bw, 'B/s')}, "
            f"FP32 compute {si(fp32, 'FLOP/s')}")
    if fp32 is None:
        raise NotMeasurable("no float32 compute ceiling fitted (no matmul/intensity float32 rows)",
                            text)
    if s.sheet is None:
        return HOLDS, text + f" (no datasheet entry matches {s.device_name!r}: no reference)"
    eff_bw = bw / s.sheet.bandwidth_Bps if s.sheet.bandwidth_Bps else None
    peak = s.sheet.peak("vector", "float32")
    eff_c = fp32 / peak if peak else None
    effs = [e for e in (eff_bw, eff_c) if e is not None]
    text += (f"; vs {s.sheet.name}: bandwidth {eff_bw:.0%}" if eff_bw else "") + (
        f", FP32 {eff_c:.0%}" if eff_c else "")
    return _verdict(all(0.5 <= e <= 1.05 for e in effs)), text


@claim("C9", "Out of memory raises an OOM error.",
       "a point past capacity becomes a row with status oom; the sweep goes on.", None)
def c9(s):
    oom = s.rows[s.rows.status == "oom"]
    if oom.empty:
        big = s.rows.working_set_bytes.max()
        raise NotMeasurable(f"no point in this sweep exceeded memory (largest working set "
                            f"{si(big, 'B')} of {si(s.facts.get('memory_bytes'), 'B')})")
    later = ok(s.rows[s.rows.experiment.isin(oom.experiment)])
    return HOLDS, (f"{len(oom)} oom row(s) in {', '.join(sorted(oom.experiment.unique()))}; "
                   f"{len(later)} ok rows in the same experiments (sweep continued)")


# --- C10, C11: arithmetic intensity ----------------------------------------------------------

def _add_one_dram(s: System) -> tuple[pd.DataFrame, float]:
    bw = s.need_ceiling("dram_bw")
    rows = s.exp("bandwidth", "add_one")
    c = roofline.lookup(s.ceilings, s.name, "dram_bw")
    rows = rows[(rows.dtype == "float32") & (rows.working_set_bytes >= c.ws_min)]
    if rows.empty:
        raise NotMeasurable(f"no float32 add_one rows with a working set >= {si(c.ws_min, 'B')}"
                            " (past the caches)")
    return rows, bw


@claim("C10", "y = x + 1 in FP32 moves 8 bytes per FLOP: intensity 0.125 FLOP/byte, so it is "
       "memory-bound.",
       "FLOP/s of x + 1 = DRAM bandwidth x 0.125 (within 15 %), far below peak compute.",
       "bandwidth")
def c10(s):
    rows, bw = _add_one_dram(s)
    intensity = rows.intensity.median()
    flops = rows.flop_per_s.median()
    ratio = flops / (bw * intensity)
    peak = s.ceilings[(s.ceilings.system == s.name) & s.ceilings.ceiling.str.endswith("flops")]
    peak = peak.value.max() if peak.value.notna().any() else None
    frac = flops / peak if peak else None
    return _verdict(abs(ratio - 1) <= 0.15 and (frac is None or frac < 0.1)), (
        f"counted intensity {intensity:.3f} FLOP/B; {si(flops, 'FLOP/s')} measured vs "
        f"{si(bw * intensity, 'FLOP/s')} = {si(bw, 'B/s')} x {intensity:.3f} (ratio {ratio:.2f})"
        + (f"; {frac:.2%} of the top compute ceiling" if frac is not None else ""))


@claim("C11", "A 4096x4096 matrix product costs 2 x 4096^3 ~ 1.374e11 FLOPs and is compute-bound "
       "(intensity in the hundreds).",
       "counted FLOPs 2n^3 (1.374e11 at n=4096); intensity n/6 in FP32 (683 at 4096), above the "
       "ridge; measured FLOP/s near the compute ceiling.", "matmul")
def c11(s):
    rows = s.exp("matmul")
    dtype = "float32" if (rows.dtype == "float32").any() else rows.dtype.iloc[0]
    rows = rows[rows.dtype == dtype]
    row = rows[rows.n == 4096].iloc[0] if (rows.n == 4096).any() else rows.loc[rows.n.idxmax()]
    counted_ok = math.isclose(row.flops, 2 * row.n ** 3, rel_tol=1e-9)
    ridge = s.need_ceiling("ridge_matrix", dtype)
    peak = s.need_ceiling("matrix_flops", dtype)
    share = row.flop_per_s / peak
    return _verdict(counted_ok and row.intensity > ridge and share >= 0.5), (
        f"{dtype} n={int(row.n)}: {row.flops:.4g} FLOPs counted, intensity "
        f"{row.intensity:.0f} FLOP/B vs ridge {ridge:.1f}; {si(row.flop_per_s, 'FLOP/s')} = {share:.0%} of the "
        f"{dtype} GEMM ceiling")


# --- C12, C13: the roofline -------------------------------------------------------------------

@claim("C12", "Roofline: attainable performance <= min(peak compute, bandwidth x intensity).",
       "the intensity sweep's points lie under the fitted roofline (>= 90 % within 10 %) and "
       "touch both roofs (a point within 20 % of each).", "roofline")
def c12(s):
    rows = s.exp("intensity")
    parts, good, judged = [], True, 0
    for dtype, g in rows[(rows.flop_per_s > 0) & (rows.intensity > 0)].groupby("dtype"):
        g, _ = roofline.fastest_variant(g)  # the kernel the roof was fitted to
        P, B = s.ceiling("vector_flops", dtype), s.ceiling("intensity_bw", dtype)
        if P is None or B is None:
            parts.append(f"{dtype}: roof not identified (the sweep misses one side), not judged")
            continue
        judged += 1
        roof = np.minimum(P, B * g.intensity)
        ratio = g.flop_per_s / roof
        under = (ratio <= 1.1).mean()
        ridge = P / B
        touch_mem = (ratio[g.intensity < ridge] >= 0.8).any()
        touch_cmp = (ratio[g.intensity > ridge] >= 0.8).any()
        good &= bool(under >= 0.9 and touch_mem and touch_cmp)
        lo_p, hi_p = roofline.lookup(s.ceilings, s.name, "vector_flops", dtype)[["ci_low",
                                                                                "ci_high"]]
        parts.append(f"{dtype}: P = {si(P, 'FLOP/s')} (95 % CI {si(lo_p, 'FLOP/s')} to "
                     f"{si(hi_p, 'FLOP/s')}), "
                     f"B = {si(B, 'B/s')}; {under:.0%} of {len(g)} points under the roof; "
                     f"touches memory roof {'yes' if touch_mem else 'no'}, compute roof "
                     f"{'yes' if touch_cmp else 'no'}")
    if not judged:
        raise NotMeasurable("no dtype's roof identified from the intensity sweep",
                            "; ".join(parts))
    return _verdict(good), "; ".join(parts)


@claim("C13", "On an RTX 3090 an elementwise add attains at most 936 GB/s x 0.125 ~ 117 GFLOP/s.",
       "RTX 3090 datasheet: 936 GB/s x 0.125 FLOP/B = 117 GFLOP/s; here: measured x + 1 "
       "FLOP/s <= this device's DRAM bandwidth x 0.125 (+15 %).", "roofline")
def c13(s):
    ref = s.article
    article = ref.bandwidth_Bps * 0.125 if ref and ref.bandwidth_Bps else None
    text = f"RTX 3090 datasheet: {si(article, 'FLOP/s')}" if article else "no RTX 3090 datasheet"
    try:
        rows, bw = _add_one_dram(s)
    except NotMeasurable as exc:
        raise NotMeasurable(f"{exc}; the datasheet arithmetic alone gives "
                            f"{si(article, 'FLOP/s')}", text) from None
    intensity = rows.intensity.median()
    flops = rows.flop_per_s.median()
    bound = bw * intensity
    reproduced = article is not None and abs(article - 117e9) / 117e9 < 0.01
    return _verdict(reproduced and flops <= 1.15 * bound), (
        f"{text}; this device: {si(bw, 'B/s')} x {intensity:.3f} = {si(bound, 'FLOP/s')}, "
        f"x + 1 attains {si(flops, 'FLOP/s')}")


# --- C14-C18: decode --------------------------------------------------------------------------

def _gemv(s: System) -> pd.DataFrame:
    from .decode import gemv_rows
    s.exp("decode")
    rows = gemv_rows(s.rows)
    if rows.empty:
        raise NotMeasurable("no ok decode x @ W (gemv_gemm) rows with a batch")
    return rows


@claim("C14", "In decode, x @ W with x of shape [B, 1, C] is a GEMV; batching b sequences makes "
       "it a GEMM.",
       "FLOPs 2bC^2; b sequences in one GEMM (b = 8, or the nearest batch measured) cost less "
       "than half of b separate GEMVs.", "decode")
def c14(s):
    rows = _gemv(s)
    counted = np.allclose(rows.flops, 2 * rows.batch * rows.n.astype(float) ** 2, rtol=1e-6)
    parts, good = [], counted
    for (dtype, c), g in rows.groupby(["dtype", "n"]):
        t = g.groupby("batch").time_s.median()
        more = t.index[t.index > 1]
        if 1 not in t.index or more.empty:
            continue
        b = max(more[more <= 8]) if (more <= 8).any() else min(more)  # 8, or the nearest
        r = t[b] / (b * t[1])
        good &= r < 0.5
        parts.append(f"{dtype} C={int(c)}: t({b:.0f}) / ({b:.0f} t(1)) = {r:.2f}")
    if not parts:
        raise NotMeasurable("no decode curve with batch 1 and a larger batch")
    return _verdict(good), ("FLOPs = 2bC^2 in every row; " if counted else
                            "FLOPs differ from 2bC^2; ") + "; ".join(parts)


@claim("C15", "With W the dominant data, FP32 decode intensity is about batch / 2 FLOP/byte "
       "(2bC^2 FLOPs over 4C^2 bytes).",
       "counted intensity = 2b / itemsize (FP32 b/2, BF16 b) within 15 % while b <= C/16.",
       "decode")
def c15(s):
    rows = _gemv(s)
    item = rows.dtype.map({"float32": 4, "tf32": 4, "float16": 2, "bfloat16": 2,
                           "float8_e4m3": 1, "float64": 8})
    small = rows[rows.batch <= rows.n / 16].assign(pred=2 * rows.batch / item)
    if small.empty:
        raise NotMeasurable("no decode rows with batch <= C/16 (W not dominant)")
    err = (small.intensity / small.pred - 1).abs()
    worst = small.loc[err.idxmax()]
    shown = small[small.batch.isin([1, 8])].drop_duplicates(["dtype", "batch"])
    parts = [f"{r['dtype']} b={int(r.batch)}: {r.intensity:.2f} (predicted {r.pred:.2f})"
             for _, r in shown.iterrows()]
    return _verdict(err.max() <= 0.15), "; ".join(parts) + (
        f"; worst {err.max():.0%} ({worst['dtype']} b={int(worst.batch)} C={int(worst.n)})")


@claim("C16", "Larger batch reuses the same weights, so utilisation rises with batch: time stays "
       "nearly flat while memory-bound.",
       "time per step at batches below the predicted knee stays within 1.5x of batch 1; "
       "tokens/s grows about linearly there.", "decode")
def c16(s):
    _gemv(s)
    if s.knees.empty:
        raise NotMeasurable("no decode prediction (no ceilings for the decode dtype)")
    from .decode import gemv_rows
    rows = gemv_rows(s.rows)
    parts, good, skipped = [], True, []
    for _, k in s.knees.iterrows():
        g = rows[(rows.dtype == k["dtype"]) & (rows.n == k.C)].groupby("batch").time_s.median()
        limit = k.predicted / 2 if math.isfinite(k.predicted) else g.index.max()
        flat = g[g.index <= limit]
        if 1 not in g.index or len(flat) < 2:
            skipped.append(f"{k['dtype']} C={k.C} (predicted knee b* = {k.predicted:.2g})")
            continue
        rise = flat.iloc[-1] / g[1]
        gain = (flat.index[-1] / flat.iloc[-1]) / (1 / g[1])
        good &= rise <= 1.5
        parts.append(f"{k['dtype']} C={k.C}: t(b={flat.index[-1]:.0f}) / t(1) = {rise:.2f}, "
                     f"tokens/s x{gain:.1f}")
    if not parts:
        raise NotMeasurable("no memory-bound batches to test: every curve's predicted knee "
                            "leaves fewer than two batches below b*/2: " + ", ".join(skipped))
    return _verdict(good), "; ".join(parts)


@claim("C17", "The RTX 3090 ridge point is 35.6 TFLOP/s / 936 GB/s ~ 38 FLOP/byte; below it "
       "memory-bound, above it compute-bound.",
       "datasheet ridge 35.6e12 / 936e9 = 38 FLOP/B; at the largest C, the decode knee measured "
       "within 2x of the one predicted from this device's ridge.", "decode")
def c17(s):
    ref = s.article
    ridge = ref.ridge("vector", "float32") if ref else None
    parts = [f"RTX 3090 datasheet ridge {ridge:.1f} FLOP/B" if ridge else "no RTX 3090 datasheet"]
    mine = s.ceilings[(s.ceilings.system == s.name) & (s.ceilings.ceiling == "ridge_matrix")
                      & s.ceilings.value.notna()]
    parts += [f"measured ridge {r['dtype']} {r.value:.1f}" for _, r in mine.iterrows()]
    reproduced = ridge is not None and round(ridge) == 38
    if s.knees.empty or not s.knees.predicted.notna().any():
        raise NotMeasurable("no decode knee to compare (no decode rows or no ceilings)",
                            "; ".join(parts))
    good = reproduced
    # Judge the largest C of each dtype: there W dominates and one step lasts far longer than a
    # launch; at small C the step is latency-bound (a few us) and its knee says little of the ridge.
    judged = s.knees.C == s.knees.groupby("dtype").C.transform("max")
    for (_, k), judge in zip(s.knees.iterrows(), judged):
        meas = (f"{k.measured:.2g} (95 % CI {k.measured_low:.2g} to {k.measured_high:.2g})"
                if math.isfinite(k.measured) else k.measured_note)
        parts.append(f"{k['dtype']} C={k.C}: knee predicted b* = {k.predicted:.2g}, "
                     f"measured {meas}" + ("" if judge else " (not judged: W small)"))
        if judge and math.isfinite(k.measured) and math.isfinite(k.predicted):
            good &= 0.5 <= k.measured / k.predicted <= 2
    return _verdict(good), "; ".join(parts)


@claim("C18", "Prefill is like a decode with a large batch and is compute-bound; decode at batch "
       "1 is memory-bound.",
       "the block's prefill intensity is above the dtype's ridge, its decode intensity below; "
       "prefill attains more FLOP/s.", "roofline")
def c18(s):
    rows = s.exp("decode", "block")
    parts, good, judged = [], True, 0
    for dtype, g in rows.groupby("dtype"):
        pre = g[g.op.str.contains("prefill")]
        dec = g[g.op.str.contains("decode")]
        if pre.empty or dec.empty:
            continue
        ridge = s.ceiling("ridge_matrix", dtype) or s.ceiling("ridge_vector", dtype)
        if ridge is None:
            parts.append(f"{dtype}: no ridge fitted (no {dtype} matmul or intensity rows), "
                         "not judged")
            continue
        judged += 1
        ip, idc = pre.intensity.median(), dec.intensity.median()
        fp, fd = pre.flop_per_s.median(), dec.flop_per_s.median()
        good &= bool(ip > ridge > idc and fp > fd)
        bw = si(dec.byte_per_s.median(), "B/s")
        parts.append(f"{dtype}: prefill {ip:.0f} FLOP/B at {si(fp, 'FLOP/s')}, decode "
                     f"{idc:.1f} FLOP/B at {si(fd, 'FLOP/s')} ({bw}); ridge {ridge:.0f}")
    if not judged:
        raise NotMeasurable("; ".join(parts) or "no dtype with both block_prefill and "
                            "block_decode rows")
    return _verdict(good), "; ".join(parts)


# --- C19, C20: precision and launch geometry -------------------------------------------------

@claim("C19", "(Section announced, no text) FP32, FP16, BF16 and Tensor Cores.",
       "Tensor Core dtypes (TF32, FP16, BF16, FP8) run GEMM at least 2x faster than FP32, at a "
       "larger error against float64.", "matmul")
def c19(s):
    rows = s.exp("matmul")
    peaks = {d: s.ceiling("matrix_flops", d) for d in rows.dtype.unique()}
    peaks = {d: v for d, v in peaks.items() if v}
    errs = rows.groupby("dtype").rel_error.median()
    text = "; ".join(f"{d} {si(v, 'FLOP/s')} (error {errs.get(d, math.nan):.1e})"
                     for d, v in sorted(peaks.items(), key=lambda kv: -kv[1]))
    if s.kind != "cuda":
        raise NotMeasurable("a CPU has no Tensor Cores (its numbers are shown for reference)",
                            text)
    if "float32" not in peaks:
        raise NotMeasurable("no float32 GEMM ceiling to compare with", text)
    low = {d: v for d, v in peaks.items() if d in ("tf32", "float16", "bfloat16", "float8_e4m3")}
    if not low:
        raise NotMeasurable("no Tensor Core dtype measured", text)
    faster = max(low.values()) / peaks["float32"]
    less_exact = all(errs.get(d, 0) > errs.get("float32", 0) for d in low)
    return _verdict(faster >= 2 and less_exact), f"{text}; best / FP32 = {faster:.1f}x"


@claim("C20", "(Section announced, no text) kernel, thread, warp, thread block and SM.",
       "time grows in steps: it follows the number of whole waves of blocks over the SMs, "
       "ceil(blocks / SMs), better than the block count itself.", "launch")
def c20(s):
    s.need_gpu("waves of thread blocks over SMs exist only on a GPU")
    rows = s.exp("launch")
    waves = launch_waves(rows)
    if waves.isna().all():
        raise NotMeasurable("launch rows give neither params.waves nor an SM count")
    rows = rows.assign(waves=waves).dropna(subset=["waves"])
    r2_step, r2_lin, groups = [], [], 0
    for key, g in rows.groupby(_launch_groups(rows)):
        if g.waves.nunique() < 4:
            continue
        groups += 1
        y = g.time_s.to_numpy(float)
        for x, out in ((np.ceil(g.waves - 1e-9), r2_step), (g.waves, r2_lin)):
            fit = np.polyfit(x.to_numpy(float), y, 1)
            out.append(1 - np.var(y - np.polyval(fit, x)) / np.var(y))
    if not groups:
        raise NotMeasurable("no launch curve with 4 or more grid sizes")
    step, lin = float(np.mean(r2_step)), float(np.mean(r2_lin))
    return _verdict(step > lin), (f"{groups} curve(s): R^2 of time vs whole waves {step:.3f}, "
                                  f"vs blocks {lin:.3f}")


def launch_waves(rows: pd.DataFrame) -> pd.Series:
    """Waves of each launch row: params.waves, else blocks (n) / SM count."""
    waves = param(rows, "waves")
    for key in ("sm_count", "sms", "num_sms"):
        sms = param(rows, key)
        waves = waves.fillna(rows.n / sms)
    return pd.to_numeric(waves, errors="coerce")


def _launch_groups(rows: pd.DataFrame) -> list:
    keys = ["dtype"] + [k for k in ("variant", "op") if rows[k].nunique() > 1]
    warps = param(rows, "num_warps")
    return [rows[k] for k in keys] + ([warps.fillna(-1)] if warps.notna().any() else [])


# --- evaluation --------------------------------------------------------------------------------

assert set(CLAIMS) == set(CLAIM_IDS), "every claim C1-C20 has exactly one check"


def systems(ds: Dataset, ceilings: pd.DataFrame, sheets: list, knees: pd.DataFrame | None = None):
    out = []
    for _, row in ds.systems().iterrows():
        k = knees[knees.system == row.system] if knees is not None and not knees.empty else \
            pd.DataFrame()
        out.append(System(row.system, row.device_kind, row.device_name or row.device,
                          ds.rows[ds.rows.system == row.system], ceilings, ds.facts(row.system),
                          datasheets.find(sheets, row.device_name), sheets, k))
    return out


def evaluate(ds: Dataset, ceilings: pd.DataFrame, sheets: list,
             knees: pd.DataFrame | None = None) -> pd.DataFrame:
    """The claims table: one row per (claim, system)."""
    out = []
    for s in systems(ds, ceilings, sheets, knees):
        for c in (CLAIMS[cid] for cid in CLAIM_IDS):
            try:
                verdict, measurement = c.check(s)
                reason = ""
            except NotMeasurable as exc:
                verdict, measurement, reason = NOT_MEASURABLE, exc.measurement, str(exc)
            except Exception as exc:  # rows in a shape this check does not know: say so, go on
                verdict, measurement = NOT_MEASURABLE, ""
                reason = f"{ANALYSIS_ERROR}: {type(exc).__name__}: {exc}"
                print(f"rooflab: {c.id} on {s.name}: {reason}", file=sys.stderr)
            out.append({"claim": c.id, "text": c.text, "prediction": c.prediction,
                        "system": s.name, "verdict": verdict, "measurement": measurement,
                        "reason": reason, "figure": c.figure})
    return pd.DataFrame(out)
