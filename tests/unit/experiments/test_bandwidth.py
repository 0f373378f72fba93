import json

import numpy as np
import pytest


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_bandwidth_counts_bytes_and_checks_results(run_experiment, dtype):
    rows = run_experiment("bandwidth", dtype, ["experiment.sizes=[4096,65536]"])
    assert set(rows.op) == {"copy", "add_one", "scale", "add", "triad"}
    assert (rows.status == "ok").all(), rows[["op", "status", "message"]]
    item = {"float32": 4, "float16": 2, "bfloat16": 2}[dtype]
    n = rows.n.to_numpy()
    arrays = rows.op.map({"copy": 2, "add_one": 2, "scale": 2, "add": 3, "triad": 3})
    flops = rows.op.map({"copy": 0, "add_one": 1, "scale": 1, "add": 1, "triad": 2})
    # a CPU call repeats the pass (params.passes) until it moves call_bytes per thread
    passes = rows.params.map(lambda p: json.loads(p)["passes"])
    assert (passes >= 1).all() and (passes > 1).any() == (dtype == "float32")
    np.testing.assert_array_equal(rows.bytes, passes * arrays * n * item)
    np.testing.assert_array_equal(rows.flops, passes * flops * n)
    assert set(rows.variant) == {"numba" if dtype == "float32" else "torch"}
    assert (rows.check_passed).all() and (rows.rel_error < 1e-2).all()
    # C10: x + 1 in float32 is 1 FLOP per 8 bytes
    add_one = rows[rows.op == "add_one"]
    np.testing.assert_allclose(add_one.intensity, 1 / (2 * item))
    np.testing.assert_allclose(rows.byte_per_s, rows.bytes / rows.time_s)
    assert (rows.time_s_q10 <= rows.time_s).all() and (rows.time_s <= rows.time_s_q90).all()


def test_bandwidth_rejects_unknown_op(run_experiment):
    with pytest.raises(ValueError, match="experiment.ops"):
        run_experiment("bandwidth", "float32", ["experiment.ops=[copy,memset]"])


@pytest.mark.parametrize("value", ["-1", "nan", "60"])
def test_bandwidth_rejects_a_bad_dram_steady_time(run_experiment, value):
    with pytest.raises(Exception, match="experiment.dram_steady_s"):
        run_experiment("bandwidth", "float32", [f"experiment.dram_steady_s={value}"])


def test_bandwidth_tf32_is_not_a_storage_type(run_experiment):
    rows = run_experiment("bandwidth", "tf32", ["experiment.sizes=[4096]", "experiment.ops=[copy]"])
    assert list(rows.status) == ["not_applicable"]


