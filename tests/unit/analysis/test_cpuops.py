"""The op model's CPU terms (experiments/analysis/cpuops.py), from synthetic rows: each op's
dispatch floor (profiled or host-timed, the median for an op not timed) added to its work, a
GEMM past the shaped sweep's thin sides at the square sweep's rate, oneDNN's RNN layer as serial
steps, a depthwise convolution read off its own curve; none of it on a GPU."""

import json
import math

import numpy as np
import pandas as pd
import pytest

from experiments.analysis import cpuops, prediction, sweeps

SYS = "CPU @ lab"
DRAM, FMA, EAGER = 1e11, 1e12, 1e-6
FLOORS = {"aten::clone": (10e-6, 3e-6), "aten::add": (4e-6, 1e-6), "aten::zeros": (8e-6, 2e-6)}


def ceilings(system=SYS):
    rows = [("dram_bw", None, DRAM), ("matrix_flops", "float32", FMA),
            ("vector_flops", "float32", FMA), ("latency_eager", None, EAGER)]
    return pd.DataFrame([{"system": system, "ceiling": c, "dtype": d, "value": v, "ci_low": v,
                          "ci_high": v, "ws_max": None, "capacity_bytes": None,
                          "device_name": "C"} for c, d, v in rows])


def _row(**kw):
    base = {"system": SYS, "status": "ok", "dtype": "float32", "flops": 0.0, "m": 0.0,
            "n": 0.0, "working_set_bytes": float("nan"), "byte_per_s": float("nan"),
            "flop_per_s": float("nan"), "device_kind": "cpu", "variant": None,
            "params": "{}", "device_name": "C"}
    return base | kw


def floor_rows(kind="cpu"):
    return [_row(experiment="op_rates", op=op, variant=cpuops.FLOOR, time_s=prof,
                 device_kind=kind, params=json.dumps({"host_s": host}))
            for op, (prof, host) in FLOORS.items()]


def gemm_rows():
    """The gemv_gemm sweep (thin sides 1-64 on C = 1024, 10x below the square GEMMs' rate at
    64) and the square GEMM sweep (5e11 FLOP/s at 2e9 FLOPs, 8e11 at 2e11)."""
    rows = [_row(experiment="decode", op="gemv_gemm", m=float(b), n=1024.0, time_s=1.0,
                 flop_per_s=f, flops=1.0) for b, f in ((1, 1e9), (64, 5e10))]
    rows += [_row(experiment="matmul", op="mm", flops=f, time_s=f / p, flop_per_s=p)
             for f, p in ((2e9, 5e11), (2e11, 8e11))]
    # a bandwidth pass of 10 ns: the shortest kernel timed, under every floor here
    return rows + [_row(experiment="bandwidth", op="copy", working_set_bytes=1e3,
                        byte_per_s=1e11, time_s=1e-8)]


def cpu_roofs(graph=True, rows=None, system=SYS):
    rows = pd.DataFrame(rows if rows is not None else floor_rows() + gemm_rows())
    return prediction.roofs(ceilings(system), system, "float32", graph, rows)


def test_each_op_pays_its_own_dispatch_floor_timed_as_it_is_timed():
    prof, host = cpu_roofs(graph=True), cpu_roofs(graph=False)
    assert prof["cpu"] and prof["op_floors"]["aten::clone"] == 10e-6
    assert host["op_floors"]["aten::clone"] == 3e-6
    tiny = prediction.predict_op(prof, 64.0, 512.0, 512.0, op="aten::clone")
    assert tiny["bound"] == "latency" and tiny["predicted_time_s"] == pytest.approx(
        10e-6 + 512 / DRAM)
    assert prediction.predict_op(host, 64.0, 512.0, 512.0, op="aten::clone")[
        "predicted_time_s"] == pytest.approx(3e-6 + 512 / DRAM)
    # an op no floor was timed for: the median of those that were, each of its calls
    other = prediction.predict_op(prof, 64.0, 512.0, 512.0, op="aten::relu", calls=2)
    assert other["predicted_time_s"] == pytest.approx(2 * 8e-6 + 512 / DRAM)


