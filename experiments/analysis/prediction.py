"""The time a call should take on a fitted roofline, summed over its ops.

Each op (an aten op with its FLOPs and bytes, experiments/placement/counting.py) is predicted as
the slowest of three terms:
- compute: FLOPs / P, P the dtype's GEMM ceiling for matrix ops (matmuls, convolutions,
  attention, fused layers) at the op's size where the system's matmul sweep is in the dataset,
  its vector (FMA) ceiling for the rest; a 2-D GEMM whose shapes the profiler recorded (mm,
  addmm, linear) reads P off the decode experiment's gemv_gemm sweep at its shape instead
  (sweeps.shaped_rate: a thin GEMM streams its wide operand and runs far below the square
  GEMMs' rate); a fused attention kernel adds its softmax
  exponentials at the special-function units' rate, SFU_SHARE of the float32 FMA rate (they
  stall the matrix units: FlashAttention-3, Shah et al. 2024, section 3);
- memory: with Nsight Compute's bytes, the slowest level's measured traffic over that level's
  bandwidth (DRAM, L2, L1), never below the time the bandwidth sweep took to move the op's
  working set where the sweep still climbs (a small kernel's launch and fill); with counted
  bytes, the `cold` bytes (weights and the call's inputs,
  rotated past the caches by the workload experiment) over DRAM bandwidth plus the rest (the
  activations earlier ops wrote) over the bandwidth sweep's rate at the op's working set (its
  tensors in and out; `level` names the smallest cache whose fitted window holds it, DRAM when
  none does);
- latency: the floor of one kernel (graph replay or eager launch, as the call was timed) times
  the kernels the op launches (Nsight Compute's count where it ran, else one per call); on a
  GPU a GEMM's floor is also the shortest GEMM the matmul and gemv_gemm sweeps timed; a cuDNN
  RNN's recurrence is serial, so its latency term is layers x directions x T steps, each one
  thin GEMM (h W_hh, its time read off the gemv_gemm sweep at its shape, never below the
  shortest GEMM) and one pointwise kernel (GELU's op rate at its bytes where measured, never
  below the latency floor: cell_time), plus its input projections at
  the GEMM roof (the op's definition: cuDNN's standard algorithm launches those two a step);
- an embedding (gather) reads only the rows its indices name: where a row counted the whole
  table (runs before the counting fix), its bytes are recomputed from its shapes (`gathered`),
  and those are the working set the bandwidth sweep is read at, ncu's bytes or not;
- op rates: an op of a class the op_rates experiment measured for this system (or its device
  model) and dtype (experiments/placement/opclass.py: convolutions by variant, attention by
  head dimension, the fused attention and encoder layers, norms, softmax, GELU, pooling,
  gathers, the elementwise add and strided copy: those two say nothing where unmeasured)
  takes the rate torch's kernel for that class attained instead of the roofs: its compute term
  FLOPs over the class's FLOP/s at its FLOPs per call (a GPU's convolutions and attention: at
  their shape, shape_rates.py; no exponentials added: the kernel's
  rate holds them), or its memory term its counted bytes over the class's B/s at its
  working set (ncu's bytes or not);
  sweeps.op_rate never reads a calibration point at the op's own input shapes. `curve` and
  the row's `predicted_from` name the class; without one, the terms above.
A call is the sum over its ops. error = measured / predicted - 1.
"""

from __future__ import annotations

import math

from experiments.analysis import cpuops, roofline, sweeps
from experiments.placement import opclass
from experiments.analysis.sweeps import at as _at, shapes_of as _shapes

MISS = 0.5  # |error| above this: the row names the term that failed
# exponentials per second over float32 FMA FLOP/s: an SM issues 16 MUFU ops per clock against
# 128 FMA (256 FLOPs) on Hopper and Ampere
SFU_SHARE = 16 / 256


