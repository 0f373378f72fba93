"""Arithmetic intensity sweep (C12): one fused kernel y[i] = f(x[i]) with `fmas` FMAs per element.

f is the chain y <- y*A + x, `fmas` times, from y = x. Whatever the chain's length, x is read once
and y written once (2 n itemsize bytes) while the work grows (2 fmas n FLOPs, counted from the
definition), so the sweep walks the roofline from memory-bound (fmas = 0 is a copy) to
compute-bound.
The chain's math, its float64 reference and check are experiments/kernels/chain.py.
GPU: the Triton kernel of experiments/kernels/fma_chain.py (independent chains interleaved per
thread, packed fp16/bf16 math, one program per tile). CPU: torch passes over cache-sized chunks (see
_cpu_chain).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from omegaconf import MISSING

from experiments import kernels
from experiments.core.config import ConfigError, ExperimentConfig, check_sizes
from experiments.core.checks import need_host_memory, need_storage_dtype
from experiments.core.dtypes import itemsize, torch_dtype
from experiments.core.runner import Context
from experiments.kernels.chain import A, check, check_block, check_warps

NAME = "intensity"
DESCRIPTION = "one fused kernel with 0..1024 FMAs per element read and written once: the roofline"


@dataclass
class IntensityConfig(ExperimentConfig):
    name: str = NAME
    fmas: list[int] = MISSING  # FMAs per element
    n: int = MISSING  # elements per array: x and y together far past the LLC, so fmas=0 is DRAM
    block: int = MISSING  # GPU: elements per Triton program
    num_warps: int = MISSING  # GPU: block / (32 num_warps) independent chains per thread
    # GPU: one wave of programs striding over the tiles instead of one program per tile. Same peak
    # FLOP/s on an H200, but its memory-bound end reached 3.7-3.8 TB/s against 4.1-4.2: off.
    persistent: bool = MISSING
    chunk_bytes: int = MISSING  # CPU: bytes of x per chunk; 0: a quarter of L2 (see _cpu_chain)

    def __post_init__(self):
        check_sizes("experiment.fmas", self.fmas, allow_zero=True)
        check_sizes("experiment.n", [self.n])
        check_block("experiment.block", self.block)
        check_warps("experiment.num_warps", [self.num_warps])
        if not isinstance(self.persistent, bool):
            raise ConfigError(f"experiment.persistent={self.persistent} must be true or false")
        if not isinstance(self.chunk_bytes, int) or self.chunk_bytes < 0:
            raise ConfigError(f"experiment.chunk_bytes={self.chunk_bytes} must be an integer >= 0")


Config = IntensityConfig


def cpu_chunk(cfg: IntensityConfig, ctx: Context) -> int:
    """Elements per CPU chunk: x's and y's chunks together fill half of L2."""
    nbytes = cfg.chunk_bytes or ctx.facts.cache_bytes.get("L2", 1 << 20) // 4
    return max(1, nbytes // itemsize(ctx.dtype))


def _cpu_chain(x: torch.Tensor, y: torch.Tensor, fmas: int, chunk: int) -> None:
    """y = f(x) with one torch op per FMA step over chunks that stay in L2.

    torch.compile would fuse the chain into one pass, but compiling a 1024-long chain takes
    minutes on a small CPU. Chunking gives the same DRAM traffic (x read once, y written once);
    torch.add(x, y, alpha=A) is one vectorized FMA pass (x + A*y), so the compute-bound end is
    set by L1/L2 streaming of these passes, below the core's FMA peak.
    """
    for start in range(0, x.numel(), chunk):
        xc, yc = x[start:start + chunk], y[start:start + chunk]
        if fmas == 0:
            yc.copy_(xc)
            continue
        torch.add(xc, xc, alpha=A, out=yc)  # the first step reads x from memory
        for _ in range(fmas - 1):
            torch.add(xc, yc, alpha=A, out=yc)


def _arrays(ctx: Context, cfg: IntensityConfig, cache: dict):
    """x (random) and y, allocated once per job and reused by every point."""
    if not cache:
        need_host_memory(ctx, 2 * cfg.n * itemsize(ctx.dtype))
        dt = torch_dtype(ctx.dtype)
        cache["x"] = ctx.randn(cfg.n, dtype=dt)
        cache["y"] = torch.empty_like(cache["x"])
    return cache["x"], cache["y"]


def _measure(ctx: Context, cfg: IntensityConfig, fmas: int, cache: dict, use_triton: bool) -> dict:
    need_storage_dtype(ctx.dtype)
    x, y = _arrays(ctx, cfg, cache)
    if use_triton:
        kernel = kernels.load("fma_chain")
        call = lambda i: kernel.fma_chain(x, y, fmas, A, block=cfg.block, num_warps=cfg.num_warps,
                                          persistent=cfg.persistent)
    else:
        chunk = cpu_chunk(cfg, ctx)
        call = lambda i: _cpu_chain(x, y, fmas, chunk)
    y.fill_(float("nan"))
    call(0)
    ctx.sync()
    err = check(ctx.dtype, x, y, fmas)
    return ctx.time(call) | {"rel_error": err, "check_passed": True}


def run(cfg: IntensityConfig, ctx: Context):
    gpu = ctx.device.type == "cuda"
    size = itemsize(ctx.dtype)
    moved = 2 * cfg.n * size
    if gpu:
        variant, params = "triton", {"block": cfg.block, "num_warps": cfg.num_warps,
                                     "persistent": cfg.persistent}
    else:
        variant, params = "torch", {"chunk": cpu_chunk(cfg, ctx)}
    cache: dict = {}
    for fmas in cfg.fmas:
        base = {"op": "fma_chain", "variant": variant, "n": cfg.n, "flops": 2.0 * fmas * cfg.n,
                "bytes": float(moved), "working_set_bytes": moved,
                "params": params | {"fmas": fmas}}
        yield ctx.point(base, lambda fmas=fmas: _measure(ctx, cfg, fmas, cache, use_triton=gpu))


def points(cfg: IntensityConfig, ctx: Context) -> int:
    """Rows `run` yields (the progress a job shows)."""
    return len(cfg.fmas)
