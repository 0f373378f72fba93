"""FLOPs per aten op where torch's FlopCounterMode has no formula (docs/placement.md: the
conventions). torch's own formulas (matmuls, convolutions, attention) are used where they exist;
these add what it leaves at 0 and the fused ops it does not see:

- elementwise ops (add, mul, relu, gelu, exp, ...): 1 FLOP per output element (a transcendental
  counts as one, as a GPU's special-function unit issues it);
- reductions (sum, mean, amax, ...): 1 FLOP per input element;
- softmax / log_softmax: 5 per element (max, subtract, exp, sum, divide);
- layer / group norm: 5 per element (mean, subtract, square-sum, scale), + 2 with an affine
  weight and bias; batch norm: the same in training, 2 + 2 in inference (running statistics:
  subtract, scale, weight, bias); RMS norm (fused): 4 per element (square, mean, scale, weight);
- pooling: one compare or add per window element of each output; adaptive: one per input;
- embedding: 0 (a gather: its bytes place it); embedding_bag: 1 add per gathered element;
  a gather's bytes are the rows its indices name and the indices, not the table (gathered_bytes);
- attention (scaled_dot_product_*): its two matmuls, 4 b h Lq Lk d; causal counts the pairs the
  mask keeps (Lq (Lq + 1) / 2 for a square: half the square plus the diagonal);
- fused transformer layer / multi-head attention (the inference fast path): their projections,
  attention matmuls, norms, residual adds and activation, by formula;
- RNNs (cuDNN / oneDNN kernels): 2 T B G H (in + H) per layer and direction (G gates: LSTM 4,
  GRU 3, RNN 1) + pointwise per hidden unit and step (LSTM 13, GRU 12, RNN 2).
"""

from __future__ import annotations

import math

import torch

# ops whose FLOPs run on the matrix units (the matmul roof); the rest run on the vector units
MATRIX_OPS = {"mm", "addmm", "bmm", "baddbmm", "_scaled_mm", "convolution", "_convolution",
              "cudnn_convolution", "_slow_conv2d_forward", "convolution_overrideable",
              "_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
              "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention_for_cpu",
              "_flash_attention_forward", "_efficient_attention_forward",
              "_cudnn_attention_forward", "_transformer_encoder_layer_fwd",
              "_native_multi_head_attention", "_cudnn_rnn", "mkldnn_rnn_layer", "linear"}

ATTENTION = {"_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
             "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention_for_cpu",
             "_flash_attention_forward", "_efficient_attention_forward", "_cudnn_attention_forward"}
# counted here even where torch has a formula (it counts a causal mask's full square)
OWN = ATTENTION | {"_transformer_encoder_layer_fwd", "_native_multi_head_attention", "_cudnn_rnn",
                   "mkldnn_rnn_layer"}

# ops that move no data: views, metadata, allocation without a write
NO_WORK = {"_unsafe_view", "empty", "empty_like", "empty_strided", "lift_fresh", "detach",
           "alias", "_reshape_alias", "resize_", "set_", "record_stream", "_local_scalar_dense"}

REDUCTIONS = {"sum", "mean", "amax", "amin", "max", "min", "prod", "var", "std", "norm",
              "linalg_vector_norm", "argmax", "argmin", "logsumexp", "any", "all", "var_mean",
              "std_mean", "cumsum"}
MOVES = {"clone", "copy_", "_to_copy", "cat", "stack", "index_select", "gather", "embedding",
         "zeros", "zeros_like", "ones", "ones_like", "full", "full_like", "fill_", "zero_",
         "arange", "index", "index_put_", "scatter", "scatter_", "slice_scatter", "select_scatter",
         "constant_pad_nd", "masked_fill", "masked_fill_", "where", "repeat", "expand_copy",
         "_unsafe_split", "split_with_sizes_copy", "unfold_copy", "tril", "triu", "randint",
         "randn", "rand", "normal_", "uniform_", "bernoulli_", "native_dropout", "lt", "gt",
         "le", "ge", "eq", "ne", "logical_not", "logical_and", "bitwise_and", "_pin_memory",
         "_softmax_backward_data", "max_pool2d_with_indices_backward"}
# (comparisons and masks: a select per element is not arithmetic)
GATES = {0: 1, 1: 1, 2: 4, 3: 3}  # cuDNN / oneDNN RNN modes: relu, tanh, LSTM, GRU
POINTWISE_PER_UNIT = {0: 2, 1: 2, 2: 13, 3: 12}


