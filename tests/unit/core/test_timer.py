"""The timer: how a point's calls are planned, sampled and summarized (core/timer.py)."""

import itertools
import math
import time

import numpy as np
import pytest
import torch

from experiments.core.config import Settings
from experiments.core.runner import Context
from experiments.core.device import device_facts
from experiments.core.timer import GRAPH_BELOW_S, CpuTimer, CudaTimer, measure, plan_counts, summarize


def _slow_call(i):  # longer than GRAPH_BELOW_S, so only a forced graph replays it
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 2 * GRAPH_BELOW_S:
        pass


def test_summarize_quantiles_and_cv():
    stats = summarize([1.0, 2.0, 3.0, 4.0, 10.0])
    assert stats["time_s"] == 3.0 and stats["time_s_min"] == 1.0 and stats["samples"] == 5
    assert stats["time_s_q25"] == 2.0 and stats["time_s_q75"] == 4.0
    assert math.isclose(stats["cv"], np.std([1, 2, 3, 4, 10], ddof=1) / 4.0)


def test_cpu_timer_divides_by_inner_calls_on_a_fake_clock():
    ticks = itertools.count(step=0.5)  # every clock read advances 0.5 s
    timer = CpuTimer(clock=lambda: next(ticks))
    calls = []
    samples = timer.run(lambda i: calls.append(i), inner=4, samples=3)
    # each sample reads the clock twice, 0.5 s apart, and made 4 calls
    np.testing.assert_allclose(samples, [0.125, 0.125, 0.125])
    assert calls == list(range(12))  # the index runs on, so rotating buffers all take turns


def test_plan_counts_reaches_past_timer_overhead_within_budget():
    inner, samples = plan_counts(per_call_s=1e-6, point_budget_s=0.1, sample_target_s=1e-3)
    assert inner == 1000 and samples == 100
    inner, samples = plan_counts(per_call_s=1.0, point_budget_s=0.1, sample_target_s=1e-3)
    assert inner == 1 and samples == 5  # never fewer than min_samples
    assert plan_counts(1e-9, 1e9, 1e-3, max_samples=50)[1] == 50


def test_a_call_longer_than_the_budget_is_taken_min_samples_times():
    """min_samples is what a call longer than the point budget gets (job.yaml: 5). Fewer than 2
    is refused: one sample has no spread."""
    import time as clock

    def slow(i):
        clock.sleep(0.02)

    for n in (3, 5):
        t = measure(slow, torch.device("cpu"), point_budget_s=0.001, min_samples=n, retries=0,
                    cv_threshold=10.0)
        assert t.stats["samples"] == n, (n, t.stats["samples"])
    assert measure(slow, torch.device("cpu"), point_budget_s=0.001, retries=0,
                   cv_threshold=10.0).stats["samples"] == 5  # job.yaml's default
    from tests.conftest import compose_job
    assert compose_job(["experiment=timing", "device=cpu"]).min_samples == 5
    with pytest.raises(Exception, match="min_samples=1 must be an integer >= 2"):
        compose_job(["experiment=timing", "device=cpu", "min_samples=1"])


def test_work_queued_before_the_estimate_is_not_the_calls():
    """A factory's rotating copies still being written when timing starts (a GPU runs them
    after the factory returns): estimate_call waits for them before its first call, so a short
    call is not planned as one call a sample on the queue's time."""
    import time as clock

    from experiments.core.timer import LONG_CALL_S, estimate_call

    class Queued:  # sync() drains 2 x LONG_CALL_S of earlier work the first time
        name, pending = "queued", 2 * LONG_CALL_S

        def sync(self):
            clock.sleep(self.pending)
            self.pending = 0.0

    per_call = estimate_call(lambda i: clock.sleep(0.0005), Queued())
    assert 0.0005 <= per_call < 0.01, per_call


