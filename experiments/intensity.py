"""Arithmetic intensity sweep (C12): one fused kernel y[i] = f(x[i]) with `fmas` FMAs per element.

f is the chain y <- y*A + x, `fmas` times, from y = x. Whatever the chain's length, x is read once
and y written once (2 n itemsize bytes) while the work grows (2 fmas n FLOPs, counted from the
definition), so the sweep walks the roofline from memory-bound (fmas = 0 is a copy) to
compute-bound.
A = 0.75 keeps |y| below 4|x| and shrinks each rounding error by A per step, so the result stays
within a few ulps of a float64 reference, which it is checked against on a sample of elements.
GPU: the Triton kernel of experiments/fma_kernel.py (independent chains interleaved per thread,
packed fp16/bf16 math, one program per tile). CPU: torch passes over cache-sized chunks (see
_cpu_chain).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .config import ConfigError, ExperimentConfig, check_sizes
from .core.dtypes import itemsize, torch_dtype
from .core.runner import Context, NotApplicable, Unsupported, WrongResult

NAME = "intensity"
DESCRIPTION = "one fused kernel with 0..1024 FMAs per element read and written once: the roofline"
CLAIMS = ("C12",)

A = 0.75
# relative error a correct chain stays under: rounding errors decay by A per step, so at most
# about one rounding / (1 - A) = 4 ulps whatever the length; garbage lands near 1
TOLERANCE = {"float64": 1e-12, "float32": 2e-6, "float16": 4e-3, "bfloat16": 3e-2}
CHECK_ELEMENTS = 1 << 16  # the numeric check samples this many; the NaN check covers all
WARPS = (1, 2, 4, 8, 16, 32)


def check_block(key: str, block: int) -> None:
    """Triton tiles are powers of two."""
    if not isinstance(block, int) or block < 16 or block & (block - 1):
        raise ConfigError(f"{key}={block} must be a power of two >= 16")


def check_warps(key: str, values) -> None:
    bad = [w for w in values if w not in WARPS]
    if bad or not list(values):
        raise ConfigError(f"{key} has {bad or 'nothing'}; allowed warps per block: {list(WARPS)}")


@dataclass
class IntensityConfig(ExperimentConfig):
    name: str = NAME
    fmas: list[int] = field(default_factory=lambda: [0, 1, 2, 4, 8, 16, 32])  # FMAs per element
    n: int = 1 << 24  # elements per array: x and y together far past the LLC, so fmas=0 is DRAM
    block: int = 4096  # GPU: elements per Triton program
    num_warps: int = 8  # GPU: block / (32 num_warps) independent chains per thread
    # GPU: one wave of programs striding over the tiles instead of one program per tile. Same peak
    # FLOP/s on an H200, but its memory-bound end reached 3.7-3.8 TB/s against 4.1-4.2: off.
    persistent: bool = False
    chunk_bytes: int = 0  # CPU: bytes of x per chunk; 0: a quarter of L2 (see _cpu_chain)

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


def reference(x64: torch.Tensor, fmas: int) -> torch.Tensor:
    """f(x) in float64, in closed form: y_k = A^k x + x (1 - A^k) / (1 - A)."""
    ak = A**fmas
    return x64 * (ak + (1 - ak) / (1 - A))


def check(dtype: str, x: torch.Tensor, y: torch.Tensor, fmas: int) -> float:
    """Relative error of y against the float64 reference on a sample; raises WrongResult."""
    if torch.isnan(y).any():
        raise WrongResult("output has unwritten (NaN-poisoned) elements")
    step = max(1, x.numel() // CHECK_ELEMENTS)
    xs, ys = x[::step].double().cpu(), y[::step].double().cpu()
    ref = reference(xs, fmas)
    err = ((ys - ref).norm() / ref.norm()).item()
    if not err <= TOLERANCE[dtype]:
        raise WrongResult(f"fmas={fmas}: relative error {err:.3g} above {TOLERANCE[dtype]:g}")
    return err


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


def load_kernel():
    """experiments.fma_kernel, imported only now: CPU-only installs need no triton."""
    try:
        from . import fma_kernel
    except ImportError as exc:
        raise Unsupported(f"the GPU kernel is a Triton kernel and triton is missing: {exc}")
    return fma_kernel


def _arrays(ctx: Context, cfg: IntensityConfig, cache: dict):
    """x (random) and y, allocated once per job and reused by every point."""
    if not cache:
        moved = 2 * cfg.n * itemsize(ctx.dtype)
        if ctx.device.type == "cpu" and moved * 1.2 > ctx.free_memory():
            # a CPU allocation past memory gets the process killed, not an exception
            raise MemoryError(f"out of memory: {moved} bytes needed, {ctx.free_memory()} available")
        dt = torch_dtype(ctx.dtype)
        cache["x"] = ctx.randn(cfg.n, dtype=dt)
        cache["y"] = torch.empty_like(cache["x"])
    return cache["x"], cache["y"]


def _measure(ctx: Context, cfg: IntensityConfig, fmas: int, cache: dict, use_triton: bool) -> dict:
    if ctx.dtype not in TOLERANCE:
        raise NotApplicable(f"{ctx.dtype} is a matmul compute mode, not a storage type")
    x, y = _arrays(ctx, cfg, cache)
    if use_triton:
        kernel = load_kernel()
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
