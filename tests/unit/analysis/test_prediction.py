"""The op model (experiments/analysis/prediction.py) and the placements file, from synthetic
ceilings: each term, the level a working set fits, ncu's bytes, a call as the sum of its ops,
and the term named on a miss."""

import json
import math

import pandas as pd
import pytest

from experiments.analysis import placements, prediction

SYS = "GPU @ lab"
DRAM, L2, L1, P, V, LAT = 1e12, 4e12, 2e13, 1e14, 1e13, 2e-6
L2_WINDOW = 50e6


def ceilings():
    rows = [("dram_bw", None, DRAM, None), ("l2_bw", None, L2, L2_WINDOW), ("l1_bw", None, L1, None),
            ("matrix_flops", "bfloat16", P, None), ("vector_flops", "bfloat16", V, None),
            ("latency_graph", None, LAT, None), ("latency_eager", None, 3 * LAT, None)]
    return pd.DataFrame([{"system": SYS, "ceiling": c, "dtype": d, "value": v, "ci_low": v,
                          "ci_high": v, "ws_max": w, "capacity_bytes": w, "device_name": "G"}
                         for c, d, v, w in rows])


def roofs(graph=True):
    return prediction.roofs(ceilings(), SYS, "bfloat16", graph)


def test_each_term_and_the_level_the_working_set_fits():
    r = roofs()
    gemm = prediction.predict_op(r, 1e12, 1e6, 1e6, "matrix")
    assert gemm["bound"] == "compute" and gemm["predicted_time_s"] == pytest.approx(1e12 / P)
    act = prediction.predict_op(r, 1e6, 1e9, 1e9, "vector")  # cold 1 GB: DRAM
    assert act["bound"] == "memory" and act["level"] == "DRAM"
    assert act["predicted_time_s"] == pytest.approx(1e9 / DRAM)
    # 20 MB of activations an earlier op wrote, 10 MB of weights: L2 for the first, DRAM after
    warm = prediction.predict_op(r, 0.0, 30e6, 10e6, "vector")
    assert warm["memory_s"] == pytest.approx(10e6 / DRAM + 20e6 / L2) and warm["level"] == "L2"
    # the same warm bytes past the L2 window: DRAM
    big = prediction.predict_op(r, 0.0, 300e6, 100e6, "vector")
    assert big["memory_s"] == pytest.approx(300e6 / DRAM) and big["level"] == "DRAM"
    tiny = prediction.predict_op(r, 10.0, 100.0, 100.0, "vector", calls=3)
    assert tiny["bound"] == "latency" and tiny["predicted_time_s"] == pytest.approx(3 * LAT)
    assert prediction.predict_op(roofs(graph=False), 10.0, 100.0)["predicted_time_s"] == 3 * LAT


def test_ncu_bytes_replace_the_counted_ones():
    r = roofs()
    op = prediction.predict_op(r, 0.0, 1e6, 1e6, "vector",
                               measured={"dram_bytes": 4e7, "l2_bytes": 8e7, "l1_bytes": 1e8})
    assert op["level"] == "DRAM" and op["memory_s"] == pytest.approx(4e7 / DRAM)
    op = prediction.predict_op(r, 0.0, 1e6, 1e6, "vector",
                               measured={"dram_bytes": 1e6, "l2_bytes": 8e8, "l1_bytes": 1e8})
    assert op["level"] == "L2" and op["memory_s"] == pytest.approx(8e8 / L2)


def test_attention_pays_for_its_exponentials():
    r = roofs()
    plain = prediction.predict_op(r, 1e12, 1e6, 1e6, "matrix")
    softmax = prediction.predict_op(r, 1e12, 1e6, 1e6, "matrix", exponentials=1e9)
    sfu = V * prediction.SFU_SHARE  # no float32 vector ceiling here: none charged
    assert softmax["compute_s"] == plain["compute_s"] and not r["sfu"]
    r = prediction.roofs(pd.concat([ceilings(), ceilings().iloc[[4]].assign(dtype="float32")]),
                         SYS, "bfloat16", True)
    sfu = V * prediction.SFU_SHARE
    softmax = prediction.predict_op(r, 1e12, 1e6, 1e6, "matrix", exponentials=1e9)
    assert softmax["compute_s"] == pytest.approx(1e12 / P + 1e9 / sfu)