def test_a_long_call_is_warmed_up_once_and_not_timed_again_a_short_one_twice():
    import time as clock

    from experiments.core.timer import LONG_CALL_S, WARM_ESTIMATE_S, estimate_call

    for sleep, calls in ((2 * LONG_CALL_S, 1), (0.0005, None)):
        seen = []

        def fn(i):
            seen.append(i)
            clock.sleep(sleep)

        per_call = estimate_call(fn, CpuTimer())
        assert per_call >= sleep
        if calls is not None:
            assert len(seen) == calls, seen  # one warm-up, its time the estimate
        else:
            assert seen[:3] == [0, 1, 0] and len(seen) >= 5  # two warm-ups, then >= 3 timed
    for warm, calls in ((2 * WARM_ESTIMATE_S, 5), (WARM_ESTIMATE_S / 2, 10)):  # a check's call:
        seen = []  # the estimate when long (5 samples only), else warm-ups and estimate as ever
        measure(lambda i: seen.append(i), torch.device("cpu"), 0.001, retries=0, warm_call_s=warm,
                min_point_s=0)
        assert len(seen) == calls if warm > WARM_ESTIMATE_S else len(seen) >= calls, (warm, seen)


def test_a_plan_made_on_a_slow_first_call_still_samples_min_point_s():
    """A first call that compiled its kernel plans too few samples (5 of a call 100x faster):
    sampling goes on until min_point_s, up to PAST_PLAN x max_samples, and no further."""
    import time as clock

    from experiments.core.timer import PAST_PLAN, WARM_ESTIMATE_S

    def fast(i):
        clock.sleep(0.001)

    for min_point_s, cap, at_least, at_most in ((0.05, 200, 30, 60),
                                                (10.0, 40, 40 * PAST_PLAN, 40 * PAST_PLAN)):
        t0 = clock.perf_counter()
        stats = measure(fast, torch.device("cpu"), 0.001, retries=0, min_point_s=min_point_s,
                        warm_call_s=100 * WARM_ESTIMATE_S, max_samples=cap).stats
        assert at_least <= stats["samples"] <= at_most, (min_point_s, stats["samples"])
        assert clock.perf_counter() - t0 < 2.0  # the cap, not min_point_s, ended the 10 s one


class _RecordingCudaTimer(CudaTimer):
    """A CudaTimer that runs no CUDA: it records whether measure() asked it for a graph."""

    def __init__(self):
        super().__init__(torch.device("cpu"))
        self.asked = []

    def sync(self):
        pass

    def run(self, fn, inner, samples):
        self.asked.append(self.use_graph)
        return np.full(samples, 1e-3)


@pytest.mark.parametrize("use_graph, force_graph, expect", [
    (True, False, False),  # a long call is timed eagerly by default
    (True, True, True),  # ... unless the caller forces graph replay
    (False, True, False),  # the job's use_graph=False still wins
])
def test_force_graph_replays_long_calls(use_graph, force_graph, expect):
    timer = _RecordingCudaTimer()
    measure(_slow_call, torch.device("cpu"), point_budget_s=0.01, timer=timer, use_graph=use_graph,
            force_graph=force_graph, min_samples=2, min_point_s=0)  # its samples take no time
    assert timer.asked == [expect]


def test_force_graph_is_ignored_on_a_cpu():
    ctx = Context(device=torch.device("cpu"), dtype="float32", facts=device_facts(torch.device("cpu")),
                  settings=Settings.defaults().but(point_budget_s=0.01))
    x = ctx.randn(64)
    stats = ctx.time(lambda i: x * 2, force_graph=True)
    assert stats["timer"] == "perf_counter" and stats["time_s"] > 0


def test_median_interval_narrows_with_samples_and_spread():
    from experiments.core.timer import median_rel_halfwidth

    rng = np.random.default_rng(0)
    tight = 1.0 + 0.001 * rng.standard_normal(60)
    wide = 1.0 + 0.2 * rng.standard_normal(60)
    assert median_rel_halfwidth(tight) < 0.001 < 0.01 < median_rel_halfwidth(wide)
    assert median_rel_halfwidth(wide[:10]) > median_rel_halfwidth(wide)  # more samples: narrower
    assert median_rel_halfwidth([1.0] * 5) == math.inf  # too few to say


