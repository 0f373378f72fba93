"""Workloads on the roofline, from synthetic rows: placements, knees, model error."""

import math

import numpy as np
import pandas as pd
import pytest

from experiments.analysis import workloads

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
