"""Timing shared by every experiment.

Modelled on triton's do_bench: warm up, estimate one call, pick how many calls make one sample
(so a sample is far past launch and timer overhead), pick how many samples fit the time budget,
report the median and quantiles. Sampling stops before the budget once the median is known to
`precision` (nvbench's approach: stop when more samples would not change the answer). GPUs are
timed with CUDA events around a CUDA-graph replay of the inner calls (eager launches from Python
cost ~9 us each and would hide short kernels); CPUs with perf_counter.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

from experiments.core.conditions import Conditions
from experiments.core.config import Settings
from experiments.core.cpu_time import SampleOffCpu

# One sample should last at least this long, so timer resolution and launch gaps are noise.
SAMPLE_TARGET_S = {"cuda": 1e-3, "cpu": 2e-3}
MAX_INNER = 10_000
# How far past max_samples a point short of min_point_s may sample: its calls ran up to that much
# faster than planned (a cold first call estimated them), or min_point_s asks for more than
# max_samples samples of SAMPLE_TARGET_S (a CPU's DRAM point: 1.5 s of 5 ms calls)
PAST_PLAN = 10
# Calls longer than this are timed as eager launches: the ~9 us launch cost is then under a few
# percent, and a graph would change what is measured (a captured copy_ becomes a memcpy node that
# the copy engines run, well below the copy kernel's rate).
GRAPH_BELOW_S = 2e-4


@dataclass
class Timing:
    """Per-call times of one measured point (seconds), and how they were taken."""

    samples_s: np.ndarray  # one entry per sample: that sample's time / inner calls
    inner: int
    timer: str
    conditions: dict = field(default_factory=dict)  # clocks, power, load... (core/conditions.py)

    @property
    def stats(self) -> dict:
        return summarize(self.samples_s) | {"inner_reps": self.inner, "timer": self.timer} | \
            self.conditions

    def spread(self) -> float:
        """How far the samples leave the statistic read from them in doubt: their CV."""
        return self.stats["cv"]

    def rank(self) -> tuple:
        """Lower is better: never a contended or throttled run over a clean one, then the lowest
        spread."""
        return (self.conditions.get("contended") is True, self.conditions.get("throttled") is True,
                self.spread())

    def settled(self, cv_threshold: float, spread_matters: bool = True) -> bool:
        """Neither contended nor throttled, and (where the spread matters) within cv_threshold:
        no retry needed."""
        contended, throttled, spread = self.rank()
        return not contended and not throttled and (spread <= cv_threshold or not spread_matters)


class MedianTiming(Timing):
    """A run read at its median alone (the launch floor): its doubt is the median's 95 %
    interval, not the CV. A stall in two samples of twenty (CPU eager rows can read a CV of a
    third) moves the CV and the mean, not the median."""

    def spread(self) -> float:
        return median_rel_halfwidth(self.samples_s)


def summarize(samples_s) -> dict:
    """The one statistics layer: median, quantiles, spread. Every row's time columns come from here."""
    s = np.asarray(samples_s, dtype=np.float64)
    mean = float(s.mean())
    std = float(s.std(ddof=1)) if s.size > 1 else 0.0
    q = np.quantile(s, [0.1, 0.25, 0.5, 0.75, 0.9])
    return {
        "time_s": float(q[2]),
        "time_s_min": float(s.min()),
        "time_s_q10": float(q[0]),
        "time_s_q25": float(q[1]),
        "time_s_q75": float(q[3]),
        "time_s_q90": float(q[4]),
        "time_s_mean": mean,
        "time_s_std": std,
        "cv": std / mean if mean > 0 else float("nan"),
        "samples": int(s.size),
    }


def median_rel_halfwidth(samples_s) -> float:
    """Half-width of the median's 95 % confidence interval, over the median: the distribution-free
    interval between order statistics n/2 -/+ 1.96 sqrt(n)/2 (no normality assumed; written here
    because it runs after every chunk of samples, where a bootstrap would cost more than the
    samples). inf below 6 samples."""
    s = np.sort(np.asarray(samples_s, dtype=np.float64))
    n = s.size
    if n < 6:
        return math.inf
    d = 1.96 * math.sqrt(n) / 2
    # 1-based ranks floor(n/2 - d) and ceil(1 + n/2 + d), as 0-based indices
    lo, hi = max(0, math.floor(n / 2 - d) - 1), min(n - 1, math.ceil(n / 2 + d))
    median = float(np.median(s))
    return (s[hi] - s[lo]) / 2 / median if median > 0 else math.inf


def plan_counts(per_call_s: float, point_budget_s: float, sample_target_s: float,
                min_samples: int = 5, max_samples: int = 200) -> tuple[int, int]:
    """(inner calls per sample, samples) for a call of `per_call_s` within `point_budget_s`."""
    per_call_s = max(per_call_s, 1e-9)
    inner = int(min(MAX_INNER, max(1, math.ceil(sample_target_s / per_call_s - 1e-9))))
    samples = int(point_budget_s / (inner * per_call_s))
    return inner, int(min(max_samples, max(min_samples, samples)))


