"""Workloads on the roofline, from synthetic rows: placements, knees, model error."""

import math

import numpy as np
import pandas as pd
import pytest

from experiments.analysis import placements as workloads

SYS = "GPU @ lab"
B, P, LAT = 1e12, 1e14, 5e-6  # bytes/s, FLOP/s, s


def ceilings(system=SYS):
    rows = [("dram_bw", None, B), ("matrix_flops", "bfloat16", P), ("latency_graph", None, LAT),
            ("latency_eager", None, 2 * LAT)]
    return pd.DataFrame([{"system": system, "ceiling": c, "dtype": d, "value": v, "ci_low": v,
                          "ci_high": v, "capacity_bytes": None} for c, d, v in rows])


def rows(name, batches, flops_per_b, weight_bytes, bytes_per_b, time_fn, timer="cuda_event_graph"):
    out = []
    for b in batches:
        f, n = flops_per_b * b, weight_bytes + bytes_per_b * b
        out.append({"experiment": "workload", "op": name, "dtype": "bfloat16", "batch": b,
                    "flops": f, "bytes": n, "time_s": time_fn(b, f, n), "timer": timer,
                    "status": "ok", "system": SYS})
    return pd.DataFrame(out)


def roofline_time(b, f, n):
    return max(LAT, n / B, f / P)


BATCHES = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]


def test_placements_on_the_roofline():
    ds = pd.concat([rows("mlp", [1, 4096], 2e8, 1e8, 4e3, roofline_time),
                    rows("slow", [1], 2e6, 1e8, 4e3, lambda b, f, n: 2 * n / B, "cuda_event"),
                    rows("tiny", [1], 1e3, 1e3, 0, roofline_time)])
    ds = pd.concat([ds, ds.iloc[:1].assign(status="error", time_s=np.nan)])  # not placed
    p = workloads.placements(ds, ceilings()).set_index(["workload", "batch"])
    assert len(p) == 4
    small, big = p.loc[("mlp", 1)], p.loc[("mlp", 4096)]
    assert small.bound == "memory" and small.model_error == pytest.approx(0)
    assert small.fraction_of_roof == pytest.approx(1)  # it runs at B x I, its roof
    assert small.roof_flop_per_s == pytest.approx(B * small.intensity)
    assert big.bound == "compute" and big.roof_flop_per_s == pytest.approx(P)
    assert big.attained_flop_per_s == pytest.approx(P)
    slow = p.loc[("slow", 1)]
    assert slow.model_error == pytest.approx(1) and slow.fraction_of_roof == pytest.approx(0.5)
    tiny = p.loc[("tiny", 1)]
    assert tiny.bound == "latency" and tiny.predicted_time_s == LAT
    # eager-timed rows are predicted with the eager latency floor
    eager = workloads.place_row(ds[ds.op == "tiny"].iloc[0].to_dict() | {"timer": "cuda_event"},
                                ceilings(), SYS)
    assert eager["predicted_time_s"] == 2 * LAT
    # a system without fitted ceilings is left out, not placed on another's
    assert workloads.placements(ds.assign(system="other"), ceilings()).empty


def test_knee_predicted_right_and_wrong():
    # weights 1e9 B, 4e9 FLOPs and 1e4 B per sequence: knee (1e9/B) / (4e9/P - 1e4/B) = 25
    right = rows("mlp", BATCHES, 4e9, 1e9, 1e4, roofline_time)
    # kernels that turn compute-bound 8x too early (a slow GEMM: 8x below P)
    wrong = rows("conv", BATCHES, 4e9, 1e9, 1e4, lambda b, f, n: max(n / B, 8 * f / P))
    few = rows("few", [1, 2], 4e9, 1e9, 1e4, roofline_time)  # < 3 batches: no knee
    k = workloads.knees(pd.concat([right, wrong, few]), ceilings()).set_index("workload")
    assert set(k.index) == {"mlp", "conv"}
    assert k.loc["mlp", "predicted"] == pytest.approx(1e-3 / (4e9 / P - 1e4 / B))
    assert k.loc["mlp", "measured"] == pytest.approx(k.loc["mlp", "predicted"], rel=0.1)
    assert k.loc["mlp", "agrees"]
    assert k.loc["conv", "predicted"] == pytest.approx(k.loc["mlp", "predicted"])
    assert k.loc["conv", "measured"] < k.loc["conv", "predicted"] / 4
    assert not k.loc["conv", "agrees"]


def test_knee_never_compute_bound_and_missing_ceiling():
    # attention in decode: bytes grow with the batch faster than FLOPs catch up
    att = rows("attn", BATCHES, 4e6, 1e3, 1e6, roofline_time)
    k = workloads.knees(att, ceilings()).iloc[0]
    assert math.isinf(k.predicted) and "never compute-bound" in k.predicted_note
    assert math.isnan(k.ratio) and k.agrees is None
    no_p = ceilings()[lambda c: c.ceiling != "matrix_flops"]
    k = workloads.knees(rows("mlp", BATCHES, 4e9, 1e9, 1e4, roofline_time), no_p).iloc[0]
    assert math.isnan(k.predicted) and "bfloat16 compute" in k.predicted_note


