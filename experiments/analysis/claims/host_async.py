"""The CPU drives the GPU: launches are asynchronous, streams keep order, events time the GPU.

Each check compares two clocks on the same kernels (the host's, with and without a synchronize,
against CUDA events recorded on the GPU): the events are the independent reference.
"""

from __future__ import annotations

import pandas as pd

from experiments.analysis.dataset import ok, param
from experiments.analysis.claims.base import (CLAIMS, NotMeasurable, Result, claim, counts,
                                              section)
from experiments.analysis.units import qty, words

SECTION = section("host", "The CPU drives the GPU: asynchronous launches, streams, clocks",
                  "timing")
KERNEL_EVIDENCE = "kernel_names"  # params key: device kernels the profiler saw an op launch
MIN_OPS = 1  # C1: profiled ops on CUDA tensors needed
NAIVE_MAX, SYNCED = 0.5, (0.8, 1.5)  # C5
MIN_KERNELS = 2  # C5: kernels in the larger half of the sizes, each judged
BIAS = 0.10  # C6: the synced host clock overstates a microsecond kernel by more than this...
BELOW = 0.10  # C6: ...and reads no kernel more than this below the events
SHORT_S, LONG_S = 100e-6, 1e-3  # C6: the range the article speaks of, microseconds to ms


def _timing(s) -> pd.DataFrame:
    """Kernel timing rows pivoted: one row per kernel size n (sorted by size, never by a measured
    time: a noisy time must not choose which kernel is judged), one column per method."""
    s.need_gpu("host and device clocks differ only on a GPU, which runs kernels asynchronously")
    rows = s.exp("timing", "kernel")
    t = rows.pivot_table(index="n", columns="variant", values="time_s", aggfunc="median")
    missing = {"host_nosync", "host_sync", "cuda_event"} - set(t.columns)
    if missing:
        raise NotMeasurable("timing rows lack the methods "
                            + ", ".join(words(m) for m in sorted(missing)))
    t = t.dropna(subset=["host_nosync", "host_sync", "cuda_event"]).sort_index()
    if t.empty:
        raise NotMeasurable(f"no kernel size has ok rows of all three clocks "
                            f"({counts(rows, 'variant')})")
    return t.assign(rows=len(rows))


def _kernel_evidence(s) -> pd.DataFrame:
    """Rows whose params list the device kernels the profiler saw their op launch."""
    rows = ok(s.rows[s.rows.experiment.isin(CLAIMS["C1"].experiments)])
    names = param(rows, KERNEL_EVIDENCE)
    return rows.assign(kernels=names)[names.notna()]


@claim("C1", SECTION,
       en="Python runs on the CPU; PyTorch sees a CUDA tensor and calls a compiled CUDA/C++ "
          "kernel that the CPU submits to the GPU.",
       zh="我的Python代码不会直接在GPU上执行，而是：Python 在 CPU 上运行 → PyTorch 看见输入 tensor "
          "位于 CUDA → PyTorch 调用已经编译好的 CUDA/C++ 实现 → CPU 向 GPU 提交一个 kernel",
       prediction=lambda: f"the profiler sees each profiled op on CUDA tensors launch a compiled "
                          f"device kernel (its name recorded, params {KERNEL_EVIDENCE}), on at "
                          f"least {MIN_OPS} op(s).",
       fails_if=lambda: "a profiled op on CUDA tensors launched no device kernel (the work ran "
                        "on the CPU).",
       experiments=("timing", "workload"))
def c1(s):
    s.need_gpu("a kernel submitted to a GPU needs a GPU")
    rows = _kernel_evidence(s)
    if len(rows) < MIN_OPS:
        raise NotMeasurable(f"no row records the kernels the profiler saw launched (params "
                            f"{KERNEL_EVIDENCE}): timing's host and event clocks show asynchrony "
                            "(C5), not which code ran")
    launched = rows.kernels.map(lambda k: bool(k) if isinstance(k, list) else bool(str(k)))
    named = [f"{op}: {', '.join(map(str, k))[:120]}" for op, k in
             zip(rows.op, rows.kernels) if isinstance(k, list) and k][:3]
    return Result(bool(launched.all()) and len(rows) >= MIN_OPS,
                  f"{int(launched.sum())} of {len(rows)} profiled ops on CUDA tensors launched a "
                  f"device kernel" + (f" ({'; '.join(named)})" if named else ""),
                  "share of profiled ops that launched a device kernel", float(launched.mean()),
                  f"= 1, on at least {MIN_OPS} op(s)", f"rows with params {KERNEL_EVIDENCE}",
                  len(rows))


@claim("C5", SECTION,
       en="Kernel launch is asynchronous: the CPU enqueues work on a stream and goes on; "
          "torch.cuda.synchronize() waits for it.",
       zh="而是异步的：CPU通知GPU做 → 各做各的。……torch.cuda.synchronize()会让CPU等到之前提交的任务全部完成。",
       prediction=lambda: f"for every kernel in the larger half of the sizes (at least "
                          f"{MIN_KERNELS}), no-sync host time / event time < {NAIVE_MAX}, and "
                          f"between {SYNCED[0]} and {SYNCED[1]} with a synchronize.",
       fails_if=lambda: f"for some kernel in the larger half of the sizes, the host clock without "
                        f"synchronize reads {NAIVE_MAX} or more of the kernel's event time (the "
                        f"launch blocked), or the synced host clock lies outside [{SYNCED[0]}, "
                        f"{SYNCED[1]}] x the event time.",
       experiments=("timing",), limits=("NAIVE_MAX", "SYNCED", "MIN_KERNELS"))
