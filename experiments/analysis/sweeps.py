"""The system's own sweeps as curves the op model reads at an op's size and shape.

- `gemm`: GEMM FLOP/s against FLOPs per call, from the matmul experiment's square GEMMs;
- `shaped`: GEMM FLOP/s against shape, from the decode experiment's gemv_gemm sweep
  (x [b, C] @ W [C, C], b from 1 to thousands, a few C; W streamed cold as a layer's weights are):
  a GEMM of M x K by K x N is read off it at s = min(M, N), its thin side, and
  C = sqrt(K max(M, N)), the side of the square its other two dimensions span (so that the
  sweep's own points map onto themselves, and FLOPs = 2 s C^2 either way); FLOP/s interpolated
  linearly in log s along each C, then linearly in log C between them, clamped at the sweep's
  edges but below its smallest C, where the time goes on down along the first two C's slope
  (log time against log FLOPs, within [0, 1]: a launch-bound GEMV's time does not halve with
  its weight);
- `shaped_narrow`: the same from the decode experiment's narrow_gemm sweep, per aspect
  a = K / N (nn.Linear's layout): a GEMM whose K is longer than its wide side is read between
  the square sweep (a = 1) and these, linearly in log a, clamped at the largest;
- `bandwidth`: the best torch streaming kernel's B/s against working set (the bandwidth
  experiment: the small-size ramp, the L2 plateau, then DRAM);
- `op_rates`: per op class (experiments/placement/opclass.py) the rate torch's own kernel for
  that building block attained in the op_rates experiment: FLOP/s against FLOPs per call
  (convolutions, attention, the fused layers) or B/s against the op's working set (norms,
  softmax, GELU, pooling, gathers); the system's own rows, else those of the same device model
  (a machine's characterization, as a published set's). Read log-log (log rate linear in log
  x), clamped at the calibrated ends, within REACH of them (beyond, no calibration speaks for
  the op); a calibration point measured at exactly the judged op's input shapes is never read
  for it (op_rate). Below its smallest point a curve goes on along its first segment in log
  time (its slope within [0, 1]): flat where the class's smallest calls were launch-bound.
  A convolution's class (not depthwise) calibrated at POWER_LAW_POINTS sizes or more, and a
  GPU's fused attention, are read by their shape instead (shape_rates.py).

Nothing here is fitted to the placed calls: every curve is a microbenchmark of the same dataset.
"""

from __future__ import annotations

import functools
import json
import math

from experiments.analysis import cpuops, dataset, shape_rates
from experiments.core.dtypes import itemsize
from experiments.placement import opclass

BANDWIDTH_OPS = ("copy", "scale", "add", "triad", "add_one")
GEMM_OPS = ("aten::mm", "aten::addmm", "aten::linear")
NARROW = "narrow_gemm"  # the decode experiment's narrow weights (the op model's alone)
REACH = 4.0  # an op-rate curve is read at most this factor past its calibrated ends
# cuDNN and oneDNN pick an algorithm per convolution shape, moving its rate 2-5x at equal FLOPs:
# the two nearest calibration sizes speak for their own shapes, this many or more for any shape
# (op_rate, shape_rates.py)
POWER_LAW_POINTS = 4
# a CPU convolution's calibration point keeps at least this share of its time as its own work,
# however long the copy its weights' reorder (cpuops.reordered_bytes) is estimated at
WORK_SHARE = 0.25


