"""Op-rate classes: which of torch's building blocks an aten op is, so that the rate the op_rates
experiment measured for that block (experiments/op_rates.py) can be read for it (the op model,
experiments/analysis/sweeps.py and prediction.py; docs/placement.md).

A class is a key and the term its rate sets:
- `compute` (FLOP/s against FLOPs per call): convolutions, `aten::convolution/<variant>`, the
  variant conv1d, conv2d or conv3d read off the input and weight shapes, conv_transpose1d/2d/3d
  off the op's name (aten::conv_transpose<N>d, as the counter names a transposed one);
  fused attention, `<op>/hd<head dim>` (a query of one token, a decode step, is no class: it
  streams its cache and the memory term holds it);
  torch's fused inference layers (FUSED: multi-head attention, the encoder layer), the key
  the op's name;
- `memory` (B/s against the op's working set, its tensors in and out): norms, softmax, GELU,
  pooling, gathers, the elementwise add and the strided copy (MEMORY_OPS), the key the op's
  name.
Any other op has no class (None): the roofs and sweeps predict it.
"""

from __future__ import annotations

import ast
import math

CONVOLUTION = "aten::convolution"
# a transposed convolution's op as the counter names it (counting.op_name): the module's op, under
# which the profiler nests aten::convolution
CONV_TRANSPOSE = "aten::conv_transpose"
ATTENTION_PREFIX = "aten::_scaled_dot_product_"
# torch's elementwise add and strided copy: classes read where their op rates were measured (a
# GPU sweep's); with none the roofs predict them, as any op without a class, and say nothing.
# A CPU's never: its hot points copy warm blocks, a model's ops write fresh ones (cpuops.py,
# warm_copy)
QUIET = frozenset({"aten::add", "aten::clone"})
MEMORY_OPS = QUIET | frozenset({
    "aten::native_batch_norm", "aten::_native_batch_norm_legit_no_training",
    "aten::native_layer_norm", "aten::native_group_norm", "aten::_fused_rms_norm",
    "aten::_softmax", "aten::gelu", "aten::max_pool2d_with_indices", "aten::avg_pool2d",
    "aten::_embedding_bag", "aten::_embedding_bag_forward_only"})
FUSED = frozenset({"aten::_native_multi_head_attention", "aten::_transformer_encoder_layer_fwd"})
COMPUTE, MEMORY = "compute", "memory"


def parse_shapes(shapes) -> list:
    """Input shapes (a list, or its repr as torch.profiler and the counter write it) as a list
    of lists; [] when unreadable."""
    try:
        out = ast.literal_eval(shapes) if isinstance(shapes, str) else shapes
    except (ValueError, SyntaxError):
        return []
    return [list(s) for s in out] if isinstance(out, (list, tuple)) and all(
        isinstance(s, (list, tuple)) for s in out) else []


def base_op(op: str) -> str:
    """The aten op whose dispatch floor and notes `op` shares: aten::convolution for a
    transposed convolution's name, the op itself for a forward-only variant (embedding_bag's:
    the same kernels, without autograd's saved outputs), else op itself."""
    return CONVOLUTION if op.startswith(CONV_TRANSPOSE) else op.removesuffix("_forward_only")


def conv_variant(shapes) -> str | None:
    """conv1d/2d/3d, or conv_transpose1d/2d/3d, of an aten::convolution from [input, weight,
    (bias)] shapes (rows recorded before the counter named a transposed one
    aten::conv_transpose<N>d). A convolution's weight is [out, in / groups, ...], a transposed
    one's [in, out / groups, ...], and a bias has the output's channels; where the shapes read
    both ways (c_in == c_out, or a transposed convolution without bias whose weight also fits a
    grouped one) it is the plain convolution."""
    s = parse_shapes(shapes)
    if len(s) < 2 or len(s[0]) not in (3, 4, 5) or len(s[1]) != len(s[0]) or min(s[1]) < 1:
        return None
    x, w = s[0], s[1]
    bias = s[2][0] if len(s) > 2 and len(s[2]) == 1 else None
    plain = x[1] % w[1] == 0 and bias in (None, w[0])
    transposed = w[0] == x[1] and (bias is None or bias % w[1] == 0)
    kind = "conv_transpose" if transposed and not plain else "conv"
    return f"{kind}{len(x) - 2}d" if plain or transposed else None


