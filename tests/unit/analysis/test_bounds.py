"""No physically impossible number (experiments/analysis/bounds.py, placements): a gather's table
counts the rows it reads, and a call's bandwidth above DRAM is named by a cache level or flagged;
small ops get the shortest measured kernel as a floor; a prediction outside calibration says so."""

import pandas as pd
import pytest
import torch

from experiments.analysis import bounds, placements, prediction, sweeps
from experiments.analysis.dataset import from_rows
from experiments.models import modules
from experiments.placement import counting

SYS = "G @ lab"
DRAM, L2, WINDOW = 1e12, 4e12, 50e6


def ceilings():
    rows = [("dram_bw", None, DRAM, None), ("l2_bw", None, L2, WINDOW),
            ("matrix_flops", "bfloat16", 1e14, None), ("vector_flops", "bfloat16", 1e13, None),
            ("latency_graph", None, 2e-6, None)]
    return pd.DataFrame([{"system": SYS, "ceiling": c, "dtype": d, "value": v, "ci_low": v,
                          "ci_high": v, "ws_max": w, "capacity_bytes": w, "device_name": "G"}
                         for c, d, v, w in rows])


def test_an_embedding_bag_call_counts_the_rows_it_reads_not_its_table():
    gen = torch.Generator().manual_seed(0)
    fn, args = modules.make_embedding_bag(4, torch.float32, "cpu", gen, rows=4096, d=64, bag=8)
    with torch.no_grad():
        c = counting.count(fn, args)
    rows_read = 4 * 8 * 64 * 4
    assert c["param_bytes"] == rows_read  # not the 4096 x 64 table (1 MB)
    assert c["bytes"] < 4096 * 64 * 4 and c["gathered_tables"] == 1


def _bag_call(nbytes, time_s, marked=False):
    table, ids = [1 << 20, 128], [64, 32]
    ops = [["aten::_embedding_bag", str([table, ids]), 1, 2.6e5, 2.2e6, 2.2e6, "vector",
            "formula"]]
    params = {"ops": ops} | ({"gathered_tables": 1} if marked else {})
    return {"experiment": "workload", "op": "bag", "dtype": "bfloat16", "status": "ok",
            "host": "lab", "device": "cuda:0", "device_kind": "cuda", "device_name": "G",
            "timer": "cuda_event_graph", "flops": 2.6e5, "bytes": nbytes, "batch": 64,
            "time_s": time_s, "params": params}


def test_an_old_row_that_counted_the_whole_table_is_recomputed_below_dram():
    table_bytes = (1 << 20) * 128 * 2
    row = _bag_call(table_bytes + 3e5, 20e-6)  # as measured before the fix: 13 TB/s "attained"
    fixed, recomputed = bounds.compulsory_bytes(row["bytes"], row["params"], "bfloat16")
    assert recomputed and fixed == pytest.approx(3e5 + 64 * 32 * 128 * 2)
    placed = placements.placements(from_rows([row]), ceilings()).iloc[0]
    assert placed.bytes == pytest.approx(fixed)
    assert placed.attained_byte_per_s <= DRAM and placed.bandwidth_level is None
    # a new row (its table already counted by rows) is left as it is
    assert bounds.compulsory_bytes(8e5, _bag_call(8e5, 1, True)["params"], "bfloat16") == (
        8e5, False)


def test_bandwidth_above_dram_is_named_by_its_cache_or_flagged():
    r = prediction.roofs(ceilings(), SYS, "bfloat16", True)
    assert bounds.bandwidth_level(r, 1e6, 0.5 * DRAM) is None
    assert bounds.bandwidth_level(r, 1e6, 2 * DRAM) == "L2"  # fits L2's window, within its rate
    assert bounds.bandwidth_level(r, 1e9, 2 * DRAM) == bounds.ABOVE  # too large for L2
    assert bounds.bandwidth_level(r, 1e6, 2 * L2) == bounds.ABOVE  # faster than any level
    row = _bag_call(4e6, 1e-6, marked=True)  # 4 TB/s of 4 MB: L2 explains it
    assert placements.placements(from_rows([row]), ceilings()).iloc[0].bandwidth_level == "L2"


def test_a_small_op_is_floored_by_the_shortest_kernel_the_sweeps_timed():
    r = prediction.roofs(ceilings(), SYS, "bfloat16", True)
    assert prediction.predict_op(r, 10.0, 100.0)["latency_s"] == pytest.approx(2e-6)
    floored = r | {"floor": 5e-6}
    op = prediction.predict_op(floored, 10.0, 100.0, kernels=3)
    assert op["bound"] == "latency" and op["latency_s"] == pytest.approx(15e-6)


