"""How to time GPU work: one matmul timed three ways, launch cost eager vs graph, stream order.

`kernel` rows: C = A @ B (n x n, so the size sets the GPU time from microseconds to milliseconds)
timed per call by the host clock without a synchronize (`host_nosync`: only the launch, C5), by
the host clock with one (`host_sync`), and by CUDA events (`cuda_event`, the true time, C6).
The host-clock loops are written out here on purpose: they are what is measured. Their samples
still go through core.timer.summarize, so statistics live in one place. Each row's params carry
`ratio_to_true` (its median over the true median). `launch_overhead`: many tiny kernels launched
eagerly vs replayed from one CUDA graph, time per kernel. `stream_order` (C7): a long matmul and
a kernel reading its output, enqueued on one stream with no synchronize between them.
On a CPU ops run synchronously: the host clock is the true time, CUDA-only methods don't apply.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch
from omegaconf import MISSING

from experiments.core.budget import samples_within
from experiments.core.config import ExperimentConfig
from experiments.core.dtypes import itemsize, torch_dtype
from experiments.core.checks import check_close, has_nan, need_storage_dtype, relative_error
from experiments.core.harness import Point, State
from experiments.core.runner import Context, NotApplicable, WrongResult
from experiments.core.conditions import Conditions
from experiments.core.schema import LAUNCH_ONLY_TIMER
from experiments.core.timer import MedianTiming, Timing, best_run, summarize

NAME = "timing"
DESCRIPTION = "a matmul timed without sync, with sync and with CUDA events; launch cost; stream order"

METHODS = ("host_nosync", "host_sync", "cuda_event")
# relative error a correct product stays under (TF32 or garbage lands far above float32's bound)
TOLERANCE = {"float64": 1e-12, "float32": 1e-5, "float16": 5e-3, "bfloat16": 2e-2}
CHECK_ROWS = 64  # rows of the product checked against float64 (cheap at any n)
SLEEP_CYCLES = 200_000  # ~100 us busy GPU: longer than the host needs to enqueue start, kernel, end
MIN_SAMPLES = 5
CPU_SYNC_NOTE = ("CPU analogue: CPU ops run synchronously, so the host clock already waits for the "
                 "result; host_sync is the true time and host_nosync measures the same thing")


@dataclass
class TimingConfig(ExperimentConfig):
    name: str = NAME
    kernel_sizes: list[int] = MISSING  # matrix side n
    max_samples: int = MISSING  # per method and size; fewer when point_budget_s runs out
    launch_kernels: int = MISSING  # tiny kernels per launch-overhead sample
    launch_samples: int = MISSING  # at least 6: a median's 95 % interval needs them (MedianTiming)
    stream_order_size: int = MISSING  # side of the long first matmul of the stream-order check

    RULES = {"kernel_sizes": "sizes", "max_samples": f"int >= {MIN_SAMPLES}",
             "launch_kernels": "int >= 1", "launch_samples": "int >= 6",
             "stream_order_size": "int >= 1"}


Config = TimingConfig


def stream_order_check(z, a, b, tol) -> tuple[float, bool]:
    """z should be 2 * (a @ b). Any NaN means the reader ran before the NaN-poisoned y was written:
    (relative error, passed), not raised: an order violation is this point's finding."""
    rows = min(z.shape[0], CHECK_ROWS)
    err = relative_error(z[:rows], 2 * (a[:rows].double() @ b.double()))
    return err, bool(err <= tol) and not has_nan(z)


def _stats(samples, timer: str, ctx: Context) -> dict:
    stats = summarize(samples) | {"inner_reps": 1, "timer": timer}
    return stats | {"noisy": bool(stats["cv"] > ctx.settings.cv_threshold)}