def curves(rows, systems, dtype: str) -> dict:
    """The roofs at a size, from the system's own sweeps where the dataset holds them: `gemm`
    (square GEMMs, this dtype), `shaped` (the gemv_gemm sweep, this dtype), `bandwidth` and
    `op_rates` (this dtype; else the same device model's). `systems`: the roofline's system
    and that of the placed rows (one device model)."""
    import numpy as np

    need = {"system", "status", "time_s", "experiment", "dtype", "flops", "flop_per_s", "op",
            "working_set_bytes", "byte_per_s"}
    if rows is None or not len(rows) or not need <= set(rows.columns):
        return {}
    systems = {systems} if isinstance(systems, str) else set(systems)
    mine = rows[rows.system.isin(systems) & (rows.status == "ok") & (rows.time_s > 0)]
    out = {}
    mm = mine[(mine.experiment == "matmul") & (mine.dtype == dtype) & (mine.flops > 0)]
    if mm.flops.nunique() >= 2:
        g = mm.groupby("flops").flop_per_s.median().sort_index()
        out["gemm"] = (np.log(g.index.to_numpy(float)), g.to_numpy(float))
    gv = mine.iloc[:0]
    if {"m", "n"} <= set(mine.columns):
        gv = x_at_w(mine, "gemv_gemm", dtype)
        if lines := gemm_lines(gv):
            out["shaped"] = lines
        if lines := narrow_lines(mine, dtype):
            out["shaped_narrow"] = lines
    bw = mine[(mine.experiment == "bandwidth") & mine.op.isin(BANDWIDTH_OPS)
              & (mine.working_set_bytes > 0)]
    if bw.working_set_bytes.nunique() >= 2:
        g = bw.groupby("working_set_bytes").byte_per_s.max().sort_index()
        out["bandwidth"] = (np.log(g.index.to_numpy(float)), g.to_numpy(float))
    # the shortest kernel timed: one pass of a bandwidth kernel over its working set (a CPU
    # kernel's call loops over it), one GEMM
    passes = mine[(mine.experiment == "bandwidth") & (mine.byte_per_s > 0)]
    kernels = [*(passes.working_set_bytes / passes.byte_per_s).dropna(),
               *mine[mine.experiment == "matmul"].time_s.dropna()]
    if kernels:
        out["floor"] = float(min(kernels))
    # a GPU's shortest GEMM of this dtype: a cuBLAS call takes it whatever its size
    gemms = [*mm.time_s, *gv.time_s]
    if gemms and not cpuops.is_cpu(mine):
        out["gemm_floor"] = float(min(gemms))
    if rates := op_rate_points(mine, rows, systems, dtype, out.get("bandwidth")):
        out["op_rates"] = rates
    if cpuops.is_cpu(mine):  # a CPU's own terms (cpuops.py): its dispatch floors
        out["cpu"] = True
        if table := cpuops.floors(mine, dtype):
            out["floors"] = table
        if threads := cpuops.job_threads(mine):
            out["threads"] = threads
        if lines := gemm_lines(cpuops.hot_rows(mine, dtype)):
            out["shaped_hot"] = lines
    return out


def narrow_lines(mine, dtype: str) -> list:
    """[(log a, gemm_lines)] of the decode experiment's narrow_gemm rows in `dtype`, one family
    per configured aspect (params "aspect") placed at its weights' mean log(K / N)."""
    import numpy as np

    if "k" not in mine:
        return []
    rows = x_at_w(mine, NARROW, dtype, ("m", "n", "k"))
    lines = [(float(np.log(g.k / g.n).mean()), ls)
             for _, g in rows.groupby(dataset.param(rows, "aspect")) if (ls := gemm_lines(g))]
    return sorted(lines, key=lambda line: line[0])


def x_at_w(mine, op: str, dtype: str, dims=("m", "n")):
    """The decode experiment's x @ W rows of `op` in `dtype` with a rate and these dimensions."""
    keep = (mine.experiment == "decode") & (mine.op == op) & (mine.dtype == dtype) \
        & (mine.flop_per_s > 0)
    for dim in dims:
        keep &= mine[dim] > 0
    return mine[keep]


def gemm_lines(rows) -> list:
    """GEMM rows x [m, K] @ W [K, N] (m the thin side) as lines [(log C, log m, FLOP/s)] by
    weight, C = sqrt(K N) (K = N where rows give no K), the median at each m; a weight of fewer
    than two thin sides is left out."""
    import numpy as np

    rows = rows.assign(k=rows.k.where(rows.k > 0, rows.n) if "k" in rows else rows.n)
    lines = []
    for (k, n), g in rows.groupby(["k", "n"]):
        g = g.groupby("m").flop_per_s.median().sort_index()
        if len(g) >= 2:
            lines.append((0.5 * math.log(k * n), np.log(g.index.to_numpy(float)),
                          g.to_numpy(float)))
    return sorted(lines, key=lambda x: x[0])


