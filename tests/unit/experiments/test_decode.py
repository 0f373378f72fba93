import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from experiments.core.device import device_facts
from experiments.core.runner import Context
from experiments import decode
from experiments.decode import block, block_counts, gemv_counts, make_layer

# max_call_s high: a loaded 2-core runner must not turn a point into a skip
GEMV = ["experiment.ops=[gemv_gemm]", "experiment.channels=[1024]", "experiment.batches=[1,8]",
        "experiment.max_call_s=100"]
BLOCK = ["experiment.max_call_s=100", "experiment.ops=[block_prefill,block_decode]",
         "experiment.d_model=8", "experiment.heads=2", "experiment.block_batches=[2]",
         "experiment.block_contexts=[3]"]


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_gemv_counts_intensity_and_check(run_experiment, dtype):
    rows = run_experiment("decode", dtype, GEMV)
    assert (rows.status == "ok").all(), rows[["op", "status", "message"]]
    assert rows.check_passed.all()
    s, C, b = {"float32": 4, "float16": 2, "bfloat16": 2}[dtype], rows.n, rows.batch
    assert list(b) == [1, 8] and (rows.m == b).all() and (rows.k == C).all()
    np.testing.assert_array_equal(rows.flops, 2 * b * C * C)
    np.testing.assert_array_equal(rows.bytes, (C * C + 2 * b * C) * s)
    # C15: W dominates, so intensity ~ 2b / itemsize: b/2 in float32, b in 16-bit types
    np.testing.assert_allclose(rows.intensity, 2 * b / s, rtol=0.02)
    np.testing.assert_allclose(rows.flop_per_s, rows.flops / rows.time_s)
    # cold weights: the rotated copies span 3 LLCs (or hit the cap)
    llc = device_facts(torch.device("cpu")).llc_bytes
    copies = rows.params.map(json.loads).map(lambda p: p["weight_copies"])
    assert ((copies >= 2) & ((copies * C * C * s >= 3 * llc) | (copies == 1024))).all()
    params = rows.params.map(json.loads)
    assert all(p.get("allow_tf32") is False for p in params) == (dtype == "float32")


def test_narrow_weights_keep_the_elements_and_linears_layout(run_experiment):
    from experiments.analysis.knees import gemv_rows

    rows = run_experiment("decode", "float32", GEMV + ["experiment.narrow_aspects=[4]"])
    assert (rows.status == "ok").all() and rows.check_passed.all()
    narrow = rows[rows.op == decode.NARROW]
    assert list(narrow.batch) == [1, 8] and (narrow.m == narrow.batch).all()
    K, N, b = narrow.k, narrow.n, narrow.batch
    assert (K == 2048).all() and (N == 512).all()  # K N = 1024^2, K = 4 N
    np.testing.assert_array_equal(narrow.flops, 2 * b * K * N)
    np.testing.assert_array_equal(narrow.bytes, (K * N + b * K + b * N) * 4)
    params = narrow.params.map(json.loads)
    assert all(p["aspect"] == 4 and p["layout"] == "nn.Linear's W^T" for p in params)
    # the decode claims and figures read the square sweep alone
    assert set(gemv_rows(rows.assign(system="s", device_kind="cpu")).op) == {"gemv_gemm"}
    assert decode.narrow_shape(8192, 12) == (28352, 2368)


def test_gemv_intensity_at_decode_sizes():
    # C15 at a model's C: 2bC^2 / 4C^2 = b/2 in float32, b in bfloat16
    for b in (1, 8, 64):
        flops, nbytes = gemv_counts(b, 8192, 4)
        assert flops / nbytes == pytest.approx(b / 2, rel=0.02)
        flops, nbytes = gemv_counts(b, 8192, 2)
        assert flops / nbytes == pytest.approx(b, rel=0.02)


