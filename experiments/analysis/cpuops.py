"""The op model's CPU terms (docs/placement.md, "On a CPU"): where a CPU runs torch's ops unlike a
GPU, read off the CPU's own calibration.

- the threads an op runs on: torch splits an elementwise op into one task per GRAIN elements,
  at most its threads, so one below the grain moves its bytes on one thread, at that thread's
  share of the team's bandwidth (thread_share). Under the profiler a new output is written to
  fresh memory, not in cache, so a profiled op's output bytes are read at DRAM's rate too (the
  cold bytes; a host-timed call reuses the same blocks each call);
- dispatch floors: each op pays a fixed cost whatever its work (dispatch, allocation, and under
  the profiler its child events' recording), timed on a tiny input per op by the op_rates
  experiment (experiments/placement/floors.py): under the profiler for a profiled op, by the
  host clock for a host-timed call; an op not timed takes the median of those that were; an op
  whose input passes torch's parallel grain at least a parallel region's (an add past it). On a
  CPU the same thread dispatches and then runs an op's work, so the floor adds to the work
  (a GPU's launch overlaps the kernel before it: there the latency term is a max);
- GEMMs hot: a profiled op repeats its call and a timed call rotates two copies, so a CPU's
  GEMM reads its weights from cache where the decode sweep's gemv_gemm streams them cold (half
  the rate or less at thin sides); the op_rates experiment times x [s, C] @ W [C, C] hot as a
  profiled op (experiments/placement/floors.py), read as the shaped sweep is (sweeps.py);
- GEMM shapes past those thin sides: a GEMM whose thin side exceeds the largest calibrated
  runs like a square GEMM of its FLOPs (oneDNN and MKL block it so); its rate is the larger
  of the thin sides' edge and the square GEMM sweep's at its FLOPs;
- contended calibration: a CPU's op-rate point timed while another process held its cores is
  left out of its class's curve (sweeps.py): without a quiet point the class is not calibrated
  and the roofs predict it;
- attention by the head: a CPU's fused attention runs one (batch, head) problem a task, at a
  fixed cost each, so its op-rate curve is read at the FLOPs of one (batch, head) problem,
  calibration points and judged op alike (read_at);
- oneDNN's RNN layer (aten::mkldnn_rnn_layer, one layer and direction an op): its recurrence is
  serial as cuDNN's is, T steps of one [batch, hidden] x [hidden, gates x hidden] GEMM (read off
  the shaped sweep) and the pointwise gates (the eager floor), after the input projection, one
  GEMM of T x batch rows;
- oneDNN's weight reorder: a convolution or RNN layer first copies its weights into oneDNN's
  blocked layout, on every call (reordered_bytes), at the bandwidth sweep's rate for a copy of
  them; a convolution's op-rate points are rated on their time less that copy, and each op
  predicted adds its own.
"""

from __future__ import annotations

import json
import math
import statistics

from experiments.placement import opclass
from experiments.placement.opclass import ATTENTION_PREFIX, parse_shapes

FLOOR, GEMM_HOT = opclass.FLOOR, opclass.GEMM_HOT  # op_rates rows: floors, hot thin GEMMs
MKLDNN_RNN = "aten::mkldnn_rnn_layer"


def is_cpu(rows) -> bool:
    """Whether every row of these (one system's) is a CPU's."""
    kinds = set(rows.device_kind.dropna()) if "device_kind" in rows else set()
    return kinds == {"cpu"}


def heads(op: str, shapes) -> int:
    """batch x heads of a fused attention op (q [batch, heads, seq, head dim]), 1 for any other
    op: a CPU's attention kernel runs one (batch, head) problem a task, each paying a fixed
    cost (microseconds, above a short sequence's work), so its rate follows the FLOPs of one."""
    s = parse_shapes(shapes)
    if not op.startswith(ATTENTION_PREFIX) or not s or len(s[0]) != 4:
        return 1
    return max(int(s[0][0]) * int(s[0][1]), 1)


def read_at(x: float, op: str, shapes, cpu: bool) -> float:
    """Where an op-rate curve is read for an op at x (its FLOPs or bytes), calibration point
    and judged op alike: on a CPU, a fused attention's x of one (batch, head) problem."""
    return x / heads(op, shapes) if cpu else x


