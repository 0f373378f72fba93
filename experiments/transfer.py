"""Host <-> device copies (C2), creating on the device vs moving (C3), mixing devices (C4).

`transfer` rows: one copy of `size` bytes, host-to-device or device-to-host, from pageable or
pinned host memory, blocking or non_blocking (variant `h2d_pinned_nonblocking` ...), timed with
CUDA events on eager calls: a blocking copy synchronizes and a pageable one cannot be captured,
so no variant uses a graph and all four pay what a program pays per call. Each row's params give
its ratio to the device memory bandwidth (`d2d_copy`, measured once per job) and to the PCIe
link's peak. `transfer_model` rows fit t = latency + size / bandwidth per variant.
`create_on_device` vs `create_then_move`: torch.randn(..., device=dev) vs torch.randn(...).to(dev);
and its two halves timed apart, so the transfer's share shows: `create_on_host` (torch.randn on
the CPU's generator, host clock) and `move_to_device` (.to(dev) of an existing pageable tensor,
CUDA events, checked equal to its source). create_then_move's params carry both medians.
`cross_device`: one row per case (params `case`, `raised`, `error_type`, `expected_raise`): a CUDA
tensor plus a CPU tensor raises; plus a 0-dim CPU tensor, it does not.
A CPU job has no separate device memory, so every op is not_applicable there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
from omegaconf import MISSING

from experiments.core.config import ExperimentConfig
from experiments.core.checks import need_storage_dtype
from experiments.core.dtypes import itemsize, torch_dtype
from experiments.core.harness import Point, State
from experiments.core.runner import Context, NotApplicable, WrongResult
from experiments.core.timer import CpuTimer

NAME = "transfer"
DESCRIPTION = "host<->device copies by size, pageable/pinned, blocking or not, vs device bandwidth"
NOT_ON = ("cpu",)  # no device memory apart from the host's: a sweep plans no CPU job

DIRECTIONS = ("h2d", "d2h")
MEMORIES = ("pageable", "pinned")
MODES = ("blocking", "nonblocking")
VARIANTS = tuple(f"{d}_{m}_{b}" for d in DIRECTIONS for m in MEMORIES for b in MODES)
NO_DEVICE = "a CPU job has no separate device memory: nothing crosses PCIe"
CHECK_ELEMENTS = 1 << 20  # copies are checked exactly on this many strided elements
# PCIe peak per direction: GT/s per lane and line-code efficiency by generation (before packets)
PCIE = {1: (2.5, 8 / 10), 2: (5.0, 8 / 10), 3: (8.0, 128 / 130), 4: (16.0, 128 / 130),
        5: (32.0, 128 / 130), 6: (64.0, 242 / 256)}
CREATE_OPS = ("create_on_device", "create_on_host", "move_to_device", "create_then_move")


@dataclass(frozen=True)
class MixedCase:
    """A CUDA tensor plus `make()`, a CPU tensor: the case in words, and whether torch raises."""

    case: str
    make: Callable[[], torch.Tensor]
    expect_raise: bool


MIXED = {"cpu_tensor": MixedCase("a CUDA tensor plus a 4-element CPU tensor",
                                 lambda: torch.ones(4), True),
         "cpu_scalar_tensor": MixedCase("a CUDA tensor plus a 0-dim CPU tensor (a scalar)",
                                        lambda: torch.tensor(1.0), False)}  # allowed as a scalar


@dataclass
class TransferConfig(ExperimentConfig):
    name: str = NAME
    sizes: list[int] = MISSING  # bytes per copy
    create_sizes: list[int] = MISSING  # bytes of the new tensor
    d2d_bytes: int = MISSING  # device-to-device copy that measures device memory bandwidth
    pageable_budget_s: float = MISSING  # the most a pageable copy's point samples

    RULES = {"sizes": "sizes", "create_sizes": "sizes", "d2d_bytes": "int >= 1",
             "pageable_budget_s": "> 0"}


Config = TransferConfig


def fit_latency_bandwidth(sizes, times) -> tuple[float, float, float]:
    """Least squares t = latency + size / bandwidth -> (latency_s, bandwidth_Bps, max |rel resid|).

    Residuals are relative (each equation divided by its t), so small copies set the latency
    instead of the largest copy's absolute error drowning them. Sizes are scaled for conditioning.
    """
    s, t = np.asarray(sizes, dtype=np.float64), np.asarray(times, dtype=np.float64)
    if np.unique(s).size < 2:
        raise ValueError("the fit needs at least two distinct sizes")
    scale = s.max()
    a = np.stack([np.ones_like(s), s / scale], axis=1) / t[:, None]
    (latency, slope), *_ = np.linalg.lstsq(a, np.ones_like(t), rcond=None)
    inv_bw = slope / scale
    resid = np.abs(latency + inv_bw * s - t) / t
    return float(latency), float(1 / inv_bw) if inv_bw > 0 else float("inf"), float(resid.max())


def pcie_params(facts) -> dict:
    gen, width = facts.pcie_generation, facts.pcie_width
    peak = PCIE[gen][0] * 1e9 * PCIE[gen][1] * width / 8 if gen in PCIE and width else None
    return {"pcie_generation": gen, "pcie_width": width, "pcie_peak_Bps": peak}


def _ratio(value, ref):
    return value / ref if value and ref else None


def model_rows(rows: list[dict], device_bw: float | None, link: dict) -> list[dict]:
    """One transfer_model row per variant, fitted from its ok transfer rows."""
    out = []
    for variant in VARIANTS:
        pts = [(r["bytes"], r["time_s"]) for r in rows
               if r["op"] == "transfer" and r["variant"] == variant and r["status"] == "ok"]
        base = {"op": "transfer_model", "variant": variant}
        if len({size for size, _ in pts}) < 2:
            out.append(base | {"status": "skipped",
                               "message": f"{len(pts)} measured sizes; the fit needs two or more"})
            continue
        latency, bw, resid = fit_latency_bandwidth(*zip(*pts))
        out.append(base | {"status": "ok", "params": link | {
            "latency_s": latency, "bandwidth_Bps": bw, "max_rel_residual": resid,
            "points": len(pts), "ratio_to_device_bw": _ratio(bw, device_bw),
            "ratio_to_pcie_peak": _ratio(bw, link.get("pcie_peak_Bps"))}})
    return out


def mixed_device_error(a: torch.Tensor, b: torch.Tensor) -> tuple[str | None, str]:
    """(exception type, message) that `a + b` raises, or (None, "") when it runs."""
    try:
        a + b
    except Exception as exc:  # RuntimeError in torch 2.x; the type is what gets recorded
        return type(exc).__name__, str(exc)
    return None, ""


def cross_device_result(case: MixedCase, on_device: torch.Tensor) -> dict:
    """The cross_device row's outcome: `on_device` plus the case's CPU tensor, against expectation."""
    kind, text = mixed_device_error(on_device, case.make())
    raised = kind is not None
    passed = raised == case.expect_raise
    expected = "expected" if passed else "NOT expected"
    message = (f"raised {kind} ({expected}): {text[:300]}" if raised
               else f"no error ({expected}): a 0-dim CPU tensor acts as a scalar")
    return {"status": "ok" if passed else "wrong_result", "check_passed": passed,
            "message": message, "params": {"case": case.case, "raised": raised,
                                           "error_type": kind, "expected_raise": case.expect_raise}}


def create_params(times: dict) -> dict:
    """create_then_move's params from the median times of the create rows of one size
    (op -> seconds, None where the row failed): how much of it is randn and how much the move."""
    whole, device = times.get("create_then_move"), times.get("create_on_device")
    move = times.get("move_to_device")
    return {"ratio_to_create_on_device": _ratio(whole, device),
            "host_randn_s": times.get("create_on_host"), "move_s": move,
            "move_fraction": _ratio(move, whole)}


def _need_gpu(ctx: Context, reason: str = NO_DEVICE):
    if ctx.device.type != "cuda":
        raise NotApplicable(reason)
    need_storage_dtype(ctx.dtype, "copies move plain dtypes")


def _same(x: torch.Tensor, ref: torch.Tensor) -> bool:
    step = max(1, ref.numel() // CHECK_ELEMENTS)
    return torch.equal(x[::step].to(ref.device), ref[::step])


def _d2d(state: State) -> dict:
    ctx, n = state.ctx, state.row["n"]
    _need_gpu(ctx, NO_DEVICE + "; the CPU's own copy bandwidth is the bandwidth experiment's copy")
    src = ctx.randn(n, dtype=torch_dtype(ctx.dtype))
    dst = torch.full_like(src, float("nan"))
    dst.copy_(src)
    ctx.sync()
    if not torch.equal(dst, src):
        raise WrongResult("device-to-device copy differs from its source")
    return state.time(lambda i: dst.copy_(src)) | {"rel_error": 0.0, "check_passed": True}


def _transfer(state: State) -> dict:
    ctx, variant, n = state.ctx, state.row["variant"], state.row["n"]
    _need_gpu(ctx)
    direction, memory, mode = variant.split("_")
    pinned, non_blocking = memory == "pinned", mode == "nonblocking"
    dt = torch_dtype(ctx.dtype)
    ref = ctx.randn(n, dtype=dt)
    host = torch.empty(n, dtype=dt, pin_memory=pinned)
    if direction == "h2d":
        host.copy_(ref)  # fill (and touch every page) before timing
        src, dst = host, torch.full_like(ref, float("nan"))
    else:
        host.fill_(float("nan"))
        src, dst = ref, host
    dst.copy_(src, non_blocking=non_blocking)
    ctx.sync()  # a non_blocking copy's result is defined only after a synchronize
    if not _same(dst, ref):
        raise WrongResult(f"{variant}: copied data differ from the source")
    stats = state.time(lambda i: dst.copy_(src, non_blocking=non_blocking), use_graph=False)
    rate, link = state.row["bytes"] / stats["time_s"], state.args["link"]
    return stats | {"rel_error": 0.0, "check_passed": True, "params": link | {
        "ratio_to_device_bw": _ratio(rate, _device_bw(state.rows)),
        "ratio_to_pcie_peak": _ratio(rate, link.get("pcie_peak_Bps"))}}


def _create(state: State) -> dict:
    ctx, op = state.ctx, state.row["op"]
    _need_gpu(ctx, NO_DEVICE + "; randn(...).to('cpu') is the same tensor, .to does nothing")
    row = time_create(ctx, op, state.row["n"], state.budget_s)
    if op != "create_then_move":
        return row
    before = state.rows[1 - len(CREATE_OPS):]  # the size's other create rows
    made = {r["op"]: r["time_s"] for r in before if r["status"] == "ok"}
    return row | {"params": create_params(made | {op: row["time_s"]})}


def time_create(ctx: Context, op: str, n: int, budget_s: float | None = None) -> dict:
    """One create row's timing and check (any device: the CPU tests run it on the CPU), within
    `budget_s` (None: the job's)."""
    dt = torch_dtype(ctx.dtype)
    host_gen = torch.Generator().manual_seed(ctx.settings.seed)
    where, src, timer = ctx.device, None, {}
    if op == "create_on_device":
        make = lambda i: torch.randn(n, dtype=dt, device=ctx.device, generator=ctx.generator)  # noqa: E731
    elif op == "create_then_move":
        make = lambda i: torch.randn(n, dtype=dt, generator=host_gen).to(ctx.device)  # noqa: E731
    elif op == "create_on_host":
        make = lambda i: torch.randn(n, dtype=dt, generator=host_gen)  # noqa: E731
        # host work only: the host clock is its time (events would time an idle stream)
        where, timer = torch.device("cpu"), {"timer": CpuTimer()}
    elif op == "move_to_device":
        src = torch.randn(n, dtype=dt, generator=host_gen)  # pageable, as randn returns it
        make = lambda i: src.to(ctx.device)  # noqa: E731
    else:
        raise ValueError(f"op={op!r}; allowed: {CREATE_OPS}")
    t = make(0)
    ctx.sync()
    if t.device != where or t.numel() != n or not bool(torch.isfinite(t).all()):
        raise WrongResult(f"{op}: got {t.numel()} elements on {t.device}")
    if src is not None and not _same(t, src):
        raise WrongResult(f"{op}: moved data differ from the source")
    # eager: randn on a private generator and a pageable .to() are not graph-capturable
    return ctx.time(make, use_graph=False, point_budget_s=budget_s, **timer) | {
        "rel_error": 0.0, "check_passed": True}


def _cross(state: State) -> dict:
    if state.device.type != "cuda":
        raise NotApplicable("needs two devices; a CPU job has only the CPU")
    return cross_device_result(MIXED[state.row["variant"]], torch.ones(4, device=state.device))


def _model(state: State) -> dict:
    """A variant's transfer_model row, fitted from the transfer rows before it."""
    link, variant = state.args["link"], state.row["variant"]
    row, = (r for r in model_rows(state.rows, _device_bw(state.rows), link)
            if r["variant"] == variant)
    if row["status"] == "skipped":
        state.skip(row["message"])
    return {"params": row["params"]}


def _device_bw(rows: list[dict]) -> float | None:
    d2d = rows[0]  # the device's own copy, where it is ok
    return d2d["bytes"] / d2d["time_s"] if d2d["status"] == "ok" else None


def measure(state: State) -> dict:
    return {"d2d_copy": _d2d, "transfer": _transfer, "transfer_model": _model,
            "cross_device": _cross}.get(state.row["op"], _create)(state)


def points(cfg: TransferConfig, ctx: Context) -> list[Point]:
    """The device copy, each variant per size, each variant's model, creations, mixed cases."""
    size, gpu = itemsize(ctx.dtype), ctx.device.type == "cuda"
    link = {"link": pcie_params(ctx.facts) if gpu else {}}
    n = max(1, cfg.d2d_bytes // size)
    out = [Point({"op": "d2d_copy", "n": n, "bytes": 2.0 * n * size,  # read + write
                  "working_set_bytes": 2 * n * size})]
    # a pageable copy stages through a driver buffer: its times scatter (a CV of several %)
    # and its median never reaches the 1 % precision, so it would spend the whole budget
    out += [Point({"op": "transfer", "variant": v, "n": n, "bytes": float(n * size),
                   "working_set_bytes": 2 * n * size}, args=link,
                  most_s=math.inf if "pinned" in v else cfg.pageable_budget_s)
            for v in VARIANTS for n in (max(1, nbytes // size) for nbytes in cfg.sizes)]
    out += [Point({"op": "transfer_model", "variant": v}, args=link) if gpu else
            Point({"op": "transfer_model", "variant": v}, status="not_applicable",
                  message=NO_DEVICE) for v in VARIANTS]
    out += [Point({"n": n, "bytes": float(n * size), "op": op})
            for n in (max(1, nbytes // size) for nbytes in cfg.create_sizes) for op in CREATE_OPS]
    # the case is named even where it cannot run (a CPU job), so every row says what it is
    return out + [Point({"op": "cross_device", "variant": v, "params": {
        "case": case.case, "raised": None, "error_type": None,
        "expected_raise": case.expect_raise}}) for v, case in MIXED.items()]
