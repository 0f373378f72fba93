"""Capacity, bandwidth, compute: the three numbers of a GPU, and what happens past capacity."""

from __future__ import annotations

from experiments.analysis import roofline
from experiments.analysis.claims.base import (NotMeasurable, Result, article_sheet, claim, section, worked_example)
from experiments.analysis.units import qty

SECTION = section("numbers", "Capacity, bandwidth, compute: the three numbers", "bandwidth")
EFFICIENCY = (0.5, 1.05)  # C8: measured / datasheet; above 1.05 the datasheet is wrong or old
FULL_SPEED = 0.5  # C9: a point past capacity that moves at least this share of DRAM bandwidth
OVERSUBSCRIBE = ("the second branch (the GPU borrowing host memory over PCIe, and slowing down) "
                 "is not exercised: oversubscribing CUDA managed memory can hang a GPU that "
                 "others share, so rooflab never asks for more than the device has")


@claim("C8", SECTION,
       en="Three numbers describe a GPU: memory capacity, memory bandwidth, compute rate "
          "(RTX 3090: 24 GB, 936 GB/s, 35.6 TFLOP/s FP32).",
       zh="显存容量：……比如RTX3090有24GB。显存带宽：……RTX3090的峰值是936GB/s。GPU算力：……RTX3090 FP32理论峰值约 35.6TFLOPS",
       prediction=lambda: f"this device's datasheet numbers (matched by its name) are what it "
                          "attains: "
                  f"measured DRAM bandwidth and FP32 compute within {EFFICIENCY[0]:.0%}-"
                  f"{EFFICIENCY[1]:.0%} of them.",
       fails_if=lambda: f"measured bandwidth or FP32 compute below {EFFICIENCY[0]:.0%} of the "
                        "datasheet "
                f"(the three numbers do not describe what the device does) or above "
                f"{EFFICIENCY[1]:.0%} (the datasheet is wrong).",
       experiments=("bandwidth", "matmul", "intensity"), figure="roofline",
       limits=("EFFICIENCY",))
def c8(s):
    capacity = s.facts.get("memory_bytes")
    # the raw table: a ceiling above the datasheet is what this claim fails on
    bw = roofline.value(s.ceilings, s.name, "dram_bw")
    if not bw:
        s.need_ceiling("dram_bw")  # NotMeasurable, with the fit's note
    fp32 = roofline.value(s.ceilings, s.name, "matrix_flops", "float32") or \
        roofline.value(s.ceilings, s.name, "vector_flops", "float32")
    text = (f"capacity {qty(capacity, 'B') or 'not known'} (device facts), "
            f"bandwidth {qty(bw, 'B/s')}, FP32 compute {qty(fp32, 'FLOP/s') or 'not fitted'}")
    if fp32 is None:
        raise NotMeasurable("no float32 compute ceiling fitted (no float32 matmul or intensity "
                            "rows)", text)
    if s.sheet is None:
        raise NotMeasurable(f"no datasheet entry matches {s.device_name!r}: nothing to compare "
                            "the measured numbers with", text)
    peak = s.sheet.peak("vector", "float32")
    effs = {"bandwidth": bw / s.sheet.bandwidth_Bps if s.sheet.bandwidth_Bps else None,
            "FP32": fp32 / peak if peak else None}
    effs = {k: v for k, v in effs.items() if v is not None}
    if not effs:
        raise NotMeasurable(f"the {s.sheet.name} datasheet has neither bandwidth nor FP32", text)
    text += f"; vs {s.sheet.name}: " + ", ".join(f"{k} {v:.0%}" for k, v in effs.items())
    worst = min(effs.values(), key=lambda e: min(e - EFFICIENCY[0], EFFICIENCY[1] - e))
    return Result(all(EFFICIENCY[0] <= e <= EFFICIENCY[1] for e in effs.values()), text,
                  "measured / datasheet (the one furthest out)", worst,
                  f"in [{EFFICIENCY[0]}, {EFFICIENCY[1]}]",
                  "ceilings: DRAM bandwidth, float32 compute; datasheet " + s.sheet.name,
                  int(roofline.lookup(s.ceilings, s.name, "dram_bw").n_points))


@worked_example("C8", lambda sheets: f"the {article_sheet(sheets).name}'s three numbers",
                "24 GB, 936 GB/s, 35.6 TFLOPS FP32", 936e9)
def w8(sheets):
    ref = article_sheet(sheets)
    return ref.bandwidth_Bps, (f"{qty(ref.memory_bytes, 'B')}, {qty(ref.bandwidth_Bps, 'B/s')}, "
                               f"{qty(ref.vector.get('float32'), 'FLOP/s')} FP32")


@claim("C9", SECTION,
       en="Out of memory raises an OOM error (or the GPU borrows host memory over PCIe and "
          "slows down).",
       zh="如果显存不够，就会OOM报错，或者GPU得通过PCIe去借用系统内存，性能就会跌。",
       prediction="a working set past the device's capacity is refused with an out-of-memory "
                  "error (a row with status oom, the sweep goes on), or runs far slower than "
                  "device memory.",
       fails_if=lambda: f"an allocation past capacity succeeds and runs at {FULL_SPEED:.0%} or "
                        "more of "
                "the DRAM bandwidth (no error and no slowdown).",
       experiments=("bandwidth",), figure="", limits=("FULL_SPEED",))
def c9(s):
    capacity = s.facts.get("memory_bytes")
    if not capacity:
        raise NotMeasurable("the device facts do not give its memory capacity")
    past = s.rows[s.rows.working_set_bytes > capacity]
    if past.empty:
        big = s.rows.working_set_bytes.max()
        raise NotMeasurable(f"no point in this sweep exceeded memory (largest working set "
                            f"{qty(big, 'B')} of {qty(capacity, 'B')}); {OVERSUBSCRIBE}")
    oom = past[past.status == "oom"]
    ran = past[(past.status == "ok") & (past.byte_per_s > 0)]
    bw = s.ceiling("dram_bw")
    fast = ran[ran.byte_per_s >= FULL_SPEED * bw] if bw and not ran.empty else ran.iloc[:0]
    share = float(ran.byte_per_s.max() / bw) if bw and not ran.empty else 0.0
    text = (f"{len(past)} point(s) past the capacity of {qty(capacity, 'B')}: {len(oom)} raised "
            f"out of memory, {len(ran)} ran")
    if not ran.empty:
        text += (f" (fastest at {qty(ran.byte_per_s.max(), 'B/s')}" + (
            f", {share:.0%} of DRAM bandwidth)" if bw else ")"))
    later = s.rows[s.rows.experiment.isin(past.experiment) & (s.rows.status == "ok")]
    text += f"; {len(later)} ok rows in the same experiments (the sweep went on); {OVERSUBSCRIBE}"
    return Result(fast.empty and (not oom.empty or not ran.empty), text,
                  "fastest point past capacity / DRAM bandwidth (0 when all raised OOM)", share,
                  f"< {FULL_SPEED} (or an oom row)", "rows whose working set exceeds capacity",
                  len(past))