def _numel(x) -> int:
    return x.numel() if isinstance(x, torch.Tensor) else 0


def _first(out):
    return out[0] if isinstance(out, (tuple, list)) else out


def _arg(args, kwargs, i, name, default=None):
    return args[i] if len(args) > i else kwargs.get(name, default)


def causal_pairs(lq: int, lk: int) -> int:
    """Query-key pairs a causal mask keeps (torch aligns it top-left: query i sees keys <= i)."""
    n = min(lq, lk)
    return n * (n + 1) // 2 + max(lq - lk, 0) * lk


def attention(q, k, v, causal: bool) -> float:
    """Two matmuls (QK^T and PV) over the pairs computed: 2 b h pairs (d_qk + d_v)."""
    *batch, lq, dq = q.shape
    lk, dv = k.shape[-2], v.shape[-1]
    pairs = causal_pairs(lq, lk) if causal else lq * lk
    return 2.0 * math.prod(batch) * pairs * (dq + dv)


def _sdpa(func_name, args, kwargs):
    q, k, v = args[:3]
    if func_name == "_efficient_attention_forward":
        causal = _arg(args, kwargs, 9, "custom_mask_type", 0) in (1, 2)
        # q, k, v [b, seq, heads, d] here: put heads before seq
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    elif func_name == "_flash_attention_forward":
        causal = bool(_arg(args, kwargs, 8, "is_causal", False))
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    elif func_name == "_cudnn_attention_forward":
        causal = bool(_arg(args, kwargs, 10, "is_causal", False))
    elif func_name in ("_scaled_dot_product_efficient_attention",
                       "_scaled_dot_product_cudnn_attention"):
        causal = bool(_arg(args, kwargs, 6, "is_causal", False))
    else:  # _scaled_dot_product_flash_attention(_for_cpu)
        causal = bool(_arg(args, kwargs, 4, "is_causal", False))
    return attention(q, k, v, causal)


def _encoder_layer(args, kwargs):
    src, d = args[0], int(args[1])
    ff = args[14].shape[0]
    b, t = (src.shape[0], src.shape[1]) if src.dim() == 3 else (1, src.shape[0])
    n = b * t
    proj = 2.0 * n * d * 3 * d + 2.0 * n * d * d + 2.0 * 2 * n * d * ff
    attn = 2.0 * b * t * t * 2 * d  # a mask is applied to the full square the kernel computes
    pointwise = 2 * 7 * n * d + 2 * n * d + n * ff  # two norms, two residual adds, activation
    return proj + attn + pointwise


def _mha(args, kwargs):
    q, k = args[0], args[1]
    d = int(args[3])
    b, lq, lk = q.shape[0], q.shape[-2], k.shape[-2]
    proj = 2.0 * b * lq * d * d + 2.0 * 2 * b * lk * d * d + 2.0 * b * lq * d * d
    return proj + 2.0 * b * lq * lk * 2 * d


def rnn(mode: int, seq: int, batch: int, inp: int, hidden: int, layers: int,
        directions: int) -> float:
    g = GATES[mode]
    total = 0.0
    for layer in range(layers):
        width = inp if layer == 0 else hidden * directions
        total += directions * (2.0 * seq * batch * g * hidden * (width + hidden)
                               + POINTWISE_PER_UNIT[mode] * seq * batch * hidden)
    return total


def _cudnn_rnn(args, kwargs):
    x = args[0]
    mode, hidden, layers = int(args[6]), int(args[7]), int(args[9])
    batch_first, bidir = bool(args[10]), bool(args[13])
    seq, batch = (x.shape[1], x.shape[0]) if batch_first else (x.shape[0], x.shape[1])
    if x.dim() == 2:  # packed: sum of batch sizes steps
        seq, batch = 1, x.shape[0]
    return rnn(mode, seq, batch, x.shape[-1], hidden, layers, 2 if bidir else 1)


def _mkldnn_rnn_layer(args, kwargs):
    x = args[0]  # one layer, one direction: [seq, batch, in] (or batch first)
    mode, hidden, batch_first = int(args[9]), int(args[10]), bool(args[14])
    seq, batch = (x.shape[1], x.shape[0]) if batch_first else (x.shape[0], x.shape[1])
    return rnn(mode, seq, batch, x.shape[-1], hidden, 1, 1)