def test_an_elementwise_op_past_the_parallel_grain_pays_a_parallel_region():
    rows = floor_rows() + [_row(experiment="op_rates", op="aten::add/parallel",
                                variant=cpuops.FLOOR, time_s=30e-6,
                                params=json.dumps({"host_s": 25e-6}))] + gemm_rows()
    r = cpu_roofs(rows=rows)
    big, small = "[[4, 161, 128], [4, 161, 128]]", "[[4, 16, 128], [4, 16, 128]]"
    # 82432 elements, past 32768: the region's 30 us, not add's 4 us
    assert prediction.predict_op(r, 0.0, 512.0, 512.0, op="aten::add", shapes=big)[
        "predicted_time_s"] == pytest.approx(30e-6 + 512 / DRAM)
    assert prediction.predict_op(r, 0.0, 512.0, 512.0, op="aten::add", shapes=small)[
        "predicted_time_s"] == pytest.approx(4e-6 + 512 / DRAM)
    # a metadata op and a GEMM run no parallel region of torch's elementwise kind
    assert prediction.predict_op(r, 0.0, 512.0, 512.0, op="aten::transpose_",
                                 shapes="[[2, 39, 448]]")["predicted_time_s"] < 30e-6
    gemm = prediction.predict_op(r, 2 * 64 * 1024 * 1024.0, 1e6, 1e6, kind="matrix",
                                 op="aten::mm", shapes="[[64, 1024], [1024, 1024]]")
    assert gemm["latency_s"] < 30e-6
    # the median floor of ops not timed leaves the region's out
    assert cpuops.op_floor(r, "aten::relu") == pytest.approx(8e-6)
    # a transposed convolution pays the convolution's floor, a plain one's where it was timed
    conv = r | {"op_floors": r["op_floors"] | {"aten::convolution": 90e-6}}
    assert cpuops.op_floor(conv, "aten::conv_transpose2d") == pytest.approx(90e-6)
    assert cpuops.op_floor(r, "aten::conv_transpose2d") == pytest.approx(8e-6)
    # embedding_bag's forward-only variant: its own floor where timed, else embedding_bag's
    bag = r | {"op_floors": r["op_floors"] | {"aten::_embedding_bag": 40e-6}}
    assert cpuops.op_floor(bag, "aten::_embedding_bag_forward_only") == pytest.approx(40e-6)
    own = bag | {"op_floors": bag["op_floors"] | {"aten::_embedding_bag_forward_only": 30e-6}}
    assert cpuops.op_floor(own, "aten::_embedding_bag_forward_only") == pytest.approx(30e-6)


def threaded(threads=16, warm=1e12):
    """Floor rows of a job on `threads` threads, and a bandwidth curve at `warm` B/s for
    working sets of 10 kB-10 MB (the team's caches, 10x DRAM)."""
    rows = [r | {"params": json.dumps(json.loads(r["params"]) | {"threads": threads})}
            for r in floor_rows()]
    return rows + gemm_rows() + [_row(experiment="bandwidth", op="triad", working_set_bytes=ws,
                                      byte_per_s=warm, time_s=ws / warm) for ws in (1e4, 1e7)]


