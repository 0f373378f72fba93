"""The op_rates experiment (experiments/op_rates.py) and the op model reading it: rows counted as
the placement counter counts the op, the class of an op from its shapes, the curve interpolated
and clamped within its reach, never read at the judged op's own shapes, and the model using it
for its class and falling back to the roofs without it."""

import json
import math

import numpy as np
import pandas as pd
import pytest
import torch

from experiments import op_rates
from experiments.analysis import placements, prediction, shape_rates, sweeps
from experiments.analysis.dataset import from_rows
from experiments.placement import counting, opclass

from tests.unit.analysis.test_prediction import DRAM, P, SYS, ceilings, roofs

TINY = ["experiment.modules=[conv2d,layer_norm,embedding_bag,rms_norm,add,permute_copy]",
        "experiment.conv2d=[1,2]", "experiment.layer_norm=[2]", "experiment.embedding_bag=[3]",
        "experiment.rms_norm=[2]", "experiment.add=[2]", "experiment.permute_copy=[2]",
        "experiment.max_call_s=10", "experiment.floor_ops=[]", "experiment.gemm_sides=[]"]


def test_rows_carry_the_work_the_placement_counter_counts(run_experiment):
    rows = run_experiment("op_rates", "float32", TINY)
    assert list(rows.batch) == [1, 2, 2, 3, 2, 2, 2]
    for r in rows.itertuples():
        p = json.loads(r.params)
        name = p["module"]
        if name == "rms_norm" and r.status != "ok":  # decomposed on this CPU: several ops
            assert r.status == "not_applicable" and "no one op's rate" in r.message
            continue
        assert r.status == "ok", r.message
        fn, args = op_rates.MODULES[name](r.batch, torch.float32, "cpu", torch.Generator())
        with counting.precision("float32"):
            counted = counting.count(fn, args)
        top = max(counted["ops"], key=lambda o: o[4])
        assert (r.op, p["input_shapes"], r.flops, r.bytes) == (top[0], top[1], top[3], top[4])
        assert r.working_set_bytes == int(top[4]) and p["cold_bytes"] == top[5]
        assert p["call_flops"] == counted["flops"] and p["call_bytes"] == counted["bytes"]
        assert r.time_s > 0 and r.flop_per_s == pytest.approx(r.flops / r.time_s)
        assert r.byte_per_s == pytest.approx(r.bytes / r.time_s) and r.check_passed
        assert p["class"] == opclass.op_class(r.op, p["input_shapes"])[0]
    ok = rows[rows.status == "ok"]
    assert ok[ok.op == "aten::convolution"].variant.tolist() == ["conv2d", "conv2d"]
    assert {"aten::add", "aten::clone"} <= set(ok.op)  # the add, the permuted view's copy
    assert ok[ok.op == "aten::_embedding_bag"].params.map(
        lambda s: json.loads(s)["other_ops"]).tolist() == [["aten::arange"]]


def test_a_dtype_the_modules_cannot_run_is_a_row_saying_so(run_experiment):
    rows = run_experiment("op_rates", "float8_e4m3", ["experiment.modules=[gelu]",
                                                      "experiment.gelu=[1]"])
    assert rows.status.tolist() == ["unsupported"] and "plain dtypes" in rows.message[0]
    assert rows.op.tolist() == ["gelu"]


def test_a_call_without_a_dominant_classed_op_is_not_applicable():
    ops = [["aten::pow", "[[2, 8]]", 1, 16.0, 128.0, 64.0, "vector", "formula", 0.0],
           ["aten::mul", "[[2, 8]]", 1, 16.0, 128.0, 0.0, "vector", "formula", 0.0]]
    with pytest.raises(op_rates.NotApplicable, match="no one op's rate"):
        op_rates.dominant(ops)
    with pytest.raises(op_rates.NotApplicable, match="no op-rate class"):
        op_rates.dominant(ops[:1])
    gelu = ["aten::gelu", "[[2, 8]]", 1, 16.0, 128.0, 64.0, "vector", "formula", 0.0]
    assert op_rates.dominant([gelu])["class"] == "aten::gelu"