def c5(s):
    t = _timing(s)
    big = t[t.index > t.index.to_series().median()]
    if len(big) < MIN_KERNELS:
        raise NotMeasurable(f"{len(big)} kernel size(s) above the median size; "
                            f"{MIN_KERNELS} needed")
    naive, synced = big.host_nosync / big.cuda_event, big.host_sync / big.cuda_event
    good = (naive < NAIVE_MAX) & synced.between(*SYNCED)
    parts = [f"n = {n:.0f} ({qty(e, 's')}): no sync / events = {a:.3f}, with sync {b:.2f}"
             for n, e, a, b in zip(big.index, big.cuda_event, naive, synced)]
    return Result(bool(good.all()), "; ".join(parts),
                  "no-sync host time / event time, worst of the larger kernels",
                  float(naive.max()), f"< {NAIVE_MAX} on each of >= {MIN_KERNELS} kernels, and "
                  f"synced / events in [{SYNCED[0]}, {SYNCED[1]}]",
                  "timing: kernel, three clocks", int(t.rows.iloc[0]))


@claim("C6", SECTION,
       en="CUDA events measure GPU work better than the CPU clock.",
       zh="CUDA Event 是插入 GPU 工作队列里的时间标记，比用 CPU 时钟测 GPU 工作更合适",
       prediction=lambda: f"over kernels from microseconds (the smallest size, under "
                          f"{qty(SHORT_S, 's')} on events) to milliseconds (the largest, over "
                          f"{qty(LONG_S, 's')}), the synced host clock adds launch and synchronize "
                          f"overhead: more than {BIAS:.0%} over events on the smallest kernel, "
                          f"within {BIAS:.0%} on the largest, and never more than {BELOW:.0%} "
                          "below the events.",
       fails_if=lambda: f"the synced host clock is within {BIAS:.0%} of the events on the "
                        f"smallest kernel, or off by more than {BIAS:.0%} on the largest, or "
                        f"reads some kernel more than {BELOW:.0%} below the events (the host "
                        "would see less time than the GPU spent: the events would be wrong).",
       experiments=("timing",), limits=("BIAS", "BELOW", "SHORT_S", "LONG_S"))
def c6(s):
    t = _timing(s)
    short, long_ = t.iloc[0], t.iloc[-1]
    if not (short.cuda_event < SHORT_S and long_.cuda_event > LONG_S):
        raise NotMeasurable(f"the kernel sizes span {qty(short.cuda_event, 's')} to "
                            f"{qty(long_.cuda_event, 's')} on events, not microseconds (under "
                            f"{qty(SHORT_S, 's')}) to milliseconds (over {qty(LONG_S, 's')})")
    bias = t.host_sync / t.cuda_event - 1
    good = bias.iloc[0] > BIAS and abs(bias.iloc[-1]) <= BIAS and bias.min() >= -BELOW
    return Result(bool(good),
                  f"synced host clock vs events: {bias.iloc[0]:+.0%} on the smallest kernel "
                  f"({qty(short.cuda_event, 's')}), {bias.iloc[-1]:+.0%} on the largest "
                  f"({qty(long_.cuda_event, 's')}); lowest {bias.min():+.0%} over "
                  f"{len(t)} sizes", "bias of the synced host clock over events, smallest "
                  "kernel", float(bias.iloc[0]),
                  f"> {BIAS:.0%} (smallest, under {qty(SHORT_S, 's')}), within {BIAS:.0%} "
                  f"(largest, over {qty(LONG_S, 's')}), >= -{BELOW:.0%} (all)",
                  "timing: kernel, three clocks", int(t.rows.iloc[0]))


@claim("C7", SECTION,
       en="A stream keeps the order of its tasks.",
       zh="这个命令缓冲区相当于一个工作队列，被称为stream。默认情况下，stream内的任务会保持顺序执行。",
       prediction="two dependent kernels on one stream give the right result without a "
                  "synchronize between them.",
       fails_if="a kernel reading the output of the one before it on the same stream sees a "
                "wrong or unfinished result, or a check did not run to the end.",
       experiments=("timing",), figure="")
def c7(s):
    s.need_gpu("a CPU has no streams: its ops run one after another as called")
    rows = s.rows[(s.rows.experiment == "timing") & s.rows.op.str.contains("stream")]
    if rows.empty:
        raise NotMeasurable("no timing rows with op stream_order")
    if (rows.status == "not_applicable").all():
        raise NotMeasurable(rows.message.dropna().iloc[0] if rows.message.notna().any()
                            else "stream_order not applicable")
    good = (rows.status == "ok") & rows.check_passed.fillna(False).astype(bool)
    return Result(bool(good.all()), f"{int(good.sum())} of {len(rows)} ordered-stream checks "
                  "gave the right result", "share of stream-order checks passed",
                  float(good.mean()), "= 1 (every check)", "timing: stream_order", len(rows))
