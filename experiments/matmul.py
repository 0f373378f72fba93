"""Square GEMM throughput per dtype, and each dtype's error against a float64 product.

FLOPs = 2 n^3 (one multiply and one add per term). Bytes are the fewest a GEMM must move: A and B
read once, C written once. Operand sets rotate until they span `rotate_bytes_factor` LLCs, so that
small sizes are not timed hot in cache; a CPU's sweep runs one set (config/config.yaml says why).
float32 runs with TF32 off; `tf32` is float32 storage with TF32 tensor cores on; fp8 is
e4m3 through torch._scaled_mm (unit scales, bf16 output) where the device has it.

Error of the checked operand set (sizes up to check_max), all relative Frobenius norms:
`rel_error` = ||C - A B|| / ||A B|| with A, B the float32 data before it was cast to the dtype, in
float64: the total a user sees. params `input_rounding_error`: the float64 product of the cast
inputs against that same reference (casting alone; 0 for float32 and tf32, whose storage is
float32: TF32 rounds inside the kernel, so it counts as arithmetic). params `arithmetic_error`:
C against the float64 product of the cast inputs (accumulation, TF32, output rounding); TOLERANCE
applies to this part, so a correct kernel passes whatever its inputs' precision.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from omegaconf import MISSING

from experiments.core.budget import SlowPointGuard, rotation_copies
from experiments.core.config import ExperimentConfig
from experiments.core.checks import has_nan
from experiments.core.dtypes import itemsize, tf32_matmul, torch_dtype
from experiments.core.cpus import HALF_ARITHMETIC, isa_flags
from experiments.core.harness import Point, State
from experiments.core.runner import Context, Unsupported, WrongResult

NAME = "matmul"
DESCRIPTION = "square C = A @ B from 256 to 16384 per dtype, with its error against float64"
# dtypes no CPU has, and why (cpu_supports' rows, by hand): a sweep plans no such CPU job
NO_CPU_HAS = {"tf32": "TF32 is a mode of NVIDIA tensor cores; a CPU has no TF32 matmul",
              "float8_e4m3": "no CPU has float8 matrix arithmetic: torch emulates float8 matmul"}
NOT_ON_DTYPES = {"cpu": tuple(NO_CPU_HAS)}

# arithmetic_error ||C - C64|| / ||C64|| a correct GEMM stays under, C64 computed in float64 from
# the very inputs the kernel saw: the error of the arithmetic (TF32 rounding, accumulation, output
# rounding), not of casting the data. Garbage lands near 1.
TOLERANCE = {"float64": 1e-12, "float32": 1e-5, "tf32": 5e-3, "float16": 5e-3,
             "bfloat16": 2e-2, "float8_e4m3": 2e-2}
OUT_DTYPE = {"float8_e4m3": torch.bfloat16}
# timed calls of a size past max_call_s that the rising curve let in (rising_call_s): its best
# of two, not min_samples' five (such a call can take seconds on a small CPU)
RISING_SAMPLES = 2
# a CPU point's least samples: it counts at its best call and samples steady_s, which short calls
# fill; min_samples' five calls of half a second or more would add seconds for no better best
CPU_SAMPLES = 3


@dataclass
class MatmulConfig(ExperimentConfig):
    name: str = NAME
    sizes: list[int] = MISSING
    max_call_s: float = MISSING  # skip a size whose predicted single call is longer (slow CPUs)
    # ...except the next size while the curve still rises (the last clean size gained at least
    # plateau_gain over the one before it, and is the best so far): it runs if predicted under
    # rising_call_s a call, sampled RISING_SAMPLES calls. The plateau is what the ceiling needs
    # (on a slow CPU max_call_s alone can stop short of the size where torch.mm reads its best).
    # Up to max_call_s: no such size.
    rising_call_s: float = MISSING
    check_max: int = MISSING  # check the result against float64 up to this size
    # a point samples at least this long. A GPU's GEMMs are power-bound: a short run times the
    # clock before the power cap pulls it down (short points read a higher clock and rate than
    # the sustained ones). A CPU's point counts at its best call, and its calls spread (the first
    # slowest): a point of a fraction of a second can fall short of torch.mm's best over a second
    steady_s: float = MISSING
    rotate_bytes_factor: float = MISSING  # rotate operand sets until they span this many LLCs
    # (0: one set)
    # Hopper's fp8 GEMMs reach full rate only with fast (lower-precision) accumulation, as
    # production fp8 training and inference use it; the rows' rel_error shows what it costs.
    fp8_fast_accum: bool = MISSING
    # stop at the plateau: once plateau_flat sizes in a row gained less than plateau_gain over
    # the best size before them, the larger sizes past plateau_past are skipped (plateau_gain 0:
    # run them all)
    plateau_gain: float = MISSING
    plateau_flat: int = MISSING
    plateau_past: int = MISSING

    RULES = {"sizes": "sizes", "max_call_s": "> 0", "rising_call_s": "> 0",
             "plateau_gain": ">= 0", "plateau_flat": "int >= 1", "plateau_past": "int >= 0",
             "rotate_bytes_factor": ">= 0", "steady_s": ">= 0"}


Config = MatmulConfig


def _operands(ctx: Context, n: int, sets: int, keep_full: bool = False):
    """`sets` (A, B, C) triples in the job's dtype, from float32 random data; with keep_full, also
    the first set's float32 (A, B) before the cast (else None), the reference of the total error.
    On a CPU the first set is drawn and the others are copies of it in memory of their own: the
    rotation defeats the cache by address, not by value, and drawing and casting each set can
    take a large share of a small CPU's job beside a large LLC. A GPU draws
    every set (its draws are fast; its GEMM's power follows the data)."""
    dt = torch_dtype(ctx.dtype)

    def drawn():
        a32, b32 = ctx.randn(n, n), ctx.randn(n, n)
        if ctx.dtype == "float8_e4m3":
            # _scaled_mm wants B column-major: transpose of a row-major [n, n]
            a, b = a32.to(dt), b32.t().contiguous().to(dt).t()
            c = torch.empty(n, n, device=ctx.device, dtype=OUT_DTYPE[ctx.dtype])
        else:
            a, b = a32.to(dt), b32.to(dt)
            c = torch.empty(n, n, device=ctx.device, dtype=dt)
        return (a, b, c), (a32, b32)

    first, full = drawn()
    full = full if keep_full else None  # the float32 originals go before the other sets come
    # each copy's C written now: a C first touched inside the timed calls paid its page faults
    # there, so the first pass over the sets read slower than the later ones
    copied = lambda: (first[0].clone(), first[1].clone(),
                      torch.full_like(first[2], float("nan")))
    rest = [copied() if ctx.device.type == "cpu" else drawn()[0] for _ in range(sets - 1)]
    return [first, *rest], full


def _kernel(ctx: Context, cfg: MatmulConfig):
    if ctx.dtype == "float8_e4m3":
        if ctx.device.type == "cuda" and torch.cuda.get_device_capability(ctx.device) < (8, 9):
            raise Unsupported("fp8 matmul needs compute capability 8.9 or newer")
        one = torch.ones((), device=ctx.device, dtype=torch.float32)
        fast = cfg.fp8_fast_accum and ctx.device.type == "cuda"
        return lambda a, b, c: torch._scaled_mm(a, b, one, one, out_dtype=c.dtype,
                                                use_fast_accum=fast, out=c)
    return lambda a, b, c: torch.mm(a, b, out=c)


def cpu_supports(dtype: str, flags=None) -> None:
    """Raise Unsupported, saying why, for a dtype the CPU has no arithmetic for: torch emulates
    it, and an emulation's rate is no ceiling (a CPU's emulated float16 reads a few GFLOP/s)."""
    if dtype in NO_CPU_HAS:
        raise Unsupported(NO_CPU_HAS[dtype])
    if dtype == "float16" and not (HALF_ARITHMETIC & (isa_flags() if flags is None else flags)):
        raise Unsupported("this CPU has no half-precision arithmetic (AVX512-FP16, AMX-FP16, ARM "
                          "FP16): torch emulates float16 matmul")


def error_parts(a, b, c, a_full, b_full) -> dict:
    """C = a @ b, with a, b the cast copies of a_full, b_full: its total error and the two parts
    (module docstring). fp8's a, b are e4m3: .double() upcasts them exactly."""
    c64 = c.double()
    rounded = a.double() @ b.double()  # what the kernel would give with exact arithmetic
    arithmetic = ((c64 - rounded).norm() / rounded.norm()).item()
    exact = a.dtype == a_full.dtype and b.dtype == b_full.dtype  # no cast: the same reference
    ref = rounded if exact else a_full.double() @ b_full.double()
    ref_norm = ref.norm()
    return {"rel_error": ((c64 - ref).norm() / ref_norm).item(),
            "input_rounding_error": ((rounded - ref).norm() / ref_norm).item(),
            "arithmetic_error": arithmetic}


def _gemm(state: State, min_samples: int | None = None) -> dict:
    ctx, cfg, n = state.ctx, state.cfg, state.row["n"]
    if ctx.device.type == "cpu":
        cpu_supports(ctx.dtype)
    kernel = _kernel(ctx, cfg)
    set_bytes = 3 * n * n * itemsize(ctx.dtype)
    sets = rotation_copies(set_bytes, ctx.facts.llc_bytes, cfg.rotate_bytes_factor, at_most=16)
    checked = n <= cfg.check_max
    triples, full = _operands(ctx, n, sets, keep_full=checked)
    with tf32_matmul(ctx.dtype == "tf32"):
        a, b, c = triples[0]
        c.fill_(float("nan"))
        first_s = ctx.first_call(lambda: kernel(a, b, c))
        if has_nan(c):  # the error parts below assume a written output
            raise WrongResult("output has unwritten (NaN-poisoned) elements")
        errors = {"rel_error": None, "input_rounding_error": None, "arithmetic_error": None}
        if checked:
            errors = error_parts(a, b, c, *full)
            del full  # the float32 originals are not timed: free them first
            if not errors["arithmetic_error"] <= TOLERANCE[ctx.dtype]:
                raise WrongResult(f"arithmetic error {errors['arithmetic_error']:.3g} "
                                  f"above {TOLERANCE[ctx.dtype]:g}")
        least = {} if min_samples is None else {"min_samples": min_samples}
        stats = state.time(lambda i: kernel(*triples[i % sets]), warm_call_s=first_s,
                           min_point_s=cfg.steady_s, **least)
    params = {"operand_sets": sets, "tf32": ctx.dtype == "tf32",
              "input_rounding_error": errors["input_rounding_error"],
              "arithmetic_error": errors["arithmetic_error"]}
    if ctx.dtype == "float8_e4m3":
        params["fp8_fast_accum"] = cfg.fp8_fast_accum and ctx.device.type == "cuda"
    return stats | {"rel_error": errors["rel_error"], "check_passed": checked, "params": params}


def points(cfg: MatmulConfig, ctx: Context) -> list[Point]:
    """One per size, smallest first; a CPU's samples steady_s at least (its calls fill it)."""
    from experiments.bandwidth import placement
    cpu = ctx.device.type == "cpu"
    where = {"params": placement()} if cpu else {}
    size = itemsize(ctx.dtype)
    out_size = OUT_DTYPE[ctx.dtype].itemsize if ctx.dtype in OUT_DTYPE else size
    moved = lambda n: 2 * n * n * size + n * n * out_size
    return [Point({"op": "gemm", "n": n, "m": n, "k": n, "flops": 2.0 * n**3,
                   "bytes": float(moved(n)), "working_set_bytes": moved(n)} | where,
                  least_s=cfg.steady_s if cpu else 0.0) for n in sorted(cfg.sizes)]


def _so_far(state: State) -> tuple[SlowPointGuard, int, bool]:
    """From the rows before: the guard, the sizes in a row that gained < plateau_gain over the
    best before, and whether the last one rose to the best so far."""
    cfg, cpu = state.cfg, state.device.type == "cpu"
    best, flat, rising, last = None, 0, False, None
    for row in state.rows:
        if row["status"] == "ok" and not (row.get("contended") or row.get("noisy") and not cpu):
            new = 2.0 * row["n"] ** 3 / row["time_s_min" if cpu else "time_s"]
            rising = last is not None and new >= max(last * (1 + cfg.plateau_gain), best)
            flat = 0 if best is None or new >= best * (1 + cfg.plateau_gain) else flat + 1
            best, last = max(best or 0.0, new), new
    return SlowPointGuard.after(cfg.max_call_s, state.rows), flat, rising


def _verdict(state: State) -> tuple[dict | None, bool]:
    """A skipped row's columns, else None; and whether the size runs past max_call_s (after one
    that rose: up to rising_call_s, on RISING_SAMPLES calls)."""
    cfg, row = state.cfg, state.row
    guard, flat, rising = _so_far(state)
    if cfg.plateau_gain and flat >= cfg.plateau_flat and row["n"] > cfg.plateau_past:
        gain = f"{cfg.plateau_gain:.0%}"
        return {"status": "skipped", "params": None, "message": f"the plateau showed: {flat} "
                f"sizes in a row gained less than {gain} over the best before"}, False
    past_max = guard.skip(row["flops"], row["bytes"])
    if rising and past_max and cfg.rising_call_s > cfg.max_call_s:
        return guard.skip(row["flops"], row["bytes"], limit_s=cfg.rising_call_s,
                          limit_name="rising_call_s"), True
    return past_max, False


def skip(state: State) -> dict | None:
    return _verdict(state)[0]


def measure(state: State) -> dict:
    rising = _verdict(state)[1]
    cpu = state.ctx.device.type == "cpu"
    row = _gemm(state, RISING_SAMPLES if rising else CPU_SAMPLES if cpu else None)
    flag = {"past_max_call_s": True} if rising else {}
    if cpu and row.get("status", "ok") == "ok":
        from experiments.kernels import cpu_clock  # the cores' clock right after (its docstring)
        flag |= cpu_clock.after_point(state.ctx)
    return row | {"params": (row.get("params") or {}) | flag | (state.row.get("params") or {})}


def extra_s(cfg: MatmulConfig) -> float:
    """What a rising size past max_call_s may sample past its budget (the job's start line)."""
    return RISING_SAMPLES * cfg.rising_call_s if cfg.rising_call_s > cfg.max_call_s else 0.0
