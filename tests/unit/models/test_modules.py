"""Work counted for torch's standard modules: each factory of experiments/models/modules.py counted
(experiments/placement/counting.py) against a hand formula (FLOPs within 2 %) and the tensors'
sizes (compulsory bytes exact). The module list below is the one the issue asked for; a module
not on it is counted by the same rules (docs/placement.md) but not checked here."""

import math

import pytest
import torch

from experiments.models import modules
from experiments.placement.counting import count, precision

def _count(name, batch, **kwargs):
    gen = torch.Generator().manual_seed(0)
    fn, args = getattr(modules, f"make_{name}")(batch, torch.float32, "cpu", gen, **kwargs)
    with precision("float32"):
        c = count(fn, args)
        out = fn(*args)
    return c, args, out


def _params(name, **kwargs):
    gen = torch.Generator().manual_seed(0)
    fn, _ = getattr(modules, f"make_{name}")(1, torch.float32, "cpu", gen, **kwargs)
    module = fn.args[0] if getattr(fn, "args", None) else fn
    if not isinstance(module, torch.nn.Module):
        return 0
    return _nbytes(*module.parameters(), *module.buffers())


def _nbytes(*ts):
    return sum(t.numel() * t.element_size() for t in ts)


# name, kwargs, batch, hand FLOPs(b, k)
B = 3
CASES = {
    "linear": ({"d_in": 64, "d_out": 32}, lambda k: 2 * B * 64 * 32),
    "conv1d": ({"c": 8, "length": 32}, lambda k: 2 * B * 8 * 32 * 8 * 3),
    "conv3d": ({"c": 4, "depth": 4, "size": 6}, lambda k: 2 * B * 4 * 4 * 6 * 6 * 4 * 27),
    # transposed: every input pixel scatters c_out k^2 products
    "conv_transpose2d": ({"c_in": 8, "c_out": 4, "size": 8}, lambda k: 2 * B * 8 * 8 * 8 * 4 * 16),
    "batch_norm": ({"c": 8, "size": 8}, lambda k: 4 * B * 8 * 8 * 8),  # running stats: 4 / elt
    "layer_norm": ({"d": 64, "seq": 8}, lambda k: 7 * B * 8 * 64),
    "group_norm": ({"groups": 4, "c": 16, "size": 8}, lambda k: 7 * B * 16 * 8 * 8),
    # square, mean, (+eps, rsqrt per row), scale, weight
    "rms_norm": ({"d": 64, "seq": 8}, lambda k: 4 * B * 8 * 64),
    "embedding": ({"vocab": 100, "d": 16, "seq": 8}, lambda k: 0),
    "embedding_bag": ({"rows": 100, "d": 16, "bag": 5}, lambda k: B * 5 * 16),
    # projections q, k, v, out (4 d^2 per token) + QK^T and PV (4 seq^2 d)
    "mha": ({"d": 64, "heads": 4, "seq": 16}, lambda k: 2 * B * 16 * 64 * 64 * 4
            + 4 * B * 16 * 16 * 64),
    "sdpa": ({"heads": 2, "seq": 64, "head_dim": 16, "causal": True},
             lambda k: 4 * B * 2 * (64 * 64 / 2) * 16),  # causal: half the square
    "encoder_layer": ({"d": 64, "heads": 4, "ff": 128, "seq": 16},
                      lambda k: 2 * B * 16 * (4 * 64 * 64 + 2 * 64 * 128)
                      + 4 * B * 16 * 16 * 64),
    "decoder_layer": ({"d": 64, "heads": 4, "ff": 128, "seq": 16},
                      lambda k: 2 * B * 16 * (8 * 64 * 64 + 2 * 64 * 128)
                      + 2 * 4 * B * 16 * 16 * 64),
    # per layer: gates x (input + hidden) matmuls, and the gates' pointwise work per hidden unit
    # and step (LSTM 13, GRU 12: docs/placement.md)
    "lstm": ({"d": 32, "hidden": 32, "layers": 2, "seq": 8},
             lambda k: 2 * (2 * 8 * B * 4 * 32 * (32 + 32) + 13 * 8 * B * 32)),
    "gru": ({"d": 32, "hidden": 32, "layers": 2, "seq": 8},
            lambda k: 2 * (2 * 8 * B * 3 * 32 * (32 + 32) + 12 * 8 * B * 32)),
    "softmax": ({"heads": 2, "seq": 32}, lambda k: 5 * B * 2 * 32 * 32),
    "gelu": ({"seq": 8, "hidden": 64}, lambda k: B * 8 * 64),
    "add": ({"seq": 8, "d": 64}, lambda k: B * 8 * 64),
    "permute_copy": ({"seq": 8, "parts": 3, "d": 64}, lambda k: 0),  # a copy: bytes alone
    "max_pool2d": ({"c": 8, "size": 16}, lambda k: B * 8 * 8 * 8 * 4),  # 4 compares per output
    "avg_pool2d": ({"c": 8, "size": 16}, lambda k: B * 8 * 16 * 16 * 9),
}
MODULES = sorted(CASES)


