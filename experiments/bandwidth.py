"""Memory bandwidth: STREAM's kernels plus `y = x + 1`, from cache-resident sizes to far past the LLC.

Buffers are deliberately not rotated: the curve over size is what shows each cache level.
Bytes are counted from each kernel's definition (every input read once, the output written once).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from omegaconf import MISSING

from experiments.core.config import ExperimentConfig, check_sizes
from experiments.core.dtypes import itemsize, torch_dtype
from experiments.core.checks import check_close, need_host_memory, need_storage_dtype
from experiments.core.runner import Context

NAME = "bandwidth"
DESCRIPTION = "copy, x + 1, scale, add and triad over sizes from inside the LLC to far past it"

SCALAR = 3.0
# op: (inputs read, FLOPs per element, kernel writing `out`, float64 reference)
OPS = {
    "copy": (1, 0, lambda a, b, out: out.copy_(a), lambda a, b: a),
    "add_one": (1, 1, lambda a, b, out: torch.add(a, 1, out=out), lambda a, b: a + 1),
    "scale": (1, 1, lambda a, b, out: torch.mul(a, SCALAR, out=out), lambda a, b: SCALAR * a),
    "add": (2, 1, lambda a, b, out: torch.add(a, b, out=out), lambda a, b: a + b),
    "triad": (2, 2, lambda a, b, out: torch.add(a, b, alpha=SCALAR, out=out),
              lambda a, b: a + SCALAR * b),
}
# relative error a correct kernel stays under (one rounding of the output, some margin)
TOLERANCE = {"float64": 1e-12, "float32": 1e-6, "float16": 2e-3, "bfloat16": 1e-2}
CHECK_ELEMENTS = 1 << 20  # the numeric check samples this many; the NaN check covers all


@dataclass
class BandwidthConfig(ExperimentConfig):
    name: str = NAME
    ops: list[str] = MISSING
    sizes: list[int] = MISSING  # bytes per array

    def __post_init__(self):
        unknown = [op for op in self.ops if op not in OPS]
        if unknown or not self.ops:
            raise ValueError(f"experiment.ops={list(self.ops)}; allowed: {list(OPS)}")
        check_sizes("experiment.sizes", self.sizes)


Config = BandwidthConfig


def _check(op, a, b, out, dtype) -> float:
    step = max(1, out.numel() // CHECK_ELEMENTS)
    pick = lambda t: None if t is None else t[::step].double()
    return check_close(out, lambda: OPS[op][3](pick(a), pick(b)), TOLERANCE[dtype], op, step=step)


def _arrays(ctx: Context, n: int, cache: dict):
    """a, b (random) and out for arrays of n elements, drawn once per size and shared by every op
    (drawing 1 GiB of random numbers on a CPU takes longer than timing a copy of it)."""
    if cache.get("n") != n:
        cache.clear()  # the last size's arrays go first
        dt = torch_dtype(ctx.dtype)
        cache.update(n=n, a=ctx.randn(n, dtype=dt), b=ctx.randn(n, dtype=dt),
                     out=torch.empty(n, device=ctx.device, dtype=dt))
    return cache["a"], cache["b"], cache["out"]


def _measure(ctx: Context, op: str, n: int, cache: dict) -> dict:
    n_in, flops_per, kernel, _ = OPS[op]
    a, b, out = _arrays(ctx, n, cache)
    b = b if n_in == 2 else None
    out.fill_(float("nan"))  # what the kernel leaves unwritten shows
    kernel(a, b, out)
    ctx.sync()
    err = _check(op, a, b, out, ctx.dtype)
    stats = ctx.time(lambda i: kernel(a, b, out))
    return stats | {"rel_error": err, "check_passed": True}


def run(cfg: BandwidthConfig, ctx: Context):
    size = itemsize(ctx.dtype)
    cache: dict = {}
    for nbytes in cfg.sizes:
        for op in cfg.ops:
            n_in, flops_per = OPS[op][:2]
            n = max(1, nbytes // size)
            moved = (n_in + 1) * n * size
            base = {"op": op, "n": n, "working_set_bytes": moved, "bytes": float(moved),
                    "flops": float(flops_per * n)}

            def body(op=op, n=n):
                need_storage_dtype(ctx.dtype)
                need_host_memory(ctx, 3 * n * size)  # a, b and out, whatever the op reads
                return _measure(ctx, op, n, cache)

            yield ctx.point(base, body)
    cache.clear()


def points(cfg: BandwidthConfig, ctx: Context) -> int:
    """Rows `run` yields (the progress a job shows)."""
    return len(cfg.ops) * len(cfg.sizes)