class CpuTimer:
    name = "perf_counter"

    def __init__(self, clock: Callable[[], float] = time.perf_counter):
        self.clock = clock
        self._team_off: list[float] = []

    def sync(self):
        pass

    def run(self, fn: Callable[[int], object], inner: int, samples: int) -> np.ndarray:
        out = np.empty(samples)
        calls = getattr(self, "_calls", 0)  # i runs on across samples and runs: every buffer
        watch = SampleOffCpu()
        watch.start()
        for s in range(samples):             # rotates in
            t0 = self.clock()
            for i in range(calls + s * inner, calls + (s + 1) * inner):
                fn(i)
            out[s] = self.clock() - t0
            self._team_off.append(watch.stop())
        self._calls = calls + samples * inner
        return out / inner

    def take_team_off(self) -> list[float]:
        """Per sample since the last take, the share of its time its CPU team was kept off its
        CPUs (core/cpu_time.py SampleOffCpu; NaN where it ran none: torch ops)."""
        out, self._team_off = self._team_off, []
        return out


class CudaTimer:
    """CUDA events around each sample; the sample's calls replayed from a captured graph."""

    def __init__(self, device: torch.device, use_graph: bool = True):
        self.device = device
        self.use_graph = use_graph
        self.name = "cuda_event"

    def sync(self):
        torch.cuda.synchronize(self.device)

    def _graph(self, fn, inner):
        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):  # capture needs a side stream, warmed once
            fn(0)
        torch.cuda.current_stream(self.device).wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for i in range(inner):
                fn(i)
        return graph

    def run(self, fn, inner, samples) -> np.ndarray:
        # measure() asks for samples in chunks: the graph captured for the first serves the rest
        cached = getattr(self, "_body", None)
        if cached is not None and cached[:3] == (fn, inner, self.use_graph):
            body, self.name = cached[3], cached[4]
        else:
            body = self._body_for(fn, inner)
            body()  # replay once before timing: first replay uploads the graph
            self._body = (fn, inner, self.use_graph, body, self.name)
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(samples)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(samples)]
        for s in range(samples):
            starts[s].record()
            body()
            ends[s].record()
        torch.cuda.synchronize(self.device)
        return np.array([a.elapsed_time(b) for a, b in zip(starts, ends)]) / 1e3 / inner

    def _body_for(self, fn, inner):
        body = None
        self.name = "cuda_event"
        if self.use_graph:
            try:
                graph = self._graph(fn, inner)
                body = graph.replay
                self.name = "cuda_event_graph"
            except Exception:  # not capturable (host sync inside, say): time eager launches
                torch.cuda.synchronize(self.device)
        if body is None:
            calls = iter(range(1 << 62))  # i runs on across samples: every buffer rotates in

            def body():
                for _ in range(inner):
                    fn(next(calls))
        return body


def best_sample_team_off(times, team_off) -> float | None:
    """The off-CPU share of the CPU team in the fastest sample: a CPU point counts at its best
    time, so it is that sample's disturbance that matters (others' only ever slowed theirs).
    None where no team ran or the shares do not match the samples one to one."""
    if len(team_off) != len(times) or not len(times):
        return None
    off = team_off[int(np.argmin(times))]
    return None if math.isnan(off) else float(off)


def make_timer(device: torch.device, use_graph: bool = True):
    return CudaTimer(device, use_graph) if device.type == "cuda" else CpuTimer()


LONG_CALL_S = 0.1  # a warm-up call this long has paid its start-up costs: no second one
# A CPU call this long (ten sample targets) is planned as one call a sample even if its steady
# time is 10x shorter: a result check's call this long is then the point's estimate (measure)
WARM_ESTIMATE_S = 10 * SAMPLE_TARGET_S["cpu"]


def estimate_call(fn, timer, warmup: int = 2) -> float:
    """Seconds for one call, after warm-up (first calls pay for allocation and kernel loading).
    A warm-up call past LONG_CALL_S is the only one, and its time the estimate: such a call is
    planned as one call a sample and min_samples samples whatever its exact time (plan_counts),
    so timing a second one buys nothing (a GEMM at 10240 on a CPU runs 1.2 s a call).
    Work queued before it (the factory's writes of each rotating copy) is waited for first: in
    the first call's time it reads as the call's, and plans one call a sample."""
    timer.sync()
    for i in range(warmup):
        t0 = time.perf_counter()
        fn(i)
        timer.sync()
        if (took := time.perf_counter() - t0) > LONG_CALL_S:
            return took
    t0 = time.perf_counter()
    n = 0
    while True:  # at least 3 calls and 5 ms, so one slow call does not skew the plan; a call
        fn(n)       # past 0.1 s is known well enough from one (it only sets inner=1 and the count)
        n += 1
        timer.sync()
        if n >= 3 and time.perf_counter() - t0 > 0.005 or time.perf_counter() - t0 > 0.1:
            break
    return (time.perf_counter() - t0) / n


