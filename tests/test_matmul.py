import numpy as np
import pytest


def test_matmul_counts_work_and_checks_against_float64(run_experiment):
    rows = run_experiment("matmul", "float32", ["experiment.sizes=[96,32,64]"])
    assert list(rows.n) == [32, 64, 96]  # measured smallest first, whatever the config order
    assert (rows.status == "ok").all(), rows[["n", "status", "message"]]
    n = rows.n.to_numpy(float)
    np.testing.assert_array_equal(rows.flops, 2 * n**3)
    np.testing.assert_array_equal(rows.bytes, 3 * n * n * 4)  # A, B read once, C written once
    np.testing.assert_allclose(rows.intensity, 2 * n**3 / (12 * n * n))
    assert rows.check_passed.all() and (rows.rel_error < 1e-5).all() and (rows.rel_error > 0).all()
    np.testing.assert_allclose(rows.flop_per_s, rows.flops / rows.time_s)


@pytest.mark.parametrize("dtype, tolerance", [("bfloat16", 2e-2), ("float16", 5e-3)])
def test_half_precision_error_is_larger_but_bounded(run_experiment, dtype, tolerance):
    rows = run_experiment("matmul", dtype, ["experiment.sizes=[64]"])
    assert list(rows.status) == ["ok"]
    assert 1e-6 < rows.rel_error.iloc[0] < tolerance  # rounding shows, garbage would be ~1


def test_tf32_is_unsupported_on_a_cpu(run_experiment):
    rows = run_experiment("matmul", "tf32", ["experiment.sizes=[32]"])
    assert list(rows.status) == ["unsupported"] and "TF32" in rows.message.iloc[0]


def test_fp8_runs_or_says_why(run_experiment):
    rows = run_experiment("matmul", "float8_e4m3", ["experiment.sizes=[32]"])
    row = rows.iloc[0]
    assert row.status in ("ok", "unsupported")
    if row.status == "ok":  # bf16 output: 2 bytes per element of C
        assert row.bytes == 2 * 32 * 32 * 1 + 32 * 32 * 2 and row.rel_error < 2e-2


def test_a_size_predicted_past_the_time_limit_is_skipped(run_experiment):
    rows = run_experiment("matmul", "float32",
                          ["experiment.sizes=[64,4096]", "experiment.max_call_s=1e-4"])
    assert list(rows.status) == ["ok", "skipped"]
    assert "max_call_s" in rows.message.iloc[1] and np.isnan(rows.time_s.iloc[1])


def test_bad_time_limit_is_rejected(run_experiment):
    with pytest.raises(ValueError, match="experiment.max_call_s"):
        run_experiment("matmul", "float32", ["experiment.max_call_s=0"])