def test_an_elementwise_op_moves_its_bytes_on_the_threads_torch_gives_it():
    host = cpu_roofs(graph=False, rows=threaded())
    assert host["threads"] == 16 and not host["fresh_outputs"]
    small, big = "[[4, 16, 128], [4, 16, 128]]", "[[4, 161, 128], [4, 161, 128]]"
    nbytes = 3 * 8192 * 4.0  # two inputs and the output of 8192 elements: below the grain
    one = prediction.predict_op(host, 0.0, nbytes, 0.0, op="aten::add", shapes=small)
    assert one["memory_s"] == pytest.approx(16 * nbytes / 1e12)  # one thread of 16
    nbytes = 3 * 82432 * 4.0  # past it: 3 tasks of GRAIN elements or less
    three = prediction.predict_op(host, 0.0, nbytes, 0.0, op="aten::add", shapes=big)
    assert three["memory_s"] == pytest.approx(16 / 3 * nbytes / 1e12)
    # 16 tasks or more: every thread; a small GEMM (its library splits its own work) keeps the
    # team's bandwidth; no threads recorded: the team's too
    assert cpuops.thread_share(host, "[[1024, 1024]]", 0) == 1.0
    gemm = prediction.predict_op(host, 2 * 8 * 64 * 64.0, 3 * 4096 * 4.0, 0.0, kind="matrix",
                                 op="aten::mm", shapes="[[8, 64], [64, 64]]")
    assert gemm["memory_s"] == pytest.approx(3 * 4096 * 4.0 / 1e12)
    bare = cpu_roofs(graph=False)
    assert "threads" not in bare
    assert prediction.predict_op(bare, 0.0, 98304.0, 0.0, op="aten::add", shapes=small)[
        "memory_s"] == pytest.approx(98304.0 / DRAM)


def test_a_profiled_cpu_op_writes_its_output_to_fresh_memory():
    prof = cpu_roofs(graph=True, rows=threaded(threads=1))
    assert prof["fresh_outputs"]
    shapes, nbytes = "[[4, 16, 128], [4, 16, 128]]", 3 * 8192 * 4.0
    got = prediction.predict_op(prof, 0.0, nbytes, 0.0, op="aten::add", shapes=shapes)
    # its output (a third of the bytes) at DRAM's rate, its inputs from the warm caches
    assert got["memory_s"] == pytest.approx(nbytes / 3 / DRAM + 2 * nbytes / 3 / 1e12)
    assert cpuops.output_bytes("aten::add", shapes, nbytes, 4) == nbytes / 3
    # an in-place op writes its input; a host-timed call reuses its blocks: both warm
    assert cpuops.output_bytes("aten::add_", shapes, nbytes, 4) == 0.0
    host = cpu_roofs(graph=False, rows=threaded(threads=1))
    assert prediction.predict_op(host, 0.0, nbytes, 0.0, op="aten::add", shapes=shapes)[
        "memory_s"] == pytest.approx(nbytes / 1e12)


def test_a_cpu_copy_is_predicted_by_its_threads_and_bytes_not_op_rates():
    """On a CPU the add and the strided copy (opclass.QUIET) are read off the roofs on their
    threads: their op-rate points copy warm blocks that a model's fresh outputs are not."""
    shapes, nbytes = "[[15, 8, 384]]", 2 * 46080 * 4.0
    rates = [_row(experiment="op_rates", op="aten::clone", bytes=b, time_s=b / 1e12,
                  byte_per_s=1e12, params=json.dumps({"class": "aten::clone",
                                                      "term": "memory"}))
             for b in (1e4, 1e5, 1e6, 1e7)]
    r = cpu_roofs(graph=True, rows=threaded(threads=16) + rates)
    got = prediction.predict_op(r, 0.0, nbytes, 0.0, op="aten::clone", shapes=shapes)
    assert got["curve"] == "" and "op rates" not in got["note"]
    # 46080 elements: 2 tasks of 16 threads; the output at DRAM's rate, the input warm
    assert got["memory_s"] == pytest.approx(8 * (nbytes / 2 / DRAM + nbytes / 2 / 1e12))


def test_on_a_cpu_the_floor_adds_to_the_work():
    r = cpu_roofs()
    big = prediction.predict_op(r, 0.0, 1e8, 1e8, op="aten::add")  # 1 ms of DRAM traffic
    assert big["bound"] == "memory"
    assert big["predicted_time_s"] == pytest.approx(1e8 / DRAM + 4e-6)