def sample(timer, fn, inner: int, samples: int, precision: float = 0.0,
           min_point_s: float = 0.0, min_samples: int = 5,
           max_samples: int | None = None) -> np.ndarray:
    """Up to `samples` samples, in chunks; stops early once at least `min_samples` samples and
    `min_point_s` seconds are in and the median is known to `precision` (relative half-width of
    its 95 % interval), as nvbench stops on its noise criterion. precision=0: all of them.
    Samples short of `min_point_s` go on past `samples`, up to PAST_PLAN x `max_samples`: a plan
    made on a slow first call (a kernel compiled in it) would otherwise stop a point short of its
    time."""
    if not precision:
        return np.asarray(timer.run(fn, inner, samples), dtype=float)
    chunk = max(min_samples, 6, math.ceil(samples / 8))
    parts, taken, t0 = [], 0, time.perf_counter()
    cap = max(samples, (max_samples or 0) * PAST_PLAN)
    while taken < samples or (taken < cap and time.perf_counter() - t0 < min_point_s):
        if taken < samples:
            left = samples - taken
        else:  # past the plan only to reach min_point_s: what that needs at the pace so far
            took = time.perf_counter() - t0
            left = min(cap - taken, max(1, math.ceil((min_point_s - took) * taken / took)))
        parts.append(np.asarray(timer.run(fn, inner, min(chunk, left)), dtype=float))
        taken += parts[-1].size
        if (taken >= min_samples and time.perf_counter() - t0 >= min_point_s
                and median_rel_halfwidth(np.concatenate(parts)) <= precision):
            break
    return np.concatenate(parts)


def measure(fn: Callable[[int], object], device: torch.device, point_budget_s: float, *,
            settings: Settings | None = None, timer=None, max_samples: int = 200,
            force_graph: bool = False, warm_call_s: float | None = None, **changes) -> Timing:
    """Time fn(i) (i picks a rotating buffer). Retries a noisy (GPU), contended (CPU: other
    processes used more than `contention_threshold` of the machine) or throttled (GPU) point;
    returns per-call times and the conditions they were taken under. The rules are `settings`
    (None: config/job.yaml's) with `changes` (precision 0 samples the whole budget).

    A point still noisy, contended or throttled after `retries` is returned all the same, with
    its flags; the row builder flags noise. `point_budget_s` is the most a run may sample: with
    `precision` > 0 it stops once the median is known that well (see sample()). `force_graph`
    replays calls longer than GRAPH_BELOW_S from a graph too, for ops that production runs as graph replays (a decode step);
    `use_graph=False` still wins, and a CPU has no graphs, so there it does nothing.
    `warm_call_s`: what the point's first call just took (its result check, after its operands
    were written); on a CPU, past WARM_ESTIMATE_S it is the estimate: no warm-up calls (a GEMM at
    10240: 1.2 s saved). A GPU's first calls pay for libraries' set-up: it estimates afresh.
    """
    rules = (settings or Settings.defaults()).but(**changes)
    use_graph, cv_threshold, retries = rules.use_graph, rules.cv_threshold, rules.retries
    contention_threshold = rules.contention_threshold
    precision, min_point_s, min_samples = rules.precision, rules.min_point_s, rules.min_samples
    timer = timer or make_timer(device, use_graph)
    warm = device.type == "cpu" and warm_call_s is not None and warm_call_s > WARM_ESTIMATE_S
    per_call = warm_call_s if warm else estimate_call(fn, timer)
    if isinstance(timer, CudaTimer):
        timer.use_graph = use_graph and (force_graph or per_call < GRAPH_BELOW_S)
    inner, samples = plan_counts(per_call, point_budget_s, SAMPLE_TARGET_S[device.type],
                                 min_samples, max_samples)
    # a CPU point counts at its best time (analysis/roofline.py fit_view): a wide spread does
    # not move it, so only other load (contended) earns a retry; a median's spread does
    spread_matters = not (isinstance(timer, CpuTimer) and device.type == "cpu")

    def run() -> Timing:
        if isinstance(timer, CpuTimer):
            timer.take_team_off()  # what the warm-up left
        with Conditions(device) as conditions:
            times = sample(timer, fn, inner, samples, precision, min_point_s, min_samples,
                           max_samples)
        timing = Timing(times, inner, timer.name)
        team_off = best_sample_team_off(times, timer.take_team_off()) \
            if isinstance(timer, CpuTimer) else None
        timing.conditions = conditions.summary(timing.stats["time_s"], contention_threshold,
                                               team_off)
        return timing

    return best_run(run, retries, cv_threshold, spread_matters)


def best_run(run: Callable[[], Timing], retries: int, cv_threshold: float,
             spread_matters: bool = True) -> Timing:
    """run() once, and again (at most `retries` times) until a run is settled; the best-ranked
    run. The one retry rule of every point (measure) and of the launch rows (timing._launch)."""
    best = None
    for _ in range(retries + 1):
        timing = run()
        if best is None or timing.rank() < best.rank():
            best = timing
        if best.settled(cv_threshold, spread_matters):
            break
    return best
