"""The measurement core: statistics, timers on a fake clock, the row schema, atomic writes, config errors."""

import itertools
import math
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from hydra.errors import ConfigCompositionException
from omegaconf.errors import ValidationError

from experiments.core.config import ConfigError
from experiments.analysis import dataset
from experiments.core import store
from experiments.core.device import DeviceError, device_facts, resolve_pool
from experiments.core.schema import FORMAT, SCHEMA, finish_row, to_table
from experiments.core.timer import GRAPH_BELOW_S, CpuTimer, CudaTimer, measure, plan_counts, summarize
from experiments.core.runner import Context, Unsupported

from conftest import compose_job


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
    from conftest import compose_job
    assert compose_job(["experiment=timing", "device=cpu"]).min_samples == 5
    with pytest.raises(Exception, match="min_samples=1 must be an integer >= 2"):
        compose_job(["experiment=timing", "device=cpu", "min_samples=1"])


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
    sampling goes on until min_point_s, up to max_samples, and no further."""
    import time as clock

    from experiments.core.timer import WARM_ESTIMATE_S

    def fast(i):
        clock.sleep(0.001)

    for min_point_s, cap, at_least, at_most in ((0.05, 200, 30, 60), (10.0, 40, 40, 40)):
        t0 = clock.perf_counter()
        stats = measure(fast, torch.device("cpu"), 0.001, retries=0, min_point_s=min_point_s,
                        warm_call_s=100 * WARM_ESTIMATE_S, max_samples=cap).stats
        assert at_least <= stats["samples"] <= at_most, (min_point_s, stats["samples"])
        assert clock.perf_counter() - t0 < 1.0  # max_samples, not min_point_s, ended the 10 s one


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


def _slow_call(i):  # longer than GRAPH_BELOW_S, so only a forced graph replays it
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 2 * GRAPH_BELOW_S:
        pass


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
                  point_budget_s=0.01)
    x = ctx.randn(64)
    stats = ctx.time(lambda i: x * 2, force_graph=True)
    assert stats["timer"] == "perf_counter" and stats["time_s"] > 0


def test_finish_row_derives_rates_and_rejects_unknown_columns():
    row = finish_row({"experiment": "x", "op": "y", "host": "h", "device": "cpu",
                      "device_kind": "cpu", "dtype": "float32", "status": "ok",
                      "flops": 10.0, "bytes": 80.0, "time_s": 2.0, "params": {"a": 1}})
    assert row["intensity"] == 0.125 and row["flop_per_s"] == 5.0 and row["byte_per_s"] == 40.0
    assert row["params"] == '{"a": 1}'
    with pytest.raises(KeyError, match="outside the schema"):
        finish_row({"status": "ok", "speed": 1})
    with pytest.raises(ValueError, match="status"):
        finish_row({"status": "fine"})


def _table():
    row = {"experiment": "x", "op": "y", "host": "h", "device": "cpu", "device_kind": "cpu",
           "dtype": "float32", "status": "ok"}
    return to_table([row], {"run_id": "r1"})


def test_atomic_write_leaves_no_partial_file(tmp_path, monkeypatch):
    target = tmp_path / "a" / "out.parquet"

    def broken_write(table, handle):
        handle.write(b"PAR1 half a file")
        raise KeyboardInterrupt  # as if the job were killed mid-write

    monkeypatch.setattr(store.pq, "write_table", broken_write)
    with pytest.raises(KeyboardInterrupt):
        store.write_atomic(_table(), target)
    assert list(target.parent.iterdir()) == []


def test_written_file_has_schema_and_provenance(tmp_path):
    path = store.write_atomic(_table(), tmp_path / "out.parquet")
    assert pq.read_schema(path).remove_metadata() == SCHEMA
    assert store.read_metadata(path) == {"run_id": "r1"} | FORMAT  # and its format


def test_collect_names_a_corrupt_or_foreign_file(tmp_path):
    good = store.write_atomic(_table(), tmp_path / "good.parquet")
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"not parquet at all")
    with pytest.raises(store.DatasetError, match="bad.parquet"):
        dataset.collect([good, bad])
    foreign = tmp_path / "foreign.parquet"
    pq.write_table(pa.table({"x": [1, 2]}), foreign)
    with pytest.raises(store.DatasetError, match="foreign.parquet.*missing columns"):
        dataset.collect([good, foreign])
    assert len(dataset.collect([good, good])) == 1  # one file named twice is read once


@pytest.mark.parametrize("override, message", [
    ("dtype=float13", "float13"),
    ("experiment.sizes=[]", "experiment.sizes is empty"),
    ("experiment.sizes=[1024,-4]", "experiment.sizes has \\[-4\\]"),
    ("device=gpu", "device='gpu'"),
    ("point_budget_s=0", "point_budget_s"),
    ("point_budget_s=nan", "point_budget_s=nan must be a finite number > 0"),
    ("point_budget_s=inf", "point_budget_s=inf must be a finite number > 0"),
    ("cv_threshold=-1", "cv_threshold=-1.0 must be a finite number > 0"),
    ("cv_threshold=nan", "cv_threshold=nan must be a finite number > 0"),
])
def test_bad_config_names_the_key(override, message):
    with pytest.raises((ConfigError, ValueError, ValidationError, ConfigCompositionException),
                       match=message):
        compose_job(["experiment=bandwidth", override])


def test_out_that_cannot_be_written_fails_before_measuring(tmp_path, monkeypatch):
    import experiments.core.device as device

    # the device must not be touched: a bad out= fails while the config is built
    monkeypatch.setattr(device, "resolve_pool", lambda name: pytest.fail("device touched"))
    with pytest.raises(ConfigError, match=f"out='{tmp_path}' is a directory"):
        compose_job(["experiment=bandwidth", "device=cpu", f"out={tmp_path}"])
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ConfigError, match="is not a directory"):
        compose_job(["experiment=bandwidth", "device=cpu", f"out={blocker}/x/bw.parquet"])
    # a read-only place (a read-only mount: root may write in a folder chmod'ed read-only)
    with pytest.raises(ConfigError, match="cannot write in /proc"):
        compose_job(["experiment=bandwidth", "device=cpu", "out=/proc/rooflab/bw.parquet"])
    compose_job(["experiment=bandwidth", "device=cpu", f"out={tmp_path}/new/dir/bw.parquet"])
    assert not (tmp_path / "new").exists()  # checking made nothing


@pytest.mark.system
def test_bad_out_on_the_command_line_measures_nothing(tmp_path):
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-m", "experiments", "experiment=bandwidth",
                          "device=cpu", f"out={tmp_path}"], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parent.parent)
    assert run.returncode == 2, run.stderr[-2000:]
    assert f"bad config: out='{tmp_path}' is a directory" in run.stderr
    assert "bandwidth copy" not in run.stdout + run.stderr  # no point was measured


def test_unknown_experiment_lists_the_allowed_ones():
    from hydra.errors import MissingConfigException

    with pytest.raises(MissingConfigException) as info:
        compose_job(["experiment=nosuch"])
    assert "nosuch" in str(info.value)
    assert "\tbandwidth" in str(info.value) and "\tmatmul" in str(info.value)


def test_device_resolution():
    assert resolve_pool("cpu") == [torch.device("cpu")]
    if not torch.cuda.is_available():
        assert resolve_pool("auto") == [torch.device("cpu")]
        with pytest.raises(DeviceError, match="does not exist"):
            resolve_pool("cuda:0")
    with pytest.raises(DeviceError, match="allowed"):
        resolve_pool("tpu")


def test_cpu_facts_are_read_not_typed():
    facts = device_facts(torch.device("cpu"))
    assert facts.compute_units >= 1 and facts.memory_bytes > 1 << 28
    assert facts.llc_bytes > 0 and facts.name


def test_point_turns_failures_into_status_rows():
    ctx = Context(device=torch.device("cpu"), dtype="float32", facts=device_facts(torch.device("cpu")))
    assert ctx.point({"op": "a"}, lambda: {"time_s": 1.0})["status"] == "ok"

    def unsupported():
        raise Unsupported("no fp8 here")

    def oom():
        raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 1 TB")

    def broken():
        raise ZeroDivisionError("boom")

    assert ctx.point({"op": "a"}, unsupported) | {} == {"op": "a", "status": "unsupported", "message": "no fp8 here"}
    assert ctx.point({"op": "a"}, oom)["status"] == "oom"
    assert ctx.point({"op": "a"}, broken)["status"] == "error"


def test_random_data_is_never_zeros():
    ctx = Context(device=torch.device("cpu"), dtype="float32", facts=device_facts(torch.device("cpu")))
    x = ctx.randn(1000)
    assert (x != 0).all() and x.std() > 0.5


def test_defaults_live_in_one_layer_the_yaml():
    """Each key's default is written once, in config/: a dataclass default beside the YAML's
    would be a second, silently disagreeing layer."""
    import dataclasses

    import yaml
    from omegaconf import MISSING

    from experiments import experiment, experiment_names
    from experiments import experiment_config
    from experiments.core.config import CONFIG_DIR, JobConfig

    for name in experiment_names():
        config = experiment(name).Config
        values = yaml.safe_load((CONFIG_DIR / "experiment" / f"{name}.yaml").read_text())
        for f in dataclasses.fields(config):
            if f.name == "name":
                continue
            assert f.default == MISSING and f.default_factory is dataclasses.MISSING, \
                f"{name}.{f.name} has a default in its dataclass"
            assert f.name in values, f"config/experiment/{name}.yaml lacks {f.name}"
        assert isinstance(experiment_config(name), config)  # the YAML alone makes a valid config
    job = yaml.safe_load((CONFIG_DIR / "job.yaml").read_text())
    for f in dataclasses.fields(JobConfig):
        assert f.default == MISSING, f"JobConfig.{f.name} has a default in its dataclass"
        assert f.name == "experiment" or f.name in job, f"config/job.yaml lacks {f.name}"


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


def test_cpu_timer_index_runs_on_across_chunks():
    calls = []
    timer = CpuTimer()
    timer.run(lambda i: calls.append(i), inner=2, samples=2)
    timer.run(lambda i: calls.append(i), inner=2, samples=1)
    assert calls == [0, 1, 2, 3, 4, 5]


def test_a_context_given_no_settings_measures_by_the_jobs_rules():
    """place() and tests build a Context without Hydra: it must measure as a job does."""
    from experiments.core.config import job_defaults
    from experiments.core.runner import SETTINGS
    ctx = Context(device=torch.device("cpu"), dtype="float32",
                  facts=device_facts(torch.device("cpu")))
    job = job_defaults()
    assert {k: getattr(ctx, k) for k in SETTINGS} == {k: job[k] for k in SETTINGS}
    assert ctx.precision > 0 and ctx.min_point_s > 0  # not "the whole budget" as before
    # and config.yaml's per-kind `job:` may set each of them: the schema lists every one
    import yaml
    from conftest import ROOT
    schema = yaml.safe_load((ROOT / "workflow/schemas/config.schema.yaml").read_text())
    assert set(schema["definitions"]["job_settings"]["properties"]) == set(SETTINGS)


def test_rotation_copies_span_the_llc_within_their_bounds():
    from experiments.core.budget import rotation_copies
    assert rotation_copies(1e6, 32e6, 2.0, at_most=16) == 16  # 64 wanted, capped
    assert rotation_copies(1e6, 32e6, 2.0, at_most=100) == 64
    assert rotation_copies(1e9, 32e6, 2.0, at_most=16, at_least=2) == 2
    assert rotation_copies(1e6, 32e6, 2.0, at_most=100, free_bytes=20e6) == 10  # half the free
    assert rotation_copies(1e9, 32e6, 2.0, at_most=16, free_bytes=1e6) == 1  # never fewer than 1


def test_the_slow_point_guard_skips_by_the_best_rates_so_far():
    from experiments.core.budget import SlowPointGuard
    guard = SlowPointGuard(max_call_s=1.0)
    assert guard.skip(1e12, 1e9) is None  # nothing measured yet: no prediction
    guard.update({"status": "ok", "flops": 1e9, "bytes": 1e6, "time_s": 1e-3})  # 1 TFLOP/s
    assert guard.skip(0.5e12, 1e6) is None
    skipped = guard.skip(2e12, 1e6)
    assert skipped["status"] == "skipped" and "max_call_s=1.0" in skipped["message"]
    guard.update({"status": "error", "flops": 1e9, "bytes": 1e6, "time_s": 1e-9})  # not learnt
    assert guard.skip(2e12, 1e6) is not None

