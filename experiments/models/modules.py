"""torch's standard building blocks as workloads (random weights, nothing downloaded): one factory
per module, make_xxx(batch, dtype, device, generator, **kwargs) -> (module, inputs), the module in
eval mode (inference: the fused fast paths on), tiny on a CPU and H200-sized on a GPU.
config/presets/modules.yaml runs them; tests/unit/models/test_modules.py checks each one's counted
work."""

from __future__ import annotations

import functools

import torch
import torch.nn as nn
import torch.nn.functional as F

from experiments.models import _init, _pick, _randn, on_device


def _made(module, kwargs, device, generator, dtype, *inputs):
    return _init(module.to(device), generator).to(dtype), inputs


@on_device
def make_linear(batch, dtype, device, generator, **kwargs):
    """nn.Linear(d_in, d_out) on x [batch, d_in]."""
    k = _pick(device, kwargs, cpu={"d_in": 64, "d_out": 64}, cuda={"d_in": 4096, "d_out": 4096})
    x = _randn((batch, k["d_in"]), dtype, device, generator)
    return _made(nn.Linear(k["d_in"], k["d_out"]), k, device, generator, dtype, x)


@on_device
def make_conv1d(batch, dtype, device, generator, **kwargs):
    """nn.Conv1d(c, c_out (c unless given), kernel 3, stride 1, padding kernel // 2, groups 1)
    on x [batch, c, length]."""
    k = _pick(device, kwargs, cpu={"c": 16, "length": 64, "kernel": 3, "groups": 1,
                                   "c_out": 0, "stride": 1},
              cuda={"c": 512, "length": 4096, "kernel": 3, "groups": 1, "c_out": 0, "stride": 1})
    x = _randn((batch, k["c"], k["length"]), dtype, device, generator)
    conv = nn.Conv1d(k["c"], k["c_out"] or k["c"], k["kernel"], stride=k["stride"],
                     padding=k["kernel"] // 2, groups=k["groups"])
    return _made(conv, k, device, generator, dtype, x)


@on_device
def make_conv3d(batch, dtype, device, generator, **kwargs):
    """nn.Conv3d(c, c, 3, padding 1) on x [batch, c, depth, size, size]."""
    k = _pick(device, kwargs, cpu={"c": 4, "depth": 4, "size": 8},
              cuda={"c": 64, "depth": 16, "size": 32})
    x = _randn((batch, k["c"], k["depth"], k["size"], k["size"]), dtype, device, generator)
    return _made(nn.Conv3d(k["c"], k["c"], 3, padding=1), k, device, generator, dtype, x)


@on_device
def make_conv_transpose2d(batch, dtype, device, generator, **kwargs):
    """nn.ConvTranspose2d(c_in, c_out, kernel 4, stride 2, padding kernel // 2 - 1): size ->
    2 size."""
    k = _pick(device, kwargs, cpu={"c_in": 8, "c_out": 4, "size": 8, "kernel": 4},
              cuda={"c_in": 128, "c_out": 64, "size": 64, "kernel": 4})
    x = _randn((batch, k["c_in"], k["size"], k["size"]), dtype, device, generator)
    conv = nn.ConvTranspose2d(k["c_in"], k["c_out"], k["kernel"], stride=2,
                              padding=k["kernel"] // 2 - 1)
    return _made(conv, k, device, generator, dtype, x)


@on_device
def make_batch_norm(batch, dtype, device, generator, **kwargs):
    """nn.BatchNorm2d(c) in inference (running statistics) on x [batch, c, size, size]."""
    k = _pick(device, kwargs, cpu={"c": 16, "size": 8}, cuda={"c": 256, "size": 56})
    x = _randn((batch, k["c"], k["size"], k["size"]), dtype, device, generator)
    return _made(nn.BatchNorm2d(k["c"]), k, device, generator, dtype, x)


def _norm_over_d(norm, batch, dtype, device, generator, kwargs):
    """norm(d) on x [batch, seq, d]: LayerNorm and RMSNorm take the same shapes."""
    k = _pick(device, kwargs, cpu={"d": 64, "seq": 16}, cuda={"d": 4096, "seq": 512})
    x = _randn((batch, k["seq"], k["d"]), dtype, device, generator)
    return _made(norm(k["d"]), k, device, generator, dtype, x)


@on_device
def make_layer_norm(batch, dtype, device, generator, **kwargs):
    """nn.LayerNorm(d) on x [batch, seq, d]."""
    return _norm_over_d(nn.LayerNorm, batch, dtype, device, generator, kwargs)


@on_device
def make_group_norm(batch, dtype, device, generator, **kwargs):
    """nn.GroupNorm(groups, c) on x [batch, c, size, size]."""
    k = _pick(device, kwargs, cpu={"groups": 4, "c": 16, "size": 8},
              cuda={"groups": 32, "c": 256, "size": 56})
    x = _randn((batch, k["c"], k["size"], k["size"]), dtype, device, generator)
    return _made(nn.GroupNorm(k["groups"], k["c"]), k, device, generator, dtype, x)


@on_device
def make_rms_norm(batch, dtype, device, generator, **kwargs):
    """nn.RMSNorm(d) on x [batch, seq, d]."""
    return _norm_over_d(nn.RMSNorm, batch, dtype, device, generator, kwargs)


@on_device
def make_embedding(batch, dtype, device, generator, **kwargs):
    """nn.Embedding(vocab, d) looking up token ids [batch, seq]: a gather, 0 FLOPs."""
    k = _pick(device, kwargs, cpu={"vocab": 512, "d": 32, "seq": 16},
              cuda={"vocab": 131072, "d": 1024, "seq": 512})
    ids = torch.randint(0, k["vocab"], (batch, k["seq"]), device=device, generator=generator)
    return _made(nn.Embedding(k["vocab"], k["d"]), k, device, generator, dtype, ids)


@on_device
def make_embedding_bag(batch, dtype, device, generator, **kwargs):
    """nn.EmbeddingBag(rows, d, mode sum) over `batch` bags of `bag` ids each."""
    k = _pick(device, kwargs, cpu={"rows": 1024, "d": 16, "bag": 8},
              cuda={"rows": 1 << 20, "d": 128, "bag": 32})
    ids = torch.randint(0, k["rows"], (batch, k["bag"]), device=device, generator=generator)
    return _made(nn.EmbeddingBag(k["rows"], k["d"], mode="sum"), k, device, generator, dtype, ids)


@on_device
def make_mha(batch, dtype, device, generator, **kwargs):
    """nn.MultiheadAttention(d, heads, batch_first) self-attention on x [batch, seq, d] (no
    weights returned: the fused fast path aten::_native_multi_head_attention)."""
    k = _pick(device, kwargs, cpu={"d": 64, "heads": 4, "seq": 16},
              cuda={"d": 1024, "heads": 16, "seq": 512})
    mha = _init(nn.MultiheadAttention(k["d"], k["heads"], batch_first=True).to(device),
                generator).to(dtype)
    x = _randn((batch, k["seq"], k["d"]), dtype, device, generator)
    return functools.partial(_self_attention, mha), (x,)


def _self_attention(mha, x):
    return mha(x, x, x, need_weights=False)[0]


@on_device
def make_sdpa(batch, dtype, device, generator, **kwargs):
    """F.scaled_dot_product_attention on q, k, v [batch, heads, seq, head_dim]; causal by
    default (counted as causal: the pairs the mask keeps)."""
    k = _pick(device, kwargs, cpu={"heads": 2, "seq": 64, "head_dim": 16, "causal": True},
              cuda={"heads": 16, "seq": 1024, "head_dim": 64, "causal": True})
    shape = (batch, k["heads"], k["seq"], k["head_dim"])
    q, kk, v = (_randn(shape, dtype, device, generator) for _ in range(3))
    return functools.partial(F.scaled_dot_product_attention, is_causal=k["causal"]), (q, kk, v)


@on_device
def make_encoder_layer(batch, dtype, device, generator, **kwargs):
    """nn.TransformerEncoderLayer(d, heads, ff, batch_first) in inference: torch's fused fast path
    aten::_transformer_encoder_layer_fwd (counted by formula)."""
    k = _pick(device, kwargs, cpu={"d": 64, "heads": 4, "ff": 128, "seq": 16},
              cuda={"d": 1024, "heads": 16, "ff": 4096, "seq": 512})
    layer = nn.TransformerEncoderLayer(k["d"], k["heads"], k["ff"], dropout=0.0, batch_first=True)
    x = _randn((batch, k["seq"], k["d"]), dtype, device, generator)
    return _made(layer, k, device, generator, dtype, x)


@on_device
def make_decoder_layer(batch, dtype, device, generator, **kwargs):
    """nn.TransformerDecoderLayer(d, heads, ff, batch_first) on (tgt, memory) [batch, seq, d]."""
    k = _pick(device, kwargs, cpu={"d": 64, "heads": 4, "ff": 128, "seq": 16},
              cuda={"d": 1024, "heads": 16, "ff": 4096, "seq": 512})
    layer = nn.TransformerDecoderLayer(k["d"], k["heads"], k["ff"], dropout=0.0, batch_first=True)
    tgt, mem = (_randn((batch, k["seq"], k["d"]), dtype, device, generator) for _ in range(2))
    return _made(layer, k, device, generator, dtype, tgt, mem)


def _rnn(cls, batch, dtype, device, generator, kwargs):
    k = _pick(device, kwargs, cpu={"d": 32, "hidden": 32, "layers": 2, "seq": 8},
              cuda={"d": 1024, "hidden": 1024, "layers": 2, "seq": 128})
    rnn = _init(cls(k["d"], k["hidden"], k["layers"], batch_first=True).to(device),
                generator).to(dtype)
    x = _randn((batch, k["seq"], k["d"]), dtype, device, generator)
    return functools.partial(_rnn_output, rnn), (x,)


def _rnn_output(rnn, x):
    return rnn(x)[0]


@on_device
def make_lstm(batch, dtype, device, generator, **kwargs):
    """nn.LSTM(d, hidden, layers, batch_first) on x [batch, seq, d] (cuDNN on a GPU)."""
    return _rnn(nn.LSTM, batch, dtype, device, generator, kwargs)


@on_device
def make_gru(batch, dtype, device, generator, **kwargs):
    """nn.GRU(d, hidden, layers, batch_first) on x [batch, seq, d]."""
    return _rnn(nn.GRU, batch, dtype, device, generator, kwargs)


@on_device
def make_softmax(batch, dtype, device, generator, **kwargs):
    """softmax over the last dimension of attention-like scores [batch, heads, seq, width]
    (width seq unless given)."""
    k = _pick(device, kwargs, cpu={"heads": 2, "seq": 32, "width": 0},
              cuda={"heads": 16, "seq": 1024, "width": 0})
    x = _randn((batch, k["heads"], k["seq"], k["width"] or k["seq"]), dtype, device, generator)
    return nn.Softmax(dim=-1), (x,)


@on_device
def make_gelu(batch, dtype, device, generator, **kwargs):
    """GELU on x [batch, seq, hidden] (an MLP's activation)."""
    k = _pick(device, kwargs, cpu={"seq": 16, "hidden": 256}, cuda={"seq": 512, "hidden": 16384})
    return nn.GELU(), (_randn((batch, k["seq"], k["hidden"]), dtype, device, generator),)


class _Add(nn.Module):
    def forward(self, x, y):
        return x + y


class _PermuteCopy(nn.Module):
    def forward(self, x):  # [seq, batch, parts, d] -> [parts, seq, batch, d], laid out afresh
        return x.permute(2, 0, 1, 3).contiguous()


@on_device
def make_add(batch, dtype, device, generator, **kwargs):
    """x + y on two [batch, seq, d] tensors (a residual connection's elementwise add)."""
    k = _pick(device, kwargs, cpu={"seq": 16, "d": 64}, cuda={"seq": 512, "d": 4096})
    x, y = (_randn((batch, k["seq"], k["d"]), dtype, device, generator) for _ in range(2))
    return _Add(), (x, y)


@on_device
def make_permute_copy(batch, dtype, device, generator, **kwargs):
    """x [seq, batch, parts, d] copied to [parts, seq, batch, d] (`.contiguous()` of a permuted
    view: how unfused multi-head attention splits its packed q, k, v projection)."""
    k = _pick(device, kwargs, cpu={"seq": 16, "parts": 3, "d": 64},
              cuda={"seq": 512, "parts": 3, "d": 4096})
    x = _randn((k["seq"], batch, k["parts"], k["d"]), dtype, device, generator)
    return _PermuteCopy(), (x,)


@on_device
def make_max_pool2d(batch, dtype, device, generator, **kwargs):
    """nn.MaxPool2d(2) on x [batch, c, size, size]."""
    k = _pick(device, kwargs, cpu={"c": 8, "size": 16}, cuda={"c": 256, "size": 112})
    x = _randn((batch, k["c"], k["size"], k["size"]), dtype, device, generator)
    return nn.MaxPool2d(2), (x,)


@on_device
def make_avg_pool2d(batch, dtype, device, generator, **kwargs):
    """nn.AvgPool2d(3, stride 1, padding 1) on x [batch, c, size, size]."""
    k = _pick(device, kwargs, cpu={"c": 8, "size": 16}, cuda={"c": 256, "size": 56})
    x = _randn((batch, k["c"], k["size"], k["size"]), dtype, device, generator)
    return nn.AvgPool2d(3, stride=1, padding=1), (x,)