@pytest.mark.parametrize("op, shapes, want", [
    ("aten::convolution", "[[4, 512, 4096], [512, 512, 3], [512]]", "aten::convolution/conv1d"),
    ("aten::convolution", "[[8, 256, 56, 56], [256, 256, 3, 3], [256]]",
     "aten::convolution/conv2d"),
    ("aten::convolution", "[[2, 64, 16, 32, 32], [64, 64, 3, 3, 3], [64]]",
     "aten::convolution/conv3d"),
    ("aten::convolution", "[[4, 128, 64, 64], [128, 64, 4, 4], [64]]",
     "aten::convolution/conv_transpose2d"),
    # c_in == c_out: the shapes read as a plain convolution's, the counter's name says transposed
    ("aten::convolution", "[[4, 128, 64, 64], [128, 128, 4, 4], [128]]",
     "aten::convolution/conv2d"),
    ("aten::conv_transpose2d", "[[4, 128, 64, 64], [128, 128, 4, 4], [128]]",
     "aten::convolution/conv_transpose2d"),
    ("aten::_scaled_dot_product_cudnn_attention",
     "[[4, 16, 1024, 64], [4, 16, 1024, 64], [4, 16, 1024, 64]]",
     "aten::_scaled_dot_product_cudnn_attention/hd64"),
    ("aten::_scaled_dot_product_cudnn_attention",  # a decode step: its cache, no class
     "[[8, 32, 1, 128], [8, 32, 4096, 128], [8, 32, 4096, 128]]", None),
    ("aten::native_group_norm", "[[8, 256, 56, 56], [256], [256]]", "aten::native_group_norm"),
    ("aten::_native_multi_head_attention", "[[8, 50, 640], [8, 50, 640], [8, 50, 640]]",
     "aten::_native_multi_head_attention"),
    ("aten::addmm", "[[4096], [64, 4096], [4096, 4096]]", None)])
def test_an_op_s_class_from_its_shapes(op, shapes, want):
    found = opclass.op_class(op, shapes)
    assert (found[0] if found else None) == want
    if found:
        assert found[1] == opclass.term_of(found[0]) == (
            opclass.MEMORY if "norm" in op else opclass.COMPUTE)


@pytest.mark.parametrize("op, shapes, want", [
    ("aten::_softmax", "[[2, 16, 1024, 1024], [], []]", None),  # a warp a row
    ("aten::_softmax", "[[18, 1, 1920], [], []]", "aten::_softmax/wide"),  # a block a row
    ("aten::convolution", "[[2, 300, 10, 10], [300, 1, 3, 3], [300]]",
     "aten::convolution/conv2d/depthwise"),
    ("aten::convolution", "[[2, 300, 10, 10], [300, 300, 3, 3], [300]]", None),
    ("aten::gelu", "[[4, 4096]]", None)])
def test_a_narrower_class_where_torch_runs_another_kernel(op, shapes, want):
    assert opclass.fine_key(op, shapes) == want
    if want:
        assert opclass.term_of(want) == opclass.MEMORY


S1, S2 = [[1, 64, 8, 8], [64, 64, 3, 3], [64]], [[4, 64, 8, 8], [64, 64, 3, 3], [64]]
KEY = "aten::convolution/conv2d"


