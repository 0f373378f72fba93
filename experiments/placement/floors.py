"""Per-op dispatch floors: the time one tiny call of a common aten op takes, the cost an op pays
whatever its work (dispatch, allocation, the profiler's own events on its children). The op_rates
experiment times each op of `floor_ops` on a few-element input (experiments/op_rates.py) two
ways: under torch.profiler as the workload experiment profiles a call's ops
(experiments/placement/profile.py: the op's self time and its children's), and by the host clock
over a loop of calls (as a call is timed); the op model floors each op's latency at its op's
(experiments/analysis/cpuops.py). A CPU's calibration: on a GPU the launch floor holds.
"""

from __future__ import annotations

import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from experiments.placement.opclass import GRAIN, PARALLEL

N = 8  # elements a side: far below any kernel's work, so only the op's fixed cost is timed
# each profiled call first fills this many float32s (4 MB, past a core's L2) on the job's
# threads, as a model's other ops run between its calls: a hot loop times a floor 2-4x under
# what the same op pays inside a call
FLUSH = 1 << 20
# an op whose parallel region wakes its other thread pays up to ~10x its one-thread floor
# (zeros' fill: 14 us against 1.4); one whose thread waits on a contended core, ~1000x
CONTENDED = 10.0
PROFILES, HOST_CALLS, HOST_ROUNDS, HOST_S = 3, 20, 3, 0.03