ITEMSIZE = {"float64": 8, "float32": 4, "tf32": 4, "bfloat16": 2, "float16": 2}
RNN_OPS = ("aten::_cudnn_rnn",)
EMBEDDINGS = ("aten::embedding", "aten::_embedding_bag")  # and their variants (opclass.base_op)


def is_gather(op: str) -> bool:
    """Whether aten op `op` gathers rows of a table (an embedding or embedding_bag)."""
    return opclass.base_op(op) in EMBEDDINGS


def gathered_bytes(op: str, shapes, itemsize: int) -> tuple[float, float] | None:
    """(bytes, cold bytes) of a gather from its input shapes: the rows the indices name (read,
    and written out: one per index for embedding, one per bag for embedding_bag) and the
    indices (int64), never the whole table; None for other ops."""
    s = _shapes(shapes)
    if not is_gather(op) or len(s) < 2 or len(s[0]) != 2:
        return None
    dim, idx = s[0][1], math.prod(s[1])
    out_rows = idx if op == "aten::embedding" else (math.prod(s[2]) if len(s) > 2 else idx)
    cold = idx * dim * itemsize + 8.0 * sum(math.prod(x) for x in s[1:])
    return cold + out_rows * dim * itemsize, cold


def gemm_time(r: dict, flops: float) -> float:
    """One GEMM's time at this size: the matmul sweep's FLOP/s there, never below the time of
    the sweep's smallest GEMM (its launch and fill); the roof and the latency floor without it."""
    if r.get("gemm"):
        x, y = r["gemm"]
        return max(flops / _at(r["gemm"], flops), math.exp(x[0]) / y[0])
    return flops / r["matrix"] + r["latency"] if r.get("matrix") else r["latency"]


def serial_time(r: dict, op: str, shapes, flops: float) -> tuple[float, int]:
    """(seconds, steps) of an RNN's recurrence: each of a cuDNN RNN's layers x directions x T
    steps runs its h W_hh GEMM and a pointwise kernel after the last; the input projections (the
    rest of its FLOPs) run as one GEMM per layer (oneDNN's layer: cpuops.rnn_serial). (0, 0)
    for other ops or unreadable shapes."""
    if op == cpuops.MKLDNN_RNN:
        return cpuops.rnn_serial(r, shapes, flops, lambda f, m, n, k: shaped_time(r, f, m, n, k),
                                 lambda b: sweeps.copy_time(r.get("bandwidth"), b, r["DRAM"]))
    s = _shapes(shapes)
    if op not in RNN_OPS or len(s) < 3 or len(s[-1]) != 3 or len(s[1]) != 2:
        return 0.0, 0
    stacks, batch, hidden = s[-1]
    gates = s[1][0] // hidden
    seq = math.prod(s[0]) // (batch * s[0][-1])
    steps = stacks * seq
    step = 2.0 * batch * gates * hidden * hidden
    rest = max(flops - steps * step, 0.0)
    # h W_hh is a thin GEMM (batch rows) streaming W_hh each step: the shaped sweep's rate
    one = max(shaped_time(r, step, batch, gates * hidden, hidden), r.get("gemm_floor") or 0.0)
    t = steps * (one + cell_time(r, batch * hidden * (gates + 2) * r.get("itemsize", 2), shapes))
    return t + (gemm_time(r, rest / stacks) * stacks if rest else 0.0), steps


def cell_time(r: dict, nbytes: float, shapes) -> float:
    """One step's pointwise kernel (the gates' sigmoids and tanhs over `nbytes` in and out): at
    GELU's op rate, a transcendental pointwise kernel measured at that working set, where one
    reaches it; never below the latency floor."""
    rate = sweeps.op_rate(r, "aten::gelu", nbytes, shapes)
    return max(r["latency"], nbytes / rate if rate else 0.0)