def test_without_floors_or_on_a_gpu_the_terms_stay_a_max():
    bare = cpu_roofs(rows=gemm_rows())
    assert not bare.get("op_floors")
    assert prediction.predict_op(bare, 0.0, 1e8, 1e8, op="aten::add")[
        "predicted_time_s"] == pytest.approx(1e8 / DRAM)
    gpu = cpu_roofs(rows=[r | {"device_kind": "cuda"} for r in floor_rows() + gemm_rows()])
    assert not gpu.get("cpu") and not gpu.get("op_floors")
    assert prediction.predict_op(gpu, 64.0, 512.0, 512.0, op="aten::clone")[
        "predicted_time_s"] == pytest.approx(EAGER)


def test_floor_rows_are_not_rates():
    rows = pd.DataFrame(floor_rows())
    assert sweeps.op_rate_points(rows, rows, {SYS}, "float32") == {}


def test_a_gemm_past_the_thin_sides_runs_at_the_square_sweep_s_rate():
    r = cpu_roofs()
    # thin side 512 > the sweep's 64: 2 x 512 x 1024 x 1024 = 1.07e9 FLOPs, the square sweep's
    # smallest point's rate (5e11) over the shaped edge's (5e10)
    op = prediction.predict_op(r, 2.0 * 512 * 1024 * 1024, 1e6, 1e6, "matrix", op="aten::mm",
                               shapes="[[512, 1024], [1024, 1024]]")
    assert op["compute_s"] == pytest.approx(2.0 * 512 * 1024 * 1024 / 5e11)
    # within the sweep's thin sides: the shaped read (5e10 at 64)
    thin = prediction.predict_op(r, 2.0 * 64 * 1024 * 1024, 1e6, 1e6, "matrix", op="aten::mm",
                                 shapes="[[64, 1024], [1024, 1024]]")
    assert thin["compute_s"] == pytest.approx(2.0 * 64 * 1024 * 1024 / 5e10)
    assert cpuops.gemm_rate(r, 512, 1024, 1024, 5e10) == pytest.approx(5e11)


MKLDNN = "[[10, 4, 1024], [4096, 1024], [4096, 1024], [4096], [4096], [4, 1024], [4, 1024]]"


def test_onednn_s_rnn_layer_is_serial_steps_after_its_weights_reorder():
    r = cpu_roofs()
    step = 2.0 * 4 * 4096 * 1024  # h W_hh, batch 4
    proj = 2.0 * 40 * 4096 * 1024  # the input projection, 40 rows
    op = prediction.predict_op(r, 10 * step + proj, 1e6, 1e6, "matrix",
                               op=cpuops.MKLDNN_RNN, shapes=MKLDNN)
    rate = lambda m: float(np.interp(math.log(m), np.log([1, 64]), [1e9, 5e10]))  # noqa: E731
    # both float32 weight matrices read and written once, at DRAM's rate (no bandwidth curve)
    assert r.get("bandwidth") is None
    reorder = 2 * (2 * 4096 * 1024 * 4) / DRAM
    want = 10 * (step / rate(4) + EAGER) + proj / rate(40) + reorder
    assert op["note"].endswith("10 serial steps") and op["bound"] == "latency"
    floor = cpuops.op_floor(r, cpuops.MKLDNN_RNN)  # the median floor: not timed for it
    assert op["predicted_time_s"] == pytest.approx(floor + want)
    assert cpuops.rnn_serial(r, "[[4, 4]]", 1.0, None) == (0.0, 0)


