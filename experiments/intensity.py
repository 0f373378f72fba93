"""Arithmetic intensity sweep (C12): one fused kernel y[i] = f(x[i]) with `fmas` FMAs per element.

f is the chain y <- y*A + x, `fmas` times, from y = x. Whatever the chain's length, x is read once
and y written once (2 n itemsize bytes) while the work grows (2 fmas n FLOPs, counted from the
definition), so the sweep walks the roofline from memory-bound (fmas = 0 is a copy) to
compute-bound.
The chain's math, its float64 reference and check are experiments/kernels/chain.py.
GPU: the Triton kernel of experiments/kernels/fma_chain.py (independent chains interleaved per
thread, packed fp16/bf16 math, one program per tile). CPU: the LLVM IR kernel of
experiments/kernels/cpu_fma_ir.py (the same interleaving, in vector registers, one pinned thread
per physical core) in float32, float64 and, where the ISA has half FMAs, float16; else float16
and bfloat16 get `unsupported` rows: torch's half ops compute in float32 between conversions, so
a chain of them times those conversions and passes over memory, not half FMAs, at 1-2 % of the
peak.
n = 0 (a CPU): x and y together 4x its LLC, so fmas = 0 streams from DRAM.
A CPU team of several CPUs also runs the longest chain on its first CPU alone (params scope
"one_cpu", each CPU's share of the last all-CPU point's elements): all N CPUs at less than N times
one CPU's rate, at the same clock, share FMA units (analysis/silicon.py says so beside the peak).
A point far past the ridge runs over a prefix of x and y (`call_s`, `elements_for`): its rate is
its compute, wherever the prefix lies, and beside a large L3 the full arrays cost a small CPU
seconds a call, a large share of the job. Each row's n is what it ran over.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from omegaconf import MISSING

from experiments import kernels
from experiments.core.config import ConfigError, ExperimentConfig
from experiments.core.checks import need_host_memory, need_storage_dtype
from experiments.core.dtypes import STORAGE, itemsize, torch_dtype
from experiments.core.harness import Point, State
from experiments.core.runner import Context, Unsupported
from experiments.kernels.chain import A, check, check_block, check_warps
from experiments.kernels.cpu_team import ONE_CPU, job_cpus

NAME = "intensity"
DESCRIPTION = "one fused kernel with 0..1024 FMAs per element read and written once: the roofline"


@dataclass
class IntensityConfig(ExperimentConfig):
    name: str = NAME
    fmas: list[int] = MISSING  # FMAs per element
    n: int = MISSING  # elements per array: x and y together far past the LLC (0: from a CPU's LLC)
    block: int = MISSING  # GPU: elements per Triton program
    num_warps: int = MISSING  # GPU: block / (32 num_warps) independent chains per thread
    # GPU: one wave of programs striding over the tiles instead of one program per tile. Same peak
    # FLOP/s, but its memory-bound end reads below one program per tile's: off.
    persistent: bool = MISSING
    # a point whose call, predicted from the last point's rate, passes this and is COMPUTE_BOUND x
    # the first point's (the traffic alone) runs over a prefix taking about this long (0: never)
    call_s: float = MISSING

    RULES = {"fmas": "sizes0", "n": "int >= 0", "persistent": "bool", "call_s": ">= 0"}

    def __post_init__(self):
        super().__post_init__()
        check_block("experiment.block", self.block)
        check_warps("experiment.num_warps", [self.num_warps])


Config = IntensityConfig


def elements(cfg: IntensityConfig, ctx: Context) -> int:
    """Elements per array: cfg.n, or with n = 0 (a CPU) x and y together 4x the LLC."""
    if cfg.n:
        return cfg.n
    if ctx.device.type != "cpu":
        raise ConfigError("experiment.n=0 (from the machine) is for CPUs; give a GPU its n")
    return max(1 << 16, 2 * ctx.facts.llc_bytes // itemsize(ctx.dtype))


COMPUTE_BOUND = 4  # a call this many times the traffic's time: compute outweighs memory 4 to 1
ALIGN = 1 << 16  # a prefix's elements: a multiple of this


def elements_for(fmas: int, n: int, seen: list[tuple[int, int, float]], call_s: float) -> int:
    """Elements a point runs over: all n, or a prefix taking about call_s where its full call,
    predicted from the last point's rate (`seen`: (fmas, elements, seconds) of the points so far),
    would be longer and COMPUTE_BOUND x the first point's. The first point (fmas = 0: a copy)
    times the traffic alone; past COMPUTE_BOUND x that, a prefix in a faster cache would still be
    compute-bound, so the point reads the same rate."""
    if not call_s or not seen:
        return n
    _, m0, t0 = seen[0]
    f1, m1, t1 = seen[-1]
    predicted = t1 * (n / m1) * max(fmas, 1) / max(f1, 1)
    if predicted <= call_s or predicted < COMPUTE_BOUND * t0 * n / m0:
        return n
    return max(ALIGN, min(n, int(n * call_s / predicted)) // ALIGN * ALIGN)


def _arrays(ctx: Context, n: int, cache: dict):
    """x (random) and y, allocated once per job and reused by every point; on a CPU the team
    fills them (each worker first-touches its slice: its pages lie in the worker's node), on
    huge pages short of DRAM's working sets (cpu_stream.host_empty says why)."""
    if not cache:
        need_host_memory(ctx, 2 * n * itemsize(ctx.dtype))
        dt = torch_dtype(ctx.dtype)
        if ctx.device.type == "cpu":
            from experiments.bandwidth import in_dram_window
            from experiments.kernels import cpu_stream
            huge = not in_dram_window(2 * n * itemsize(ctx.dtype), ctx.facts.llc_bytes)
            cpus = job_cpus(ctx)
            cache["x"] = cpu_stream.filled(cpus, n, dt, ctx.settings.seed + 1, huge_pages=huge)
            cache["y"] = cpu_stream.filled(cpus, n, dt, ctx.settings.seed + 2, index=1,
                                           huge_pages=huge)
        else:
            cache["x"] = ctx.randn(n, dtype=dt)
            cache["y"] = torch.empty_like(cache["x"])
    return cache["x"], cache["y"]


def _cpu_kernel(dtype: str = "float32"):
    """The CPU FMA kernel module (kernels/cpu_fma_ir.py: float32, float64, and float16 where the
    ISA has half FMAs); Unsupported, saying why, otherwise."""
    if dtype == "bfloat16":
        raise Unsupported("no bfloat16 FMA kernel for CPUs: x86 (AVX512_BF16, AMX) and ARM have "
                          "bf16 dot products, not bf16 FMAs (the GEMM ceiling measures them)")
    try:
        from experiments.kernels import cpu_fma_ir
    except ImportError as exc:
        raise Unsupported(f"the CPU FMA kernel is compiled by llvmlite, missing: {exc}")
    if dtype == "float16" and not cpu_fma_ir.native():
        raise Unsupported("this CPU has no half-precision FMAs (x86 AVX512-FP16, ARM FP16): a "
                          "float16 chain would time its emulation")
    return cpu_fma_ir


def measure(state: State) -> dict:
    ctx, cfg, fmas, m = state.ctx, state.cfg, state.args["fmas"], state.row["n"]
    need_storage_dtype(ctx.dtype)
    cpu_kernel = None if state.args["triton"] else _cpu_kernel(ctx.dtype)
    x, y = (t[:m] for t in _arrays(ctx, elements(cfg, ctx), state.memo))
    cpus = job_cpus(ctx)[:1] if state.args.get("one_cpu") else job_cpus(ctx)
    if state.args["triton"]:
        kernel = kernels.load("fma_chain")
        call = lambda i: kernel.fma_chain(x, y, fmas, A, block=cfg.block, num_warps=cfg.num_warps,
                                          persistent=cfg.persistent)
    else:
        xn, yn = x.numpy(), y.numpy()
        call = lambda i: cpu_kernel.fma_chain(cpus, xn, yn, fmas, A)
    y.fill_(float("nan"))
    first_s = ctx.first_call(lambda: call(0))
    err = check(ctx.dtype, x, y, fmas)
    out = state.time(call, warm_call_s=first_s) | {"rel_error": err, "check_passed": True}
    if cpu_kernel is not None:  # the cores' clock right after, on the same cores (cpu_clock.py)
        from experiments.kernels import cpu_clock
        out["params"] = state.row["params"] | cpu_clock.after_point(ctx, cpus)
    return out


def _variant(ctx: Context, size: int) -> tuple[str, dict]:
    if ctx.device.type == "cuda":
        return "triton", {}
    from experiments.bandwidth import placement
    variant = "llvmlite"
    lanes = {}
    try:
        lanes = {"lanes": _cpu_kernel(ctx.dtype).lanes(size)}
    except Unsupported:
        pass  # each point's row says why
    return variant, lanes | placement(job_cpus(ctx))


def points(cfg: IntensityConfig, ctx: Context) -> list[Point]:
    """One point per FMA count, over all n elements (adapt: a prefix, once the rates show it)."""
    size, n = itemsize(ctx.dtype), elements(cfg, ctx)
    variant, params = _variant(ctx, size)
    gpu = ctx.device.type == "cuda"
    if gpu:
        params = {"block": cfg.block, "num_warps": cfg.num_warps, "persistent": cfg.persistent}
    out = [Point({"op": "fma_chain", "variant": variant, "n": n, "flops": 2.0 * fmas * n,
                  "bytes": float(2 * n * size), "working_set_bytes": 2 * n * size,
                  "params": params | {"fmas": fmas}}, args={"fmas": fmas, "triton": gpu})
           for fmas in cfg.fmas]
    # only where the chain runs: a dtype without a CPU kernel says so once, in its team's rows
    if not gpu and "lanes" in params and ctx.dtype in STORAGE and len(job_cpus(ctx)) > 1 \
            and max(cfg.fmas) > 0:
        fmas = max(cfg.fmas)
        from experiments.bandwidth import placement
        one = params | placement(job_cpus(ctx)[:1]) | {"fmas": fmas, "scope": ONE_CPU}
        out.append(Point({"op": "fma_chain", "variant": variant, "n": n,
                          "flops": 2.0 * fmas * n, "bytes": float(2 * n * size),
                          "working_set_bytes": 2 * n * size, "params": one},
                         args={"fmas": fmas, "triton": False, "one_cpu": True}))
    return out


def adapt(state: State) -> dict:
    """The elements a point runs over (elements_for), from the ok rows before it; the one-CPU
    point: one CPU's share of the last all-CPU point's."""
    seen = [(r["params"]["fmas"], r["n"], float(r["time_s"])) for r in state.rows
            if r.get("status") == "ok" and (r.get("time_s") or 0) > 0
            and r["params"].get("scope") != ONE_CPU]
    n, fmas, size = state.row["n"], state.args["fmas"], itemsize(state.dtype)
    m = elements_for(fmas, n, seen, state.cfg.call_s)
    if state.args.get("one_cpu"):
        last = seen[-1][1] if seen else n
        m = min(last, max(ALIGN, last // len(job_cpus(state.ctx)) // ALIGN * ALIGN))
    return {"n": m, "flops": 2.0 * fmas * m, "bytes": float(2 * m * size),
            "working_set_bytes": 2 * m * size}
