import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from experiments import transfer
from experiments.core.device import device_facts
from experiments.core.config import Settings
from experiments.core.runner import Context


def test_transfer_cpu_rows_are_not_applicable_with_bytes_counted(run_experiment):
    rows = run_experiment("transfer", "float32", [
        "experiment.sizes=[4096,65536]", "experiment.create_sizes=[4096]", "experiment.d2d_bytes=8192"])
    assert (rows.status == "not_applicable").all(), rows[["op", "status", "message"]]
    assert rows.message.str.len().gt(10).all()
    counts = rows.op.value_counts().to_dict()
    assert counts == {"transfer": 16, "transfer_model": 8, "d2d_copy": 1, "create_on_device": 1,
                      "create_on_host": 1, "move_to_device": 1, "create_then_move": 1,
                      "cross_device": 2}
    create = rows[rows.op.isin(transfer.CREATE_OPS)]
    assert (create.bytes == 4096).all() and (create.n == 1024).all()
    copies = rows[rows.op == "transfer"]
    assert set(copies.variant) == set(transfer.VARIANTS) and "h2d_pinned_nonblocking" in transfer.VARIANTS
    for variant in transfer.VARIANTS:
        assert sorted(copies[copies.variant == variant].bytes) == [4096, 65536]
    np.testing.assert_array_equal(copies.n * 4, copies.bytes)
    d2d = rows[rows.op == "d2d_copy"].iloc[0]
    assert d2d.bytes == 2 * 8192 and d2d.n == 2048  # read + write
    cross = rows[rows.op == "cross_device"].set_index("variant")
    assert set(cross.index) == {"cpu_tensor", "cpu_scalar_tensor"}
    # each row names its own case and expectation, though a CPU job cannot run it
    params = cross.params.map(json.loads)
    assert params["cpu_tensor"]["expected_raise"] is True
    assert params["cpu_scalar_tensor"]["expected_raise"] is False
    assert "0-dim" in params["cpu_scalar_tensor"]["case"] and "0-dim" not in params["cpu_tensor"]["case"]
    assert all(p["raised"] is None and p["error_type"] is None for p in params)


def test_transfer_rejects_bad_config(run_experiment):
    with pytest.raises(ValueError, match="experiment.d2d_bytes"):
        run_experiment("transfer", "float32", ["experiment.d2d_bytes=0"])
    with pytest.raises(ValueError, match="experiment.sizes"):
        run_experiment("transfer", "float32", ["experiment.sizes=[]"])


SIZES = 4096 * 4.0 ** np.arange(10)  # 4 KiB ... 1 GiB


def test_fit_recovers_latency_and_bandwidth():
    latency, bw = 8e-6, 25e9
    times = latency + SIZES / bw
    fit_lat, fit_bw, resid = transfer.fit_latency_bandwidth(SIZES, times)
    assert fit_lat == pytest.approx(latency, rel=1e-9) and fit_bw == pytest.approx(bw, rel=1e-9)
    assert resid < 1e-9
    noisy = times * (1 + 0.01 * np.random.default_rng(0).standard_normal(SIZES.size))
    fit_lat, fit_bw, resid = transfer.fit_latency_bandwidth(SIZES, noisy)
    assert fit_lat == pytest.approx(latency, rel=0.1) and fit_bw == pytest.approx(bw, rel=0.03)
    assert 0.005 < resid < 0.05
    with pytest.raises(ValueError, match="two distinct sizes"):
        transfer.fit_latency_bandwidth([4096, 4096], [1e-5, 1e-5])


