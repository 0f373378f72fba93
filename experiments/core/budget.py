"""What keeps a sweep's points honest and in bounds, for every experiment that needs it (matmul,
decode, workload): how many copies of a call's data rotate, the guard that skips a point
predicted to take too long, how long user code's timing may run. A point's own budget is the
harness's (core/harness.py budget_s)."""

from __future__ import annotations

import math


def timing_limit(ctx, call_s: float, copies: int) -> float:
    """How long user code's timing (core/isolate.py) may run for a call that took `call_s`:
    call_timeout_s past its warm-ups, min_samples calls and each copy's first, in every try."""
    calls = ctx.settings.min_samples + 4 + copies
    rules = ctx.settings
    return rules.call_timeout_s + (rules.retries + 1) * (2 * rules.point_budget_s + calls * call_s)


def samples_within(budget_s: float, call_s: float, *, at_least: int, at_most: int) -> int:
    """How many calls of `call_s` seconds a point's budget (the harness's budget_s) holds, within
    [at_least, at_most]: for an experiment that takes its samples itself (timing)."""
    return int(min(at_most, max(at_least, budget_s // max(call_s, 1e-9))))


def rotation_copies(set_bytes: float, llc_bytes: float, rotate_bytes_factor: float, *,
                    at_most: int, at_least: int = 1, free_bytes: float | None = None,
                    extra_bytes: float = 0.0) -> int:
    """How many copies of one call's data rotate, so that a point is not timed hot in cache:
    enough to span `rotate_bytes_factor` LLCs, at least `at_least`, at most `at_most` and, given
    `free_bytes`, what fits in half of it beside `extra_bytes`; never fewer than 1."""
    set_bytes = max(set_bytes, 1.0)
    copies = min(at_most, max(at_least, math.ceil(rotate_bytes_factor * llc_bytes / set_bytes)))
    if free_bytes is not None:
        copies = min(copies, int((free_bytes / 2 - extra_bytes) // set_bytes))
    return max(1, copies)


class SlowPointGuard:
    """Skips a point whose predicted call is longer than max_call_s. The prediction is this job's
    roofline so far, max(FLOPs / best FLOP/s, bytes / best byte/s) over the points measured ok,
    times how far the last clean point fell short of that roofline, and again by as much as that
    shortfall grew from the clean point before: a small size's rate, in cache, must not stand for
    a larger one's, nor the last size's for the next while the rate still falls (an emulated
    bfloat16 GEMM's rate can halve from size to size: the last shortfall alone predicts the next
    size just under max_call_s, and its call takes twice that). Points run smallest first, so
    the rates climb towards the device's ceilings; a guard for slow CPUs (fp16 on a CPU without
    fp16 units), not a model."""

    def __init__(self, max_call_s: float):
        self.max_call_s, self.flop_rate, self.byte_rate = max_call_s, 0.0, 0.0
        self.shortfall = 1.0  # the last clean point's time over the roofline's (>= 1)
        self.growth = 1.0  # the last shortfall over the one before it (>= 1: a falling rate)

    @classmethod
    def after(cls, max_call_s: float, rows) -> "SlowPointGuard":
        """The guard as it stands once it learnt from `rows` (a job's rows so far), in order."""
        guard = cls(max_call_s)
        for row in rows:
            guard.update(row)
        return guard

    def _roofline_s(self, flops: float, nbytes: float) -> float:
        return max(flops / self.flop_rate if self.flop_rate else 0.0,
                   nbytes / self.byte_rate if self.byte_rate else 0.0)

    def skip(self, flops: float, nbytes: float, limit_s: float | None = None,
             limit_name: str = "max_call_s") -> dict | None:
        """The skipped row's status and message if the point would take longer than `limit_s`
        a call (max_call_s unless given), else None."""
        limit_s = self.max_call_s if limit_s is None else limit_s
        predicted = self._roofline_s(flops, nbytes) * self.shortfall * self.growth
        if predicted > limit_s:
            return {"status": "skipped",
                    "message": f"predicted {predicted:.2g} s per call at this job's rates so "
                               f"far > {limit_name}={limit_s}"}
        return None

    def update(self, row: dict) -> None:
        """Learn from a measured row (only an ok one with a time counts; a contended one's time
        moves no shortfall: another process slowed it, not its size)."""
        if row.get("status") == "ok" and row.get("time_s"):
            self.flop_rate = max(self.flop_rate, row["flops"] / row["time_s"])
            self.byte_rate = max(self.byte_rate, row["bytes"] / row["time_s"])
            if not row.get("contended"):
                roof = self._roofline_s(row["flops"], row["bytes"])
                shortfall = max(1.0, row["time_s"] / roof) if roof else 1.0
                self.growth = max(1.0, shortfall / self.shortfall)
                self.shortfall = shortfall

    def point(self, ctx, base: dict, body, **limit) -> dict:
        """ctx.point(base, body), unless the guard skips it; `base` holds flops and bytes;
        `limit`: skip()'s limit_s and limit_name."""
        if skipped := self.skip(base["flops"], base["bytes"], **limit):
            return base | skipped
        row = ctx.point(base, body)
        self.update(row)
        return row