def test_a_call_is_the_sum_of_its_ops():
    r = roofs()
    ops = [["aten::addmm", "[]", 2, 2e12, 4e6, 4e6, "matrix", "FlopCounterMode"],
           ["aten::gelu", "[]", 1, 1e6, 2e9, 0.0, "vector", "formula"]]
    call = prediction.predict_call(r, ops)
    want = 2e12 / P + 2e9 / DRAM  # the GELU's 2 GB of activations spill past L2
    assert call["predicted_time_s"] == pytest.approx(want) and call["ops"] == 2
    assert call["bound"] == "compute"  # the GEMMs take most of the sum


def _dataset():
    ops = [["aten::addmm", "[]", 1, 2e11, 4e6, 4e6, "matrix", "FlopCounterMode"],
           ["aten::gelu", "[]", 1, 1e6, 2e6, 0.0, "vector", "formula"]]
    predicted = 2e11 / P + max(LAT, 2e6 / L2)
    base = {"experiment": "workload", "op": "mlp", "dtype": "bfloat16", "status": "ok",
            "system": SYS, "device_name": "G", "timer": "cuda_event_graph", "flops": 2e11 + 1e6,
            "bytes": 4e6}
    calls = [base | {"batch": 1, "time_s": predicted * 1.1, "params": {"ops": ops}},
             base | {"batch": 2, "time_s": predicted * 3, "params": {"ops": ops}}]
    op = base | {"variant": "aten_op", "batch": 1, "flops": 1e6, "bytes": 2e6, "time_s": 0.5e-6,
                 "timer": "torch_profiler",
                 "params": {"aten_op": "aten::gelu", "input_shapes": "[[1]]", "kind": "vector",
                            "cold_bytes": 0.0, "calls_per_step": 1}}
    return pd.DataFrame(calls + [op]), predicted


def test_the_placements_file_holds_calls_and_ops_and_names_the_failed_term(tmp_path):
    ds, predicted = _dataset()
    table = placements.placement_table(ds, ceilings())
    assert sorted(table.kind) == ["call", "call", "op"]
    calls = table[table.kind == "call"].set_index("batch")
    assert calls.loc[1, "predicted_time_s"] == pytest.approx(predicted)
    assert calls.loc[1, "predicted_from"] == ("sum over 2 ops (2 distinct); outside calibration: "
                                              "aten::gelu not calibrated")
    assert calls.loc[1, "model_error"] == pytest.approx(0.1) and not calls.loc[1, "failed_term"]
    assert calls.loc[2, "model_error"] == pytest.approx(2.0)
    assert calls.loc[2, "failed_term"].startswith("compute")
    op = table[table.kind == "op"].iloc[0]
    assert op.bound == "latency" and op.failed_term.startswith("latency")  # 0.5 us: under the 2 us floor
    stats = placements.error_stats(table)
    assert stats["calls"]["n"] == 2 and stats["calls"]["median"] == pytest.approx(1.05)
    # the report's reader gives back what placements() and op_placements() give
    path = tmp_path / "placements.parquet"
    table.to_parquet(path)
    whole, ops = placements.read_placements(path)
    assert list(whole.columns) == placements.PLACEMENT_COLUMNS and len(whole) == 2
    assert list(ops.columns) == placements.OP_COLUMNS and ops.aten_op.tolist() == ["aten::gelu"]