def test_a_depthwise_convolution_reads_its_own_curve_where_calibrated():
    def conv(shapes, flops, rate, ws, bw):
        return _row(experiment="op_rates", op="aten::convolution", flops=flops,
                    flop_per_s=rate, time_s=flops / rate, working_set_bytes=ws, byte_per_s=bw,
                    params=json.dumps({"input_shapes": shapes}))

    dense = [conv(f"[[{b}, 16, 16, 16], [16, 16, 3, 3], [16]]", b * 1.2e6, 1e11, 1e5, 1e9)
             for b in (2, 8)]
    # depthwise: B/s against the working set (it streams its activations)
    depthwise = [conv(f"[[{b}, 96, 16, 16], [96, 1, 3, 3], [96]]", b * 4.4e5, 1e9, b * 2e5,
                      5e9) for b in (2, 8)]
    judged = "[[4, 300, 16, 16], [300, 1, 3, 3], [300]]"
    flops, nbytes = 4 * 2.0 * 300 * 256 * 9, 8e5
    r = cpu_roofs(rows=floor_rows() + dense)
    op = prediction.predict_op(r, flops, nbytes, nbytes, "matrix", op="aten::convolution",
                               shapes=judged)
    # the dense curve, without its own (its weights' reorder a hair of it here)
    assert op["compute_s"] == pytest.approx(flops / 1e11, rel=0.01)
    r = cpu_roofs(rows=floor_rows() + dense + depthwise)
    op = prediction.predict_op(r, flops, nbytes, nbytes, "matrix", op="aten::convolution",
                               shapes=judged)
    assert op["curve"] == "aten::convolution/conv2d/depthwise"
    assert op["memory_s"] == pytest.approx(nbytes / 5e9) and op["bound"] == "memory"
    # an op rate timed the op whole: its dispatch floor is not added again
    assert op["predicted_time_s"] == pytest.approx(nbytes / 5e9)
    # a dense one never reads the depthwise points
    r = cpu_roofs(rows=floor_rows() + depthwise)
    assert prediction.predict_op(r, 1e8, 1e5, 1e5, "matrix", op="aten::convolution",
                                 shapes="[[4, 64, 16, 16], [64, 64, 3, 3], [64]]")["curve"] == ""


def test_a_cpu_convolution_pays_its_weights_reorder_and_its_points_are_rated_without_it():
    """oneDNN copies a convolution's weight into its blocked layout on every call: a point's
    rate is its FLOPs over its time less that copy (2 x the weight's bytes at the bandwidth
    sweep's rate, 2e10 B/s here), and the judged op adds its own weight's copy back; without
    the sweep neither."""
    stream = [_row(experiment="bandwidth", op="copy", working_set_bytes=ws, byte_per_s=2e10,
                   time_s=ws / 2e10) for ws in (1e5, 1e9)]
    copy = lambda weight: 2 * math.prod(weight) * 4 / 2e10  # noqa: E731  float32, read + write
    points = [_row(experiment="op_rates", op="aten::convolution", flops=b * 1e8,
                   flop_per_s=1e3, time_s=b * 1e8 / 1e11 + copy((64, 64, 3, 3)),
                   params=json.dumps({"input_shapes": f"[[{b}, 64, 16, 16], [64, 64, 3, 3]]"}))
              for b in (2, 8)]
    judged = "[[4, 64, 16, 16], [128, 64, 3, 3]]"
    r = cpu_roofs(rows=floor_rows() + points + stream)
    assert [y for _, y, _ in r["op_rates"]["aten::convolution/conv2d"]] == pytest.approx(
        [1e11, 1e11])
    op = prediction.predict_op(r, 4e8, 1e6, 1e6, "matrix", op="aten::convolution",
                               shapes=judged)
    assert op["compute_s"] == pytest.approx(4e8 / 1e11 + copy((128, 64, 3, 3)))
    r = cpu_roofs(rows=floor_rows() + points)
    assert [y for _, y, _ in r["op_rates"]["aten::convolution/conv2d"]] == [1e3, 1e3]
    op = prediction.predict_op(r, 4e8, 1e6, 1e6, "matrix", op="aten::convolution",
                               shapes=judged)
    assert op["compute_s"] == pytest.approx(4e8 / 1e3)
    assert cpuops.reordered_bytes("aten::relu", "[[4, 64]]", 4) == 0.0
    assert cpuops.reordered_bytes("aten::conv_transpose2d", "[[1, 8, 4, 4], [8, 2, 4, 4]]",
                                  4) == 8 * 2 * 4 * 4 * 4