def test_the_curve_interpolates_log_log_clamps_within_reach_and_skips_the_judged_shapes():
    r = {"op_rates": {KEY: [(1e9, 1e13, S1), (1e11, 3e13, S2), (1e11, 5e13, S2)]}}
    other = [[2, 64, 8, 8], [64, 64, 3, 3], [64]]
    # log rate linear in log x, half way: the geometric mean (the median of 3e13 and 5e13: 4e13)
    assert sweeps.op_rate(r, KEY, 1e10, other) == pytest.approx(math.sqrt(1e13 * 4e13))
    # below the curve: the first segment's slope in log time (rate x4 over x100: 1 - 0.301)
    slope = 1 - math.log(4) / math.log(100)
    assert sweeps.op_rate(r, KEY, 1e9 / 3, other) == pytest.approx(
        1e9 / 3 / (1e9 / 1e13 * (1 / 3) ** slope))
    assert sweeps.op_rate(r, KEY, 1e9 / 5, other) is None  # past REACH: no calibration speaks
    assert sweeps.op_rate(r, KEY, 3e11, other) == pytest.approx(4e13)
    # the judged op's own shapes are never read: S2's points drop out, S1's stands alone
    assert sweeps.op_rate(r, KEY, 2e9, str(S2)) == pytest.approx(1e13)
    assert sweeps.op_rate({"op_rates": {KEY: [(1e9, 1e13, S1)]}}, KEY, 1e9, S1) is None
    assert sweeps.op_rate(r, KEY, 1e10, "not shapes") is None  # unknown shapes: nothing read


def test_a_convolution_of_four_or_more_sizes_reads_one_power_law_not_its_neighbours():
    """Rates on rate = 1e9 x^0.3 but for one size whose algorithm ran 4x slower: the piecewise
    curve would give a call near that size its rate; the power law over all sizes barely moves,
    never passes the best rate measured, and a class of three sizes still interpolates."""
    law = lambda x: 1e9 * x ** 0.3  # noqa: E731
    xs = [1e8, 1e9, 1e10, 1e11, 1e12]
    pts = [(x, law(x) / (4 if x == 1e10 else 1), S1) for x in xs]
    r = {"op_rates": {KEY: pts}}
    other = [[2, 64, 8, 8], [64, 64, 3, 3], [64]]
    near = sweeps.op_rate(r, KEY, 1.2e10, other)
    assert 0.6 * law(1.2e10) < near < law(1.2e10)  # the outlier pulls the fit a little
    assert sweeps.op_rate(r, KEY, 3e12, other) <= max(y for _, y, _ in pts)
    few = {"op_rates": {KEY: pts[1:4]}}  # three sizes: interpolated, the outlier read as is
    assert sweeps.op_rate(few, KEY, 1e10, other) == pytest.approx(law(1e10) / 4)
    # a memory class (depthwise) keeps its curve whatever its sizes
    dw = "aten::convolution/conv2d/depthwise"
    assert sweeps.op_rate({"op_rates": {dw: pts}}, dw, 1e10, other) == pytest.approx(
        law(1e10) / 4)


def _op_rate_rows(host="lab-rates", dtype="bfloat16"):
    """Calibration rows as the experiment writes them, under another host than the placement."""
    base = {"experiment": "op_rates", "host": host, "device": "cuda:0", "device_kind": "cuda",
            "device_name": "G", "dtype": dtype, "status": "ok", "op": "aten::convolution",
            "variant": "conv2d"}
    return [base | {"batch": b, "flops": f, "bytes": 1e6, "working_set_bytes": 1e6,
                    "time_s": f / rate, "params": {"input_shapes": str(s), "module": "conv2d"}}
            for b, f, rate, s in ((1, 1e9, 1e13, S1), (4, 4e9, 2e13, S2))] + [
        base | {"op": "aten::native_group_norm", "variant": None, "batch": b, "flops": 0.0,
                "bytes": ws, "working_set_bytes": ws, "time_s": ws / 1e11,
                "params": {"input_shapes": f"[[{b}, 64, 8, 8], [64], [64]]"}}
        for b, ws in ((1, 1e6), (4, 4e6))]