def test_a_call_whose_ops_ncu_measured_is_predicted_from_their_bytes():
    ds, _ = _dataset()
    op = ds[ds.variant == "aten_op"].iloc[0].to_dict()
    op["params"] = op["params"] | {"bytes_source": "ncu", "dram_bytes": 4e7, "l2_bytes": 1e7,
                                   "l1_bytes": 1e7}
    ds = pd.concat([ds[ds.variant != "aten_op"], pd.DataFrame([op])], ignore_index=True)
    table = placements.placement_table(ds, ceilings())
    call = table[(table.kind == "call") & (table.batch == 1)].iloc[0]
    assert call.predicted_time_s == pytest.approx(4e7 / DRAM)  # the one op's measured traffic
    assert call.predicted_from == "sum over 1 profiled ops, ncu bytes"
    other = table[(table.kind == "call") & (table.batch == 2)].iloc[0]
    assert other.predicted_from.startswith("sum over 2 ops")  # no ops measured at batch 2


def _with_gemm_sweep(r):
    """The roofs with a matmul sweep: 3 us for the smallest GEMM (1e7 FLOPs), 1e14 FLOP/s at
    1e10 FLOPs."""
    import numpy as np

    return r | {"gemm": (np.log([1e7, 1e10]), np.array([1e7 / 3e-6, 1e14]))}


LSTM = "[[8, 128, 1024], [4096, 1024], [4096, 1024], [4096], [4096], [4096, 1024], " \
       "[4096, 1024], [4096], [4096], [2, 8, 1024], [2, 8, 1024]]"


def test_an_rnn_recurrence_is_serial_steps_of_small_gemms():
    r = _with_gemm_sweep(roofs())
    steps, step = 2 * 128, 2.0 * 8 * 4 * 1024 * 1024  # layers x T; h W_hh per step
    flops = steps * step + 2 * 8.6e9  # and the two layers' input projections
    op = prediction.predict_op(r, flops, 7e7, 3.5e7, "matrix", op="aten::_cudnn_rnn",
                               shapes=LSTM)
    # each step: the GEMM at the sweep's size (never under its smallest GEMM's 3 us) + a
    # pointwise kernel at the floor; then two projection GEMMs
    want = steps * (prediction.gemm_time(r, step) + LAT) + 2 * prediction.gemm_time(r, 8.6e9)
    assert prediction.gemm_time(r, step) >= 3e-6
    assert op["bound"] == "latency" and op["predicted_time_s"] == pytest.approx(want)
    assert op["note"] == "256 serial steps" and want > 3 * flops / P
    plain = prediction.predict_op(r, flops, 7e7, 3.5e7, "matrix")  # no shapes: no recurrence
    assert plain["predicted_time_s"] < want / 3
    # with GELU's op rates measured, each step's pointwise kernel runs at that curve's rate at
    # the cell's bytes (gates in, state in and out): here 4 us, above the floor
    cell = 8 * 1024 * (4 + 2) * 2
    slow = r | {"op_rates": {"aten::gelu": [(cell / 2, cell / 2 / 4e-6, []),
                                            (cell * 2, cell * 2 / 4e-6, [])]}}
    assert prediction.cell_time(slow, cell, LSTM) == pytest.approx(4e-6)
    assert prediction.cell_time(r, cell, LSTM) == LAT  # no curve: the latency floor
    stepped = prediction.predict_op(slow, flops, 7e7, 3.5e7, "matrix", op="aten::_cudnn_rnn",
                                    shapes=LSTM)
    assert stepped["predicted_time_s"] == pytest.approx(want + steps * (4e-6 - LAT))


def test_a_gather_reads_the_rows_it_names_not_the_table():
    r = roofs()
    table = 131072 * 1024 * 2
    rows = 4 * 512 * 1024 * 2
    op = prediction.predict_op(r, 0.0, table + rows + 16384, table + 16384, "vector",
                               op="aten::embedding", shapes="[[131072, 1024], [4, 512]]")
    cold = rows + 8 * 4 * 512  # the rows and the int64 indices, read cold; the rows written
    assert op["note"] == "bytes: gathered rows"
    assert op["memory_s"] == pytest.approx(cold / DRAM + rows / L2)
    bag = prediction.gathered_bytes("aten::_embedding_bag", "[[1048576, 128], [32768], [1024]]",
                                    2)
    assert bag == (32768 * 128 * 2 + 8 * (32768 + 1024) + 1024 * 128 * 2,
                   32768 * 128 * 2 + 8 * (32768 + 1024))


