"""Host <-> device copies (C2), creating on the device vs moving (C3), mixing devices (C4).

`transfer` rows: one copy of `size` bytes, host-to-device or device-to-host, from pageable or
pinned host memory, blocking or non_blocking (variant `h2d_pinned_nonblocking` ...), timed with
CUDA events on eager calls: a blocking copy synchronizes and a pageable one cannot be captured,
so no variant uses a graph and all four pay what a program pays per call. Each row's params give
its ratio to the device memory bandwidth (`d2d_copy`, measured once per job) and to the PCIe
link's peak. `transfer_model` rows fit t = latency + size / bandwidth per variant.
`create_on_device` vs `create_then_move`: torch.randn(..., device=dev) vs torch.randn(...).to(dev).
`cross_device`: a CUDA tensor plus a CPU tensor raises; plus a 0-dim CPU tensor, it does not.
A CPU job has no separate device memory, so every op is not_applicable there.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from .config import ConfigError, ExperimentConfig, check_sizes
from .core.dtypes import itemsize, torch_dtype
from .core.runner import Context, NotApplicable, WrongResult

NAME = "transfer"
DESCRIPTION = "host<->device copies by size, pageable/pinned, blocking or not, vs device bandwidth"
CLAIMS = ("C2", "C3", "C4")

DIRECTIONS = ("h2d", "d2h")
MEMORIES = ("pageable", "pinned")
MODES = ("blocking", "nonblocking")
VARIANTS = tuple(f"{d}_{m}_{b}" for d in DIRECTIONS for m in MEMORIES for b in MODES)
STORAGE = ("float64", "float32", "float16", "bfloat16")
NO_DEVICE = "a CPU job has no separate device memory: nothing crosses PCIe"
CHECK_ELEMENTS = 1 << 20  # copies are checked exactly on this many strided elements
# PCIe peak per direction: GT/s per lane and line-code efficiency by generation (before packets)
PCIE = {1: (2.5, 8 / 10), 2: (5.0, 8 / 10), 3: (8.0, 128 / 130), 4: (16.0, 128 / 130),
        5: (32.0, 128 / 130), 6: (64.0, 242 / 256)}
# op on (CUDA tensor, this CPU tensor): (the CPU tensor, whether torch raises)
MIXED = {"cpu_tensor": (lambda: torch.ones(4), True),
         "cpu_scalar_tensor": (lambda: torch.tensor(1.0), False)}  # 0-dim: allowed as a scalar


@dataclass
class TransferConfig(ExperimentConfig):
    name: str = NAME
    sizes: list[int] = field(default_factory=lambda: [4096, 1 << 20])  # bytes per copy
    create_sizes: list[int] = field(default_factory=lambda: [1 << 20])  # bytes of the new tensor
    d2d_bytes: int = 1 << 26  # device-to-device copy that measures device memory bandwidth

    def __post_init__(self):
        check_sizes("experiment.sizes", self.sizes)
        check_sizes("experiment.create_sizes", self.create_sizes)
        if not isinstance(self.d2d_bytes, int) or self.d2d_bytes < 1:
            raise ConfigError(f"experiment.d2d_bytes={self.d2d_bytes!r} must be an integer >= 1")


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
        base = {"op": "transfer_model", "variant": variant, "claims": ["C2"]}
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


def _need_gpu(ctx: Context, reason: str = NO_DEVICE):
    if ctx.device.type != "cuda":
        raise NotApplicable(reason)
    if ctx.dtype not in STORAGE:
        raise NotApplicable(f"{ctx.dtype} is not a storage type; copies move plain dtypes")


def _same(x: torch.Tensor, ref: torch.Tensor) -> bool:
    step = max(1, ref.numel() // CHECK_ELEMENTS)
    return torch.equal(x[::step].to(ref.device), ref[::step])


def _d2d(ctx: Context, n: int) -> dict:
    _need_gpu(ctx, NO_DEVICE + "; the CPU's own copy bandwidth is the bandwidth experiment's copy")
    src = ctx.randn(n, dtype=torch_dtype(ctx.dtype))
    dst = torch.full_like(src, float("nan"))
    dst.copy_(src)
    ctx.sync()
    if not torch.equal(dst, src):
        raise WrongResult("device-to-device copy differs from its source")
    return ctx.time(lambda i: dst.copy_(src)) | {"rel_error": 0.0, "check_passed": True}


def _transfer(ctx: Context, variant: str, n: int) -> dict:
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
    stats = ctx.time(lambda i: dst.copy_(src, non_blocking=non_blocking), use_graph=False)
    return stats | {"rel_error": 0.0, "check_passed": True}


def _create(ctx: Context, op: str, n: int) -> dict:
    _need_gpu(ctx, NO_DEVICE + "; randn(...).to('cpu') is the same tensor, .to does nothing")
    dt = torch_dtype(ctx.dtype)
    if op == "create_on_device":
        make = lambda i: torch.randn(n, dtype=dt, device=ctx.device, generator=ctx.generator)  # noqa: E731
    else:
        host_gen = torch.Generator().manual_seed(ctx.seed)
        make = lambda i: torch.randn(n, dtype=dt, generator=host_gen).to(ctx.device)  # noqa: E731
    t = make(0)
    ctx.sync()
    if t.device != ctx.device or t.numel() != n or not bool(torch.isfinite(t).all()):
        raise WrongResult(f"{op}: got {t.numel()} elements on {t.device}")
    # eager: randn on a private generator and a pageable .to() are not graph-capturable
    return ctx.time(make, use_graph=False) | {"rel_error": 0.0, "check_passed": True}


def _cross(ctx: Context, variant: str) -> dict:
    if ctx.device.type != "cuda":
        raise NotApplicable("needs two devices; a CPU job has only the CPU")
    make, expect = MIXED[variant]
    kind, text = mixed_device_error(torch.ones(4, device=ctx.device), make())
    passed = (kind is not None) == expect
    message = f"{kind}: {text[:300]}" if kind else "no error: a 0-dim CPU tensor acts as a scalar"
    return {"status": "ok" if passed else "wrong_result", "check_passed": passed,
            "message": message, "params": {"error_type": kind, "expected_raise": expect}}


def run(cfg: TransferConfig, ctx: Context):
    size = itemsize(ctx.dtype)
    link = pcie_params(ctx.facts) if ctx.device.type == "cuda" else {}

    n = max(1, cfg.d2d_bytes // size)
    d2d = ctx.point({"op": "d2d_copy", "n": n, "bytes": 2.0 * n * size,  # read + write
                     "working_set_bytes": 2 * n * size, "claims": ["C2", "C8"]},
                    lambda: _d2d(ctx, n))
    device_bw = d2d["bytes"] / d2d["time_s"] if d2d["status"] == "ok" else None
    yield d2d

    rows = []
    for variant in VARIANTS:
        for nbytes in cfg.sizes:
            n = max(1, nbytes // size)
            base = {"op": "transfer", "variant": variant, "n": n, "bytes": float(n * size),
                    "working_set_bytes": 2 * n * size, "claims": ["C2"]}
            row = ctx.point(base, lambda v=variant, n=n: _transfer(ctx, v, n))
            if row["status"] == "ok":
                rate = row["bytes"] / row["time_s"]
                row["params"] = link | {"ratio_to_device_bw": _ratio(rate, device_bw),
                                        "ratio_to_pcie_peak": _ratio(rate, link.get("pcie_peak_Bps"))}
            rows.append(row)
            yield row

    if ctx.device.type == "cuda":
        yield from model_rows(rows, device_bw, link)
    else:
        for variant in VARIANTS:
            yield {"op": "transfer_model", "variant": variant, "claims": ["C2"],
                   "status": "not_applicable", "message": NO_DEVICE}

    for nbytes in cfg.create_sizes:
        n = max(1, nbytes // size)
        base = {"n": n, "bytes": float(n * size), "claims": ["C3"]}
        pair = [ctx.point(base | {"op": op}, lambda op=op: _create(ctx, op, n))
                for op in ("create_on_device", "create_then_move")]
        if all(r["status"] == "ok" for r in pair):
            pair[1]["params"] = {"ratio_to_create_on_device": pair[1]["time_s"] / pair[0]["time_s"]}
        yield from pair

    for variant in MIXED:
        yield ctx.point({"op": "cross_device", "variant": variant, "claims": ["C4"]},
                        lambda v=variant: _cross(ctx, v))
