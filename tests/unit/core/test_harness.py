"""The typed values a job passes down (Settings, JobDevice) and the harness every experiment runs
on (core/harness.py): its loop, budgets, skip reasons and rows."""

from __future__ import annotations

import dataclasses
from types import ModuleType, SimpleNamespace

import pytest
import torch

from experiments.core import harness
from experiments.core.config import Settings
from experiments.core.device import DeviceError, JobDevice, device_facts
from experiments.core.devicenames import DeviceName
from experiments.core.harness import Point
from experiments.core.runner import Context, Unsupported

CPU = torch.device("cpu")


def test_settings_are_frozen_typed_and_changed_only_by_copy():
    base = Settings.defaults()
    assert Settings.defaults() is base  # config/job.yaml read once
    quick = base.but(point_budget_s=0.25, retries=3)
    assert (quick.point_budget_s, quick.retries) == (0.25, 3)
    assert base.point_budget_s != 0.25  # the defaults stay as they were
    with pytest.raises(dataclasses.FrozenInstanceError):
        base.retries = 5
    with pytest.raises(TypeError, match="point_budget"):
        base.but(point_budget=1.0)  # a key that is no setting is named, not dropped


def test_a_jobs_settings_are_its_own():
    from tests.conftest import compose_job
    job = compose_job(["experiment=l1", "device=cpu", "point_budget_s=0.125", "retries=4"])
    settings = Settings.of(job)
    assert (settings.point_budget_s, settings.retries) == (0.125, 4)
    assert settings.seed == job.seed and settings.precision == job.precision


def test_a_device_name_in_every_spelling():
    pool = DeviceName("cuda:0+1")
    assert (pool.name, pool.slug, pool.resource, pool.gpus) == (
        "cuda:0+1", "cuda0+1", "cuda0_1", [0, 1])
    assert DeviceName.from_slug("cuda0+1") == pool
    assert DeviceName("cpu").slug == "cpu" and str(pool) == "cuda:0+1"
    with pytest.raises(DeviceError, match="allowed"):
        DeviceName("cuda0+1")  # a slug is no config name


def test_a_job_device_resolves_once_and_is_passed_on():
    cpu = JobDevice.resolve("cpu")
    assert cpu.devices == (CPU,) and not cpu.pooled and cpu.name.slug == "cpu"
    assert JobDevice.resolve(cpu) is cpu  # resolved already: taken as it is
    if not torch.cuda.is_available():
        with pytest.raises(DeviceError, match="does not exist"):
            JobDevice.resolve("cuda:3+4")


def test_run_job_resolves_the_device_once(tmp_path, monkeypatch):
    from tests.conftest import compose_job
    from experiments import l1
    from experiments.core import runner

    calls = []
    real = JobDevice.resolve.__func__

    def counted(cls, name):
        calls.append(name)
        return real(cls, name)

    monkeypatch.setattr(JobDevice, "resolve", classmethod(counted))
    job = compose_job(["experiment=l1", "device=cpu", f"out={tmp_path / 'l1.parquet'}"])
    runner.run_job(job, l1)
    assert [str(c) for c in calls if not isinstance(c, JobDevice)] == ["cpu"]


def _module(points, measure) -> ModuleType:
    module = ModuleType("fake")
    module.points, module.measure = points, measure
    return module


def _ctx(budget_s=0.5):
    return Context(device=CPU, dtype="float32", facts=device_facts(CPU),
                   settings=Settings.defaults().but(point_budget_s=budget_s))


def test_the_harness_owns_the_loop_budgets_and_skip_reasons():
    seen = []

    def points(cfg, ctx):
        return [Point({"op": "a", "n": 1}, args={"k": "ok"}),
                Point({"op": "b", "n": 2}, args={"k": "oom"}, least_s=2.0),
                Point({"op": "c", "n": 3}, args={"k": "unsupported"}, most_s=0.1),
                Point({"op": "d", "n": 4}, args={"k": "skip"}),
                Point({"op": "e"}, status="not_applicable", message="no SMs here")]

    def measure(state):
        seen.append((state.row["op"], state.budget_s, len(state.rows)))
        state.memo["calls"] = state.memo.get("calls", 0) + 1
        kind = state.args["k"]
        if kind == "oom":
            raise torch.OutOfMemoryError("CUDA out of memory")
        if kind == "unsupported":
            raise Unsupported("no float8 here")
        if kind == "skip":
            state.skip(f"after {state.memo['calls']} calls")
        return {"time_s": 1.0}

    module, ctx = _module(points, measure), _ctx(0.5)
    rows = list(harness.rows(module, None, ctx))
    assert [r["status"] for r in rows] == ["ok", "oom", "unsupported", "skipped",
                                           "not_applicable"]
    assert rows[3]["message"] == "after 4 calls" and rows[4]["message"] == "no SMs here"
    assert rows[0]["time_s"] == 1.0 and rows[1]["n"] == 2
    # each point's budget is the job's within its bounds; each sees the rows before it
    assert seen == [("a", 0.5, 0), ("b", 2.0, 1), ("c", 0.1, 2), ("d", 0.5, 3)]
    assert harness.count(module, None, ctx) == 5
    assert harness.sampling_s(module, None, ctx) == pytest.approx(0.5 + 2.0 + 0.1 + 0.5)