def test_an_op_pays_the_floor_for_each_kernel_it_launches():
    r = roofs()
    assert prediction.predict_op(r, 10.0, 100.0, 100.0, "vector", kernels=9)[
        "predicted_time_s"] == pytest.approx(9 * LAT)


def test_a_gather_is_counted_by_the_rows_it_reads():
    import torch

    from experiments.placement import counting

    table, ids = torch.randn(1000, 16), torch.randint(0, 1000, (4, 5))
    _, ops = counting.record_ops(torch.nn.functional.embedding, (ids, table))
    (op,) = [o for o in ops if o["op"] == "aten::embedding"]
    rows = 20 * 16 * 4
    assert op["bytes"] == rows + 20 * 8 + rows and op["cold_bytes"] == rows + 20 * 8


def test_a_miss_the_model_has_no_term_for_names_it():
    conv = prediction.failed_term(1.0, "compute", None, "aten::convolution")
    assert conv.startswith("compute: cuDNN's convolution ran below the GEMM curve")
    assert prediction.failed_term(1.0, "compute", None, "aten::conv_transpose2d") == conv
    assert prediction.failed_term(1.0, "compute", None, "aten::addmm").startswith(
        "compute: the kernel ran below the FLOP roof")
    assert "pooling" in prediction.failed_term(9.0, "memory", "DRAM", "aten::avg_pool2d")
    assert prediction.failed_term(0.2, "compute", None, "aten::convolution") == ""
    r = roofs()
    call = prediction.predict_call(r, [["aten::convolution", "[]", 1, 1e12, 1e6, 1e6, "matrix"],
                                       ["aten::relu", "[]", 1, 1e6, 2e6, 0.0, "vector"]])
    assert call["top_op"] == "aten::convolution"


def _sweep_rows():
    """A dataset's microbenchmark rows: the gemv_gemm sweep (x [b, C] @ W [C, C]) on two
    channel counts, and a bandwidth sweep that climbs to 1e12 B/s at 1 MB and stays there."""
    base = {"system": SYS, "status": "ok", "dtype": "bfloat16", "flops": 1.0, "k": 0.0,
            "working_set_bytes": float("nan"), "byte_per_s": float("nan")}
    rows = []
    for c, rates in ((1024, {1: 1e11, 64: 1e13, 1024: 3e14}),
                     (4096, {1: 1e12, 64: 5e13, 4096: 6e14})):
        rows += [base | {"experiment": "decode", "op": "gemv_gemm", "m": float(b), "n": float(c),
                         "time_s": 2.0 * b * c * c / f, "flop_per_s": f}
                 for b, f in rates.items()]
    rows += [base | {"experiment": "bandwidth", "op": "copy", "m": 0.0, "n": 0.0, "time_s": 1e-6,
                     "flop_per_s": 0.0, "working_set_bytes": ws, "byte_per_s": bw}
             for ws, bw in ((1e4, 1e10), (1e6, 1e12), (1e9, 1e12))]
    return pd.DataFrame(rows)