def _kernel(ctx: Context, n: int):
    """A checked matmul C = A @ B and its relative error (first rows against float64)."""
    need_storage_dtype(ctx.dtype, "time the kernel in a plain dtype")
    dt = torch_dtype(ctx.dtype)
    a, b = ctx.randn(n, n, dtype=dt), ctx.randn(n, n, dtype=dt)
    c = torch.full((n, n), float("nan"), device=ctx.device, dtype=dt)
    kernel = lambda: torch.mm(a, b, out=c)  # noqa: E731
    kernel()
    ctx.sync()
    rows = min(n, CHECK_ROWS)
    err = check_close(c[:rows], lambda: a[:rows].double() @ b.double(), TOLERANCE[ctx.dtype],
                      f"matmul n={n}")
    for _ in range(2):  # warm up: first calls pick the algorithm and load the kernel
        kernel()
    ctx.sync()
    return kernel, err


def _sample_count(ctx: Context, cfg: TimingConfig, kernel, budget_s: float) -> int:
    t0 = time.perf_counter()
    kernel()
    ctx.sync()
    one = time.perf_counter() - t0
    return samples_within(budget_s, one, at_least=MIN_SAMPLES, at_most=cfg.max_samples)


def _host_samples(ctx: Context, kernel, samples: int, sync: bool):
    """Host-clock time of one call per sample; for host_nosync also how often the kernel was
    still running when the clock stopped (the host returned before the kernel ended: C1, C5)."""
    cuda = ctx.device.type == "cuda"
    out, pending = np.empty(samples), 0
    for s in range(samples):
        ctx.sync()  # every sample starts with an idle device, outside the clock
        t0 = time.perf_counter()
        kernel()
        if sync:
            ctx.sync()
        out[s] = time.perf_counter() - t0
        if cuda and not sync:
            done = torch.cuda.Event()
            done.record()
            pending += not done.query()
    ctx.sync()
    return out, pending / samples


def _event_samples(ctx: Context, kernel, samples: int):
    """CUDA-event time of one call per sample. A busy-wait kernel first keeps the GPU occupied
    while the host enqueues start, kernel, end, so the events bracket the kernel, not the launch."""
    sleep = getattr(torch.cuda, "_sleep", None)
    pairs = []
    for _ in range(samples):
        ctx.sync()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if sleep is not None:
            sleep(SLEEP_CYCLES)
        start.record()
        kernel()
        end.record()
        pairs.append((start, end))
    ctx.sync()
    return np.array([a.elapsed_time(b) for a, b in pairs]) / 1e3, sleep is not None


def _conditions(ctx: Context, run):
    """Run the timed part with the conditions sampled, as core.timer.measure does for the other
    experiments; returns (its result, the condition columns for a row of median `time_s`)."""
    with Conditions(ctx.device) as cond:
        result = run()
    return result, lambda time_s: cond.summary(time_s, ctx.settings.contention_threshold)


def _measure_method(state: State) -> dict:
    ctx, cfg, n, method = state.ctx, state.cfg, state.row["n"], state.row["variant"]
    cpu = ctx.device.type == "cpu"
    if method == "cuda_event" and cpu:
        raise NotApplicable("a CPU has no CUDA events; its true time is host_sync (perf_counter)")
    kernel, err = _kernel(ctx, n)
    samples = _sample_count(ctx, cfg, kernel, state.budget_s)
    row = {"rel_error": err, "check_passed": True}
    if method == "cuda_event":
        (times, preloaded), cond = _conditions(ctx, lambda: _event_samples(ctx, kernel, samples))
        stats = _stats(times, "cuda_event", ctx)
        return row | stats | cond(stats["time_s"]) | {"params": {"gpu_preloaded": preloaded}}
    (times, pending), cond = _conditions(
        ctx, lambda: _host_samples(ctx, kernel, samples, sync=method == "host_sync"))
    timer = "perf_counter_sync" if method == "host_sync" else LAUNCH_ONLY_TIMER
    row |= _stats(times, timer, ctx)
    # without a synchronize time_s is not how long a call ran: no energy per call for it
    row |= cond(row["time_s"]) | ({"energy_j": None} if method == "host_nosync" else {})
    if cpu:
        return row | {"message": CPU_SYNC_NOTE}
    return row | ({"params": {"pending_fraction": pending}} if method == "host_nosync" else {})