# op_rates rows of these variants are a CPU's dispatch floors and hot thin GEMMs (floors.py),
# read by the op model's CPU terms (analysis/cpuops.py), never a class's rate
FLOOR, GEMM_HOT = "floor", "gemm_hot"
# torch runs an elementwise op past GRAIN elements as a parallel region over its threads
# (at::internal::GRAIN_SIZE); the floor row PARALLEL, an add of twice that, times the region's
# fork and join, which such an op pays at least (analysis/cpuops.py)
GRAIN, PARALLEL = 32768, "aten::add/parallel"
DEPTHWISE = "depthwise"  # a class key's suffix: a convolution of one input channel a group
# softmax's suffix past a row of WARP_ROW elements: torch's CUDA softmax takes rows up to 1024
# (of 2- and 4-byte elements) a warp each, longer ones a block each (SoftMax.cu, host_softmax)
WIDE, WARP_ROW = "wide", 1024


def fine_key(op: str, shapes) -> str | None:
    """The narrower class an op belongs to where one runs unlike its class (a depthwise
    convolution: groups = channels, one input channel a filter, `<class key>/depthwise`, read
    as B/s against its working set: term_of; a softmax over rows longer than WARP_ROW,
    `aten::_softmax/wide`); the op model reads it where it was calibrated, else the class's.
    None for any other op."""
    found = op_class(op, shapes)
    s = parse_shapes(shapes)
    if found and op == "aten::_softmax" and s and s[0]:
        return f"{op}/{WIDE}" if s[0][-1] > WARP_ROW else None
    if not found or not found[0].startswith(CONVOLUTION + "/conv"):
        return None
    depthwise = "transpose" not in found[0] and s[1][1] == 1 and s[0][1] == s[1][0] > 1
    return f"{found[0]}/{DEPTHWISE}" if depthwise else None


def conv_gemm(key: str, shapes, flops: float) -> tuple[int, int, int] | None:
    """(M, N, K) of one group's implicit GEMM of a convolution of class `key` ([input, weight,
    (bias)] shapes, `flops` its count): M output pixels by K = in channels a group x kernel
    against N out channels a group; a transposed one's M input pixels by K in channels a group
    against N = out channels a group x kernel (its col2im form). FLOPs = 2 M N K groups.
    None for another class or unreadable shapes."""
    s = parse_shapes(shapes)
    if not key.startswith(CONVOLUTION) or len(s) < 2 or len(s[0]) < 3 or min(s[1]) < 1:
        return None
    x, w = s[0], s[1]
    kernel = math.prod(w[2:])
    if "transpose" in key:
        bias = s[2][0] if len(s) > 2 and len(s[2]) == 1 else w[1]
        groups = max(bias // w[1], 1)
        return math.prod([x[0], *x[2:]]), w[1] * kernel, max(w[0] // groups, 1)
    groups = max(x[1] // w[1], 1)
    k, n = w[1] * kernel, max(w[0] // groups, 1)
    return max(round(flops / (2 * k * n * groups)), 1), n, k


def term_of(key: str) -> str:
    """The term a class's rate sets: COMPUTE for convolutions, attention and the fused layers,
    else MEMORY (a depthwise convolution's too: it streams its activations, a few FLOPs a
    byte)."""
    if key.endswith("/" + DEPTHWISE):
        return MEMORY
    return COMPUTE if key.startswith((CONVOLUTION, ATTENTION_PREFIX)) or key in FUSED else MEMORY


def op_class(op: str, shapes) -> tuple[str, str] | None:
    """(class key, term: COMPUTE or MEMORY) of an aten op with these input shapes; None when it
    has no class."""
    if op == CONVOLUTION:
        variant = conv_variant(shapes)
        return (f"{op}/{variant}", COMPUTE) if variant else None
    if op.startswith(CONV_TRANSPOSE):
        return f"{CONVOLUTION}/{op.removeprefix('aten::')}", COMPUTE
    if op.startswith(ATTENTION_PREFIX):
        s = parse_shapes(shapes)
        if len(s) < 3 or len(s[0]) != 4 or s[0][2] <= 1:
            return None
        return f"{op}/hd{s[0][3]}", COMPUTE
    if op in FUSED:
        return op, COMPUTE
    return (op, MEMORY) if op in MEMORY_OPS else None