def test_a_gemm_is_read_off_the_sweep_at_its_shape():
    from experiments.analysis import sweeps

    r = prediction.roofs(ceilings(), SYS, "bfloat16", True, _sweep_rows())
    assert [round(math.exp(c)) for c, _, _ in r["shaped"]] == [1024, 4096]
    assert sweeps.gemm_dims("aten::addmm", "[[4096], [64, 4096], [4096, 4096]]") == (64, 4096,
                                                                                     4096)
    assert sweeps.gemm_dims("aten::mm", "[[4096, 64], [64, 4096]]") == (4096, 4096, 64)
    assert sweeps.gemm_dims("aten::linear", "[[2, 32, 4096], [1024, 4096], [1024]]") == (
        64, 1024, 4096)
    assert sweeps.gemm_dims("aten::relu", "[[4, 4]]") is None
    # the sweep's own points map onto themselves (either side thin)
    assert sweeps.shaped_rate(r, 64, 4096, 4096) == pytest.approx(5e13)
    assert sweeps.shaped_rate(r, 4096, 64, 4096) == pytest.approx(5e13)
    # halfway in log b between 1 and 64, halfway in log C between 1024 and 4096
    mid = sweeps.shaped_rate(r, 8, 2048, 2048)
    assert mid == pytest.approx(0.5 * ((1e11 + 1e13) / 2 + (1e12 + 5e13) / 2))
    flops = 2.0 * 64 * 4096 * 4096
    op = prediction.predict_op(r, flops, 1e3, 1e3, "matrix", op="aten::addmm",
                               shapes="[[4096], [64, 4096], [4096, 4096]]")
    assert op["compute_s"] == pytest.approx(flops / 5e13) and "GEMM sweep at 64x4096x4096" in \
        op["note"]
    # without shapes (or for a convolution) the roof at its FLOPs, as before
    plain = prediction.predict_op(r, flops, 1e3, 1e3, "matrix", op="aten::convolution")
    assert plain["compute_s"] == pytest.approx(flops / P)


def test_a_narrow_long_k_gemm_is_read_off_the_narrow_sweep():
    from experiments.analysis import sweeps

    # narrow weights of aspect 16 (K = 16 N, C = sqrt(K N) = 1024 and 4096), each half the
    # square's rate: few output tiles, each streaming all of K
    narrow = [{"system": SYS, "status": "ok", "dtype": "bfloat16", "flops": 1.0,
               "working_set_bytes": float("nan"), "byte_per_s": float("nan"),
               "experiment": "decode", "op": sweeps.NARROW, "m": float(b), "n": c / 4.0,
               "k": c * 4.0, "params": json.dumps({"aspect": 16}),
               "time_s": 2.0 * b * c * c / f, "flop_per_s": f}
              for c, rates in ((1024, {1: 5e10, 64: 5e12}), (4096, {1: 5e11, 64: 2.5e13}))
              for b, f in rates.items()]
    rows = pd.concat([_sweep_rows(), pd.DataFrame(narrow)], ignore_index=True)
    r = prediction.roofs(ceilings(), SYS, "bfloat16", True, rows)
    (aspect, lines), = r["shaped_narrow"]
    assert math.exp(aspect) == pytest.approx(16) and len(lines) == 2
    # at its own shapes the narrow sweep's rate; at aspect 4, halfway in log a from the square
    assert sweeps.shaped_rate(r, 64, 256, 4096) == pytest.approx(5e12)
    assert sweeps.shaped_rate(r, 64, 1024, 16384) == pytest.approx(2.5e13)
    assert sweeps.shaped_rate(r, 64, 512, 2048) == pytest.approx(math.sqrt(1e13 * 5e12))
    # past the largest aspect it stays there; K no longer than the wide side reads the square
    assert sweeps.shaped_rate(r, 64, 128, 8192) == pytest.approx(5e12)
    assert sweeps.shaped_rate(r, 64, 4096, 4096) == pytest.approx(5e13)
    assert sweeps.shaped_rate(r, 64, 4096, 1024) == sweeps.shaped_rate(
        {"shaped": r["shaped"]}, 64, 4096, 1024)