def add_ratios(rows: list[dict], true_variant: str, key: str = "ratio_to_true") -> list[dict]:
    """Put each ok row's median over the `true_variant` row's median into its params."""
    true = next((r["time_s"] for r in rows
                 if r.get("variant") == true_variant and r["status"] == "ok"), None)
    for r in rows:
        if true and r["status"] == "ok":
            r["params"] = dict(r.get("params") or {}) | {
                "true_variant": true_variant, key: r["time_s"] / true}
    return rows


def _launch(ctx: Context, cfg: TimingConfig, variant: str) -> dict:
    """Wall time per tiny kernel (x += 1 on one element) until N of them are done, the final
    synchronize amortised over N."""
    cpu = ctx.device.type == "cpu"
    if variant == "graph" and cpu:
        raise NotApplicable("CUDA graphs exist only on a GPU; a CPU runs each op when called")
    big_n = cfg.launch_kernels
    x = torch.zeros(1, dtype=torch.int64, device=ctx.device)  # an exact counter: checks every add ran
    done = 0
    if variant == "eager":
        def body():
            for _ in range(big_n):
                x.add_(1)
    else:
        stream = torch.cuda.Stream(ctx.device)  # capture needs a side stream, warmed once
        stream.wait_stream(torch.cuda.current_stream(ctx.device))
        with torch.cuda.stream(stream):
            x.add_(1)
        torch.cuda.current_stream(ctx.device).wait_stream(stream)
        done += 1
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(big_n):
                x.add_(1)
        body = graph.replay
    body()  # warm-up (the first replay uploads the graph)
    done += big_n

    def timed():
        out = np.empty(cfg.launch_samples)
        for s in range(cfg.launch_samples):
            ctx.sync()
            t0 = time.perf_counter()
            body()
            ctx.sync()
            out[s] = (time.perf_counter() - t0) / big_n
        return out

    # measured again while noisy, contended or throttled, by ctx.time's rule (core/timer.py
    # best_run): the floor is this row's median, and a fit leaves a noisy one out. Noisy here is
    # a median known to no better than cv_threshold (MedianTiming), not a CV: a CPU's eager rows
    # can read a CV of a tenth to a third, sweep after sweep, and would leave no eager floor
    def one_run() -> Timing:
        nonlocal done
        out, cond = _conditions(ctx, timed)
        done += big_n * cfg.launch_samples
        timing = MedianTiming(out, big_n, "perf_counter_sync")
        timing.conditions = cond(timing.stats["time_s"])
        return timing

    best = best_run(one_run, ctx.settings.retries, ctx.settings.cv_threshold)
    if int(x.item()) != done:
        raise WrongResult(f"counter is {int(x.item())} after {done} adds: kernels were lost")
    row = {"check_passed": True, "rel_error": 0.0, "params": {"kernels": big_n}}
    row |= best.stats | {"noisy": bool(best.spread() > ctx.settings.cv_threshold)}
    if cpu:
        row["message"] = "CPU analogue: per-op dispatch cost of a tiny eager op; nothing is launched"
    return row