def test_the_curves_come_from_the_system_or_its_device_model_in_that_dtype():
    rows = from_rows(_op_rate_rows() + _op_rate_rows(dtype="float32")).rows
    placed = from_rows([{"experiment": "workload", "host": "lab", "device": "cuda:0",
                         "device_kind": "cuda", "device_name": "G", "dtype": "bfloat16",
                         "status": "ok", "op": "x", "time_s": 1.0}]).rows
    rows = pd.concat([rows, placed], ignore_index=True)
    got = sweeps.curves(rows, {"G @ lab"}, "bfloat16")["op_rates"]
    assert sorted(got) == [KEY, "aten::native_group_norm"]
    flat = lambda key: [v for p in got[key] for v in p[:2]]  # noqa: E731
    assert flat(KEY) == pytest.approx([1e9, 1e13, 4e9, 2e13])
    assert flat("aten::native_group_norm") == pytest.approx([1e6, 1e11, 4e6, 1e11])
    assert got[KEY][0][2] == S1  # each point keeps its input shapes
    assert "op_rates" not in sweeps.curves(rows, {"G @ lab"}, "float16")
    other_model = rows.assign(device_name=rows.device_name.where(rows.host != "lab", "H"))
    assert "op_rates" not in sweeps.curves(other_model, {"G @ lab"}, "bfloat16")


def _with_rates():
    rows = from_rows(_op_rate_rows()).rows  # the placed rows' own system: G @ lab-rates
    return prediction.roofs(ceilings(), SYS, "bfloat16", True, rows, also=("G @ lab-rates",))


def test_the_model_reads_the_class_rate_and_falls_back_without_it():
    r, plain = _with_rates(), roofs()
    judged = "[[2, 64, 8, 8], [64, 64, 3, 3], [64]]"
    conv = prediction.predict_op(r, 2e9, 1e6, 1e6, "matrix", op="aten::convolution",
                                 shapes=judged)
    rate = math.sqrt(1e13 * 2e13)  # half way in log FLOPs: log-log
    assert conv["curve"] == KEY and conv["compute_s"] == pytest.approx(2e9 / rate)
    assert "op rates" in conv["note"] and conv["bound"] == "compute"
    without = prediction.predict_op(plain, 2e9, 1e6, 1e6, "matrix", op="aten::convolution",
                                    shapes=judged)
    assert without["curve"] == "" and without["compute_s"] == pytest.approx(2e9 / P)
    # at the shapes of a calibration point that point is not read: the other one is, clamped
    own = prediction.predict_op(r, 2e9, 1e6, 1e6, "matrix", op="aten::convolution",
                                shapes=str(S2))
    assert own["compute_s"] == pytest.approx(2e9 / 1e13)
    norm = prediction.predict_op(r, 1e6, 2e6, 2e6, "vector", op="aten::native_group_norm",
                                 shapes="[[2, 64, 8, 8], [64], [64]]")
    assert norm["curve"] == "aten::native_group_norm" and norm["bound"] == "memory"
    assert norm["memory_s"] == pytest.approx(2e6 / 1e11)
    norm = prediction.predict_op(plain, 1e6, 2e6, 2e6, "vector", op="aten::native_group_norm",
                                 shapes="[[2, 64, 8, 8], [64], [64]]")
    assert norm["curve"] == "" and norm["memory_s"] == pytest.approx(2e6 / DRAM)  # cold: DRAM
    assert prediction.failed_term(1.0, "compute", None, "aten::convolution", KEY).startswith(
        f"compute: the op ran slower than its class's op-rate curve {KEY}")
    assert "no convolution sweep" in prediction.failed_term(1.0, "compute", None,
                                                            "aten::convolution")


def test_the_placements_file_names_the_curve_a_call_read():
    ops = [["aten::convolution", "[[2, 64, 8, 8], [64, 64, 3, 3], [64]]", 1, 2e9, 1e6, 1e6,
            "matrix", "FlopCounterMode"]]
    call = {"experiment": "workload", "op": "conv", "dtype": "bfloat16", "status": "ok",
            "host": "lab", "device": "cuda:0", "device_kind": "cuda", "device_name": "G",
            "timer": "cuda_event_graph", "flops": 2e9, "bytes": 1e6, "batch": 2,
            "time_s": 1e-3, "params": {"ops": ops}}
    ds = from_rows([call] + _op_rate_rows())
    table = placements.placement_table(ds, ceilings().assign(system="G @ lab"))
    row = table[table.kind == "call"].iloc[0]
    assert row.predicted_from == f"sum over 1 ops (1 distinct); op rates: {KEY}"
    assert row.failed_term.startswith("compute: the op ran slower than its class's op-rate")
    alone = placements.placement_table(from_rows([call]), ceilings().assign(system="G @ lab"))
    # without the curve: the roofs, and the prediction says it lies outside calibration
    assert alone[alone.kind == "call"].predicted_from.tolist() == [
        f"sum over 1 ops (1 distinct); outside calibration: {KEY} not calibrated"]