def shaped_rate(r: dict, m: int, n: int, k: int) -> float | None:
    """An M x K by K x N GEMM's FLOP/s at its shape: the gemv_gemm sweep's; a CPU's, its hot
    GEMMs' where timed, past their thin sides cpuops.gemm_rate's. None without the sweep."""
    if not r.get("cpu"):
        return sweeps.shaped_rate(r, m, n, k)
    rate = sweeps.shaped_rate(r, m, n, k, "shaped_hot" if r.get("shaped_hot") else "shaped")
    return cpuops.gemm_rate(r, m, n, k, rate) if rate else rate


def shaped_time(r: dict, flops: float, m: int, n: int, k: int) -> float:
    """An M x K by K x N GEMM's time at its shaped rate, gemm_time without that sweep."""
    rate = shaped_rate(r, m, n, k)
    return flops / rate if rate else gemm_time(r, flops)


def roofs(ceilings, system: str, dtype: str, graph: bool, rows=None, also=()) -> dict:
    """The ceilings the model reads for one system and dtype (and, given the dataset's rows,
    its GEMM and bandwidth curves, from `system` and the systems in `also`: the roofs at an
    op's size)."""
    val = lambda name, dt=None: roofline.value(ceilings, system, name, dt)  # noqa: E731
    matrix, vector = val("matrix_flops", dtype), val("vector_flops", dtype)
    levels = []  # (capacity window, name, B/s), smallest first
    bws = ceilings[(ceilings.system == system) & ceilings.ceiling.str.endswith("_bw")
                   & ceilings.value.notna()]
    for r in bws.itertuples(index=False):
        hi = getattr(r, "ws_max", math.nan)
        if r.ceiling not in ("dram_bw", "l1_bw", "intensity_bw") and hi == hi and hi:
            levels.append((float(hi), r.ceiling[:-3].upper(), float(r.value)))
    out = {"matrix": matrix or vector, "vector": vector or matrix,
           "DRAM": val("dram_bw"), "L2": val("l2_bw"), "L1": val("l1_bw"),
           "caches": sorted(levels),
           "sfu": (val("vector_flops", "float32") or 0.0) * SFU_SHARE,
           "itemsize": ITEMSIZE.get(dtype, 2),
           # a CPU has no graph floor: its profiled ops pay the eager one
           "latency": (val("latency_graph") if graph else None) or val("latency_eager")
           or 0.0} | \
        sweeps.curves(rows, {system, *also}, dtype)
    # a CPU's dispatch floors, timed as the predicted rows are: profiled ops, host-timed calls
    out["op_floors"] = (out.pop("floors", None) or {}).get("profiled" if graph else "host")
    out["fresh_outputs"] = graph and bool(out.get("cpu"))  # a profiled CPU op's (cpuops.py)
    if not out["DRAM"] and out.get("bandwidth"):  # no DRAM fit (a busy CPU): the sweep's
        out["DRAM"] = float(out["bandwidth"][1][-1])  # rate at its largest working set
    return out


def cache_level(r: dict, working_set: float) -> tuple[str, float | None]:
    for hi, name, bw in r["caches"]:
        if working_set <= hi:
            return name, bw
    return "DRAM", r["DRAM"]