def _norm(x, affine: bool, stats: bool = True) -> float:
    return (5 if stats else 2) * _numel(x) + (2 * _numel(x) if affine else 0)


def _pool(name, args, kwargs, out):
    if name.startswith("_adaptive") or name.startswith("adaptive"):
        return float(_numel(args[0]))
    window = math.prod(args[1]) if isinstance(args[1], (list, tuple)) else args[1]
    return float(_numel(_first(out)) * window)


def exponentials(name: str, args, kwargs) -> float:
    """Softmax exponentials a fused attention kernel evaluates (one per query-key pair kept):
    they run on the special-function units, not the matrix units, and the model charges them
    there (experiments/analysis/prediction.py)."""
    if name in ATTENTION:
        flops = _sdpa(name, args, kwargs)
        q, v = args[0], args[2]
        return flops / (2.0 * (q.shape[-1] + v.shape[-1]))
    if name == "_transformer_encoder_layer_fwd":
        src, heads = args[0], int(args[2])
        b, t = (src.shape[0], src.shape[1]) if src.dim() == 3 else (1, src.shape[0])
        return float(b * heads * t * t)
    if name == "_native_multi_head_attention":
        q, k, heads = args[0], args[1], int(args[4])
        return float(q.shape[0] * heads * q.shape[-2] * k.shape[-2])
    return 0.0


GATHERS = ("embedding", "_embedding_bag", "_embedding_bag_forward_only")


def gathered_bytes(name: str, args) -> float | None:
    """Bytes a gather reads: the table rows its indices name (gathered_rows) and the indices
    (and embedding_bag's offsets), never the whole table; None for other ops."""
    if name not in GATHERS:
        return None
    indices = args[1:2] if name == "embedding" else args[1:3]  # embedding_bag: and offsets
    index_bytes = sum(_numel(t) * t.element_size() for t in indices
                      if isinstance(t, torch.Tensor))
    return gathered_rows(name, args) + float(index_bytes)


def gathered_rows(name: str, args) -> float:
    """Bytes of the table rows a gather reads (one row per index, repeats included): the part
    of gathered_bytes a call's compulsory traffic counts for its table; 0 for other ops."""
    if name not in GATHERS:
        return 0.0
    table, idx = args[0], args[1]
    return float(_numel(idx) * table.shape[-1] * table.element_size())


def formula(name: str, args, kwargs, out) -> float | None:
    """FLOPs of one aten op (name without `aten::`) by the conventions above; None where the op
    has none (then 0, placed by its bytes)."""
    if name in MOVES or name in NO_WORK:
        return 0.0
    if name in ATTENTION:
        return _sdpa(name, args, kwargs)
    if name == "_transformer_encoder_layer_fwd":
        return _encoder_layer(args, kwargs)
    if name == "_native_multi_head_attention":
        return _mha(args, kwargs)
    if name == "_cudnn_rnn":
        return _cudnn_rnn(args, kwargs)
    if name == "mkldnn_rnn_layer":
        return _mkldnn_rnn_layer(args, kwargs)
    if name in ("_softmax", "_log_softmax", "softmax", "log_softmax"):
        return 5.0 * _numel(args[0])
    if name == "native_layer_norm":
        return _norm(args[0], args[2] is not None)
    if name == "native_group_norm":
        return _norm(args[0], args[1] is not None)
    if name in ("_fused_rms_norm",):
        return 4.0 * _numel(args[0])
    if name in ("native_batch_norm", "cudnn_batch_norm", "miopen_batch_norm"):
        return _norm(args[0], args[1] is not None, stats=bool(args[5]))
    if name == "_native_batch_norm_legit_no_training":
        return _norm(args[0], args[1] is not None, stats=False)
    if name in ("_native_batch_norm_legit", "_batch_norm_with_update"):
        return _norm(args[0], args[1] is not None)
    if name in ("_embedding_bag", "_embedding_bag_forward_only"):
        return float(_numel(args[1]) * args[0].shape[-1])
    if "pool" in name:
        return _pool(name, args, kwargs, out)
    if name in REDUCTIONS:
        return float(_numel(args[0]) if isinstance(args[0], torch.Tensor) else 0)
    first = _first(out)
    if isinstance(first, torch.Tensor) and first.is_floating_point():
        return float(first.numel())  # elementwise: one per output element
    return None