def test_an_op_outside_every_calibrated_range_says_so():
    r = prediction.roofs(ceilings(), SYS, "bfloat16", True)
    conv = ("aten::convolution", "[[8, 64, 32, 32], [64, 64, 3, 3], [64]]")
    op = prediction.predict_op(r, 2e9, 1e6, 1e6, "matrix", op=conv[0], shapes=conv[1])
    assert op["outside"] == "aten::convolution/conv2d not calibrated"
    rated = r | {"op_rates": {"aten::convolution/conv2d": [(1e8, 1e13, []), (4e8, 2e13, [])]}}
    op = prediction.predict_op(rated, 2e9, 1e6, 1e6, "matrix", op=conv[0], shapes=conv[1])
    assert op["outside"] == "aten::convolution/conv2d at 2e+09, calibrated 1e+08-4e+08"
    near = prediction.predict_op(rated, 8e8, 1e6, 1e6, "matrix", op=conv[0], shapes=conv[1])
    assert near["outside"] == "" and near["curve"] == "aten::convolution/conv2d"
    text = prediction.with_curves("sum over 1 ops", [], op["outside"])
    assert text.endswith(prediction.OUTSIDE + op["outside"])
    assert prediction.curves_of(prediction.with_curves("x", ["c1"], "far")) == ["c1"]


def test_an_add_is_read_at_its_op_rates_where_measured_and_silent_without_them():
    r = prediction.roofs(ceilings(), SYS, "bfloat16", True)
    add = ("aten::add", "[[4, 64, 512], [4, 64, 512]]")
    plain = prediction.predict_op(r, 1.3e5, 7.9e5, 7.9e5, op=add[0], shapes=add[1])
    assert plain["outside"] == "" and plain["curve"] == ""  # the roofs, as before the class
    slow = r | {"op_rates": {"aten::add": [(1e5, 1e11, []), (1e7, 1e12, [])]}}
    rated = prediction.predict_op(slow, 1.3e5, 7.9e5, 7.9e5, op=add[0], shapes=add[1])
    assert rated["curve"] == "aten::add" and rated["memory_s"] > plain["memory_s"]
    assert rated["predicted_time_s"] == pytest.approx(7.9e5 / sweeps.op_rate(
        slow, "aten::add", 7.9e5, add[1]))
    far = prediction.predict_op(slow, 1e9, 6e9, 6e9, op=add[0], shapes=add[1])
    assert far["outside"] == "aten::add at 6e+09, calibrated 1e+05-1e+07"


def test_a_gemm_beyond_the_shaped_sweep_says_so():
    import numpy as np

    lines = [(np.log(c), np.log([1.0, 64.0, 4096.0]), np.array([1e12, 5e13, 6e14]))
             for c in (1024, 4096)]
    r = {"shaped": lines}
    assert sweeps.shaped_outside(r, 8, 2048, 2048) == ""
    far = sweeps.shaped_outside(r, 8, 128, 128)  # width 128, 8x under the narrowest swept
    assert far.startswith("GEMM 8x128x128") and "width 1024-4096" in far


def test_copies_of_a_gather_fit_in_memory_by_their_whole_table():
    from types import SimpleNamespace

    from experiments.workload import copies_for

    ctx = SimpleNamespace(facts=SimpleNamespace(llc_bytes=50e6), free_memory=lambda: 80e9)
    cfg = SimpleNamespace(rotate_bytes_factor=3.0, max_copies=64)
    assert copies_for(ctx, cfg, 1e6) == 64  # a small call: the most copies
    assert copies_for(ctx, cfg, 1e6, resident_bytes=2e9) == 20  # 2 GB tables: half of 80 GB
    assert copies_for(ctx, cfg, 1e6, resident_bytes=100e9) == 1


def test_without_a_dram_fit_the_bandwidth_sweeps_largest_set_stands_for_it():
    import numpy as np

    no_dram = ceilings()[lambda c: c.ceiling != "dram_bw"]
    rows = pd.DataFrame([{"system": SYS, "status": "ok", "time_s": 1e-3, "experiment":
                          "bandwidth", "dtype": "float32", "flops": 0.0, "flop_per_s": np.nan,
                          "op": "copy", "working_set_bytes": ws, "byte_per_s": bw}
                         for ws, bw in ((1e6, 3e12), (1e9, 0.8e12))])
    r = prediction.roofs(no_dram, SYS, "bfloat16", True, rows)
    assert r["DRAM"] == 0.8e12 and r["floor"] == pytest.approx(1e6 / 3e12)  # one pass
    op = prediction.predict_op(r, 0.0, 4e9, 4e9, "vector")
    assert op["bound"] == "memory" and op["memory_s"] == pytest.approx(4e9 / 0.8e12)
    assert prediction.roofs(no_dram, SYS, "bfloat16", True)["DRAM"] is None


def test_bandwidth_the_sweep_reached_at_that_size_is_bounded_by_it():
    import numpy as np

    r = prediction.roofs(ceilings(), SYS, "bfloat16", True)
    r = r | {"bandwidth": (np.log([1e6, 1e9, 1e10]), np.array([3e12, 1.05 * DRAM, DRAM]))}
    within = bounds.bandwidth_level(r, 1e9, 1.04 * DRAM)
    assert within.startswith("DRAM, within the bandwidth sweep's best kernel")
    assert bounds.bandwidth_level(r, 1e9, 1.1 * DRAM) == bounds.ABOVE


def test_a_system_without_a_graph_floor_pays_the_eager_one():
    eager = ceilings()[lambda c: c.ceiling != "latency_graph"]
    eager = pd.concat([eager, eager.iloc[[0]].assign(ceiling="latency_eager", value=7e-6)])
    assert prediction.roofs(eager, SYS, "bfloat16", True)["latency"] == 7e-6
    assert prediction.roofs(ceilings(), SYS, "bfloat16", True)["latency"] == 2e-6
