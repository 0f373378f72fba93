"""Claim verdicts from synthetic rows: every measured claim holds on a GPU that behaves as the
article says, and fails on a fixture made to contradict it; worked examples follow the datasheet."""

import copy
import json
import math

import numpy as np
import pandas as pd
import pytest

from tests import analysis_fixtures as fx
from experiments import experiment_names
from experiments.analysis import claims, datasheets, dataset, roofline
from experiments.analysis import knees as decode
from experiments.steps.pipeline import DATASHEETS
from experiments.report.catalog import FIGURES
from experiments.analysis.claims import (ARTICLE, CLAIMS, FAILS, HOLDS, MEASURED,
                                         NOT_MEASURABLE, UNDECIDED, WORKED)

SHEETS = datasheets.load(DATASHEETS)


def _fitted(rows_by_experiment, dev=fx.GPU, knees=True):
    rows = [r for rows in rows_by_experiment.values() for r in rows]
    ds = dataset.from_rows(rows, {"f": fx.metadata(dev, "all") | {"source": "run"}})
    ceilings = roofline.fit(ds)
    return ds, ceilings, decode.predict(ds, ceilings)[1] if knees else None


def verdicts(rows_by_experiment, dev=fx.GPU, sheets=SHEETS):
    ds, ceilings, knees = _fitted(rows_by_experiment, dev)
    table = claims.evaluate(ds, ceilings, sheets, knees)
    assert not table.reason.str.contains(claims.ANALYSIS_ERROR).any(), table.reason
    return table


def verdict(rows_by_experiment, cid: str, dev=fx.GPU, sheets=SHEETS):
    """The measured verdict of one claim, judged as `evaluate` judges it (the other claims'
    checks are not run: they read the same rows and would only cost time)."""
    # only the decode claims read the knees (a bootstrap per curve): the others skip them
    ds, ceilings, knees = _fitted(rows_by_experiment, dev, "decode" in CLAIMS[cid].experiments)
    (system,) = claims.systems(ds, ceilings, sheets, knees)
    r = claims.judge(CLAIMS[cid], system)
    assert claims.ANALYSIS_ERROR not in r["reason"], r["reason"]
    return pd.Series(r)


def measured(table):
    return table[table.kind == MEASURED].set_index("claim")


@pytest.fixture(scope="module")
def gpu():
    return verdicts(fx.gpu_rows(seed=0))


def test_every_claim_is_registered_once_with_its_texts():
    assert sorted(CLAIMS, key=lambda c: int(c[1:])) == [f"C{i}" for i in range(1, 21)]
    for c in CLAIMS.values():
        assert c.en and c.zh and c.prediction, c.id
        assert set(c.experiments) <= set(experiment_names()), c.id  # experiments: one registry
        assert not c.figure or c.figure in FIGURES, c.id  # figures: the catalog
        if c.check is not None:
            assert c.fails_if, f"{c.id} says what would make it fail"
        else:
            assert claims.WORKED_EXAMPLES.get(c.id), f"{c.id} has neither check nor arithmetic"


def test_all_measured_claims_hold_on_a_gpu_that_behaves_as_the_article_says(gpu):
    table = measured(gpu)
    assert (table.verdict == HOLDS).all(), table[table.verdict != HOLDS][
        ["verdict", "reason", "measurement"]]
    assert set(table.index) == {c.id for c in CLAIMS.values() if c.check is not None}
    assert "H200 SXM" in table.loc["C8"].measurement  # matched to its datasheet by name
    for _, r in table.iterrows():  # every measured verdict names its metric, value and rows
        assert r.metric and r.threshold and r.used and math.isfinite(r.value), r


def test_worked_examples_are_apart_and_reproduce_the_article(gpu):
    worked = gpu[gpu.kind == WORKED]
    assert set(worked.claim) == {"C8", "C10", "C11", "C13", "C14", "C15", "C17"}
    assert (worked.verdict == WORKED).all() and (worked.system == ARTICLE).all()
    assert worked.measurement.str.endswith("as the article says").all(), worked.measurement
    assert "117 GFLOP/s" in worked.set_index("claim").loc["C13"].measurement
    assert not (gpu[gpu.kind == MEASURED].verdict == WORKED).any()


