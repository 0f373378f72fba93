"""Your own workload on the roofline: one factory (experiments/placement/target.py's convention)
over its batch sizes, each point counted (every aten op's FLOPs and bytes,
experiments/placement/counting.py; compulsory bytes for the call), checked and timed by the core
timer, replayed from a CUDA graph whatever its length where it can be captured.

config/config.yaml's `workloads:` lists them; the workflow runs one job per workload, device and
dtype. Copies of the call's data (fresh weights and inputs from the factory) rotate until they span
`rotate_bytes_factor` LLCs, so a point is not timed hot in cache, as decode does with its weights.
A target that cannot be imported, raises or returns no tensor becomes rows with that status and
message; the other points go on. So does one that hangs or crashes the process: the job runs in
a watched worker (USER_CODE, core/isolate.py), each factory build and each stage of a call under
its limit (job.yaml's factory_timeout_s, call_timeout_s). A call of 0 FLOPs is placed by its bytes.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from typing import Any

from omegaconf import MISSING

from experiments.placement import checking, counting, ncu, profile, target
from experiments.placement.measure import row_fields as measure_row, time_calls as measure_calls
from experiments.core.budget import SlowPointGuard, rotation_copies, timing_limit
from experiments.core.config import ConfigError, ExperimentConfig, check_sizes
from experiments.core.dtypes import torch_dtype
from experiments.core.isolate import UserCodeFailed, phase
from experiments.core.harness import Point, State
from experiments.core.runner import Context

NAME = "workload"
DESCRIPTION = "your own callable (config workloads:) over batch sizes, placed on the roofline"
USER_CODE = True  # its job runs in a watched worker (core/isolate.py)


@dataclass
class WorkloadConfig(ExperimentConfig):
    name: str = NAME
    workload: str = MISSING  # the name rows carry as `op`
    target: str = MISSING  # module:make_fn or path/to/file.py:make_fn
    kwargs: dict[str, Any] = MISSING  # keywords for the factory
    batches: list[int] = MISSING
    max_call_s: float = MISSING  # skip a point whose predicted call is longer (slow CPUs)
    rotate_bytes_factor: float = MISSING  # rotate copies until they span this many LLCs
    max_copies: int = MISSING
    profile_batches: list[int] = MISSING  # batches also broken down per aten op (torch.profiler)
    ncu_batches: list[int] = MISSING  # ...and their kernels' DRAM/L2/L1 bytes measured by ncu

    RULES = {"batches": "sizes", "max_call_s": "> 0", "rotate_bytes_factor": "> 0",
             "max_copies": "int >= 1"}

    def __post_init__(self):
        super().__post_init__()
        for key in ("profile_batches", "ncu_batches"):
            check_sizes(f"experiment.{key}", getattr(self, key) or [1])
            if not set(getattr(self, key)) <= set(self.batches):
                raise ConfigError(f"experiment.{key}={list(getattr(self, key))} must be among "
                                  f"experiment.batches={list(self.batches)}")
        if not set(self.ncu_batches) <= set(self.profile_batches):
            raise ConfigError(f"experiment.ncu_batches={list(self.ncu_batches)} must be among "
                              f"profile_batches={list(self.profile_batches)}: ncu's bytes join "
                              "the profiler's ops")
        if ":" not in self.target:
            raise ConfigError(f"experiment.target={self.target!r}: give module:function or "
                              "path/to/file.py:function")


Config = WorkloadConfig


def copies_for(ctx: Context, cfg: WorkloadConfig, set_bytes: float,
               resident_bytes: float = 0.0) -> int:
    """Copies to rotate: enough to span the LLCs by the bytes a call moves, as many as fit in
    memory by what a copy holds (a gather's whole table, where it reads a few rows)."""
    n = rotation_copies(set_bytes, ctx.facts.llc_bytes, cfg.rotate_bytes_factor,
                        at_most=cfg.max_copies, free_bytes=ctx.free_memory())
    return max(1, min(n, int(ctx.free_memory() / 2 // max(resident_bytes, set_bytes, 1.0))))


def _build(ctx: Context, cfg: WorkloadConfig, factory, batch: int, key: str):
    with phase(key, "the factory", ctx.settings.factory_timeout_s, "factory_timeout_s"):
        return target.build(factory, batch, torch_dtype(ctx.dtype), ctx.device, ctx.generator,
                            cfg.kwargs)


def measure(state: State) -> dict:
    ctx, cfg, factory, batch = state.ctx, state.cfg, state.args["factory"], state.row["batch"]
    key = f"{cfg.workload} batch {batch}"
    fn, args = _build(ctx, cfg, factory, batch, key)
    with counting.precision(ctx.dtype):
        t0 = time.perf_counter()
        with phase(key, "the call", ctx.settings.call_timeout_s):
            counts = counting.count(fn, args)
        call_s = time.perf_counter() - t0
        guard = SlowPointGuard.after(cfg.max_call_s, state.rows)
        if skipped := guard.skip(counts["flops"], counts["bytes"]):
            return {"flops": counts["flops"], "bytes": counts["bytes"]} | skipped
        with phase(key, "the call", ctx.settings.call_timeout_s + 6 * call_s):
            err, info = checking.check(fn, args, None, ctx.dtype, counts["bytes"])
        n = copies_for(ctx, cfg, counts["bytes"], counts.get("resident_bytes", 0.0))
        # fresh draws from the factory: weights and inputs at other addresses, as a real step's
        calls = [(fn, args)] + [_build(ctx, cfg, factory, batch, key) for _ in range(n - 1)]
        with phase(key, "the call", timing_limit(ctx, call_s, n),
                   "call_timeout_s plus the timing's budget"):
            stats = measure_calls(ctx, calls)
    row = measure_row(counts, stats, err, info)
    row["params"] = state.row["params"] | row["params"] | {"copies": n}
    return row


def points(cfg: WorkloadConfig, ctx: Context) -> list[Point]:
    """One per batch, smallest first; a profiled batch adds one row per aten op once it ran. A
    target that cannot be imported gives every point its status, so the sweep's gaps say why."""
    params, failed, factory = {"target": cfg.target, "kwargs": dict(cfg.kwargs)}, {}, None
    try:
        with phase(f"{cfg.workload} import", "importing the target", ctx.settings.factory_timeout_s,
                   "factory_timeout_s"):
            factory = target.load_target(cfg.target)
        if not target.is_factory(factory):
            raise target.TargetError(f"target {cfg.target!r} is not a factory: name it make_* "
                                    "(or set rooflab_factory = True) and return (fn, args)")
    except (target.TargetError, UserCodeFailed) as exc:
        failed = {"status": getattr(exc, "status", "error"), "message": str(exc)}
    return [Point({"op": cfg.workload, "batch": b, "params": params}, {"factory": factory},
                  more=b in cfg.profile_batches, **failed) for b in sorted(cfg.batches)]


def more(state: State, row: dict) -> list[dict]:
    """A profiled batch's per-op rows, after its own (whose params they may add to)."""
    if row.get("status") != "ok":
        return []
    return _per_op(state.ctx, state.cfg, state.args["factory"], row["batch"], row)


def _per_op(ctx: Context, cfg: WorkloadConfig, factory, batch: int, row: dict) -> list[dict]:
    """The call broken down per aten op (profiler times, counted work) and, where ncu runs, each
    op's measured DRAM/L2/L1 bytes; the whole call's measured bytes go in `row`'s params. A
    failure here is written in the row's params, never ends the job."""
    key = f"{cfg.workload} batch {batch} profile"
    try:
        fn, args = _build(ctx, cfg, factory, batch, key)
        limit = ctx.settings.call_timeout_s + 100 * row["time_s"]
        with counting.precision(ctx.dtype), phase(key, "the profiled call", limit):
            ops = profile.profile_ops(fn, args, device=ctx.device)
        del fn, args
        profile.with_kernels(row["params"].get("ops"), ops)
    except Exception as exc:  # noqa: BLE001 - the whole-call row stands without its breakdown
        row["params"]["profile_error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        return []
    measured = None
    if batch in cfg.ncu_batches:
        if ctx.device.type != "cuda":
            row["params"]["ncu"] = "not run: Nsight Compute profiles GPU kernels"
        elif shutil.which("ncu") is None:
            row["params"]["ncu"] = "not run: ncu is not on PATH (bytes are counted, not measured)"
        else:
            try:
                kernels = ncu.run_ncu(cfg.target, str(ctx.device), ctx.dtype, batch,
                                        dict(cfg.kwargs))
                measured = ncu.ncu_by_op(kernels)
                row["params"] |= {"ncu": "ran"} | {  # a level counts if every op has it
                    level: float(measured[level].sum()) if measured[level].notna().all()
                    else None for level in ncu.NCU_LEVELS}
            except Exception as exc:  # noqa: BLE001
                row["params"]["ncu"] = f"failed: {type(exc).__name__}: {str(exc)[:300]}"
    return profile.op_rows(ops, cfg.workload, batch, measured)