def contended(row) -> bool:
    """Whether a CPU's row was timed while another process held its cores: a parallel region
    then waits milliseconds for its other thread, so the point is no rate of the kernel's (a
    GPU's row: False, its flags say other things)."""
    flag = getattr(row, "contended", None)
    return getattr(row, "device_kind", None) == "cpu" and flag is not None and flag == flag \
        and bool(flag)


def warm_copy(row, key: str) -> bool:
    """Whether a CPU's op-rate row is torch's add or strided copy (opclass.QUIET): its hot calls
    copy warm blocks where a model's write fresh ones, so the model reads such an op on its
    threads (thread_share), not off these points."""
    return getattr(row, "device_kind", None) == "cpu" and key in opclass.QUIET


def floors(rows, dtype: str) -> dict:
    """{'profiled': {op: s}, 'host': {op: s}} of the op_rates floor rows (this dtype's, else any
    dtype's: a dispatch costs alike), {} without any."""
    if "variant" not in rows or "params" not in rows:
        return {}
    mine = rows[(rows.experiment == "op_rates") & (rows.variant == FLOOR)
                & (rows.status == "ok") & (rows.time_s > 0)]
    if (mine.dtype == dtype).any():
        mine = mine[mine.dtype == dtype]
    out: dict = {"profiled": {}, "host": {}}
    for r in mine.itertuples(index=False):
        p = r.params if isinstance(r.params, dict) else json.loads(r.params or "{}")
        out["profiled"].setdefault(r.op, []).append(float(r.time_s))
        if (host := p.get("host_s")) and host > 0:
            out["host"].setdefault(r.op, []).append(float(host))
    out = {k: {op: min(v) for op, v in d.items()} for k, d in out.items()}
    return out if out["profiled"] else {}


def op_floor(r: dict, op: str) -> float:
    """The dispatch floor of `op` (its own, else the median of the timed ops'; embedding_bag's
    forward-only variant is embedding_bag's, a transposed convolution's the convolution's), 0
    where no floor was timed."""
    table = r.get("op_floors") or {}
    if not table:
        return 0.0
    own = table.get(op, table.get(opclass.base_op(op)))
    return own if own is not None else statistics.median(
        [t for key, t in table.items() if key != opclass.PARALLEL] or table.values())


# in-place ops that change a tensor's shape or strides alone: no kernel, no parallel region
METADATA_OPS = frozenset({"aten::transpose_", "aten::t_", "aten::squeeze_", "aten::unsqueeze_",
                          "aten::as_strided_", "aten::swapdims_", "aten::swapaxes_"})


def parallel_floor(r: dict, op: str, shapes) -> float:
    """A parallel region's floor (an add past torch's grain, opclass.PARALLEL) for an op whose
    largest input passes that grain, 0 otherwise, for a metadata op, or where it was not
    timed."""
    table = r.get("op_floors") or {}
    if op in METADATA_OPS:
        return 0.0
    largest = max((math.prod(s) for s in parse_shapes(shapes)), default=0)
    return table.get(opclass.PARALLEL, 0.0) if largest > opclass.GRAIN else 0.0


def job_threads(rows) -> int | None:
    """The threads the CPU's jobs ran torch on (the floor rows' params), None where no row
    recorded them."""
    if "variant" not in rows or "params" not in rows:
        return None
    mine = rows[(rows.experiment == "op_rates") & (rows.variant == FLOOR)]
    got = [(p if isinstance(p, dict) else json.loads(p or "{}")).get("threads")
           for p in mine.params]
    return max((int(t) for t in got if t), default=None)


def output_bytes(op: str, shapes, nbytes: float, itemsize: int) -> float:
    """Bytes one call of an op writes to a new tensor: its bytes less its inputs' (0 for an
    in-place op, which writes its input)."""
    if op.endswith("_"):
        return 0.0
    return max(nbytes - sum(math.prod(s) for s in parse_shapes(shapes)) * itemsize, 0.0)


