"""The CPU drives the GPU: launches are asynchronous, streams keep order, events time the GPU.

Each check compares two clocks on the same kernels (the host's, with and without a synchronize,
against CUDA events recorded on the GPU): the events are the independent reference.
"""

from __future__ import annotations

import pandas as pd

from experiments.analysis.claims.base import NotMeasurable, Result, claim, section, si

SECTION = section("host", "The CPU drives the GPU: asynchronous launches, streams, clocks",
                  "timing")
ASYNC_RATIO = 0.9  # C1: the host returns before the kernel ends: no-sync / events below this
NAIVE_MAX, SYNCED = 0.5, (0.8, 1.5)  # C5
BIAS = 0.10  # C6: the synced host clock overstates a short kernel by more than this


def _timing(s) -> pd.DataFrame:
    """Kernel timing rows pivoted: one row per kernel size, one column per timing method."""
    s.need_gpu("host and device clocks differ only on a GPU, which runs kernels asynchronously")
    rows = s.exp("timing", "kernel")
    t = rows.pivot_table(index="n", columns="variant", values="time_s", aggfunc="median")
    cv = rows.pivot_table(index="n", columns="variant", values="cv", aggfunc="median")
    missing = {"host_nosync", "host_sync", "cuda_event"} - set(t.columns)
    if missing:
        raise NotMeasurable(f"timing rows lack the methods {', '.join(sorted(missing))}")
    t = t.dropna(subset=["host_nosync", "host_sync", "cuda_event"]).sort_values("cuda_event")
    return t.join(cv.add_suffix("_cv")).assign(rows=len(rows))


@claim("C1", SECTION,
       en="Python runs on the CPU; PyTorch sees a CUDA tensor and calls a compiled CUDA/C++ "
          "kernel that the CPU submits to the GPU.",
       zh="我的Python代码不会直接在GPU上执行，而是：Python 在 CPU 上运行 → PyTorch 看见输入 tensor "
          "位于 CUDA → PyTorch 调用已经编译好的 CUDA/C++ 实现 → CPU 向 GPU 提交一个 kernel",
       prediction="the host returns from a kernel call before the kernel ends: for the longest "
                  "kernel the host clock without a synchronize reads less than the GPU's events.",
       fails_if=f"host clock without synchronize / CUDA events >= {ASYNC_RATIO} for the longest "
                "kernel (the host waited for the GPU: the call ran synchronously).",
       experiments=("timing",))
def c1(s):
    t = _timing(s)
    last = t.iloc[-1]
    ratio = last.host_nosync / last.cuda_event
    launch = s.rows[(s.rows.experiment == "timing") & (s.rows.op == "launch_overhead")
                    & (s.rows.status == "ok")]
    extra = "; ".join(f"{v} launch {si(x, 's')}" for v, x in zip(launch.variant, launch.time_s))
    return Result(ratio < ASYNC_RATIO,
                  f"longest kernel: host clock without sync {si(last.host_nosync, 's')} vs CUDA "
                  f"events {si(last.cuda_event, 's')} (ratio {ratio:.2f})"
                  + (f"; {extra}" if extra else ""),
                  "host clock without sync / CUDA events, longest kernel", ratio,
                  f"< {ASYNC_RATIO}", "timing: kernel, three clocks", int(last.rows))


@claim("C5", SECTION,
       en="Kernel launch is asynchronous: the CPU enqueues work on a stream and goes on; "
          "torch.cuda.synchronize() waits for it.",
       zh="而是异步的：CPU通知GPU做 → 各做各的。……torch.cuda.synchronize()会让CPU等到之前提交的任务全部完成。",
       prediction=f"no-sync host time / event time < {NAIVE_MAX} for a kernel longer than a "
                  f"launch, and between {SYNCED[0]} and {SYNCED[1]} with a synchronize.",
       fails_if="the host clock without synchronize reads at least half the kernel's event time "
                "(the launch blocked), or the synced host clock misses the kernel's time.",
       experiments=("timing",))
def c5(s):
    t = _timing(s)
    naive = (t.host_nosync / t.cuda_event).iloc[-1]
    synced = (t.host_sync / t.cuda_event).iloc[-1]
    return Result(bool(naive < NAIVE_MAX and SYNCED[0] <= synced <= SYNCED[1]),
                  f"longest kernel ({si(t.cuda_event.iloc[-1], 's')}): no sync / events = "
                  f"{naive:.3f}, with sync / events = {synced:.2f}",
                  "no-sync host time / event time, longest kernel", naive,
                  f"< {NAIVE_MAX}, and synced / events in [{SYNCED[0]}, {SYNCED[1]}]",
                  "timing: kernel, three clocks", int(t.rows.iloc[0]))


@claim("C6", SECTION,
       en="CUDA events measure GPU work better than the CPU clock.",
       zh="CUDA Event 是插入 GPU 工作队列里的时间标记，比用 CPU 时钟测 GPU 工作更合适",
       prediction=f"for the shortest kernel the synced host clock adds launch and synchronize "
                  f"overhead (bias > {BIAS:.0%} over events), or spreads more (CV) than events.",
       fails_if=f"the synced host clock is within {BIAS:.0%} of the events on the shortest kernel "
                "and spreads no more than they do.",
       experiments=("timing",))
def c6(s):
    t = _timing(s)
    short = t.iloc[0]
    bias = short.host_sync / short.cuda_event - 1
    cv_host, cv_event = t["host_sync_cv"].median(), t["cuda_event_cv"].median()
    return Result(bool(bias > BIAS or cv_host > cv_event),
                  f"shortest kernel ({si(short.cuda_event, 's')}): synced host clock {bias:+.0%} "
                  f"vs events; median CV host {cv_host:.3f}, events {cv_event:.3f}",
                  "bias of the synced host clock over events, shortest kernel", bias,
                  f"> {BIAS:.0%}, or CV(host) > CV(events)", "timing: kernel, three clocks",
                  int(t.rows.iloc[0]))


@claim("C7", SECTION,
       en="A stream keeps the order of its tasks.",
       zh="这个命令缓冲区相当于一个工作队列，被称为stream。默认情况下，stream内的任务会保持顺序执行。",
       prediction="two dependent kernels on one stream give the right result without a "
                  "synchronize between them.",
       fails_if="a kernel reading the output of the one before it on the same stream sees a "
                "wrong or unfinished result.",
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