def test_below_the_smallest_width_a_gemm_goes_on_along_the_first_slope_in_time():
    from experiments.analysis import sweeps

    r = prediction.roofs(ceilings(), SYS, "bfloat16", True, _sweep_rows())
    # b = 1: 1e11 at C = 1024, 1e12 at 4096; FLOPs x16, time x1.6: slope log 1.6 / log 16
    slope = math.log(1.6) / math.log(16)
    at_512 = sweeps.shaped_rate(r, 1, 512, 512)
    assert at_512 == pytest.approx(1e11 * 0.25 ** (1 - slope))
    t = lambda c, rate: 2.0 * c * c / rate  # noqa: E731
    assert t(512, at_512) / t(1024, 1e11) == pytest.approx(0.25 ** slope)
    # a slope past 1 (the rate falls with C) is held at 1: the rate stays the smallest C's
    flat = sweeps.read_lines([(math.log(1024), [0.0], [2e11]), (math.log(4096), [0.0], [1e11])],
                             0.0, math.log(256))
    assert flat == pytest.approx(2e11)


def test_a_small_kernel_takes_the_bandwidth_sweeps_time_at_its_size():
    from experiments.analysis import sweeps

    r = prediction.roofs(ceilings(), SYS, "bfloat16", True, _sweep_rows())
    climb = (1e10 + 1e12) / 2  # halfway up the climb, linear in log working set
    assert sweeps.ramp(r["bandwidth"], 1e5) == pytest.approx(climb)
    assert sweeps.ramp(r["bandwidth"], 1e7) == math.inf  # past the peak: no floor
    # ncu measured 1e4 DRAM bytes of a 1e5-byte op: the sweep moved 1e5 bytes no faster
    small = prediction.predict_op(r, 0.0, 1e5, 1e5, "vector",
                                  measured={"dram_bytes": 1e4, "l2_bytes": 1e5})
    assert small["memory_s"] == pytest.approx(1e5 / climb) and 1e5 / climb > 1e5 / L2
    big = prediction.predict_op(r, 0.0, 1e8, 1e8, "vector", measured={"dram_bytes": 1e8})
    assert big["memory_s"] == pytest.approx(1e8 / DRAM)
    # a gather ncu measured, its row counted before the gather fix (the whole table): the
    # working set the sweep is read at is the rows it names, not the table
    rows = prediction.gathered_bytes("aten::embedding", "[[1000, 10], [5]]", 2)[0]
    emb = prediction.predict_op(r, 0.0, 1e9, 1e9, "vector", measured={"dram_bytes": 1e3},
                                op="aten::embedding", shapes="[[1000, 10], [5]]")
    assert emb["memory_s"] == pytest.approx(rows / 1e10) and emb["note"] == ""


def test_a_slow_norm_or_attention_names_what_no_sweep_measures():
    norm = prediction.failed_term(2.0, "memory", "DRAM", "aten::native_group_norm")
    assert norm.startswith("memory (DRAM): torch's kernel streamed below the bandwidth sweep")
    assert "reductions" in prediction.failed_term(0.9, "memory", None, "aten::_softmax")
    sdpa = prediction.failed_term(1.0, "compute", None, "aten::_scaled_dot_product_cudnn_attention")
    assert sdpa.startswith("compute: the attention kernel ran below the GEMM curve")
    # faster than predicted: the generic reason, whatever the op
    assert prediction.failed_term(-0.6, "memory", None, "aten::_softmax").startswith(
        "memory: fewer bytes")


def test_a_call_predicted_from_ncu_bytes_names_its_top_ops_reason():
    ds, _ = _dataset()
    op = ds[ds.variant == "aten_op"].iloc[0].to_dict()
    op["params"] = op["params"] | {"aten_op": "aten::_softmax", "bytes_source": "ncu",
                                   "dram_bytes": 4e7}
    ds = pd.concat([ds[ds.variant != "aten_op"], pd.DataFrame([op])], ignore_index=True)
    table = placements.placement_table(ds, ceilings())
    call = table[(table.kind == "call") & (table.batch == 1)].iloc[0]
    assert call.model_error > 1 and call.failed_term.startswith("memory: torch's kernel")