def test_a_floor_op_is_timed_on_a_tiny_input_both_ways(run_experiment):
    rows = run_experiment("op_rates", "float32", ["experiment.modules=[gelu]",
                                                  "experiment.gelu=[1]",
                                                  "experiment.floor_ops=[aten::add,aten::clone,"
                                                  "aten::add/parallel]",
                                                  "experiment.gemm_sides=[1,4]",
                                                  "experiment.gemm_widths=[40]"])
    hot = rows[rows.variant == op_rates.GEMM_HOT]
    assert list(zip(hot.m, hot.n)) == [(1, 40), (4, 40)] and (hot.flop_per_s > 0).all()
    floor = rows[rows.variant == op_rates.FLOOR]
    assert floor.op.tolist() == ["aten::add", "aten::clone", "aten::add/parallel"]
    assert (floor.status == "ok").all()
    params = [json.loads(p) for p in floor.params]
    assert all(p["host_s"] > 0 and p["input_shapes"].startswith("[[8, 8]") for p in params[:2])
    assert params[2]["input_shapes"] == "[[65536], [65536]]"  # twice torch's parallel grain
    assert (floor.time_s > 0).all() and set(floor.timer) == {"torch_profiler"}
    # floor rows are no class's rates
    rates = sweeps.op_rate_points(rows.assign(system=SYS), rows.assign(system=SYS), {SYS},
                                  "float32")
    assert set(rates) <= {"aten::gelu"}


def test_an_unknown_floor_op_is_refused():
    from experiments import experiment_config
    from experiments.core.config import ConfigError

    with pytest.raises(ConfigError, match="floor_ops"):
        experiment_config("op_rates", floor_ops=["aten::frobnicate"])


def test_below_its_curve_a_call_s_time_follows_the_first_segment_and_a_gpu_gemm_its_floor():
    flat = [[1, 8]]  # a launch-bound class: 1e3 and 1e5 bytes both in 2 us
    r = {"op_rates": {KEY: [(1e3, 1e3 / 2e-6, flat), (1e5, 1e5 / 2e-6, flat)]}}
    assert 1e3 / 4 / sweeps.op_rate(r, KEY, 1e3 / 4, "[[2, 8]]") == pytest.approx(2e-6)
    # a streaming class (time ~ work): below its curve the time keeps falling with the work
    r = {"op_rates": {KEY: [(1e6, 1e12, flat), (1e7, 1e12, flat)]}}
    assert sweeps.op_rate(r, KEY, 5e5, "[[2, 8]]") == pytest.approx(1e12)
    # a rate that falls with size: the time falls no faster than the work (the end's rate)
    r = {"op_rates": {KEY: [(1e6, 2e12, flat), (1e7, 1e12, flat)]}}
    assert sweeps.op_rate(r, KEY, 5e5, "[[2, 8]]") == pytest.approx(2e12)
    # a rate that rises faster than the work: a smaller call takes no longer (time held flat)
    r = {"op_rates": {KEY: [(1e6, 1e12, flat), (1e7, 2e13, flat)]}}
    assert 5e5 / sweeps.op_rate(r, KEY, 5e5, "[[2, 8]]") == pytest.approx(1e-6)
    # a GEMM of no class on a GPU: at least the shortest GEMM the sweeps timed
    r = _with_rates()
    gemm = prediction.predict_op(r | {"gemm_floor": 3e-6}, 2e3, 1e3, 1e3, "matrix",
                                 op="aten::addmm", shapes="[[8], [1, 8], [8, 8]]")
    assert gemm["predicted_time_s"] == pytest.approx(3e-6) and gemm["bound"] == "latency"
    # a CPU's ops keep their own floors (analysis/cpuops.py)
    cpu = prediction.predict_op(r | {"cpu": True, "gemm_floor": 3e-6}, 2e3, 1e3, 1e3, "matrix",
                                op="aten::addmm", shapes="[[8], [1, 8], [8, 8]]")
    assert cpu["predicted_time_s"] < 3e-6