@pytest.mark.parametrize("cid, field, scale", [("C8", "bandwidth_Bps", 2), ("C13", "bandwidth_Bps",
                                                                             2),
                                               ("C17", "bandwidth_Bps", 0.5)])
def test_a_changed_datasheet_number_changes_the_worked_example(gpu, cid, field, scale):
    sheets = copy.deepcopy(SHEETS)
    ref = datasheets.by_name(sheets, datasheets.ARTICLE_DEVICE)
    setattr(ref, field, getattr(ref, field) * scale)
    before = gpu[(gpu.kind == WORKED) & (gpu.claim == cid)].iloc[0]
    after = claims.worked(CLAIMS[cid], sheets)[0]
    assert not math.isclose(after["value"], before.value, rel_tol=1e-3)
    assert "the article says" in after["measurement"]  # no longer the article's number


# --- one fixture per measured claim where it must fail -----------------------------------------

def _timing_sync(rows):
    for r in rows["timing"]:
        if r.get("variant") == "host_nosync":  # the host waited for every kernel
            event = next(e for e in rows["timing"] if e.get("variant") == "cuda_event"
                         and e["n"] == r["n"])
            r["time_s"] = event["time_s"] * 1.01


def _no_kernel(rows):
    for r in rows["timing"]:
        if r["op"] == "dispatch":  # the profiler saw the op launch nothing on the device
            r["params"] = json.dumps(json.loads(r["params"]) | {"kernel_names": []})


def _host_clock_exact(rows):
    events = {e["n"]: e for e in rows["timing"] if e.get("variant") == "cuda_event"}
    for r in rows["timing"]:
        if r.get("variant") == "host_sync":  # as exact and as steady as the events
            r["time_s"], r["cv"] = events[r["n"]]["time_s"], events[r["n"]]["cv"] / 2


def _stream_wrong(rows):
    for r in rows["timing"]:
        if r["op"] == "stream_order":
            r.update(status="wrong_result", check_passed=False, message="read stale data")


def _h2d_fast(rows):
    for r in rows["transfer"]:
        if "h2d" in str(r.get("variant")) and r["op"] == "transfer":
            r["time_s"] = r["bytes"] / (fx.GPU["dram_bw"] / 2)


def _create_slow(rows):
    move = {r["n"]: r["time_s"] for r in rows["transfer"] if r["op"] == "move_to_device"}
    for r in rows["transfer"]:
        if r["op"] == "create_on_device":
            r["time_s"] = 2 * move[r["n"]]


def _scalar_raises(rows):
    for r in rows["transfer"]:
        if r["op"] == "cross_device" and r["variant"] == "scalar_cpu_plus_cuda":
            r["params"] = json.dumps(json.loads(r["params"]) | {"raised": True,
                                                                "error_type": "RuntimeError"})


def _bandwidth_slow(rows):
    for r in rows["bandwidth"]:
        r["time_s"] /= 0.3