def predict_op(r: dict, flops: float, nbytes: float, cold_bytes: float | None = None,
               kind: str = "vector", calls: int = 1, measured: dict | None = None,
               exponentials: float = 0.0, op: str = "", shapes=None,
               kernels: int = 0) -> dict:
    """One op (calls launches of it, work summed over them; `op` and `shapes` as the profiler
    names them, `kernels` Nsight Compute's count): its three terms, the prediction, which term
    bounds it and the memory level; `note` says where a term came from the op's definition."""
    calls = max(int(calls or 1), 1)
    note = []
    gathered = gathered_bytes(op, shapes, r.get("itemsize", 2))
    if gathered and gathered[0] * calls < nbytes:  # a row that counted the whole table
        nbytes, cold_bytes = gathered[0] * calls, gathered[1] * calls
        note.append("" if measured else "bytes: gathered rows")
    rated = opclass.op_class(op, shapes)
    fine = opclass.fine_key(op, shapes)
    tries = [(fine, opclass.term_of(fine))] if rated and fine else []  # its narrower class's
    for rated in [*tries, rated]:  # curve where it reaches the op, else the class's
        x = cpuops.read_at((flops if rated and rated[1] == opclass.COMPUTE else nbytes) / calls,
                           op, shapes, bool(r.get("cpu")))
        if rate := rated and sweeps.op_rate(r, rated[0], x, shapes):
            break
    curve, term = (rated[0], rated[1]) if rate else ("", "")
    calibrated = rated and (rated[0] not in opclass.QUIET
                            or rated[0] in (r.get("op_rates") or {}))
    outside = [sweeps.outside(r, rated[0], x)] if calibrated and not rate else []
    P = r["matrix"] if kind == "matrix" else r["vector"]
    dims = sweeps.gemm_dims(op, shapes) if kind == "matrix" else None
    if dims and r.get("shaped") and not term and (far := sweeps.shaped_outside(r, *dims)):
        outside.append(far)
    reorder = 0.0
    if term == opclass.COMPUTE:  # the FLOP/s torch's kernel for this class attained
        P = rate
        note.append(f"compute: op rates {curve}")
        if r.get("cpu"):  # a convolution's weight reorder, which its points were rated without
            reorder = calls * sweeps.reorder_time(curve, op, shapes, r["itemsize"],
                                                  r.get("bandwidth"))
    elif dims and r.get("shaped"):  # the GEMM sweep at this shape
        P = shaped_rate(r, *dims) or P
        note.append("compute: GEMM sweep at {}x{}x{}".format(*dims))
    elif kind == "matrix" and r.get("gemm"):  # the GEMM roof at this size
        P = _at(r["gemm"], flops / calls) or P
    compute = (flops / P if P and flops else 0.0) + reorder
    if exponentials and exponentials == exponentials and r.get("sfu") and not term:
        compute += exponentials / r["sfu"]
    level, memory = "DRAM", None
    measured = {k: v for k, v in (measured or {}).items() if v == v and v is not None}
    if measured:  # Nsight Compute's traffic at each level over that level's bandwidth
        times = {name: measured[key] / r[name] for key, name in
                 (("dram_bytes", "DRAM"), ("l2_bytes", "L2"), ("l1_bytes", "L1"))
                 if key in measured and r[name]}
        fill = nbytes / sweeps.ramp(r.get("bandwidth"), nbytes / calls)  # a small kernel
        if times and fill > max(times.values()):
            times[max(times, key=times.get)] = fill
        if times:
            level = max(times, key=times.get)
            memory = times[level]
    if memory is None and r["DRAM"] and nbytes == nbytes:
        cold = min(cold_bytes if cold_bytes == cold_bytes and cold_bytes is not None
                   else nbytes, nbytes)
        elementwise = r.get("cpu") and not term and kind != "matrix"
        written = cpuops.output_bytes(op, shapes, nbytes / calls, r.get("itemsize", 2)) \
            if elementwise else 0.0
        if r.get("fresh_outputs"):
            cold = min(cold + written * calls, nbytes)
        level, bw = cache_level(r, nbytes / calls)
        warm_bw = _at(r.get("bandwidth"), nbytes / calls) or bw or r["DRAM"]
        memory = cold / min(warm_bw, r["DRAM"]) + (nbytes - cold) / warm_bw
        if elementwise:  # on the threads torch gives it
            memory /= cpuops.thread_share(r, shapes, written / r.get("itemsize", 2))
        if cold >= nbytes - cold:
            level = "DRAM"
    if term == opclass.MEMORY:  # the B/s torch's kernel for this class attained, in place of
        memory, level = nbytes / rate, cache_level(r, nbytes / calls)[0]  # traffic / bandwidth
        note.append(f"memory: op rates {curve}")
    # a parallel region: a CPU op of the elementwise kind (no class, no GEMM) that moves data
    parallel = cpuops.parallel_floor(r, op, shapes) if r.get("cpu") and not term \
        and kind != "matrix" and nbytes > 0 else 0.0
    floor, latency = kernel_floor(r, op, kind, term, calls, kernels, parallel)
    serial, steps = serial_time(r, op, shapes, flops / calls)
    if serial * calls > latency:
        latency = serial * calls
        note.append(f"{steps} serial steps")
    terms = {"compute": compute, "memory": memory or 0.0, "latency": latency}
    bound = max(terms, key=terms.get)
    total = terms[bound]
    # one thread dispatches, then works: they add (an op rate timed the op whole, dispatch in)
    if r.get("cpu") and r.get("op_floors") and not term:
        total = floor * calls + max(compute, memory or 0.0, serial * calls)
    return {"compute_s": compute, "memory_s": memory, "latency_s": latency,
            "predicted_time_s": total if total > 0 else math.nan,
            "bound": bound, "level": level if bound == "memory" else None, "curve": curve,
            "note": ", ".join(n for n in note if n), "outside": "; ".join(outside)}