def test_a_gpu_op_pays_the_floor_for_each_kernel_the_profiler_saw_it_launch():
    r = _with_rates() | {"gemm_floor": 3e-6}
    floor = max(r["latency"], r.get("floor") or 0.0)
    one = dict(flops=2e3, nbytes=1e3, cold_bytes=1e3, kind="matrix", op="aten::addmm",
               shapes="[[8], [1, 8], [8, 8]]")
    # a split-K GEMM: the GEMM kernel at the shortest GEMM, its reduction at the kernel floor
    split = prediction.predict_op(r, **one, kernels=2)
    assert split["latency_s"] == pytest.approx(3e-6 + floor)
    assert prediction.predict_op(r, **one)["latency_s"] == pytest.approx(3e-6)
    # a pointwise op launching three kernels pays three floors
    three = prediction.predict_op(r, 0.0, 1e3, 1e3, "vector", op="aten::add",
                                  shapes="[[8], [8]]", kernels=3)
    assert three["latency_s"] == pytest.approx(3 * floor)
    # and a call's op carries the count in its tenth field
    call = prediction.predict_call(r, [["aten::addmm", "[[8], [1, 8], [8, 8]]", 1, 2e3, 1e3,
                                        1e3, "matrix", "formula", 0.0, 2]])
    assert call["latency_s"] == pytest.approx(3e-6 + floor)


def test_a_narrower_class_s_curve_is_read_where_it_reaches_the_op_else_the_class_s():
    narrow, wide = [[8, 1, 64, 512]], [[8, 1, 64, 4000]]
    r = _with_rates() | {"op_rates": {
        "aten::_softmax": [(1e4, 1e10, narrow), (1e6, 1e11, narrow)],
        "aten::_softmax/wide": [(1e8, 1e12, wide), (1e9, 1e12, wide)]}}
    big = prediction.predict_op(r, 0.0, 4e8, 4e8, op="aten::_softmax",
                                shapes="[[16, 1, 100, 2000], [], []]")
    assert big["curve"] == "aten::_softmax/wide"
    # a small wide softmax: the wide curve starts 4x past it, the class's reaches it
    small = prediction.predict_op(r, 0.0, 2e4, 2e4, op="aten::_softmax",
                                  shapes="[[1, 1, 5, 2000], [], []]")
    assert small["curve"] == "aten::_softmax" and not small["outside"]