def test_model_rows_fit_each_variant_from_its_ok_rows():
    rows = [{"op": "transfer", "variant": "h2d_pinned_nonblocking", "status": "ok",
             "bytes": float(s), "time_s": 2e-6 + s / 50e9} for s in SIZES]
    rows += [{"op": "transfer", "variant": "d2h_pageable_blocking", "status": "ok",
              "bytes": float(s), "time_s": 1e-5 + s / 10e9} for s in SIZES[:3]]
    rows += [{"op": "transfer", "variant": "d2h_pageable_blocking", "status": "oom",
              "bytes": float(s), "time_s": None} for s in SIZES[3:]]
    rows += [{"op": "transfer", "variant": "h2d_pageable_blocking", "status": "ok",
              "bytes": 4096.0, "time_s": 1e-5}]  # one size: nothing to fit
    link = transfer.pcie_params(SimpleNamespace(pcie_generation=5, pcie_width=16))
    out = {r["variant"]: r for r in transfer.model_rows(rows, 4e12, link)}
    assert set(out) == set(transfer.VARIANTS) and all(r["op"] == "transfer_model" for r in out.values())
    pinned = out["h2d_pinned_nonblocking"]["params"]
    assert pinned["latency_s"] == pytest.approx(2e-6) and pinned["bandwidth_Bps"] == pytest.approx(50e9)
    assert pinned["ratio_to_device_bw"] == pytest.approx(50e9 / 4e12)
    assert pinned["ratio_to_pcie_peak"] == pytest.approx(50e9 / link["pcie_peak_Bps"])
    assert pinned["points"] == 10 and pinned["pcie_generation"] == 5
    assert out["d2h_pageable_blocking"]["params"]["points"] == 3
    assert out["d2h_pageable_blocking"]["params"]["bandwidth_Bps"] == pytest.approx(10e9)
    assert out["h2d_pageable_blocking"]["status"] == "skipped"
    assert out["d2h_pinned_blocking"]["status"] == "skipped"
    json.dumps(pinned)  # params go into the row as JSON


def test_pcie_peak_per_direction():
    peak = lambda gen, width: transfer.pcie_params(  # noqa: E731
        SimpleNamespace(pcie_generation=gen, pcie_width=width))["pcie_peak_Bps"]
    assert peak(5, 16) == pytest.approx(63.0e9, rel=1e-3)
    assert peak(4, 16) == pytest.approx(31.5e9, rel=1e-3)
    assert peak(3, 8) == pytest.approx(7.88e9, rel=1e-3)
    assert peak(None, None) is None


@pytest.mark.parametrize("variant", list(transfer.MIXED))
def test_mixed_device_check_on_meta_device(variant):
    # the meta device stands in for a GPU: torch applies the same same-device rule to it
    case = transfer.MIXED[variant]
    kind, text = transfer.mixed_device_error(torch.ones(4, device="meta"), case.make())
    assert (kind is not None) == case.expect_raise
    if case.expect_raise:
        assert kind == "RuntimeError" and "device" in text
    row = transfer.cross_device_result(case, torch.ones(4, device="meta"))
    assert row["status"] == "ok" and row["check_passed"]
    assert row["params"] == {"case": case.case, "raised": case.expect_raise, "error_type": kind,
                             "expected_raise": case.expect_raise}


def test_cross_device_result_flags_a_surprise():
    # a case that expects no error but raises: wrong_result, and the row says what was raised
    case = transfer.MixedCase("a meta tensor plus a 4-element CPU tensor", lambda: torch.ones(4), False)
    row = transfer.cross_device_result(case, torch.ones(4, device="meta"))
    assert row["status"] == "wrong_result" and not row["check_passed"]
    assert row["params"]["raised"] is True and row["params"]["error_type"] == "RuntimeError"
    assert "NOT expected" in row["message"]


def test_create_params_split_create_then_move():
    times = {"create_on_device": 1e-5, "create_on_host": 3e-3, "move_to_device": 1e-3,
             "create_then_move": 4e-3}
    p = transfer.create_params(times)
    assert p == pytest.approx({"ratio_to_create_on_device": 400.0, "host_randn_s": 3e-3,
                               "move_s": 1e-3, "move_fraction": 0.25})
    # a failed half leaves its keys empty, not a made-up number
    p = transfer.create_params({"create_on_device": 1e-5, "create_then_move": 4e-3})
    assert p["move_s"] is None and p["move_fraction"] is None and p["host_randn_s"] is None
    assert p["ratio_to_create_on_device"] == pytest.approx(400.0)


@pytest.mark.parametrize("op", transfer.CREATE_OPS)
def test_create_ops_time_and_check_on_the_cpu(op):
    # the GPU rows' code run on the CPU (there .to() moves nothing): it times and checks each op
    cpu = torch.device("cpu")
    ctx = Context(device=cpu, dtype="float32", facts=device_facts(cpu),
                  settings=Settings.defaults().but(point_budget_s=0.01))
    row = transfer.time_create(ctx, op, 4096)
    assert row["check_passed"] and row["time_s"] > 0 and row["timer"] == "perf_counter"
    with pytest.raises(ValueError, match="create_on_host"):
        transfer.time_create(ctx, "create_somewhere", 16)
