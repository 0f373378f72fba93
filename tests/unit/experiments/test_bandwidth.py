import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from tests.conftest import compose_job


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_bandwidth_counts_bytes_and_checks_results(run_experiment, dtype):
    rows = run_experiment("bandwidth", dtype, ["experiment.sizes=[4096,65536]"])
    assert set(rows.op) == {"copy", "add_one", "scale", "add", "triad"}
    assert (rows.status == "ok").all(), rows[["op", "status", "message"]]
    item = {"float32": 4, "float16": 2, "bfloat16": 2}[dtype]
    n = rows.n.to_numpy()
    arrays = rows.op.map({"copy": 2, "add_one": 2, "scale": 2, "add": 3, "triad": 3})
    flops = rows.op.map({"copy": 0, "add_one": 1, "scale": 1, "add": 1, "triad": 2})
    # a CPU call repeats the pass (params.passes) until it moves call_bytes per thread
    passes = rows.params.map(lambda p: json.loads(p)["passes"])
    assert (passes >= 1).all() and (passes > 1).any() == (dtype == "float32")
    np.testing.assert_array_equal(rows.bytes, passes * arrays * n * item)
    np.testing.assert_array_equal(rows.flops, passes * flops * n)
    assert set(rows.variant) == {"numba" if dtype == "float32" else "torch"}
    assert (rows.check_passed).all() and (rows.rel_error < 1e-2).all()
    # C10: x + 1 in float32 is 1 FLOP per 8 bytes
    add_one = rows[rows.op == "add_one"]
    np.testing.assert_allclose(add_one.intensity, 1 / (2 * item))
    np.testing.assert_allclose(rows.byte_per_s, rows.bytes / rows.time_s)
    assert (rows.time_s_q10 <= rows.time_s).all() and (rows.time_s <= rows.time_s_q90).all()


def test_bandwidth_rejects_unknown_op(run_experiment):
    with pytest.raises(ValueError, match="experiment.ops"):
        run_experiment("bandwidth", "float32", ["experiment.ops=[copy,memset]"])


@pytest.mark.parametrize("value", ["-1", "nan", "60"])
def test_bandwidth_rejects_a_bad_dram_steady_time(run_experiment, value):
    with pytest.raises(Exception, match="experiment.dram_steady_s"):
        run_experiment("bandwidth", "float32", [f"experiment.dram_steady_s={value}"])


def test_bandwidth_tf32_is_not_a_storage_type(run_experiment):
    rows = run_experiment("bandwidth", "tf32", ["experiment.sizes=[4096]", "experiment.ops=[copy]"])
    assert list(rows.status) == ["not_applicable"]


def test_a_cpus_dram_points_step_one_vector_at_a_time(run_experiment, monkeypatch):
    """The team's points in the DRAM window run the kernels stepping one vector at a time
    (cpu_stream.ONE_VECTOR), those in a cache LLVM's four: a 16 KiB 'LLC' here puts the 64 KiB
    arrays in the DRAM window and the 4 KiB ones in a cache, and both compute what they should.
    The DRAM window's points sample dram_steady_s each, the caches' their point budget."""
    pytest.importorskip("numba")
    from experiments import bandwidth
    from experiments.kernels import cpu_stream
    monkeypatch.setattr(bandwidth, "_llc", lambda ctx: 16384)
    calls, run = [], cpu_stream.run

    def recorded(*args, one_vector=False, **kwargs):
        calls.append(one_vector)
        return run(*args, one_vector=one_vector, **kwargs)
    monkeypatch.setattr(cpu_stream, "run", recorded)
    rows = run_experiment("bandwidth", "float32", ["experiment.sizes=[4096,65536]",
                                                   "experiment.dram_steady_s=0.3"])
    step = rows.params.map(lambda p: json.loads(p)["one_vector_step"])
    assert list(step) == [ws >= 4 * 16384 for ws in rows.working_set_bytes]
    assert step.any() and not step.all()
    assert (rows.status == "ok").all() and rows.check_passed.all()
    assert set(calls) == {True, False}
    # DRAM's points sample dram_steady_s each (the job's point budget: 0.02 s), and say so
    # (at their mean time at least; the caches' at their best time at most: load only slows)
    sampled = rows.samples * rows.inner_reps * rows.time_s_mean
    planned = rows.samples * rows.inner_reps * rows.time_s_min
    steady = rows.params.map(lambda p: json.loads(p).get("min_point_s"))
    assert list(steady.notna()) == list(step) and (steady[step] == 0.3).all()
    assert (sampled[step] >= 0.2).all() and (planned[~step] < 0.1).all(), (sampled, planned)
    # and the job's start line counts them so (5 cache points x 0.02 s, 5 DRAM points x 0.3 s)
    cfg = compose_job(["experiment=bandwidth", "experiment.sizes=[4096,65536]",
                       "experiment.dram_steady_s=0.3"]).experiment
    from experiments.core import harness
    from experiments.core.config import Settings
    ctx = SimpleNamespace(device=torch.device("cpu"), dtype="float32",
                          settings=Settings.defaults().but(point_budget_s=0.02))
    assert harness.sampling_s(bandwidth, cfg, ctx) == pytest.approx(5 * 0.02 + 5 * 0.3)
