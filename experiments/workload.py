"""Your own workload on the roofline: one factory (experiments/place.py's convention) over its
batch sizes, each point counted (FlopCounterMode, compulsory bytes), checked and timed by the core
timer, replayed from a CUDA graph whatever its length where it can be captured.

config/config.yaml's `workloads:` lists them; the workflow runs one job per workload, device and
dtype. Copies of the call's data (fresh weights and inputs from the factory) rotate until they span
`rotate_bytes_factor` LLCs, so a point is not timed hot in cache, as decode does with its weights.
A target that cannot be imported, raises, returns no tensor, or counts no FLOPs becomes rows with
that status and message; the other points go on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from . import place
from .config import ConfigError, ExperimentConfig, check_sizes
from .core.dtypes import torch_dtype
from .core.runner import Context

NAME = "workload"
DESCRIPTION = "your own callable (config workloads:) over batch sizes, placed on the roofline"
CLAIMS: tuple = ()


@dataclass
class WorkloadConfig(ExperimentConfig):
    name: str = NAME
    workload: str = "mlp"  # the name rows carry as `op`
    target: str = "experiments.workloads:make_mlp"  # module:make_fn or path/to/file.py:make_fn
    kwargs: dict[str, Any] = field(default_factory=dict)  # keywords for the factory
    batches: list[int] = field(default_factory=lambda: [1, 8])
    max_call_s: float = 0.05  # skip a point whose predicted call is longer (slow CPUs)
    rotate_bytes_factor: float = 3.0  # rotate copies until they span this many LLCs
    max_copies: int = 64

    def __post_init__(self):
        check_sizes("experiment.batches", self.batches)
        if ":" not in self.target:
            raise ConfigError(f"experiment.target={self.target!r}: give module:function or "
                              "path/to/file.py:function")
        if not self.max_call_s > 0:
            raise ConfigError(f"experiment.max_call_s={self.max_call_s} must be > 0")
        if not self.rotate_bytes_factor > 0:
            raise ConfigError(
                f"experiment.rotate_bytes_factor={self.rotate_bytes_factor} must be > 0")
        if self.max_copies < 1:
            raise ConfigError(f"experiment.max_copies={self.max_copies} must be >= 1")


Config = WorkloadConfig


def copies_for(ctx: Context, cfg: WorkloadConfig, set_bytes: float) -> int:
    """Enough copies to span rotate_bytes_factor LLCs, at least 1, at most max_copies and what
    fits in half the free memory."""
    want = math.ceil(cfg.rotate_bytes_factor * ctx.facts.llc_bytes / max(set_bytes, 1.0))
    fit = int(ctx.free_memory() / 2 // max(set_bytes, 1.0))
    return max(1, min(cfg.max_copies, want, fit))


class _Rates:
    """The job's best FLOP/s and byte/s so far: a point predicted past max_call_s is skipped
    (batches run smallest first, so the rates climb towards the ceilings). A guard, not a model."""

    def __init__(self):
        self.flop_rate = self.byte_rate = 0.0

    def predict(self, flops, nbytes) -> float:
        return max(flops / self.flop_rate if self.flop_rate else 0.0,
                   nbytes / self.byte_rate if self.byte_rate else 0.0)

    def update(self, row):
        if row.get("status") == "ok" and row.get("time_s"):
            self.flop_rate = max(self.flop_rate, row["flops"] / row["time_s"])
            self.byte_rate = max(self.byte_rate, row["bytes"] / row["time_s"])


def _point(ctx: Context, cfg: WorkloadConfig, factory, batch: int, rates: _Rates):
    dt = torch_dtype(ctx.dtype)
    fn, args = place.build(factory, batch, dt, ctx.device, ctx.generator, cfg.kwargs)
    with place.precision(ctx.dtype):
        counts = place.count(fn, args)
        predicted = rates.predict(counts["flops"], counts["bytes"])
        if predicted > cfg.max_call_s:
            return {"flops": counts["flops"], "bytes": counts["bytes"], "status": "skipped",
                    "message": f"predicted {predicted:.2g} s per call at this job's best rates "
                               f"so far > max_call_s={cfg.max_call_s}"}
        err, info = place.check(fn, args, None, ctx.dtype, counts["bytes"])
        n = copies_for(ctx, cfg, counts["bytes"])
        # fresh draws from the factory: weights and inputs at other addresses, as a real step's
        calls = [(fn, args)] + [place.build(factory, batch, dt, ctx.device, ctx.generator,
                                            cfg.kwargs) for _ in range(n - 1)]
        stats = place.time_calls(ctx, calls)
    row = place.row_fields(counts, stats, err, info)
    row["params"] |= {"copies": n}
    return row


def run(cfg: WorkloadConfig, ctx: Context):
    params = {"target": cfg.target, "kwargs": dict(cfg.kwargs)}
    try:
        factory = place.load_target(cfg.target)
        if not place.is_factory(factory):
            raise place.TargetError(f"target {cfg.target!r} is not a factory: name it make_* "
                                    "(or set rooflab_factory = True) and return (fn, args)")
    except place.TargetError as exc:
        for b in sorted(cfg.batches):  # every point says why, so the sweep's gaps are explained
            yield {"op": cfg.workload, "batch": b, "params": params, "status": "error",
                   "message": str(exc)}
        return
    rates = _Rates()
    for b in sorted(cfg.batches):
        base = {"op": cfg.workload, "batch": b, "params": params}
        row = ctx.point(base, lambda b=b: _point(ctx, cfg, factory, b, rates))
        row["params"] = params | (row["params"] if row.get("status") == "ok" else {})
        rates.update(row)
        yield row


def points(cfg: WorkloadConfig, ctx: Context) -> int:
    """Rows `run` yields (the progress a job shows): one per batch."""
    return len(cfg.batches)