def test_a_plan_runs_the_points_once_and_old_modules_their_own_run():
    built = []

    def points(cfg, ctx):
        built.append(1)
        return [Point({"op": "a"}), Point({"op": "b"})]

    plan = harness.plan(_module(points, lambda state: {"time_s": 2.0}), None, _ctx(0.25))
    assert (plan.total, plan.sampling_s) == (2, 0.5)
    assert [r["op"] for r in plan.rows] == ["a", "b"] and len(built) == 1
    old = ModuleType("old")
    old.run = lambda cfg, ctx: iter([{"op": "x", "status": "ok"}])
    old.points = lambda cfg, ctx: 1
    plan = harness.plan(old, None, _ctx())
    assert plan.total == 1 and plan.sampling_s is None and next(plan.rows)["op"] == "x"


def test_points_that_are_not_points_are_named():
    module = _module(lambda cfg, ctx: [{"op": "a"}], lambda state: {})
    with pytest.raises(TypeError, match="gave dict, not a Point"):
        harness.count(module, None, SimpleNamespace())


def test_adapt_gives_a_point_the_columns_that_follow_from_the_rows_before():
    def measure(state):
        if state.row["n"] == 2:
            raise RuntimeError("out of memory")
        return {"time_s": float(state.row["n"])}

    module = _module(lambda cfg, ctx: [Point({"op": "a", "n": 100}) for _ in range(3)], measure)
    module.adapt = lambda state: {"n": 1 + len(state.rows)}
    rows = list(harness.rows(module, None, _ctx()))
    # a failed point's row holds its adapted columns too
    assert [(r["n"], r["status"]) for r in rows] == [(1, "ok"), (2, "oom"), (3, "ok")]


def test_a_groups_rows_are_finished_together_and_yielded_after_it():
    finished, yielded = [], []

    def finish(group, rows):
        finished.append((group, [r["op"] for r in rows], len(yielded)))
        for r in rows:
            r["share"] = r["time_s"] / sum(x["time_s"] for x in rows)

    plan = [Point({"op": "a"}, group="g"), Point({"op": "b"}, group="g"), Point({"op": "c"}),
            Point({"op": "d"}, group="h")]
    module = _module(lambda cfg, ctx: plan, lambda state: {"time_s": 1.0 + len(state.rows)})
    module.finish = finish
    for row in harness.rows(module, None, _ctx()):
        yielded.append(row)
    assert finished == [("g", ["a", "b"], 0), ("h", ["d"], 3)]  # before any of its rows went
    assert [r["op"] for r in yielded] == ["a", "b", "c", "d"]
    assert yielded[0]["share"] == pytest.approx(1 / 3) and "share" not in yielded[2]


def test_more_rows_follow_a_point_and_leave_the_total_open():
    def more(state, row):
        return [{"op": f"{row['op']}.part", "status": "ok"}] if row["status"] == "ok" else []

    def measure(state):
        seen.append(len(state.rows))
        return {"time_s": 1.0}

    seen = []
    plan = [Point({"op": "a"}, more=True), Point({"op": "b"}), Point({"op": "c"}, more=True,
                                                                     status="error", message="x")]
    module = _module(lambda cfg, ctx: plan, measure)
    module.more = more
    # the rows it adds are no point's: the next point sees only the rows of points
    assert [r["op"] for r in harness.rows(module, None, _ctx())] == ["a", "a.part", "b", "c"]
    assert seen == [0, 1] and harness.count(module, None, _ctx()) is None
    assert harness.count(_module(lambda cfg, ctx: plan[1:2], measure), None, _ctx()) == 1
