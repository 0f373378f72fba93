"""Memory bandwidth: STREAM's kernels plus `y = x + 1`, from cache-resident sizes to far past the LLC.

Buffers are deliberately not rotated: the curve over size is what shows each cache level.
Bytes are counted from each kernel's definition (every input read once, the output written once).

CPU, float32/float64: numba kernels (kernels/cpu_stream.py) on a team of pinned threads, one per
physical core; a call repeats the pass until it moves `call_bytes` per thread, so L1-sized slices
are timed past the team's start-up. float16/bfloat16 (numba has no half arithmetic): torch ops,
short of the DRAM window (`_torch_sizes`).
from_machine (a CPU): sizes from its caches (machine_sizes), not `sizes`. A machine of several
NUMA nodes also runs the DRAM sizes on each NUMA node's cores alone (params.scope "numa<N>",
else "machine").
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass

import torch
from omegaconf import MISSING

from experiments.core.cpus import read_topology
from experiments.core.config import ConfigError, ExperimentConfig
from experiments.core.dtypes import itemsize, torch_dtype
from experiments.core.checks import check_close, need_host_memory, need_storage_dtype
from experiments.core.harness import Point, State
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
MEMORY_SHARE = 0.25  # machine sizes: a DRAM size's three arrays take at most this of memory


@dataclass
class BandwidthConfig(ExperimentConfig):
    name: str = NAME
    ops: list[str] = MISSING
    sizes: list[int] = MISSING  # bytes per array
    from_machine: bool = MISSING  # CPU: sizes from its caches instead (machine_sizes)
    level_points: int = MISSING  # machine sizes: array sizes per cache level
    dram_arrays: list[float] = MISSING  # machine sizes: DRAM arrays, in multiples of the LLC
    call_bytes: int = MISSING  # CPU: bytes one call moves per thread at least (passes repeat)
    dram_steady_s: float = MISSING  # CPU: a DRAM-window point samples at least this long

    RULES = {"ops": OPS, "sizes": "sizes", "from_machine": "bool", "level_points": "int >= 1",
             "call_bytes": "int >= 1", "dram_steady_s": ">= 0"}

    def __post_init__(self):
        super().__post_init__()
        if not self.dram_steady_s < 60:
            raise ConfigError(f"experiment.dram_steady_s={self.dram_steady_s} must be seconds "
                              "in [0, 60)")
        if not list(self.dram_arrays) or any(not f > 0 for f in self.dram_arrays):
            raise ConfigError(f"experiment.dram_arrays={list(self.dram_arrays)} must be > 0")


Config = BandwidthConfig


def _check(op, a, b, out, dtype) -> float:
    step = max(1, out.numel() // CHECK_ELEMENTS)
    pick = lambda t: None if t is None else t[::step].double()
    return check_close(out, lambda: OPS[op][3](pick(a), pick(b)), TOLERANCE[dtype], op, step=step)


def machine_sizes(cfg: BandwidthConfig, facts, level_points: int | None = None) -> list[int]:
    """Bytes per array from the cache sizes the team holds together: `level_points` (else cfg's)
    sizes per level, between one where every op's working set (2-3 arrays) is past the level
    below and one where it fills at most half of this level (the fit's windows,
    analysis/levels.py), then the DRAM arrays (multiples of the LLC: working sets 8x and more
    past it)."""
    caches = (facts.extra or {}).get("cache_total_bytes") or facts.cache_bytes or {}
    levels = sorted(v for v in caches.values() if v)
    sizes, below = [], (levels[0] / 16 if levels else 4096)
    for cap in levels:
        # every op's working set (2 or 3 arrays of s bytes) in [2 below, cap / 2] for s in [lo, hi]
        lo, hi, k = below, cap / 6, level_points or cfg.level_points
        if lo < hi:
            sizes += [lo * (hi / lo) ** (i / max(1, k - 1)) for i in range(k)] if k > 1 else [hi]
        else:  # a narrow window: 3-array ops inside at hi, 2-array ops at lo
            sizes += [hi] + ([lo] if lo <= cap / 4 else [])
        below = cap
    llc = levels[-1] if levels else facts.llc_bytes or 32 << 20  # all sockets' LLCs together
    sizes += dram_sizes(cfg.dram_arrays, llc, getattr(facts, "memory_bytes", None))
    return sorted({max(256, int(s) // 256 * 256) for s in sizes})


def dram_sizes(dram_arrays, llc: float, memory_bytes: float | None) -> list[int]:
    """Bytes per array of the DRAM window: dram_arrays x the LLC, leaving out those whose three
    arrays would take more than MEMORY_SHARE of memory (the smallest stays: its `oom` rows say
    it did not fit). One size past 4x the LLC is enough for the plateau; beside a large L3, larger
    arrays cost many seconds and, where memory is small, end in oom rows."""
    sizes = sorted(int(f * llc) // 256 * 256 for f in dram_arrays)
    fits = [s for s in sizes if not memory_bytes or 3 * s <= MEMORY_SHARE * memory_bytes]
    return fits or sizes[:1]


def _llc(ctx: Context) -> float:
    """The LLC the team holds together (all sockets'), as machine_sizes reads it."""
    facts = _facts(ctx)
    return max(((facts.extra or {}).get("cache_total_bytes") or {}).values(),
               default=facts.llc_bytes) or 32 << 20


def in_dram_window(working_set_bytes: float, llc: float) -> bool:
    """Whether a working set is DRAM's: past 4x the LLC (an op over two such arrays is)."""
    return working_set_bytes >= 4 * llc


def _sizes(cfg: BandwidthConfig, ctx: Context) -> list[int]:
    """cfg.sizes, or a CPU's machine_sizes: level_points per level, but one where this job's
    torch ops run beside numba's float32 kernels (a half dtype's): the level fits leave its rows
    out (analysis/levels.py own_kernels), so more sizes a level would decide nothing."""
    if cfg.from_machine and ctx.device.type == "cpu":
        beside = not _numba(ctx) and _numba(ctx, "float32")
        return machine_sizes(cfg, _facts(ctx), level_points=1 if beside else None)
    return list(cfg.sizes)


def _teams(ctx: Context, sizes) -> list[tuple[str, list[int], list[int]]]:
    """[(scope, CPUs, sizes)]: the whole team over every size; with several NUMA nodes, each
    NUMA node's cores over the DRAM sizes (working sets past 4x the LLC)."""
    extra = _facts(ctx).extra or {}
    team = list(extra.get("team") or [])
    out = [("machine", team, list(sizes))]
    numa = extra.get("numa") or {}
    if len(numa) > 1 and team:
        llc = _llc(ctx)
        dram = [s for s in sizes if in_dram_window(2 * s, llc)]
        for node, cpus in sorted(numa.items(), key=lambda kv: int(kv[0])):
            mine = [c for c in team if c in set(cpus)]
            if mine and dram:
                out.append((f"numa{node}", mine, dram))
    return out


def _torch_sizes(ctx: Context, sizes) -> list[int]:
    """A CPU's torch (half) jobs stop before the DRAM window where numba's kernels stream it (this
    machine's float32 job, `_numba`): the DRAM ceiling and the claims read those alone
    (analysis/levels.py own_kernels), and beside a large L3 a half dtype's one DRAM size (three
    gigabyte arrays, drawn and first-touched) takes most of its job's time.
    Without numba they stop at the first DRAM size: drawing random gigabyte arrays takes longer
    than timing them."""
    if ctx.device.type != "cpu":
        return list(sizes)
    llc = _llc(ctx)
    past = [s for s in sizes if in_dram_window(2 * s, llc)]
    if _numba(ctx, "float32"):
        return [s for s in sizes if s not in past]
    return [s for s in sizes if not past or s <= min(past)]


def _numba(ctx: Context, dtype: str | None = None) -> bool:
    """Whether the numba kernels run this job, or this machine's job in `dtype` (a CPU,
    float32/float64, facts naming a team, numba installed: without it torch ops run, as for half
    dtypes)."""
    dtype = dtype or getattr(ctx, "dtype", "float32")
    return ctx.device.type == "cpu" and dtype in ("float32", "float64") and bool(
        (_facts(ctx).extra or {}).get("team")) and bool(importlib.util.find_spec("numba"))


def _facts(ctx):
    """The job's device facts (points() may be asked with a bare device)."""
    facts = getattr(ctx, "facts", None)
    if facts is None:
        from experiments.core.device import device_facts
        facts = device_facts(ctx.device)
    return facts


def _arrays(ctx: Context, n: int, cache: dict, cpus=None):
    """a, b (random) and out for arrays of n elements, drawn once per size (and team) and shared
    by every op (drawing 1 GiB of random numbers on a CPU takes longer than timing a copy of it).
    With `cpus`, the team fills them: each worker first-touches its own slice; on huge pages
    short of the DRAM window (cpu_stream.host_empty says why)."""
    key = (n, tuple(cpus or ()))
    if cache.get("key") != key:
        cache.clear()  # the last size's arrays go first
        dt = torch_dtype(ctx.dtype)
        team = cpus or _fill_team(ctx)
        if team:
            from experiments.kernels import cpu_stream
            huge = not in_dram_window(2 * n * itemsize(ctx.dtype), _llc(ctx))
            a, b, out = (cpu_stream.filled(team, n, dt, seed, index=seed - 1, huge_pages=huge)
                         for seed in (1, 2, 3))
        else:
            a, b = ctx.randn(n, dtype=dt), ctx.randn(n, dtype=dt)
            out = torch.empty(n, device=ctx.device, dtype=dt)
        cache.update(key=key, a=a, b=b, out=out)
    return cache["a"], cache["b"], cache["out"]


def _fill_team(ctx: Context):
    """The CPUs that fill a CPU job's arrays (numba's fill, in parallel: torch.randn with a
    generator draws on one thread, tens of seconds over a large machine's half-dtype jobs), else
    None."""
    if ctx.device.type != "cpu" or not importlib.util.find_spec("numba"):
        return None
    return list((_facts(ctx).extra or {}).get("team") or []) or None


def measure(state: State) -> dict:
    ctx, op, n, cpus = state.ctx, state.row["op"], state.row["n"], state.args["cpus"]
    need_storage_dtype(ctx.dtype)
    need_host_memory(ctx, 3 * n * itemsize(ctx.dtype))  # a, b and out, whatever the op reads
    n_in, flops_per, kernel, _ = OPS[op]
    a, b, out = _arrays(ctx, n, state.memo, cpus)
    b = b if n_in == 2 else None
    if cpus:
        from experiments.kernels import cpu_stream
        arrays = [t.numpy() for t in (a, b if b is not None else a, out)]
        reps, one = state.args["reps"], state.args["one_vector"]
        call = lambda i: cpu_stream.run(cpus, op, *arrays, reps=reps, one_vector=one)
    else:
        call = lambda i: kernel(a, b, out)
    out.fill_(float("nan"))  # what the kernel leaves unwritten shows
    first_s = ctx.first_call(lambda: call(0))
    err = _check(op, a, b, out, ctx.dtype)
    # a long first call is the estimate (a DRAM size); a DRAM point samples dram_steady_s at least
    steady = {"min_point_s": state.point.least_s} if state.point.least_s else {}
    stats = state.time(call, warm_call_s=first_s, **steady)
    return stats | {"rel_error": err, "check_passed": True}


def points(cfg: BandwidthConfig, ctx: Context) -> list[Point]:
    """Per team (scope), size and op; a CPU's DRAM-window points sample dram_steady_s at least."""
    size, llc = itemsize(ctx.dtype), _dram_llc(ctx)
    sizes = _sizes(cfg, ctx)
    teams = _teams(ctx, sizes) if _numba(ctx) else [("machine", None, _torch_sizes(ctx, sizes))]
    out = []
    for scope, cpus, team_sizes in teams:
        where = placement(cpus) if ctx.device.type == "cpu" else {}
        for nbytes in team_sizes:
            n = max(1, nbytes // size)
            for op in cfg.ops:
                moved = _moved(op, n, size)
                reps = max(1, -(-cfg.call_bytes * len(cpus) // moved)) if cpus else 1
                dram = _dram_point(moved, llc)
                # DRAM's points step one vector at a time, the caches' as LLVM unrolls
                # (cpu_stream.ONE_VECTOR says why)
                one = bool(cpus) and dram
                steady = _steady_s(cfg, dram)
                row = {"op": op, "n": n, "working_set_bytes": moved, "bytes": float(reps * moved),
                       "flops": float(reps * OPS[op][1] * n),
                       "variant": "numba" if cpus else "torch",
                       "params": {"scope": scope, "passes": reps} | where | (
                           {"one_vector_step": one} if cpus else {}) | (
                           {"min_point_s": steady} if dram else {})}
                out.append(Point(row, args={"cpus": cpus, "reps": reps, "one_vector": one},
                                 least_s=steady))
    return out


def placement(cpus=None) -> dict:
    """Where a CPU point's threads ran: a team's CPUs, else torch's pool over this process's."""
    if cpus:
        return read_topology().placement(cpus)
    where = read_topology().placement(sorted(os.sched_getaffinity(0)))
    return where | {"threads": torch.get_num_threads()}


def _moved(op: str, n: int, size: int) -> int:
    """Bytes one pass of `op` over n elements moves: each input read once, the output written."""
    return (OPS[op][0] + 1) * n * size


def _dram_llc(ctx: Context) -> float | None:
    """The LLC a CPU job's DRAM window is judged against (in_dram_window); None on a GPU."""
    return _llc(ctx) if ctx.device.type == "cpu" else None


def _steady_s(cfg: BandwidthConfig, dram: bool) -> float:
    """The least a point samples: dram_steady_s for a CPU's DRAM-window point
    (config/experiment/bandwidth.yaml says why), else 0 (the job's budget alone)."""
    return cfg.dram_steady_s if dram else 0.0


def _dram_point(moved: int, llc: float | None) -> bool:
    """Whether a point whose pass moves `moved` bytes lies in a CPU's DRAM window (`llc`: from
    _dram_llc, None on a GPU)."""
    return llc is not None and in_dram_window(moved, llc)