def op_rate_points(mine, rows, systems: set, dtype: str, bandwidth=None) -> dict:
    """class key -> [(x, rate, input shapes)] of the op_rates experiment's ok rows in `dtype`
    (module docstring): `mine` the systems' ok rows; without op rates among them, those of the
    same device model among all `rows`. A CPU's point timed contended is left out
    (cpuops.contended), and so is a CPU's add or strided copy (cpuops.warm_copy). A CPU's
    convolution is rated on its time less its weights' reorder at `bandwidth` (a curve; the
    op adds its own back, cpuops.reordered_bytes), at least WORK_SHARE of its time."""
    def measured(r):
        return r[(r.experiment == "op_rates") & (r.status == "ok") & (r.dtype == dtype)
                 & (r.time_s > 0)]

    if "params" not in rows:
        return {}
    own = measured(mine)
    if "variant" in own:  # dispatch floors (cpuops.floors), not rates
        own = own[~own.variant.fillna("").isin((cpuops.FLOOR, cpuops.GEMM_HOT))]
    if own.empty and "device_name" in rows:
        names = set(rows[rows.system.isin(systems)].device_name.dropna())
        own = measured(rows[rows.device_name.isin(names)])
    out: dict = {}
    for r in own.itertuples(index=False):
        p = r.params if isinstance(r.params, dict) else json.loads(r.params or "{}") \
            if isinstance(r.params, str) else {}
        found = opclass.op_class(r.op, p.get("input_shapes"))
        if found is None:
            continue
        # a narrower class's points are its own (op_rate reads them for its ops alone)
        if fine := opclass.fine_key(r.op, p.get("input_shapes")):
            found = (fine, opclass.term_of(fine))
        x, y = ((r.flops, r.flop_per_s) if found[1] == opclass.COMPUTE
                else (r.working_set_bytes, r.byte_per_s))
        cpu = getattr(r, "device_kind", None) == "cpu"
        if cpu and (reorder := reorder_time(found[0], r.op, p.get("input_shapes"),
                                            itemsize(dtype), bandwidth)):
            y = r.flops / max(r.time_s - reorder, WORK_SHARE * r.time_s)
        x = cpuops.read_at(x, r.op, p.get("input_shapes"), cpu)
        if x == x and y == y and x > 0 and y > 0 and not cpuops.contended(r) \
                and not cpuops.warm_copy(r, found[0]):
            out.setdefault(found[0], []).append(
                (float(x), float(y), opclass.parse_shapes(p.get("input_shapes"))))
    return out


def op_rate(r: dict, key: str, x: float, shapes) -> float | None:
    """The rate of op class `key` at x (FLOPs per call for a compute class, the working set for
    a memory one), read off the op_rates curve without every calibration point whose input
    shapes are exactly `shapes` (the judged op's own: never read for it; unknown shapes cannot
    be told apart, so nothing is read). None without such points or with x beyond REACH of them."""
    import numpy as np

    judged = opclass.parse_shapes(shapes)
    own = [p for p in (r.get("op_rates") or {}).get(key, ()) if judged and p[2] != judged]
    points = [(px, py) for px, py, _ in own]
    if not points or not x > 0:
        return None
    xs = sorted({px for px, _ in points})
    if not xs[0] / REACH <= x <= xs[-1] * REACH:
        return None
    ys = [float(np.median([py for px, py in points if px == v])) for v in xs]
    gpu = not r.get("cpu")
    if gpu and key.startswith(opclass.ATTENTION_PREFIX) \
            and (t := shape_rates.attention_time(x, judged, own)):
        return x / t
    if len(xs) >= POWER_LAW_POINTS and key.startswith(opclass.CONVOLUTION) \
            and opclass.term_of(key) == opclass.COMPUTE:
        if gpu and (rate := shape_rates.conv_rate(key, x, judged, own,
                                                  functools.partial(shaped_rate, r))):
            return rate
        return shape_rates.power_law(xs, ys, x)
    if x < xs[0] and len(xs) > 1:
        # below the curve its first segment goes on in log time, its slope kept within [0, 1]:
        # a smaller call takes no longer, and its time falls no faster than its work
        rise = math.log(ys[1] / ys[0]) / math.log(xs[1] / xs[0])
        return x / (xs[0] / ys[0] * (x / xs[0]) ** min(1.0, max(0.0, 1.0 - rise)))
    # log rate in log x: between a launch-bound point (time flat, rate ~ x) and a streaming
    # one, a linear rate would read the time far too short in the middle
    return float(np.exp(np.interp(math.log(x), np.log(xs), np.log(ys))))


def outside(r: dict, key: str, x: float) -> str:
    """Why op class `key` at x has no op rate (op_rate gave None): 'KEY at X, calibrated A-B',
    or 'KEY not calibrated' where no point of it was measured for this system and dtype."""
    xs = [px for px, _, _ in (r.get("op_rates") or {}).get(key, ())]
    if not xs:
        return f"{key} not calibrated"
    return f"{key} at {x:.3g}, calibrated {min(xs):.3g}-{max(xs):.3g}"


def shaped_outside(r: dict, m: int, n: int, k: int) -> str:
    """'' where an M x K by K x N GEMM lies within REACH of the gemv_gemm sweep's thin sides and
    widths (shaped_rate's axes), else 'GEMM MxNxK, calibrated ...'."""
    lines = r.get("shaped")
    if not lines:
        return ""
    s, c = min(m, n), math.sqrt(k * max(m, n))
    ss = [math.exp(x) for _, xs, _ in lines for x in xs]
    cs = [math.exp(lc) for lc, _, _ in lines]
    if min(ss) / REACH <= s <= max(ss) * REACH and min(cs) / REACH <= c <= max(cs) * REACH:
        return ""
    return (f"GEMM {m}x{n}x{k}, calibrated thin side {min(ss):.0f}-{max(ss):.0f} and width "
            f"{min(cs):.0f}-{max(cs):.0f}")