def kernel_floor(r: dict, op: str, kind: str, term: str, calls: int,
                 kernels: int, parallel: float = 0.0) -> tuple[float, float]:
    """(one kernel's floor, the op's latency term): each kernel at least the launch floor, the
    shortest kernel the sweeps timed and, on a CPU, the op's dispatch floor and `parallel` (a
    parallel region's: cpuops.parallel_floor); a GPU's GEMM kernel at least the shortest GEMM
    the sweeps timed, once a call, its other kernels (a split-K GEMM's reduction) the floor
    each."""
    floor = max(r["latency"], r.get("floor") or 0.0, cpuops.op_floor(r, op), parallel)
    launched = max(calls, int(kernels or 0))
    if not r.get("cpu") and kind == "matrix" and not term and op not in RNN_OPS:
        gemm = max(floor, r.get("gemm_floor") or 0.0)
        return gemm, gemm * calls + floor * (launched - calls)
    return floor, floor * launched


def predict_call(r: dict, ops: list) -> dict:
    """A call from its ops ([op, shapes, calls, FLOPs, bytes, cold bytes, kind, source,
    exponentials] lists, and the kernels a profiled call's op launched, where it was):
    the sum of their predictions; the call's bound is the term that takes most of that sum."""
    parts = [predict_op(r, o[3], o[4], o[5], o[6], o[2],
                        exponentials=o[8] if len(o) > 8 else 0.0, op=o[0], shapes=o[1],
                        kernels=o[9] if len(o) > 9 else 0)
             for o in ops]
    parts = [p | {"op": o[0]} for p, o in zip(parts, ops)
             if p["predicted_time_s"] == p["predicted_time_s"]]
    total = sum(p["predicted_time_s"] for p in parts)
    share: dict = {}
    for p in parts:
        key = p["bound"] + (f" ({p['level']})" if p["level"] else "")
        share[key] = share.get(key, 0.0) + p["predicted_time_s"]
    top = max(share, key=share.get) if share else "-"
    bound, _, level = top.partition(" (")
    first = max(parts, key=lambda p: p["predicted_time_s"]) if parts else {}
    return {"predicted_time_s": total if total > 0 else math.nan,
            "compute_s": sum(p["compute_s"] for p in parts if p["bound"] == "compute"),
            "memory_s": sum(p["memory_s"] or 0.0 for p in parts if p["bound"] == "memory"),
            "latency_s": sum(p["latency_s"] for p in parts if p["bound"] == "latency"),
            "bound": bound, "level": level.rstrip(")") or None, "ops": len(parts),
            "launches": sum(max(int(o[2] or 1), 1) for o in ops),
            "top_op": first.get("op", ""), "top_curve": first.get("curve", ""),
            "curves": sorted({p["curve"] for p in parts if p["curve"]}),
            "outside": "; ".join(sorted({p["outside"] for p in parts if p["outside"]}))}


OUTSIDE = "outside calibration: "