class _Scripted:
    """A timer whose samples come from a function of the sample's index: counts what it gave."""

    name = "scripted"

    def __init__(self, value):
        self.value, self.given = value, 0

    def sync(self):
        pass

    def run(self, fn, inner, samples):
        out = np.array([self.value(self.given + i) for i in range(samples)])
        self.given += samples
        return out


def test_sampling_stops_once_the_median_is_known_and_not_before():
    from experiments.core.timer import sample

    steady = _Scripted(lambda i: 1e-3 * (1 + 0.001 * math.sin(i)))
    got = sample(steady, None, 1, 200, precision=0.01, min_samples=10)
    assert 10 <= len(got) <= 30 and steady.given == len(got)  # a chunk or two, not 200
    noisy = _Scripted(lambda i: 1e-3 * (1 + 0.5 * ((i * 7919) % 13 - 6) / 6))
    assert len(sample(noisy, None, 1, 200, precision=0.01, min_samples=10)) == 200
    # precision 0: the whole budget, as before
    assert len(sample(_Scripted(lambda i: 1e-3), None, 1, 200, precision=0.0)) == 200
    # never before min_point_s, however steady
    t0 = time.perf_counter()
    slow = _Scripted(lambda i: (time.sleep(0.002), 1e-3)[1])
    sample(slow, None, 1, 200, precision=0.01, min_samples=10, min_point_s=0.1)
    assert time.perf_counter() - t0 >= 0.1


def _sampled_on_a_clock(monkeypatch, sample_s: float, planned: int, min_point_s: float):
    """timer.sample on a clock each sample moves `sample_s` (each a little apart): (the samples,
    the clock at the end, how many the timer gave)."""
    import types

    from experiments.core import timer as timer_module

    clock = [0.0]
    monkeypatch.setattr(timer_module, "time", types.SimpleNamespace(perf_counter=lambda: clock[0]))

    def one(i):
        clock[0] += sample_s
        return sample_s * (1 + 0.01 * (i % 3))

    timer = _Scripted(one)
    got = timer_module.sample(timer, None, 1, planned, precision=0.01, min_samples=5,
                              min_point_s=min_point_s, max_samples=200)
    return got, clock[0], timer.given


def test_sampling_past_the_plan_stops_near_min_point_s_not_a_chunk_later(monkeypatch):
    """A slow call (a DRAM point's 0.2 s) sampled to min_point_s, on a clock each sample moves
    20 ms: the samples past the plan are what min_point_s still needs at the pace so far."""
    got, clock, given = _sampled_on_a_clock(monkeypatch, 0.02, 5, 0.15)
    assert clock >= 0.15 and len(got) == given
    assert len(got) == 8  # 5 planned (0.10 s), then the 3 that 0.05 s more takes; a chunk: 11


def test_a_point_faster_than_planned_still_samples_min_point_s(monkeypatch):
    """200 planned samples of 5 ms cover 1 s; min_point_s asks 1.5 s (a CPU's DRAM point at its
    smallest working set): the point samples on past max_samples to it."""
    got, clock, given = _sampled_on_a_clock(monkeypatch, 0.005, 200, 1.5)
    # 300 samples at 5 ms, one more where the float sum falls short of 1.5; the old cap: 200
    assert clock >= 1.5 and len(got) == given and 300 <= len(got) <= 301


def test_cpu_timer_index_runs_on_across_chunks():
    calls = []
    timer = CpuTimer()
    timer.run(lambda i: calls.append(i), inner=2, samples=2)
    timer.run(lambda i: calls.append(i), inner=2, samples=1)
    assert calls == [0, 1, 2, 3, 4, 5]