def _tiny(op: str, dtype, device, gen) -> tuple:
    """(fn, args) of one tiny call whose profile holds `op`; KeyError for an op not known."""
    def randn(*shape):
        return torch.randn(shape, generator=gen, device=device).to(dtype)

    x, y, w, b = randn(N, N), randn(N, N), randn(N, N), randn(N)
    if op == PARALLEL:
        return torch.add, (randn(2 * GRAIN), randn(2 * GRAIN))
    ids = torch.randint(0, N, (2, 4), generator=gen, device=device)
    seq = randn(2, 4, N)
    calls = {
        "aten::clone": (lambda a: a.t().contiguous(), (x,)),
        "aten::zeros": (lambda a: torch.zeros(2, N, device=a.device, dtype=a.dtype), (x,)),
        "aten::arange": (lambda a: torch.arange(N, device=a.device), (x,)),
        "aten::add": (torch.add, (x, y)), "aten::add_": (torch.Tensor.add_, (x.clone(), y)),
        "aten::mul": (torch.mul, (x, y)), "aten::mul_": (torch.Tensor.mul_, (x.clone(), y)),
        "aten::sub": (torch.sub, (x, y)), "aten::div": (torch.div, (x, y)),
        "aten::relu": (torch.relu, (x,)), "aten::tanh": (torch.tanh, (x,)),
        "aten::tanh_": (torch.Tensor.tanh_, (x.clone(),)),
        "aten::sigmoid": (torch.sigmoid, (x,)),
        "aten::sigmoid_": (torch.Tensor.sigmoid_, (x.clone(),)),
        "aten::unsafe_split": (lambda a: a.unsafe_split(N // 2, 1), (x,)),
        "aten::stack": (lambda a, c: torch.stack([a, c]), (x, y)),
        "aten::cat": (lambda a, c: torch.cat([a, c]), (x, y)),
        "aten::transpose_": (lambda a: a.transpose_(0, 1), (x.clone(),)),
        "aten::copy_": (torch.Tensor.copy_, (x.clone(), y)),
        "aten::addmm": (F.linear, (x, w, b)), "aten::mm": (torch.mm, (x, w)),
        "aten::bmm": (torch.bmm, (seq, seq.transpose(1, 2))),
        "aten::_softmax": (lambda a: torch.softmax(a, -1), (x,)),
        "aten::native_layer_norm": (lambda a: F.layer_norm(a, (N,)), (x,)),
        "aten::gelu": (F.gelu, (x,)),
        "aten::_embedding_bag": (nn.EmbeddingBag(N, N).to(device, dtype), (ids,)),
        "aten::convolution": (nn.Conv1d(N, N, 1).to(device, dtype), (seq.transpose(1, 2),)),
        "aten::mkldnn_rnn_layer": (nn.LSTM(N, N, batch_first=True).to(device, dtype), (seq,)),
        "aten::_scaled_dot_product_flash_attention_for_cpu": (
            F.scaled_dot_product_attention, (seq[None], seq[None], seq[None])),
        # the fused inference paths: their many inner ops' dispatch in one op
        "aten::_native_multi_head_attention": (_mha(device, dtype), (seq,)),
        "aten::_transformer_encoder_layer_fwd": (
            nn.TransformerEncoderLayer(N, 2, 2 * N, dropout=0.0, batch_first=True)
            .to(device, dtype).eval(), (seq,)),
    }
    return calls[op]


def _mha(device, dtype):
    mha = nn.MultiheadAttention(N, 2, batch_first=True).to(device, dtype).eval()
    return lambda x: mha(x, x, x, need_weights=False)[0]


# the ops a floor can be timed for (the held-out and shipped calls' small ops)
OPS = ("aten::clone", "aten::zeros", "aten::arange", "aten::add", "aten::add_", "aten::mul",
        "aten::mul_", "aten::sub", "aten::div", "aten::relu", "aten::tanh", "aten::tanh_",
        "aten::sigmoid", "aten::sigmoid_", "aten::unsafe_split", "aten::stack", "aten::cat",
        "aten::transpose_", "aten::copy_", "aten::addmm", "aten::mm", "aten::bmm",
        "aten::_softmax", "aten::native_layer_norm", "aten::gelu", "aten::_embedding_bag",
        "aten::convolution", "aten::mkldnn_rnn_layer",
        "aten::_scaled_dot_product_flash_attention_for_cpu", "aten::_native_multi_head_attention",
        "aten::_transformer_encoder_layer_fwd", PARALLEL)


def measure(op: str, dtype, device, gen) -> dict:
    """{op, profiled_s, host_s, input_shapes, threads (the job's)}: the least time per call
    over PROFILES profiles of a flush and the op (profile.profile_ops's: the op's self time and
    its children's), and over up to HOST_ROUNDS loops of HOST_CALLS calls of the op by the host
    clock (fewer past HOST_S), at the job's threads; ValueError where the profile holds no
    `op`. Each at most CONTENDED times its time on one thread: a parallel region whose other
    thread waits for a core another process holds takes milliseconds, not the floor."""
    runs = _at_job_and_one_thread(lambda: _measure(op, dtype, device, gen))
    return runs[0] | {k: min(runs[0][k], CONTENDED * runs[-1][k])
                      for k in ("profiled_s", "host_s")} | {"threads": torch.get_num_threads()}


def _at_job_and_one_thread(measure_once) -> list:
    """[measure_once() at the job's threads, then at one thread] (one item on one thread)."""
    threads = torch.get_num_threads()
    try:
        out = []
        for n in sorted({threads, 1}, reverse=True):
            torch.set_num_threads(n)
            out.append(measure_once())
        return out
    finally:
        torch.set_num_threads(threads)


def _measure(op: str, dtype, device, gen) -> dict:
    from experiments.placement.profile import profile_ops

    op_fn, args = _tiny(op, dtype, device, gen)
    flush = torch.empty(FLUSH, device=device)

    def fn(*a):
        flush.fill_(1.0)
        return op_fn(*a)

    times, shapes = [], None
    for _ in range(PROFILES):
        ops = profile_ops(fn, args, device=device)
        # a module's op may carry a suffix (embedding_bag's _forward_only)
        mine = ops[ops.op.str.startswith(op.split("/")[0])]
        if mine.empty:
            raise ValueError(f"{op}: the tiny call's profile holds {sorted(set(ops.op))}")
        times.append(float(mine.time_s.iloc[0]))
        shapes = str(mine.input_shapes.iloc[0])
    return {"op": op, "profiled_s": min(times), "host_s": _loop(op_fn, args),
            "input_shapes": shapes}


def _loop(fn, args) -> float:
    """The least time per call over up to HOST_ROUNDS loops of HOST_CALLS calls (fewer past
    HOST_S)."""
    best, began, rounds = math.inf, time.perf_counter(), 0
    while rounds < HOST_ROUNDS and (not rounds or time.perf_counter() - began < HOST_S):
        start = time.perf_counter()
        for _ in range(HOST_CALLS):
            fn(*args)
        best, rounds = min(best, (time.perf_counter() - start) / HOST_CALLS), rounds + 1
    return best


def measure_gemm(side: int, width: int, dtype, device, gen) -> dict:
    """{profiled_s, work_s, input_shapes}: x [side, width] @ W [width, width] + b (aten::addmm)
    timed as a profiled op is, its operands hot (the same call repeated, as profile.profile_ops
    repeats a call): the least over PROFILES profiles, at the job's threads and at most
    CONTENDED times one thread's; `work_s` less the same timing of an N x N addmm (its
    dispatch, which the op model's floor adds back)."""
    def timed(rows: int, cols: int) -> float:
        x = torch.randn((rows, cols), generator=gen, device=device).to(dtype)
        w = torch.randn((cols, cols), generator=gen, device=device).to(dtype)
        b = torch.randn((cols,), generator=gen, device=device).to(dtype)
        return _least(lambda: _profiled(F.linear, (x, w, b), "aten::addmm", device))

    t, tiny = timed(side, width), timed(N, N)
    return {"profiled_s": t, "work_s": max(t - tiny, t / 10),
            "input_shapes": str([[width], [side, width], [width, width]])}


def _profiled(fn, args, op: str, device) -> float:
    from experiments.placement.profile import profile_ops

    ops = profile_ops(fn, args, device=device)
    return float(ops[ops.op == op].time_s.iloc[0])


def _least(time_one) -> float:
    """The least of PROFILES timings at the job's threads, at most CONTENDED times one
    thread's."""
    best = _at_job_and_one_thread(lambda: min(time_one() for _ in range(PROFILES)))
    return min(best[0], CONTENDED * best[-1])