def test_model_error_summary():
    p = pd.DataFrame({"system": ["a"] * 10 + ["b"] * 2,
                      "model_error": [0.1, -0.1, 0.2, -0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 1.0]
                      + [0.0, np.nan]})
    s = workloads.model_error_summary(p).set_index("system")
    assert s.loc["a", "rows"] == 10 and s.loc["a", "median_abs_error"] == pytest.approx(0.35)
    assert s.loc["a", "p90_abs_error"] == pytest.approx(np.quantile(
        [0.1, 0.1, 0.2, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 1.0], 0.9))
    assert s.loc["b", "rows"] == 1 and s.loc["b", "median_abs_error"] == 0


def _op_rows():
    """An MLP step at batch 64 as its aten ops: a GEMM measured at the DRAM roof, and a GELU
    whose kernel ncu saw move 3x its compulsory bytes (say, a spill)."""
    gemm = {"aten_op": "aten::addmm", "input_shapes": "[[64, 1024]]", "bytes_source": "ncu",
            "dram_bytes": 2.1e6, "l2_bytes": 4e6, "l1_bytes": 8e6}
    gelu = {"aten_op": "aten::gelu", "input_shapes": "[[64, 4096]]", "bytes_source": "ncu",
            "dram_bytes": 3 * 1e6, "l2_bytes": 3e6, "l1_bytes": 3e6}
    out = []
    for params, flops, nbytes, t in ((gemm, 1.3e8, 2e6, 2e6 / B), (gelu, 0.0, 1e6, 3e6 / B)):
        out.append({"experiment": "workload", "op": "mlp", "variant": "aten_op", "dtype": "bfloat16",
                    "batch": 64, "flops": flops, "bytes": nbytes, "time_s": t,
                    "timer": "torch_profiler", "status": "ok", "system": SYS, "params": params})
    return pd.DataFrame(out)


def test_ops_are_placed_apart_from_whole_calls_with_their_measured_traffic():
    whole = rows("mlp", [64], 1.3e8 / 64, 0, 3e6 / 64, lambda b, f, n: 5e6 / B)
    ds = pd.concat([whole.assign(variant=None), _op_rows()], ignore_index=True)
    placed = workloads.placements(ds, ceilings())
    assert len(placed) == 1  # the ops are not whole calls
    ops = workloads.op_placements(ds, ceilings()).set_index("aten_op")
    assert list(ops.index) == ["aten::gelu", "aten::addmm"]  # the slowest first
    assert ops.share_of_call.sum() == pytest.approx(1)
    gelu = ops.loc["aten::gelu"]
    # counted bytes put it at a third of its roof; the bytes ncu measured explain the time
    assert gelu.fraction_of_roof != gelu.fraction_of_roof or gelu.bound == "memory"
    assert gelu.predicted_time_s == pytest.approx(max(LAT, 1e6 / B))  # the graph floor
    assert gelu.measured_bound == "DRAM" and ops.loc["aten::addmm"].measured_bound == "DRAM"
    calls = workloads.call_from_ops(workloads.op_placements(ds, ceilings()), placed)
    c = calls.iloc[0]
    assert c.ops == 2 and c.ops_time_s == pytest.approx(5e6 / B)
    predicted = max(LAT, 2e6 / B, 1.3e8 / P) + max(LAT, 1e6 / B)
    assert c.ops_predicted_time_s == pytest.approx(predicted)
    assert c.model_error == pytest.approx(5e6 / B / predicted - 1)


def test_measured_bound_names_the_level_whose_traffic_takes_longest():
    c = pd.concat([ceilings(), pd.DataFrame([
        {"system": SYS, "ceiling": "l2_bw", "dtype": None, "value": 4 * B},
        {"system": SYS, "ceiling": "l1_bw", "dtype": None, "value": 20 * B}])])
    # little DRAM traffic but 100x as much through L1: L1 bounds it
    levels = {"dram_bytes": 1e6, "l2_bytes": 2e6, "l1_bytes": 1e8}
    assert workloads.measured_bound(c, SYS, "bfloat16", 0.0, levels) == "L1"
    assert workloads.measured_bound(c, SYS, "bfloat16", 1e12, levels) == "compute"
    # nothing measured: no verdict from counted bytes
    assert workloads.measured_bound(c, SYS, "bfloat16", 1e12, {}) is None


def test_a_system_without_ceilings_is_placed_on_its_device_models_roofline():
    c = ceilings().assign(device_name="GPU X")
    ds = pd.concat([rows("mlp", [64], 2e6, 1e8, 4e3, roofline_time).assign(device_name="GPU X"),
                    rows("mlp", [64], 2e6, 1e8, 4e3, roofline_time).assign(
                        system="GPU X @ ncu-run", device_name="GPU X"),
                    rows("mlp", [64], 2e6, 1e8, 4e3, roofline_time).assign(
                        system="GPU Y @ other", device_name="GPU Y")])
    p = workloads.placements(ds, c).set_index("system")
    assert set(p.index) == {SYS, "GPU X @ ncu-run"}  # GPU Y has no roofline of its model
    assert p.loc["GPU X @ ncu-run", "roofline_of"] == SYS
    assert p.loc["GPU X @ ncu-run", "model_error"] == pytest.approx(0)