def test_every_module_has_a_factory_and_a_case():
    factories = {n.removeprefix("make_") for n in dir(modules) if n.startswith("make_")}
    assert factories == set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_flops_match_the_hand_formula(name):
    kwargs, hand = CASES[name]
    c, _, _ = _count(name, B, **kwargs)
    want = hand(kwargs)
    if want == 0:
        assert c["flops"] == 0  # a gather: placed on the bandwidth roof by its bytes
    else:
        assert c["flops"] == pytest.approx(want, rel=0.02), (c["flops"], want, c["ops"])


@pytest.mark.parametrize("name", MODULES)
def test_bytes_are_the_tensors_sizes(name):
    kwargs, _ = CASES[name]
    c, args, out = _count(name, B, **kwargs)
    outs = [out] if isinstance(out, torch.Tensor) else list(out)
    assert c["input_bytes"] == _nbytes(*args)
    assert c["output_bytes"] == _nbytes(*outs)
    if name.startswith("embedding"):  # a table counts the rows its ids read, never more
        ids = args[0].numel() * kwargs["d"] * 4
        assert c["param_bytes"] == min(ids, _params(name, **kwargs)) < _params(name, **kwargs)
    else:
        assert c["param_bytes"] == _params(name, **kwargs)
    assert c["bytes"] == c["input_bytes"] + c["param_bytes"] + c["output_bytes"]
    # every op's own traffic is at least what it reads and writes once: never below its output
    assert c["op_bytes"] >= c["output_bytes"] > 0


def test_fused_paths_are_counted_by_formula_and_say_so():
    c, _, _ = _count("encoder_layer", 2, d=64, heads=4, ff=128, seq=16)
    assert c["counted_by_formula"] == ["aten::_transformer_encoder_layer_fwd"]
    c, _, _ = _count("lstm", 2, d=32, hidden=32, layers=2, seq=8)
    assert any("rnn" in op for op in c["counted_by_formula"])


def test_causal_attention_counts_the_kept_pairs_only():
    full, _, _ = _count("sdpa", 1, heads=1, seq=128, head_dim=16, causal=False)
    causal, _, _ = _count("sdpa", 1, heads=1, seq=128, head_dim=16, causal=True)
    assert full["flops"] == 4 * 128 * 128 * 16
    assert causal["flops"] == 4 * (128 * 129 / 2) * 16  # the diagonal is computed too
    assert math.isclose(causal["flops"] / full["flops"], 129 / 256)


def test_every_shipped_factory_builds_its_modules_on_its_device():
    """Each factory runs with its device as torch's default (models.on_device), so a GPU's
    modules are never initialised on the CPU first (0.8 s a build for the MLP)."""
    import experiments.models as models

    factories = {name: f for mod in (models, modules) for name, f in vars(mod).items()
                 if name.startswith("make_") and callable(f)}
    assert len(factories) >= 20
    unwrapped = [name for name, f in factories.items()
                 if getattr(f, "__wrapped__", None) is None]
    assert not unwrapped, unwrapped

    @models.on_device
    def make_probe(batch, dtype, device, generator):
        return torch.nn.Linear(2, 2).weight.device, torch.empty(1).device

    assert make_probe(1, torch.float32, "meta", None) == (torch.device("meta"),) * 2
    assert make_probe(1, torch.float32, "cpu", None) == (torch.device("cpu"),) * 2