def with_curves(text: str, curves, outside: str = "") -> str | None:
    """A row's `predicted_from`, naming the op-rate curves its ops read ("" / None alone) and,
    last, what of it lies outside every calibrated range (`outside`: OUTSIDE and the ops')."""
    curves = sorted({c for c in curves if c})
    return "; ".join([t for t in [text] if t] + ([f"op rates: {', '.join(curves)}"] if curves
                                                  else [])
                     + ([OUTSIDE + outside] if outside else [])) or None


def curves_of(predicted_from) -> list[str]:
    """The op-rate curves a `predicted_from` names (with_curves's), [] for none."""
    text = predicted_from if isinstance(predicted_from, str) else ""
    _, _, named = text.partition(OUTSIDE)[0].rstrip("; ").partition("op rates: ")
    return [c for c in named.split(", ") if c]


# misses the model knows it has no measured term for (docs/placement.md, "what remains off")
SLOWER_THAN_MODELLED = {
    opclass.CONVOLUTION: "compute: cuDNN's convolution ran below the GEMM curve (no convolution "
                         "sweep measured to ground it)",
    "aten::_cudnn_rnn": "latency: the recurrence's steps took longer than a sweep GEMM and one "
                        "pointwise launch each",
    "aten::_embedding_bag": "memory: random row gathers run below the streaming bandwidth (no "
                            "gather bandwidth measured)",
}
# torch's reductions and transcendental pointwise kernels: below the bandwidth sweep for want of
# instructions the one-FLOP-an-element convention does not count (no sweep measures them)
REDUCING = ("norm", "softmax", "gelu")
ATTENTION_OPS = ("aten::_scaled_dot_product_cudnn_attention",
                 "aten::_scaled_dot_product_flash_attention",
                 "aten::_scaled_dot_product_efficient_attention")


def _known_slow(op: str, where: str) -> str:
    """The reason for a slow miss of an op the model has no measured term for ("" if none)."""
    op = opclass.base_op(op)
    if op in SLOWER_THAN_MODELLED:
        return SLOWER_THAN_MODELLED[op]
    if "pool" in op:
        return f"memory{where}: the pooling kernel streamed far below the bandwidth sweep's rate"
    if any(k in op for k in REDUCING):
        return (f"memory{where}: torch's kernel streamed below the bandwidth sweep (its "
                "reductions or transcendentals bind it; no sweep measures such a kernel)")
    if op in ATTENTION_OPS:
        return ("compute: the attention kernel ran below the GEMM curve at this head dimension "
                "(no attention sweep measured)")
    return ""


def failed_term(error: float, bound: str, level: str | None, op: str = "",
                curve: str = "") -> str:
    """For a miss above MISS: which term failed, and the likely reason (`op`: the aten op's,
    where the model knows it has no measured term for it; `curve`: the op-rate class its
    prediction read, which is then that measured term)."""
    if not (error == error) or abs(error) <= MISS:
        return ""
    op, where = op or "", f" ({level})" if level else ""
    if curve and bound == opclass.term_of(curve):
        return (f"{bound}{where}: the op ran {'slower' if error > 0 else 'faster'} than its "
                f"class's op-rate curve {curve} (measured at other shapes) says")
    if error > 0 and not curve and _known_slow(op, where):
        return _known_slow(op, where)
    if error > 0:
        return {"compute": "compute: the kernel ran below the FLOP roof (small or oddly shaped "
                           "work, or a fallback kernel)",
                "memory": f"memory{where}: more traffic than counted (activations spilled, "
                          "strided reads) or bandwidth below the ceiling",
                "latency": "latency: more kernels or longer launches than the floor"}.get(
            bound, bound)
    return {"compute": "compute: fewer FLOPs ran than counted (masked or skipped work)",
            "memory": f"memory{where}: fewer bytes reached this level than counted (served "
                      "from a closer cache)",
            "latency": "latency: the floor is above what this call took"}.get(bound, bound)