def shapes_of(shapes) -> list:
    """The profiler's input shapes (a list, or its repr) as a list; [] when unreadable."""
    import ast

    try:
        out = ast.literal_eval(shapes) if isinstance(shapes, str) else shapes
    except (ValueError, SyntaxError):
        return []
    return out if isinstance(out, list) else []


def reorder_time(key: str, op: str, shapes, size: int, bandwidth) -> float:
    """A CPU convolution's per-call weight reorder (cpuops.reordered_bytes, `size` bytes an
    element) copied at the `bandwidth` curve's rate: what its class's op-rate points are rated
    without and each of its ops adds back. 0 for other classes, or without the curve."""
    if not key.startswith(opclass.CONVOLUTION) or opclass.term_of(key) != opclass.COMPUTE:
        return 0.0
    return copy_time(bandwidth, cpuops.reordered_bytes(op, shapes, size))


def copy_time(curve, nbytes: float, fallback: float | None = None) -> float:
    """Seconds to copy `nbytes` into a buffer of its own (read once, written once) at the
    bandwidth curve's rate for that working set, else at `fallback` B/s; 0 without either."""
    rate = at(curve, 2 * nbytes) or fallback
    return 2 * nbytes / rate if rate and nbytes > 0 else 0.0


def at(curve, x: float) -> float | None:
    """A (log x, y) curve read at x (linear in log x, clamped at its ends)."""
    import numpy as np

    if curve is None or not x > 0:
        return None
    return float(np.interp(math.log(x), *curve))


def ramp(curve, x: float) -> float:
    """The bandwidth curve at x while it still climbs (below its peak: a kernel that small is
    bound by its launch and fill, whatever level serves it: the latency term floors what is
    smaller still), infinite past the peak."""
    import numpy as np

    if curve is None or not x > 0 or not x == x:
        return math.inf
    peak = int(np.argmax(curve[1]))
    return at(curve, x) if math.log(x) < curve[0][peak] else math.inf


def gemm_dims(op: str, shapes) -> tuple[int, int, int] | None:
    """(M, N, K) of a 2-D GEMM from the profiler's input shapes: mm [[M, K], [K, N]], addmm
    [[bias], [M, K], [K, N]], linear [[..., K], [N, K], ...]; None for anything else."""
    s = shapes_of(shapes)
    if op == "aten::mm" and len(s) >= 2:
        a, b = s[0], s[1]
    elif op == "aten::addmm" and len(s) >= 3:
        a, b = s[1], s[2]
    elif op == "aten::linear" and len(s) >= 2 and len(s[0]) >= 2 and len(s[1]) == 2:
        a, b = [math.prod(s[0][:-1]), s[0][-1]], s[1][::-1]
    else:
        return None
    if len(a) != 2 or len(b) != 2 or a[1] != b[0] or min(a + b) <= 0:
        return None
    return int(a[0]), int(b[1]), int(a[1])


def shaped_rate(r: dict, m: int, n: int, k: int, key: str = "shaped") -> float | None:
    """FLOP/s of an M x K by K x N GEMM read off the gemv_gemm sweep (module docstring; `key`
    "shaped_hot": a CPU's hot GEMMs, read alike), None without those lines."""
    import numpy as np

    lines = r.get(key)
    if not lines:
        return None
    s, c = math.log(min(m, n)), 0.5 * math.log(k * max(m, n))
    rate = read_lines(lines, s, c)
    if key != "shaped" or not (narrow := r.get("shaped_narrow")) or k <= max(m, n):
        return rate
    # between the square sweep (log a = 0) and the narrow ones, in log a; clamped at the last
    aspects = [0.0] + [la for la, _ in narrow]
    logs = [math.log(rate)] + [math.log(read_lines(ls, s, c)) for _, ls in narrow]
    return math.exp(float(np.interp(math.log(k / max(m, n)), aspects, logs)))


def read_lines(lines: list, s: float, c: float) -> float:
    """FLOP/s at log thin side s and log width c off lines [(log C, log m, FLOP/s)] (module
    docstring: below the smallest C, along the first two C's slope in log time)."""
    import numpy as np

    rates = [float(np.interp(s, xs, ys)) for _, xs, ys in lines]
    cs = [lc for lc, _, _ in lines]
    if len(cs) == 1:
        return rates[0]
    if c >= cs[0]:
        return float(np.interp(c, cs, rates))
    # FLOPs go as C^2 at one thin side: log time = log FLOPs - log rate
    slope = 1 - (math.log(rates[1]) - math.log(rates[0])) / (2 * (cs[1] - cs[0]))
    slope = min(max(slope, 0.0), 1.0)
    return rates[0] * math.exp(2 * (c - cs[0]) * (1 - slope))
