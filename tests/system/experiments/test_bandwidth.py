from __future__ import annotations

import json
from types import SimpleNamespace
import pytest
import torch
from tests.conftest import compose_job


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
