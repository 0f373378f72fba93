"""The held-out generator (experiments/models/heldout.py): seeded, every kind, in range, within
budget, never a calibration point, and each draw builds a module that runs."""

import pytest
import torch

from experiments.models import heldout


def test_a_seed_draws_the_same_specs_and_another_seed_others():
    a, b = heldout.draw(7, 13, "cpu"), heldout.draw(7, 13, "cpu")
    assert a == b
    assert heldout.draw(8, 13, "cpu") != a
    assert heldout.draw(7, 13, "cuda") != a  # each device kind its own stream


@pytest.mark.parametrize("kind", ["cpu", "cuda"])
def test_every_kind_is_drawn_in_range_and_within_budget(kind):
    specs = heldout.draw(3, 2 * len(heldout.KINDS), kind)
    assert {s["kind"] for s in specs} == set(heldout.KINDS)
    flops_cap, bytes_cap = heldout.BUDGET[kind]
    for s in specs:
        assert heldout.BATCHES[0] <= s["batch"] <= heldout.BATCHES[1]
        flops, nbytes = heldout.estimate(s)
        assert 0 < flops <= flops_cap and 0 < nbytes <= bytes_cap, s
        widths = [s[k] for k in ("d_in", "d_out", "c_in", "width", "d", "dim") if k in s]
        if "heads" in s:
            widths.append(s["heads"] * s["head_dim"])
        assert widths and all(32 <= w <= heldout.WIDTHS[1] for w in widths), s
        assert all(w >= heldout.WIDTHS[0] for w in widths if "heads" not in s), s


def test_a_calibration_point_is_never_drawn():
    first = heldout.draw(11, 26, "cpu")
    again = heldout.draw(11, 26, "cpu", calibration=first[:5])
    assert not any(s in first[:5] for s in again)
    assert again[5:] != [] and again != first


def test_calibration_specs_are_the_op_rates_points():
    cal = heldout.calibration_specs("cuda", {"conv2d": [2, 16], "gelu": [4], "max_pool2d": [4]})
    assert {(c["kind"], c["batch"]) for c in cal} == {("conv2d", 2), ("conv2d", 16), ("gelu", 4)}
    conv = next(c for c in cal if c["kind"] == "conv2d")
    assert (conv["c_in"], conv["size"], conv["kernel"]) == (256, 56, 3)  # make_conv2d's own


def test_bad_input_names_what_is_wrong():
    with pytest.raises(heldout.DrawError, match="device kind 'tpu'"):
        heldout.draw(1, 3, "tpu")
    with pytest.raises(heldout.DrawError, match="count=0"):
        heldout.draw(1, 0, "cpu")
    with pytest.raises(heldout.DrawError, match="unknown kind 'pool'"):
        heldout.make_heldout(1, torch.float32, "cpu", torch.Generator(), kind="pool")


def test_each_kind_builds_and_runs_on_the_cpu():
    gen = torch.Generator().manual_seed(0)
    small = {"cpu": (1e8, 16e6)}
    old, heldout.BUDGET = heldout.BUDGET, heldout.BUDGET | small  # small draws: a fast test
    try:
        specs = heldout.draw(5, len(heldout.KINDS), "cpu")
    finally:
        heldout.BUDGET = old
    for s in specs:
        sizes = {k: v for k, v in s.items() if k != "batch"}
        fn, args = heldout.make_heldout(s["batch"], torch.float32, "cpu", gen, **sizes)
        with torch.no_grad():
            out = fn(*args)
        assert out.shape[0] == s["batch"] and torch.isfinite(out).all(), heldout.name(s)
        assert heldout.name(s).startswith(f"{s['kind']}-b{s['batch']}-")


def test_a_calibration_shape_of_sdpa_is_a_spec_never_drawn():
    shapes = [("sdpa", {"heads": 3, "seq": 100, "head_dim": 64, "causal": False}),
              ("conv2d", {"c_in": 100, "c_out": 100, "size": 12})]
    cal = heldout.calibration_specs("cpu", {"sdpa": [2, 8]}, shapes)
    assert {"kind": "sdpa", "heads": 3, "head_dim": 64, "seq": 100, "causal": False,
            "batch": 8} in cal and len(cal) == 4  # the factory's own two, the shape's two


def test_validate_calibrates_only_the_drawn_classes_off_the_draws_grid():
    from experiments.cli import validate
    from experiments.op_rates import parse_shape

    shapes = validate.sweep_config()["validate"]["calibrate"]["cpu"]
    specs = [{"kind": "mha"}, {"kind": "lstm"}, {"kind": "conv2d"}]
    chosen = validate.calibrating(specs, shapes)
    # no strided copy: a CPU's copies follow their threads, not op rates (analysis/cpuops.py)
    assert chosen and {parse_shape(t)[0] for t in chosen} == {"sdpa", "mha", "conv2d", "gelu"}
    # channels and widths no draw takes (multiples of 32 from 128): convolutions, norms, GELU
    # (the attention layers' widths are heads x head dimension)
    for name, kw in map(parse_shape, shapes):
        if name not in ("sdpa", "mha", "encoder_layer"):
            sizes = [v for k, v in kw.items() if k in ("c", "c_in", "c_out", "d", "hidden",
                                                       "seq")]
            assert not any(v >= 128 and v % 32 == 0 for v in sizes), (name, kw)


def test_validate_s_gpu_shapes_cover_the_drawn_classes_off_the_grid_at_their_own_batches():
    from experiments.cli import validate
    from experiments.op_rates import parse_shape

    shapes = validate.sweep_config()["validate"]["calibrate"]["cuda"]
    chosen = validate.calibrating([{"kind": "encoder_layer"}, {"kind": "linear"}], shapes)
    assert {parse_shape(t)[0] for t in chosen} == {"sdpa", "encoder_layer", "layer_norm",
                                                    "permute_copy", "add"}
    parsed = list(map(parse_shape, shapes))
    assert all("batch" in kw for _, kw in parsed)  # each timed at its own batch alone
    for name, kw in parsed:  # the attention layers' widths are heads x head dimension
        if name not in ("sdpa", "mha", "encoder_layer"):  # one size off the grid: no draw
            sizes = [v for k, v in kw.items() if k in ("c", "c_in", "c_out", "d", "hidden",
                                                       "width")]
            assert not all(v >= 128 and v % 32 == 0 for v in sizes), (name, kw)
    # an sdpa shape at its own batch is a spec the generator never draws
    cal = heldout.calibration_specs("cuda", {}, [p for p in parsed if p[0] == "sdpa"])
    assert {"kind": "sdpa", "heads": 3, "head_dim": 32, "seq": 10, "causal": False,
            "batch": 1} in cal and len(cal) == sum(p[0] == "sdpa" for p in parsed)
