"""The op_rates experiment's extra calibration shapes (`shapes`: the factories' keywords, the
--full preset's axes: channels, spatial size, sequence, head dimension, heads, causal, rows by
width, table rows and bag), each timed at its module's batches."""

import json

import pytest

from experiments import op_rates
from experiments.core.config import ConfigError


def test_a_shape_entry_is_a_module_and_its_keywords():
    assert op_rates.parse_shape("sdpa heads=4 seq=128 head_dim=32 causal=false") == (
        "sdpa", {"heads": 4, "seq": 128, "head_dim": 32, "causal": False})
    assert op_rates.parse_shape("gelu") == ("gelu", {})


@pytest.mark.parametrize("text, says", [("pool2d c=4", "module 'pool2d'"),
                                        ("conv2d c_in=4.5", "'c_in=4.5'"),
                                        ("conv2d c_in", "'c_in'")])
def test_a_bad_shape_entry_names_itself(text, says):
    with pytest.raises(ConfigError, match=says):
        op_rates.parse_shape(text)


def test_each_shape_is_timed_at_the_module_s_batches(run_experiment):
    rows = run_experiment("op_rates", "float32", [
        "experiment.modules=[conv2d,gelu]", "experiment.conv2d=[1,2]", "experiment.gelu=[2]",
        "experiment.max_call_s=10", "experiment.floor_ops=[]", "experiment.gemm_sides=[]",
        'experiment.shapes=["conv2d c_in=8 c_out=24 size=12","gelu seq=4 hidden=64"]'])
    kwargs = [json.loads(p)["kwargs"] for p in rows.params]
    conv8 = {"c_in": 8, "c_out": 24, "size": 12}
    assert list(zip(rows.batch, kwargs)) == [(1, {}), (2, {}), (1, conv8), (2, conv8), (2, {}),
                                             (2, {"seq": 4, "hidden": 64})]
    assert (rows.status == "ok").all(), rows.message.tolist()
    conv = rows[rows.op == "aten::convolution"]
    shapes = [json.loads(p)["input_shapes"] for p in conv.params]
    assert "[2, 8, 12, 12], [24, 8, 3, 3]" in shapes[3] and "[2, 16, 16, 16]" in shapes[1]
    assert conv.flops.iloc[3] == pytest.approx(2 * 2 * 24 * 12 * 12 * 8 * 9, rel=0.01)


def test_the_full_preset_s_and_validate_s_shapes_build_with_their_factories():
    import torch
    import yaml

    from experiments.core.paths import config_dir

    full = yaml.safe_load((config_dir() / "presets" / "full.yaml").read_text())
    given = full["experiments"]["op_rates"]
    entries = [t for kind in ("cpu", "cuda") for t in given[kind]["shapes"]]
    calibrate = yaml.safe_load((config_dir() / "config.yaml").read_text())["validate"]
    entries += [t for kind in ("cpu", "cuda") for t in calibrate["calibrate"][kind]]
    assert len(entries) > 100
    for text in entries:
        name, kwargs = op_rates.parse_shape(text)
        # every keyword its factory's, at small sizes (each int 2): a wrong key raises TypeError
        small = {k: v if isinstance(v, bool) else 2 for k, v in kwargs.items() if k != "batch"}
        fn, args = op_rates.MODULES[name](1, torch.float32, "cpu", torch.Generator(), **small)
        assert callable(fn) and args, text


def test_without_own_sizes_only_the_shapes_are_timed():
    from experiments import experiment_config

    cfg = experiment_config("op_rates", modules=["conv2d"], own_sizes=False,
                            shapes=["conv2d c_in=8 c_out=24 size=12"])
    assert op_rates.shapes_of(cfg, "conv2d") == [{"c_in": 8, "c_out": 24, "size": 12}]
    assert op_rates.shapes_of(cfg.__class__(**{**cfg.__dict__, "own_sizes": True}),
                              "conv2d")[0] == {}


def test_a_shape_s_own_batch_is_the_only_batch_it_is_timed_at():
    from experiments import experiment_config

    cfg = experiment_config("op_rates", modules=["gelu"], own_sizes=False, gelu=[2, 8],
                            shapes=["gelu seq=3 hidden=150 batch=5", "gelu seq=4 hidden=100"])
    got = [(p.row["batch"], p.args["kwargs"]) for p in op_rates.points(cfg, _cuda_ctx())]
    assert got == [(5, {"seq": 3, "hidden": 150}), (2, {"seq": 4, "hidden": 100}),
                   (8, {"seq": 4, "hidden": 100})]


def _cuda_ctx():
    import types

    import torch

    return types.SimpleNamespace(device=torch.device("cuda", 0), dtype="bfloat16")