def thread_share(r: dict, shapes, elements: float) -> float:
    """The share of the team's threads an elementwise CPU op runs on: torch splits its work
    into one task per GRAIN elements, at most its threads (at::parallel_for), so an op below the
    grain runs on one thread whatever the team; 1 where the threads were not recorded."""
    threads = r.get("threads")
    if not threads:
        return 1.0
    largest = max([elements, *(math.prod(s) for s in parse_shapes(shapes))])
    return min(threads, max(1, math.ceil(largest / opclass.GRAIN))) / threads


def hot_rows(rows, dtype: str):
    """The op_rates experiment's hot GEMMs (x [s, C] @ W [C, C], variant gemm_hot) in `dtype`,
    the shaped sweep's rows alike (sweeps.gemm_lines)."""
    if "variant" not in rows or not {"m", "n"} <= set(rows.columns):
        return rows.iloc[:0]
    return rows[(rows.experiment == "op_rates") & (rows.variant == GEMM_HOT)
                & (rows.status == "ok") & (rows.dtype == dtype) & (rows.flop_per_s > 0)]


def gemm_rate(r: dict, m: int, n: int, k: int, shaped: float | None) -> float | None:
    """A CPU GEMM's FLOP/s (module docstring): `shaped`, the read at its shape of the hot GEMMs'
    lines (else the gemv_gemm sweep's), or past their thin sides the larger of it and the
    square GEMM sweep's rate at this GEMM's FLOPs."""
    import numpy as np

    lines, gemm = r.get("shaped_hot") or r.get("shaped"), r.get("gemm")
    if not shaped or not lines or not gemm:
        return shaped
    thin = max(math.exp(x) for _, xs, _ in lines for x in xs)
    past = min(m, n) > thin * (1 + 1e-9)  # the sweep's own largest batch stays its read
    square = float(np.interp(math.log(2.0 * m * n * k), *gemm))  # sweeps.at, clamped
    return max(shaped, square) if past else shaped


def reordered_bytes(op: str, shapes, itemsize: int) -> float:
    """The weight bytes oneDNN reorders into its blocked layout on every call of a CPU op
    (ONEDNN_VERBOSE shows a reorder before each convolution and RNN primitive: torch hands it
    plain weights): a convolution's weight, an RNN layer's w_ih and w_hh; 0 for other ops."""
    s = parse_shapes(shapes)
    if op == MKLDNN_RNN and len(s) >= 3:
        return float(math.prod(s[1]) + math.prod(s[2])) * itemsize
    if op.startswith((opclass.CONVOLUTION, opclass.CONV_TRANSPOSE)) and len(s) >= 2 \
            and len(s[1]) >= 3:
        return float(math.prod(s[1])) * itemsize
    return 0.0


def rnn_serial(r: dict, shapes, flops: float, gemm_time, copy_time=None) -> tuple[float, int]:
    """(seconds, steps) of an aten::mkldnn_rnn_layer call from its input shapes ([T, batch, in],
    w_ih [gates x hidden, in], w_hh [gates x hidden, hidden], biases, h0 [batch, hidden], ...):
    T steps of the h W_hh GEMM (`gemm_time(flops, m, n, k)`) and the eager floor, plus the input
    projection (the rest of `flops`) as one GEMM, plus `copy_time(bytes)` of its weights'
    reorder (reordered_bytes); (0, 0) for unreadable shapes."""
    s = parse_shapes(shapes)
    if len(s) < 6 or len(s[0]) != 3 or len(s[2]) != 2 or len(s[5]) != 2:
        return 0.0, 0
    batch, hidden = s[5]
    rows_out, width = s[2][0], s[0][2]
    if not batch or not hidden or not width:
        return 0.0, 0
    steps = math.prod(s[0]) // (batch * width)
    step = 2.0 * batch * rows_out * hidden
    rest = max(flops - steps * step, 0.0)
    t = steps * (gemm_time(step, batch, rows_out, hidden) + r["latency"])
    if rest:
        t += gemm_time(rest, steps * batch, rows_out, width)
    if copy_time:
        t += copy_time(reordered_bytes(MKLDNN_RNN, shapes, r.get("itemsize", 2)))
    return t, steps
