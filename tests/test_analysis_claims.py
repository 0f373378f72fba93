"""Claim verdicts computed from synthetic rows: holding, failing, and not measurable."""

import numpy as np
import pytest

import analysis_fixtures as fx
from experiments.analysis import claims, datasheets, dataset, decode, roofline
from experiments.analysis.catalog import CLAIM_IDS
from experiments.analysis.claims import FAILS, HOLDS, NOT_MEASURABLE
from experiments.analysis.__main__ import DATASHEETS

SHEETS = datasheets.load(DATASHEETS)


def verdicts(rows_by_experiment, dev=fx.GPU):
    rows = [r for rows in rows_by_experiment.values() for r in rows]
    ds = dataset.from_rows(rows, {"f": fx.metadata(dev, "all") | {"source": "run"}})
    ceilings = roofline.fit(ds)
    _, knees = decode.predict(ds, ceilings)
    table = claims.evaluate(ds, ceilings, SHEETS, knees)
    assert not table.reason.str.contains(claims.ANALYSIS_ERROR).any(), table.reason
    return table.set_index("claim")


@pytest.fixture(scope="module")
def gpu():
    return verdicts(fx.gpu_rows(seed=0))


def test_every_claim_has_a_check_and_a_row():
    assert list(claims.CLAIMS) and set(claims.CLAIMS) == set(CLAIM_IDS)
    assert len(CLAIM_IDS) == 20


def test_all_claims_hold_on_a_gpu_that_behaves_as_the_article_says(gpu):
    assert (gpu.verdict == HOLDS).all(), gpu[gpu.verdict != HOLDS][["verdict", "reason",
                                                                      "measurement"]]
    assert "H200 SXM" in gpu.loc["C8"].measurement  # matched to its datasheet by name
    assert "117 GFLOP/s" in gpu.loc["C13"].measurement  # the article's arithmetic


def test_cpu_gpu_claims_are_not_measurable_with_the_reason():
    table = verdicts(fx.cpu_rows(), fx.CPU)
    for cid in ("C1", "C2", "C3", "C4", "C5", "C6", "C7", "C20"):
        assert table.loc[cid].verdict == NOT_MEASURABLE
        assert "CPU" in table.loc[cid].reason, table.loc[cid].reason
    assert table.loc["C12"].reason == "no intensity rows"
    assert table.loc["C14"].reason == "no decode rows"
    assert table.loc["C10"].verdict == HOLDS  # x + 1 on the CPU: bandwidth x 0.125
    c19 = table.loc["C19"]
    assert "no Tensor Cores" in c19.reason and "GFLOP/s" in c19.measurement  # numbers still shown


def test_x_plus_one_slower_than_bandwidth_fails_c10():
    rows = fx.gpu_rows(seed=0)
    rows["bandwidth"] = fx.bandwidth_rows(fx.GPU, np.random.default_rng(0), add_one_factor=0.5)
    c10 = verdicts(rows).loc["C10"]
    assert c10.verdict == FAILS and "ratio 0.5" in c10.measurement


def test_synchronous_launches_fail_c5():
    rows = fx.gpu_rows(seed=0)
    for r in rows["timing"]:
        if r.get("variant") == "host_nosync":  # the host waited for every kernel
            event = next(e for e in rows["timing"] if e.get("variant") == "cuda_event"
                         and e["n"] == r["n"])
            r["time_s"] = event["time_s"] * 1.01
    table = verdicts(rows)
    assert table.loc["C5"].verdict == FAILS and table.loc["C1"].verdict == FAILS


def test_tensor_cores_no_faster_than_fp32_fail_c19():
    dev = fx.GPU | {"matrix": dict.fromkeys(fx.GPU["matrix"], 50e12)}
    rows = fx.gpu_rows(seed=0) | {"matmul": fx.matmul_rows(dev, np.random.default_rng(0))}
    c19 = verdicts(rows).loc["C19"]
    assert c19.verdict == FAILS and "best / FP32 = 1.0x" in c19.measurement


def test_launch_time_without_wave_steps_fails_c20():
    rows = fx.gpu_rows(seed=0)
    for r in rows["launch"]:
        r["time_s"] = 3e-6 + 12e-6 * r["n"] / 1024 / fx.GPU["sms"]  # linear in blocks: no steps
    assert verdicts(rows).loc["C20"].verdict == FAILS


def test_decode_knee_far_from_prediction_fails_c17():
    rows = fx.gpu_rows(seed=0)
    for r in rows["decode"]:
        if r["op"] == "gemv_gemm":  # 8x slower compute: the knee comes 8x earlier
            r["time_s"] = max(r["bytes"] / fx.GPU["dram_bw"],
                              8 * r["flops"] / fx.GPU["matrix"][r["dtype"]])
    c17 = verdicts(rows).loc["C17"]
    assert c17.verdict == FAILS and "knee predicted" in c17.measurement


def test_missing_experiment_is_named():
    rows = fx.gpu_rows(seed=0)
    del rows["decode"]
    table = verdicts(rows)
    for cid in ("C14", "C15", "C16", "C18"):
        assert table.loc[cid].verdict == NOT_MEASURABLE
        assert table.loc[cid].reason.startswith("no decode rows")


def test_rows_that_are_not_ok_say_their_status():
    rows = {"decode": [r | {"status": "unsupported", "message": "bf16 not here"}
                       for r in fx.decode_rows(fx.GPU, np.random.default_rng(0))]}
    reason = verdicts(rows).loc["C14"].reason
    assert "no ok decode rows" in reason and "unsupported" in reason and "bf16 not here" in reason
