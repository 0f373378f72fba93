import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from experiments import transfer


def test_transfer_cpu_rows_are_not_applicable_with_bytes_counted(run_experiment):
    rows = run_experiment("transfer", "float32", [
        "experiment.sizes=[4096,65536]", "experiment.create_sizes=[4096]", "experiment.d2d_bytes=8192"])
    assert (rows.status == "not_applicable").all(), rows[["op", "status", "message"]]
    assert rows.message.str.len().gt(10).all()
    counts = rows.op.value_counts().to_dict()
    assert counts == {"transfer": 16, "transfer_model": 8, "d2d_copy": 1, "create_on_device": 1,
                      "create_then_move": 1, "cross_device": 2}
    copies = rows[rows.op == "transfer"]
    assert set(copies.variant) == set(transfer.VARIANTS) and "h2d_pinned_nonblocking" in transfer.VARIANTS
    for variant in transfer.VARIANTS:
        assert sorted(copies[copies.variant == variant].bytes) == [4096, 65536]
    np.testing.assert_array_equal(copies.n * 4, copies.bytes)
    d2d = rows[rows.op == "d2d_copy"].iloc[0]
    assert d2d.bytes == 2 * 8192 and d2d.n == 2048  # read + write
    assert set(rows[rows.op == "cross_device"].variant) == {"cpu_tensor", "cpu_scalar_tensor"}


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
    make, expect_raise = transfer.MIXED[variant]
    kind, text = transfer.mixed_device_error(torch.ones(4, device="meta"), make())
    assert (kind is not None) == expect_raise
    if expect_raise:
        assert kind == "RuntimeError" and "device" in text