def test_block_counts_by_hand():
    # d=8, b=2, L=3, float32. Prefill: 6 tokens; projections 2*6*8*8*4 = 3072, MLP 2*6*8*32*2
    # = 6144, causal pairs 1+2+3 = 6 per sequence, attention 2 (QK, PV) * 2 * 2 seq * 6 * 8 = 384.
    c = block_counts("prefill", 2, 3, 8, 4, "rmsnorm")
    assert (c["projection_flops"], c["mlp_flops"], c["attention_flops"]) == (3072, 6144, 384)
    assert c["flops"] == 9600
    # weights (12*64 + 2*8) * 4 = 3136, KV 2*2*3*8*4 = 384, x in and out 2*6*8*4 = 384
    assert c["bytes"] == 3136 + 384 + 384
    # Decode: 2 tokens, each attends over 3 slots: 1024 + 2048 + 2*2*2*3*8 = 3264 FLOPs
    c = block_counts("decode", 2, 3, 8, 4, "layernorm")
    assert c["flops"] == 1024 + 2048 + 192 and c["tokens"] == 2
    assert c["bytes"] == (12 * 64 + 4 * 8) * 4 + 384 + 2 * 2 * 8 * 4


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_block_rows(run_experiment, dtype):
    rows = run_experiment("decode", dtype, BLOCK)
    assert list(rows.op) == ["block_prefill", "block_decode"]
    assert (rows.status == "ok").all(), rows[["op", "status", "message"]]
    assert rows.check_passed.all()
    s = 4 if dtype == "float32" else 2
    np.testing.assert_array_equal(rows.flops, [9600, 3264])
    np.testing.assert_array_equal(rows.bytes, np.array([784 + 96 + 96, 784 + 96 + 32]) * s)
    params = rows.params.map(json.loads)
    assert [(p["tokens"], p["context"]) for p in params] == [(6, 3), (2, 3)]
    assert list(rows.m) == [6, 2] and (rows.k == 3).all() and (rows.batch == 2).all()
    # C18: prefill does more work per byte than decode
    assert rows.intensity.iloc[0] > rows.intensity.iloc[1]
    # bytes = weights + KV cache + activations, each part in params
    parts = params.map(lambda p: p["weight_bytes"] + p["kv_bytes"] + p["activation_bytes"])
    np.testing.assert_array_equal(rows.bytes, parts)
    assert [p["kv_bytes"] for p in params] == [2 * 2 * 3 * 8 * s] * 2
    # graph replay is asked for, but a CPU has no graphs: the host clock timed it
    assert all(p["force_graph"] for p in params) and set(rows.timer) == {"perf_counter"}
    assert ((rows.rel_error > 0) & (rows.rel_error < decode.BLOCK_TOLERANCE[dtype])).all()


def test_a_wrong_block_fails_its_float64_check(run_experiment, monkeypatch):
    def off(x, p, heads, norm, decode_):  # right in float64 (the reference), wrong in the dtype
        out = block(x, p, heads, norm, decode_)
        return out if x.dtype == torch.float64 else out + 0.1 * out.abs().mean()

    monkeypatch.setattr(decode, "block", off)
    rows = run_experiment("decode", "float32", BLOCK)
    assert list(rows.status) == ["wrong_result"] * 2
    assert rows.message.str.contains("relative error").all()


def test_cuda_sweep_spans_weight_bound_to_kv_bound_decode():
    # C18 on a GPU: decode time can follow the KV cache only if the sweep makes KV dominate somewhere
    root = Path(__file__).resolve().parents[3]
    cuda = yaml.safe_load((root / "config" / "config.yaml").read_text())["experiments"]["decode"]["cuda"]
    shares = [block_counts("decode", b, L, cuda["d_model"], 2, "rmsnorm")
              for b in cuda["block_batches"] for L in cuda["block_contexts"]]
    shares = [c["kv_bytes"] / c["bytes"] for c in shares]
    assert min(shares) < 0.1 and max(shares) > 0.8
    assert len(cuda["block_contexts"]) >= 3  # a middle context, so growth is more than two points


@pytest.mark.parametrize("norm", ["rmsnorm", "layernorm"])
def test_decode_continues_prefill(norm):
    """Decoding token L-1 over the cache that prefill wrote gives prefill's output at L-1:
    the causal mask, the cache layout and the decode write-then-attend all agree."""
    cpu = torch.device("cpu")
    ctx = Context(device=cpu, dtype="float64", facts=device_facts(cpu))
    b, L, d, heads = 2, 5, 16, 4
    layer = make_layer(ctx, d, heads, b, L, norm, torch.float64, random_cache=False)
    x = ctx.randn(b, L, d, dtype=torch.float64)
    full = block(x, layer, heads, norm, decode=False)
    cache = replace(layer, k=layer.k.clone(), v=layer.v.clone())
    cache.k[:, :, -1] = cache.v[:, :, -1] = float("nan")  # decode must write its slot first
    last = block(x[:, -1:], cache, heads, norm, decode=True)
    torch.testing.assert_close(last, full[:, -1:])
    torch.testing.assert_close(cache.k, layer.k)


def test_skips_past_max_call_s(run_experiment):
    rows = run_experiment("decode", "float32", GEMV[:-1] + ["experiment.max_call_s=1e-9"])
    assert list(rows.status) == ["ok", "skipped"]
    assert "max_call_s" in rows.message.iloc[1]


def test_tf32_is_not_a_storage_type(run_experiment):
    rows = run_experiment("decode", "tf32", GEMV + ["experiment.batches=[1]"])
    assert list(rows.status) == ["not_applicable"]


@pytest.mark.parametrize("override, key", [
    ("experiment.heads=3", "experiment.d_model"),
    ("experiment.ops=[gemv]", "experiment.ops"),
    ("experiment.norm=batchnorm", "experiment.norm"),
    ("experiment.batches=[0]", "experiment.batches"),
    ("experiment.narrow_aspects=[1]", "experiment.narrow_aspects"),
])
def test_bad_config_names_the_key(run_experiment, override, key):
    with pytest.raises(ValueError, match=key):
        run_experiment("decode", "float32", [override])
