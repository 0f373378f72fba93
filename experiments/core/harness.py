"""The harness every experiment runs on, in the spirit of nvbench's `state`.

An experiment declares its points, `points(cfg, ctx)`: for each, the row it writes as far as it
is known before measuring (op, n, flops, bytes, params), what measuring it needs (`args`) and the
bounds of its budget; and one function measuring a point, `measure(state)`, given a `State`
(the job's context and settings, the device, the dtype, the point, its budget, the rows so far);
and, where a point's row follows from the rows before it, `adapt(state)`: those columns;
`skip(state)`: the columns of a point declined, unmeasured (status skipped, message), or None;
`finish(group, rows)`: the columns a group's rows take from one another (a ratio to one);
`more(state, row)`: rows that follow a point's, known only once it ran (its per-op breakdown).
The harness owns the rest: the loop over the points, each point's budget (computed here, once),
the skip reasons (a failure, an OOM or an unsupported dtype becomes a row with its status) and
the rows. A point known not to be measurable carries its status and message and is never run.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from types import ModuleType
from typing import Any


class Skipped(Exception):
    """A point the experiment declines to measure (predicted too slow, past a plateau): a
    `skipped` row with the reason."""


@dataclass(frozen=True)
class Point:
    """One point of an experiment's sweep."""

    row: dict  # the row's columns known before measuring: op, variant, n, flops, bytes, params
    args: dict = field(default_factory=dict)  # what measure() reads that the row does not hold
    least_s: float = 0.0  # the point samples at least this long: its budget is raised to it
    most_s: float = math.inf  # ...and at most this long: its budget is capped there
    status: str | None = None  # a row decided without measuring (not_applicable): its status
    message: str | None = None  # ...and why
    group: Any = None  # consecutive points of one group: finish(group, rows) sees their rows
    more: bool = False  # more(state, row) may add rows after it: the job's total is not known


def budget_s(point: Point, ctx) -> float:
    """Seconds a point samples at most: the job's point_budget_s (config/job.yaml's, or the
    sweep's per-kind `job:`) within the point's own bounds."""
    return min(max(ctx.settings.point_budget_s, point.least_s), point.most_s)


@dataclass
class State:
    """What measure(state) gets: one point, and the job it belongs to."""

    ctx: Any  # core.runner.Context: the device, its facts, the dtype, the settings
    cfg: Any  # the experiment's config
    point: Point
    budget_s: float  # this point's budget (budget_s above)
    rows: list[dict]  # the rows of the points before this one, in order
    memo: dict  # scratch every point of the job shares (arrays drawn once, say)

    @classmethod
    def alone(cls, ctx, cfg, point: Point) -> "State":
        """One point measured on its own: no rows before it (a test, a one-off)."""
        return cls(ctx, cfg, point, budget_s(point, ctx), [], {})

    @property
    def args(self) -> dict:
        return self.point.args

    @property
    def row(self) -> dict:
        return self.point.row

    @property
    def device(self):
        return self.ctx.device

    @property
    def dtype(self) -> str:
        return self.ctx.dtype

    @property
    def settings(self):
        return self.ctx.settings

    def time(self, fn: Callable[[int], object], **overrides) -> dict:
        """The row's time columns for fn(i), sampled within this point's budget."""
        return self.ctx.time(fn, point_budget_s=self.budget_s, **overrides)

    def skip(self, reason: str):
        raise Skipped(reason)


def declared(module: ModuleType) -> bool:
    """Whether `module` runs on this harness (it has measure()); else it loops itself (run)."""
    return callable(getattr(module, "measure", None))


def points(module: ModuleType, cfg, ctx) -> list[Point]:
    """The experiment's points, built once per job."""
    plan = list(module.points(cfg, ctx))
    bad = [p for p in plan if not isinstance(p, Point)]
    if bad:
        raise TypeError(f"{module.__name__}.points() gave {type(bad[0]).__name__}, not a Point")
    return plan


def count(module: ModuleType, cfg, ctx) -> int | None:
    """How many rows the job writes (its progress's total); None where not known up front."""
    if declared(module):
        return _total(points(module, cfg, ctx))
    own = getattr(module, "points", None)
    return own(cfg, ctx) if own else None


def _total(plan: list[Point]) -> int | None:
    return None if any(p.more for p in plan) else len(plan)


def sampling_s(module: ModuleType, cfg, ctx, plan: list[Point] | None = None) -> float:
    """Seconds the points sample at most, before warm-ups (the job's start line): each measured
    point's budget, plus what the experiment says some point may sample past it (extra_s)."""
    plan = points(module, cfg, ctx) if plan is None else plan
    extra = getattr(module, "extra_s", None)
    return sum(budget_s(p, ctx) for p in plan if p.status is None) + (
        extra(cfg) if extra else 0.0)


def rows(module: ModuleType, cfg, ctx, plan: list[Point] | None = None) -> Iterator[dict]:
    """Measure every point in order, yielding its row (a group's once the group is done)."""
    plan = points(module, cfg, ctx) if plan is None else plan
    done: list[dict] = []
    memo: dict = {}
    adapt, skip = getattr(module, "adapt", None), getattr(module, "skip", None)
    finish, more = getattr(module, "finish", None), getattr(module, "more", None)
    group: list[dict] = []
    for i, point in enumerate(plan):
        if point.status is not None:
            row = point.row | {"status": point.status, "message": point.message}
        else:
            state = State(ctx, cfg, point, budget_s(point, ctx), done, memo)
            if adapt:  # columns that follow from the rows before (a prefix's n, say)
                state.point = replace(point, row=point.row | adapt(state))
            if skip and (skipped := skip(state)):  # declined, from the rows before
                row = state.row | skipped
            else:
                row = ctx.point(state.row, lambda state=state: module.measure(state))
        done.append(row)
        group.append(row)
        if point.more and point.status is None:  # its own rows, never read as a point's
            group += more(state, row)
        after = plan[i + 1] if i + 1 < len(plan) else None
        if point.group is None or after is None or after.group != point.group:
            if finish and point.group is not None:  # columns a row takes from its group's
                finish(point.group, group)
            yield from group
            group = []


@dataclass
class Plan:
    """A job's rows to come: how many, how long they sample, and the rows themselves."""

    total: int | None
    sampling_s: float | None
    rows: Iterator[dict]


def plan(module: ModuleType, cfg, ctx) -> Plan:
    """The job's plan, on this harness or (cli/validate's held-out job) the module's own run()."""
    if declared(module):
        made = points(module, cfg, ctx)
        return Plan(_total(made), sampling_s(module, cfg, ctx, made), rows(module, cfg, ctx, made))
    total = count(module, cfg, ctx)
    own = getattr(module, "sampling_s", None)
    return Plan(total, own(cfg, ctx) if own and total else None, module.run(cfg, ctx))