def _stream_order(ctx: Context, n: int) -> dict:
    if ctx.device.type == "cpu":
        raise NotApplicable("a CPU has no streams: its ops run one after another as called")
    need_storage_dtype(ctx.dtype, "time the kernel in a plain dtype")
    dt = torch_dtype(ctx.dtype)
    a, b = ctx.randn(n, n, dtype=dt), ctx.randn(n, n, dtype=dt)
    y = torch.full((n, n), float("nan"), device=ctx.device, dtype=dt)
    z = torch.full((n, n), float("nan"), device=ctx.device, dtype=dt)
    ctx.sync()
    sleep = getattr(torch.cuda, "_sleep", None)

    def enqueue() -> bool:
        first_done = torch.cuda.Event()
        if sleep is not None:  # keep the GPU busy while the host enqueues both kernels
            sleep(50 * SLEEP_CYCLES)
        torch.mm(a, b, out=y)  # long
        first_done.record()
        torch.mul(y, 2, out=z)  # reads y; enqueued at once, no synchronize in between
        return not first_done.query()  # the mm still ran after the reader was enqueued

    # Once as a warm-up: a kernel's first launch can wait for the GPU to go idle while CUDA
    # loads its module (lazy loading), letting the mm finish before the reader is enqueued.
    enqueue()
    y.fill_(float("nan"))
    z.fill_(float("nan"))
    ctx.sync()
    pending = enqueue()
    ctx.sync()
    err, ok = stream_order_check(z, a, b, TOLERANCE[ctx.dtype])
    row = {"rel_error": err, "check_passed": ok, "status": "ok" if ok else "wrong_result",
           "params": {"first_pending_at_enqueue": pending}}
    if not pending:
        row["message"] = ("the matmul had ended before the reader was enqueued: order not "
                          "stressed; raise stream_order_size")
    elif not ok:
        row["message"] = f"the reader saw unwritten or wrong data (relative error {err:.3g})"
    return row


def _dispatch(ctx: Context, n: int) -> dict:
    """C1's evidence: torch.profiler's view of one matmul on the device's tensors, the aten op and
    the device kernels it launched (a compiled CUDA/C++ kernel the CPU submitted to the GPU)."""
    if ctx.device.type == "cpu":
        raise NotApplicable("on a CPU the op runs on the host: no device kernel to submit")
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    need_storage_dtype(ctx.dtype, "time the kernel in a plain dtype")
    dt = torch_dtype(ctx.dtype)
    a, b = ctx.randn(n, n, dtype=dt), ctx.randn(n, n, dtype=dt)
    torch.mm(a, b)  # warm: cuBLAS picks its kernel and loads it outside the profiled call
    ctx.sync()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        y = torch.mm(a, b)
        ctx.sync()
    kernels = sorted({e.name for e in prof.events() if e.device_type == DeviceType.CUDA
                      and "memcpy" not in e.name.lower() and "memset" not in e.name.lower()})
    err = check_close(y, lambda: a.double() @ b.double(), TOLERANCE[ctx.dtype],
                      "the profiled matmul")
    return {"rel_error": err, "check_passed": True,
            "params": {"aten_op": "aten::mm", "kernel_names": kernels},
            "message": "the device kernels torch.profiler saw one torch.mm launch"}


def points(cfg: TimingConfig, ctx: Context) -> list[Point]:
    """Each size timed every way, launch rows, the stream-order check, the dispatch (C1)."""
    size, out = itemsize(ctx.dtype), []
    true = "host_sync" if ctx.device.type == "cpu" else "cuda_event"
    for n in cfg.kernel_sizes:
        out += [Point({"op": "kernel", "n": n, "m": n, "k": n, "flops": 2.0 * n**3,
                       "bytes": float(3 * n * n * size), "working_set_bytes": 3 * n * n * size,
                       "variant": m}, group=("ratio_to_true", true, n)) for m in METHODS]
    out += [Point({"op": "launch_overhead", "n": 1, "variant": v},
                  group=("ratio_to_graph", "graph")) for v in ("eager", "graph")]
    s, d = cfg.stream_order_size, min(cfg.kernel_sizes)
    return out + [Point({"op": "stream_order", "n": s, "m": s, "k": s}),
                  Point({"op": "dispatch", "n": d, "m": d, "k": d, "variant": "torch_profiler"})]


def measure(state: State) -> dict:
    if (op := state.row["op"]) in ("kernel", "launch_overhead"):
        return _measure_method(state) if op == "kernel" else _launch(
            state.ctx, state.cfg, state.row["variant"])
    return (_stream_order if op == "stream_order" else _dispatch)(state.ctx, state.row["n"])


def finish(group: tuple, rows: list[dict]) -> None:  # launch's: a no-op on a CPU (no graph)
    add_ratios(rows, group[1], key=group[0])