def test_a_gpu_convolution_reads_the_efficiency_of_the_points_nearest_its_gemm_shape():
    """On a flat GEMM sweep (1e14 FLOP/s at every shape) thin, wide-channel points ran at a
    tenth of it (one at 0.3) and broad, narrow-channel ones at half: a call of the first kind
    reads near a tenth whatever its FLOPs, one of the second near half; a CPU keeps the power
    law."""
    flat = [(math.log(c), np.log([1.0, 1e6]), np.array([1e14, 1e14])) for c in (256, 4096)]
    wide = lambda b: [[b, 1024, 4, 4], [1024, 1024, 3, 3], [1024]]  # noqa: E731
    broad = lambda b: [[b, 32, 64, 64], [32, 32, 3, 3], [32]]  # noqa: E731
    flops_wide = lambda b: 2.0 * 16 * b * 1024 * 9216  # noqa: E731
    flops_broad = lambda b: 2.0 * 4096 * b * 32 * 288  # noqa: E731
    pts = [(flops_wide(b), 3e13 if b == 4 else 1e13, wide(b)) for b in (1, 4, 12)] + [
        (flops_broad(b), 5e13, broad(b)) for b in (8, 64)]
    r = {"shaped": flat, "op_rates": {KEY: pts}}
    assert opclass.conv_gemm(KEY, wide(2), flops_wide(2)) == (32, 1024, 9216)
    assert 1e13 < sweeps.op_rate(r, KEY, flops_wide(2), wide(2)) < 2e13
    assert 4.5e13 < sweeps.op_rate(r, KEY, flops_broad(32), broad(32)) <= 5e13
    # its own point (0.3) is never read: the other wide points speak for it
    assert sweeps.op_rate(r, KEY, flops_wide(4), wide(4)) < 1.2e13
    cpu = r | {"cpu": True}
    xs = sorted(x for x, _, _ in pts)
    assert sweeps.op_rate(cpu, KEY, flops_wide(2), wide(2)) == pytest.approx(
        shape_rates.power_law(xs, [y for x in xs for px, y, _ in pts if px == x], flops_wide(2)))


@pytest.mark.parametrize("key, shapes, flops, want", [
    # 2 x 8 x 8 output pixels, 3 x 3 x 16 in channels a group, 64 / 2 out channels a group
    ("aten::convolution/conv2d", [[2, 32, 8, 8], [64, 16, 3, 3], [64]],
     2.0 * 128 * 32 * 144 * 2, (128, 32, 144)),
    # transposed: 2 x 5 x 5 input pixels by 48 in channels, against 24 out x 4 x 4 a kernel
    ("aten::convolution/conv_transpose2d", [[2, 48, 5, 5], [48, 24, 4, 4], [24]],
     2.0 * 50 * 384 * 48, (50, 384, 48)),
    ("aten::_softmax", [[2, 8]], 1.0, None)])
def test_a_convolution_is_one_implicit_gemm_a_group(key, shapes, flops, want):
    assert opclass.conv_gemm(key, shapes, flops) == want


ATT = "aten::_scaled_dot_product_cudnn_attention/hd64"


def _attention(b, h, s, causal=False):
    """(FLOPs, shapes, seconds) of a fused attention on a law of launch, tiles and keys."""
    q = [b, h, s, 64]
    flops = 4.0 * b * h * s * s * 64 / (2 if causal else 1)
    tiles = b * h * math.ceil(s / 128)
    return flops, [q, q, q], 5e-6 + tiles * 2e-8 + tiles * s / (2 if causal else 1) * 1e-10


def test_a_gpu_attention_pays_its_query_tiles_not_only_its_flops():
    """Points on t = 5 us + 20 ns a query tile + 0.1 ns a tile and key: a call of many short
    heads (few FLOPs, many tiles) and a causal one read their law's time; the FLOP curve reads the
    short one far too fast. Fewer than three points, or a CPU, keep that curve."""
    pts = [(f, f / t, s) for f, s, t in (_attention(*a) for a in
                                         [(1, 4, 16), (8, 16, 1024), (2, 8, 256), (64, 64, 32)])]
    r = {"op_rates": {ATT: pts}}
    for call in [(40, 40, 30), (4, 8, 512, True), (2, 4, 2048)]:
        flops, shapes, t = _attention(*call)
        assert flops / sweeps.op_rate(r, ATT, flops, shapes) == pytest.approx(t, rel=0.01)
    flops, shapes, t = _attention(40, 40, 30)
    assert flops / sweeps.op_rate(r | {"cpu": True}, ATT, flops, shapes) < t / 2
    few = {"op_rates": {ATT: pts[:2]}}
    assert sweeps.op_rate(few, ATT, flops, shapes) == pytest.approx(
        sweeps.op_rate(few | {"cpu": True}, ATT, flops, shapes))
    assert shape_rates.attention_work([[2, 4, 300, 64]] * 3, 4.0 * 8 * 300 * 300 * 64) == (
        24, 24 * 300)