def test_a_contended_cpu_point_is_no_rate():
    def ln(b, rate, busy, kind="cpu"):
        return _row(experiment="op_rates", op="aten::native_layer_norm", working_set_bytes=b,
                    byte_per_s=rate, time_s=b / rate, contended=busy, device_kind=kind,
                    params=json.dumps({"input_shapes": f"[[{b}, 64], [64], [64]]"}))

    rows = pd.DataFrame([ln(1e5, 1e10, False), ln(4e5, 2e10, False), ln(2e5, 1e7, True)])
    pts = sweeps.op_rate_points(rows, rows, {SYS}, "float32")["aten::native_layer_norm"]
    assert sorted(p[1] for p in pts) == [1e10, 2e10]
    alone = rows.iloc[[2]]  # only contended points: the class is not calibrated
    assert sweeps.op_rate_points(alone, alone, {SYS}, "float32") == {}
    gpu = rows.assign(device_kind="cuda")  # a GPU's flags mean other things: all kept
    assert len(sweeps.op_rate_points(gpu, gpu, {SYS}, "float32")[
        "aten::native_layer_norm"]) == 3


def test_a_cpu_gemm_reads_the_hot_gemms_where_timed():
    hot = [_row(experiment="op_rates", op="aten::addmm", variant=cpuops.GEMM_HOT, m=float(s),
                n=1024.0, flops=2.0 * s * 1024 * 1024, time_s=1.0, flop_per_s=f)
           for s, f in ((1, 4e9), (64, 2e11))]
    r = cpu_roofs(rows=floor_rows() + gemm_rows() + hot)
    assert [round(math.exp(c)) for c, _, _ in r["shaped_hot"]] == [1024]
    flops = 2.0 * 64 * 1024 * 1024
    op = prediction.predict_op(r, flops, 1e6, 1e6, "matrix", op="aten::mm",
                               shapes="[[64, 1024], [1024, 1024]]")
    assert op["compute_s"] == pytest.approx(flops / 2e11)  # not the cold sweep's 5e10
    assert sweeps.op_rate_points(pd.DataFrame(hot), pd.DataFrame(hot), {SYS}, "float32") == {}


def test_a_cpu_attention_curve_is_read_by_the_batch_head_problem():
    def sdpa(b, h, seq, rate):
        flops = 4.0 * b * h * seq * seq * 64
        q = f"[{b}, {h}, {seq}, 64]"
        return _row(experiment="op_rates", op=ATTN, flops=flops, flop_per_s=rate,
                    time_s=flops / rate,
                    params=json.dumps({"input_shapes": f"[{q}, {q}, {q}]"}))

    # many short heads run slow, few long ones fast: the (batch, head) problem sets the rate
    rows = [sdpa(8, 24, 8, 1e10), sdpa(1, 1, 400, 7e10)]
    r = cpu_roofs(rows=floor_rows() + rows)
    assert cpuops.heads(ATTN, "[[13, 23, 9, 64], [13, 23, 9, 64], [13, 23, 9, 64]]") == 299
    many = 4.0 * 13 * 23 * 9 * 9 * 64  # 299 problems of 9 tokens: the short heads' rate
    op = prediction.predict_op(r, many, 1e5, 1e5, "matrix", op=ATTN,
                               shapes="[[13, 23, 9, 64], [13, 23, 9, 64], [13, 23, 9, 64]]")
    assert op["compute_s"] == pytest.approx(many / 1e10, rel=0.2)  # near the short heads


ATTN = "aten::_scaled_dot_product_flash_attention_for_cpu"