def _no_oom(rows):
    ws = 2 * fx.GPU["memory_bytes"]  # an allocation past capacity that runs at full speed
    rows["bandwidth"].append(fx._row(fx.GPU, "bandwidth", "copy", "float32",
                                     ws / fx.GPU["dram_bw"], 0, ws, n=ws // 8))
    rows["matmul"] = [r for r in rows["matmul"] if r["status"] != "oom"]


def _add_one(factor):
    def mutate(rows):
        rows["bandwidth"] = fx.bandwidth_rows(fx.GPU, np.random.default_rng(0),
                                              add_one_factor=factor)
    return mutate


def _gemm_slow(rows):
    for r in rows["matmul"]:
        if r["dtype"] == "float32":
            r["time_s"] *= 10


def _above_roof(rows):
    for r in rows["intensity"]:
        ridge = fx.GPU["vector"][r["dtype"]] / fx.GPU["dram_bw"]
        if r["flops"] / r["bytes"] < ridge / 2:  # the memory side runs 2x above its roof
            r["time_s"] /= 2


def _batch_no_reuse(rows):
    t1 = {(r["dtype"], r["n"]): r["time_s"] for r in rows["decode"]
          if r["op"] == "gemv_gemm" and r["batch"] == 1}
    for r in rows["decode"]:
        if r["op"] == "gemv_gemm":  # b sequences cost b GEMVs: nothing shared
            r["time_s"] = r["batch"] * t1[(r["dtype"], r["n"])]


def _knee_early(rows):
    for r in rows["decode"]:
        if r["op"] == "gemv_gemm":  # 8x slower compute: the knee comes 8x earlier
            r["time_s"] = max(r["bytes"] / fx.GPU["dram_bw"],
                              8 * r["flops"] / fx.GPU["matrix"][r["dtype"]])


def _decode_block_slow(rows):
    for r in rows["decode"]:
        if r["op"] == "block_decode":
            r["time_s"] *= 10


def _tensor_cores_slow(rows):
    dev = fx.GPU | {"matrix": dict.fromkeys(fx.GPU["matrix"], 50e12)}
    rows["matmul"] = fx.matmul_rows(dev, np.random.default_rng(0))


def _no_waves(rows):
    for r in rows["launch"]:
        r["time_s"] = 3e-6 + 12e-6 * r["n"] / 1024 / fx.GPU["sms"]  # linear in blocks


FAILING = {"C1": _no_kernel, "C5": _timing_sync, "C6": _host_clock_exact, "C7": _stream_wrong,
           "C2": _h2d_fast, "C3": _create_slow, "C4": _scalar_raises, "C8": _bandwidth_slow,
           "C9": _no_oom, "C10": _add_one(0.5), "C11": _gemm_slow, "C12": _above_roof,
           "C13": _add_one(1.5), "C14": _batch_no_reuse, "C16": _batch_no_reuse,
           "C17": _knee_early, "C18": _decode_block_slow, "C19": _tensor_cores_slow,
           "C20": _no_waves}


def test_every_measured_claim_has_a_fixture_where_it_fails():
    checked = {c.id for c in CLAIMS.values() if c.check is not None}
    assert checked == set(FAILING), checked ^ set(FAILING)


@pytest.mark.parametrize("cid", sorted(FAILING, key=lambda c: int(c[1:])))
def test_claim_fails_when_the_rows_contradict_it(cid):
    rows = fx.gpu_rows(seed=0)
    FAILING[cid](rows)
    r = verdict(rows, cid)
    assert r.verdict == FAILS, (r.verdict, r.reason, r.measurement)


# --- not measurable, with the reason ------------------------------------------------------------

def test_cpu_gpu_claims_are_not_measurable_with_the_reason():
    table = measured(verdicts(fx.cpu_rows(), fx.CPU))
    for cid in ("C1", "C2", "C3", "C4", "C5", "C6", "C7", "C20"):
        assert table.loc[cid].verdict == NOT_MEASURABLE
        assert "CPU" in table.loc[cid].reason, table.loc[cid].reason
    assert table.loc["C12"].reason == "no intensity rows"
    assert table.loc["C14"].reason == "no decode rows"
    # x + 1 on the CPU, at copy/scale bandwidth x 0.125: within the CPU's repeat spread of DRAM
    # bandwidth (plateaus.RUN_TO_RUN) of its bound, so undecided (without it: test_undecided.py)
    assert table.loc["C10"].verdict == UNDECIDED, table.loc["C10"].measurement
    c19 = table.loc["C19"]
    assert "no Tensor Cores" in c19.reason and "GFLOP/s" in c19.measurement  # numbers still shown
    assert "no datasheet entry" in table.loc["C8"].reason  # no reference: not a "holds"


def test_eagerly_timed_decode_block_is_not_judged_memory_bound():
    rows = fx.gpu_rows(seed=0)
    for r in rows["decode"]:
        if r["op"] == "block_decode":
            r["timer"] = "cuda_event"
    c18 = measured(verdicts(rows)).loc["C18"]
    # the claim is about both phases: a judged prefill alone does not make it hold
    assert c18.verdict == NOT_MEASURABLE and "eager launches" in c18.measurement


def test_transfer_not_timed_apart_from_randn_is_not_measurable():
    rows = fx.gpu_rows(seed=0)
    rows["transfer"] = [r for r in rows["transfer"] if r["op"] != "move_to_device"]
    c3 = measured(verdicts(rows)).loc["C3"]
    assert c3.verdict == NOT_MEASURABLE and "random-number" in c3.reason


def test_c4_lists_each_case_and_whether_it_raised(gpu):
    text = measured(gpu).loc["C4"].measurement
    assert "a CPU tensor plus a CUDA tensor: raised RuntimeError" in text
    assert "0-dim CPU tensor plus a CUDA tensor: did not raise" in text


def test_c19_reports_input_rounding_and_arithmetic_apart(gpu):
    text = measured(gpu).loc["C19"].measurement
    assert "inputs rounded 3.5e-02" in text and "arithmetic" in text


def test_missing_experiment_is_named():
    rows = fx.gpu_rows(seed=0)
    del rows["decode"]
    table = measured(verdicts(rows))
    for cid in ("C14", "C16", "C17", "C18"):
        assert table.loc[cid].verdict == NOT_MEASURABLE
        assert table.loc[cid].reason.startswith("no decode rows")


def test_rows_that_are_not_ok_say_their_status():
    rows = {"decode": [r | {"status": "unsupported", "message": "bf16 not here"}
                       for r in fx.decode_rows(fx.GPU, np.random.default_rng(0))]}
    reason = measured(verdicts(rows)).loc["C14"].reason
    assert "no ok decode rows" in reason and "unsupported" in reason and "bf16 not here" in reason
    assert "{" not in reason  # no raw Python dicts for readers


def test_a_system_with_no_claim_experiment_gets_no_verdicts():
    rows = fx.gpu_rows(seed=0)
    other = fx.GPU | {"host": "gpu2gpu-only"}
    rows["peer_copy"] = [fx._row(other, "peer_copy", "copy_engine", "float32", 1e-3, 0, 2**30,
                                 n=2**28, variant="uni")]
    table = verdicts(rows)
    assert not table.system.str.contains("gpu2gpu-only").any()
    assert (table[table.kind == MEASURED].system.str.contains("h200-ref")).all()


def test_a_verdict_is_under_load_only_where_its_points_were():
    rows = fx.gpu_rows(seed=0)
    for r in rows["timing"]:  # host-clocked kernels while other processes used half the CPUs
        if r.get("variant") == "host_sync":
            r.update(other_cpu_share=0.5, timer="perf_counter_sync")
    for r in rows["matmul"]:  # timed by CUDA events: a busy host does not disturb them
        r.update(other_cpu_share=0.5)
    table = measured(verdicts(rows))
    c6 = table.loc["C6"]
    assert c6.under_load and c6.points_contended == 4
    assert "under load: 4 of the" in c6.measurement
    for cid in ("C19", "C11", "C17", "C2"):
        assert not table.loc[cid].under_load and "under load" not in table.loc[cid].measurement


def test_roofline_claim_reads_the_bandwidth_of_its_own_traffic():
    """The FMA chain moves a copy's traffic (one read, one write). A triad 40 % faster sets the
    DRAM ceiling (a CPU's write-allocate), but C12 judges the chain against copy and scale: it
    still holds, and still fails when the chain's memory side runs above that roof."""
    rows = fx.gpu_rows(seed=0)
    for r in rows["bandwidth"]:
        if r["op"] == "triad":
            r["time_s"] /= 1.4
    assert verdict(rows, "C12").verdict == HOLDS
    _above_roof(rows)
    assert verdict(rows, "C12").verdict == FAILS


def test_a_roof_point_is_judged_against_the_roof_the_other_points_set():
    """C12 on a CPU: its FMA roof is the plateau's best point, so the point that sets it could
    never lie above it. Each point is judged against the roof fitted without it."""
    import pandas as pd

    from experiments.analysis.claims import intensity_roofline
    fmas = np.array([1, 2, 4, 8, 16, 64, 128, 256, 512, 1024])
    gflops = np.array([8.8, 17.5, 33.8, 60.0, 80.0, 100.0, 104.0, 96.0, 150.0, 101.0])
    g = pd.DataFrame({"dtype": "float64", "variant": "numba", "intensity": fmas / 8,
                      "flop_per_s": gflops * 1e9, "device_kind": "cpu",
                      "timer": "perf_counter", "time_s": 1.0, "time_s_min": 1.0})
    peaks = intensity_roofline._peaks_without_each(g, 150e9)
    assert peaks[8] == pytest.approx(104e9)  # the 150 point, against the others' best
    assert np.allclose(np.delete(peaks, 8), 150e9)
