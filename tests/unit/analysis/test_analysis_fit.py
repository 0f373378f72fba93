"""The roofline fit recovers known ceilings from synthetic noisy rows, within its intervals."""

import math

import numpy as np
import pandas as pd
import pytest

from tests import analysis_fixtures as fx
from experiments.analysis import dataset, roofline
from experiments.analysis import knees as decode



@pytest.fixture
def no_run_to_run_floor(monkeypatch):
    """The plateau's own interval, before plateaus.repeatable widens it
    (tests/unit/analysis/test_repeatable.py)."""
    from experiments.analysis import plateaus

    for kind, floors in plateaus.RUN_TO_RUN.items():
        monkeypatch.setitem(plateaus.RUN_TO_RUN, kind, dict.fromkeys(floors, 0.0))

def _fit(rows_by_experiment, dev=fx.GPU):
    rows = [r for rows in rows_by_experiment.values() for r in rows]
    files = {"f": fx.metadata(dev, "all") | {"source": "run"}}
    ds = dataset.from_rows(rows, files)
    return ds, roofline.fit(ds)


def _ceiling(table, name, dtype=None):
    c = table[(table.ceiling == name) & ((table.dtype == dtype) if dtype else table.dtype.isna())]
    assert len(c) == 1, table[["ceiling", "dtype", "value", "note"]]
    return c.iloc[0]


def _within(c, truth):
    assert c.ci_low <= truth <= c.ci_high, (c.ceiling, c.dtype, c.value, c.ci_low, c.ci_high)
    assert math.isclose(c.value, truth, rel_tol=0.05)


@pytest.fixture(scope="module")
def gpu():
    return _fit(fx.gpu_rows(seed=0))


def test_bandwidth_plateaus_recovered(gpu):
    _, table = gpu
    _within(_ceiling(table, "dram_bw"), fx.GPU["dram_bw"])
    _within(_ceiling(table, "l2_bw"), fx.GPU["l2_bw"])
    assert _ceiling(table, "l2_bw").capacity_bytes == fx.GPU["l2_bytes"]


@pytest.mark.parametrize("dtype", ["float32", "tf32", "bfloat16", "float8_e4m3"])
def test_matrix_ceiling_recovered(gpu, dtype):
    _within(_ceiling(gpu[1], "matrix_flops", dtype), fx.GPU["matrix"][dtype])


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_roof_fit_recovers_vector_peak_and_bandwidth(dtype):
    """Within 5 % every time, and a 95 % interval that covers the truth nearly every time: one
    draw can put all five compute-bound points above the truth (p = 1/32), so count over seeds."""
    hits = {"vector_flops": 0, "intensity_bw": 0}
    for seed in range(10):
        _, table = _fit({"intensity": fx.intensity_rows(fx.GPU, np.random.default_rng(seed))})
        for name, truth in (("vector_flops", fx.GPU["vector"][dtype]),
                            ("intensity_bw", fx.GPU["dram_bw"])):
            c = _ceiling(table, name, dtype)
            assert math.isclose(c.value, truth, rel_tol=0.05), (name, seed, c.value)
            hits[name] += c.ci_low <= truth <= c.ci_high
    assert min(hits.values()) >= 8, hits


def test_ridge_is_ceiling_over_bandwidth(gpu):
    _, table = gpu
    ridge = _ceiling(table, "ridge_matrix", "bfloat16")
    truth = fx.GPU["matrix"]["bfloat16"] / fx.GPU["dram_bw"]
    assert ridge.ci_low <= truth <= ridge.ci_high
    assert ridge.unit == "FLOP/B"


def test_bandwidth_interval_covers_truth_over_seeds():
    """A 95 % interval: over 10 noise draws it covers the truth nearly every time."""
    hits = 0
    for seed in range(10):
        rng = np.random.default_rng(seed)
        _, table = _fit({"bandwidth": fx.bandwidth_rows(fx.GPU, rng, ("float32",))})
        c = _ceiling(table, "dram_bw")
        hits += c.ci_low <= fx.GPU["dram_bw"] <= c.ci_high
    assert hits >= 8


def test_cache_level_without_a_step_is_not_reported():
    """A CPU whose L2-resident sizes are no faster than DRAM shows no L2 plateau: say why."""
    dev = fx.CPU | {"l2_bw": fx.CPU["dram_bw"] * 1.05}
    _, table = _fit({"bandwidth": fx.bandwidth_rows(dev, np.random.default_rng(0), ("float32",))},
                    dev)
    l2 = _ceiling(table, "l2_bw")
    assert math.isnan(l2.value) and "no plateau of its own" in l2.note
    assert not math.isnan(_ceiling(table, "dram_bw").value)


def test_missing_experiments_are_rows_with_a_reason():
    _, table = _fit({"bandwidth": fx.bandwidth_rows(fx.GPU, np.random.default_rng(0))})
    for name, why in (("matrix_flops", "no matmul rows"), ("vector_flops", "no intensity rows")):
        c = _ceiling(table, name)
        assert math.isnan(c.value) and c.note == why


def test_roof_fit_refuses_a_sweep_that_never_reaches_the_compute_roof():
    rows = [r for r in fx.intensity_rows(fx.GPU, np.random.default_rng(0)) if r["flops"] /
            r["bytes"] < 3]
    _, table = _fit({"intensity": rows})
    c = _ceiling(table, "vector_flops", "float32")
    assert math.isnan(c.value) and "not identified" in c.note


def test_decode_knee_predicted_and_measured(gpu):
    ds, table = gpu
    per_row, knees = decode.predict(ds, table)
    for _, k in knees.iterrows():
        s = fx.ITEM[k["dtype"]]
        truth_ridge = fx.GPU["matrix"][k["dtype"]] / fx.GPU["dram_bw"]
        assert math.isclose(k.predicted, truth_ridge * s / 2, rel_tol=0.15), k
        assert 0.5 <= k.measured / k.predicted <= 2, k
    assert set(per_row.bound) == {"memory", "compute"}


def test_noisy_points_never_enter_a_fit():
    rows = fx.matmul_rows(fx.GPU, np.random.default_rng(0))
    for r in rows:
        if r["dtype"] == "bfloat16" and r["n"] >= 2048:  # the whole plateau, noisy
            r["noisy"] = True
    _, table = _fit({"matmul": rows})
    c = _ceiling(table, "matrix_flops", "bfloat16")
    # what is left is the rising part of the curve: one top point, so no ceiling at all
    assert math.isnan(c.value) and "left out 6 noisy" in c.note, c.note


def test_a_ceiling_whose_points_were_all_dropped_is_still_a_row_saying_why():
    rows = fx.matmul_rows(fx.GPU, np.random.default_rng(0))
    for r in rows:
        if r["dtype"] == "float32" and r["status"] == "ok":  # every float32 point, noisy
            r["noisy"] = True
    _, table = _fit({"matmul": rows})
    c = _ceiling(table, "matrix_flops", "float32")
    assert math.isnan(c.value) and c.method == "not fitted", c
    assert "10 of 10 dropped" in c.note and "9 noisy" in c.note and "1 oom" in c.note, c.note
    assert not math.isnan(_ceiling(table, "matrix_flops", "bfloat16").value)
    # and when no dtype has a point left: still one row per dtype aimed at, not one for none
    for r in rows:
        r["noisy"] = r["status"] == "ok"
    _, table = _fit({"matmul": rows})
    for dtype in fx.GPU["matrix"]:
        c = _ceiling(table, "matrix_flops", dtype)
        assert math.isnan(c.value) and "noisy" in c.note, c.note
    assert table[(table.ceiling == "matrix_flops") & table.dtype.isna()].empty


def test_no_ceiling_from_a_single_point():
    rows = [r for r in fx.matmul_rows(fx.GPU, np.random.default_rng(0), sizes=(256, 4096))
            if r["status"] == "ok"]
    _, table = _fit({"matmul": rows})
    c = _ceiling(table, "matrix_flops", "float32")
    assert math.isnan(c.value) and "single point" in c.note


def test_degenerate_ridge_and_knee_are_not_numbers():
    slow = fx.GPU | {"matrix": {"bfloat16": 1e9, "float32": 50e12}}  # bf16 GEMM at 1 GFLOP/s
    rows = {"bandwidth": fx.bandwidth_rows(slow, np.random.default_rng(0)),
            "matmul": fx.matmul_rows(slow, np.random.default_rng(0)),
            "decode": fx.decode_rows(slow, np.random.default_rng(0), dtypes=("bfloat16",))}
    ds, table = _fit(rows)
    ridge = _ceiling(table, "ridge_matrix", "bfloat16")
    assert math.isnan(ridge.value) and "degenerate" in ridge.note
    _, knees = decode.predict(ds, table)
    # a knee under 1 is no knee, said as the workload knees say it, with no number in e-notation
    assert knees.predicted.isna().all() and knees.predicted_note.str.startswith(
        decode.NO_KNEE).all()
    assert not knees.predicted_note.str.contains(r"\de[+-]?\d|-0\.0|knee -", regex=True).any()


def test_a_lone_top_compute_point_does_not_set_the_roof_alone():
    # the node's fp64 sweep: 581, 638, 839 (one fast sample run), 676 GFLOP/s past the ridge;
    # a plateau of one point would make 839 the roof, with no interval
    import pandas as pd
    fmas = np.array([1, 2, 4, 8, 16, 128, 256, 512, 1024])
    gflops = np.array([8.8, 17.5, 33.8, 72.6, 137.0, 581.0, 638.0, 839.0, 676.0])
    rows = pd.DataFrame({"dtype": "float64", "variant": "numba", "intensity": fmas / 8,
                         "flop_per_s": gflops * 1e9})
    roof = next(c for c in roofline.fit_roof(rows) if c["ceiling"] == "vector_flops")
    assert roof["value"] == pytest.approx((839.0 + 676.0) / 2 * 1e9)
    assert roof["ci_low"] == pytest.approx(676e9) and roof["ci_high"] == pytest.approx(839e9)


def _bandwidth(dev, op_factor: dict, seed=0):
    rows = fx.bandwidth_rows(dev, np.random.default_rng(seed), ("float32",))
    for r in rows:
        r["time_s"] /= op_factor.get(r["op"], 1.0)  # this op moves factor x the bandwidth
    return rows


def test_dram_is_the_fastest_ops_plateau_and_a_slower_op_does_not_cut_it():
    """A CPU's copy-like ops read each written line too (uncounted): DRAM is the op that moves
    the most (triad here, 25 % above the rest), not their mix, and the slower ops' largest
    working sets do not cut the triad's points as LLC shadow."""
    dev = fx.CPU
    ds, table = _fit({"bandwidth": _bandwidth(dev, {"triad": 1.25})}, dev)
    dram = _ceiling(table, "dram_bw")
    assert math.isclose(dram.value, 1.25 * dev["dram_bw"], rel_tol=0.05), dram.value
    assert "of triad" in dram.method
    # the reference a claim takes from some ops alone stays their pooled plateau
    copy = ds.rows[ds.rows.op.isin(["copy", "scale"])]
    pooled = roofline.dram_ceiling(copy, ds.facts(ds.rows.system.iloc[0]))
    assert math.isclose(pooled["value"], dev["dram_bw"], rel_tol=0.05), pooled["value"]


def _with_a_fast_minimum(rows, timer):
    """Every sample but the best was slowed 30 % (other load): the median says 1.3x the time."""
    for r in rows:
        r["time_s_min"], r["time_s"], r["timer"] = r["time_s"], 1.3 * r["time_s"], timer
    return rows


def test_a_host_clocked_cpu_point_is_fitted_on_its_best_time_a_gpu_point_on_its_median():
    cpu = _with_a_fast_minimum(fx.matmul_rows(fx.CPU, np.random.default_rng(0),
                                              (256, 512, 1024, 2048, 3072)), "perf_counter")
    _, table = _fit({"matmul": cpu}, fx.CPU)
    _within(_ceiling(table, "matrix_flops", "float32"), fx.CPU["matrix"]["float32"])
    gpu = _with_a_fast_minimum(fx.matmul_rows(fx.GPU, np.random.default_rng(0)), "cuda_event")
    _, table = _fit({"matmul": gpu})
    c = _ceiling(table, "matrix_flops", "float32")
    assert math.isclose(c.value, fx.GPU["matrix"]["float32"] / 1.3, rel_tol=0.05), c.value


@pytest.mark.usefixtures("no_run_to_run_floor")
def test_a_cpu_gemm_ceiling_is_its_plateaus_best_point_a_gpus_its_median():
    """A CPU library's GEMM sizes step with its blocking (the node's bfloat16: 3.67-4.05 TFLOP/s
    over its plateau): a host-clocked plateau's ceiling is its best point, its interval the
    plateau's range; a GPU plateau keeps its median."""
    def stepped(dev, timer):
        rows = fx.matmul_rows(dev, np.random.default_rng(0), (256, 512, 2048, 3072, 4096, 6144))
        slower = {2048: 1.02, 3072: 1.08, 4096: 1.0, 6144: 1.05}  # 4096 is the library's best
        for r in rows:
            r["time_s"] *= slower.get(r.get("n"), 1.0)
            r["time_s_min"], r["timer"] = r["time_s"], timer
        rates = {r["n"]: r["flops"] / r["time_s"] for r in rows
                 if r.get("n") in slower and r["dtype"] == "float32"}
        return rows, rates

    cpu, rates = stepped(fx.CPU, "perf_counter")
    _, table = _fit({"matmul": cpu}, fx.CPU)
    c = _ceiling(table, "matrix_flops", "float32")
    assert c.n_points == 4 and math.isclose(c.value, rates[4096], rel_tol=1e-9), (c.value, rates)
    assert (c.ci_low, c.ci_high) == pytest.approx((min(rates.values()), rates[4096]), rel=1e-9)
    assert c.value > np.median(list(rates.values())) * 1.02
    gpu, rates = stepped(fx.GPU, "cuda_event")
    _, table = _fit({"matmul": gpu})
    c = _ceiling(table, "matrix_flops", "float32")
    assert math.isclose(c.value, np.median(list(rates.values())), rel_tol=1e-9), (c.value, rates)


@pytest.mark.usefixtures("no_run_to_run_floor")
def test_a_cpu_gemm_lone_top_is_fitted_with_what_it_may_be():
    """A host-clocked GEMM whose lone top point is a middle size (the node's float16: 1.34
    TFLOP/s at 1024, 1.00-1.08 from 2048 to 8192) came down after it: that point is the ceiling,
    the next best its interval's low end. One whose lone top is its largest size is fitted the
    same way, with a note: a burst where its calls spread wide (noisy), else a curve that may
    still rise (the ceiling is at least this)."""
    def ceiling(slower, noisy=()):
        rows = fx.matmul_rows(fx.CPU, np.random.default_rng(0), (256, 512, 1024, 2048, 4096))
        for r in rows:
            r["time_s"] *= slower.get(r.get("n"), 1.0)
            r["time_s_min"], r["timer"] = r["time_s"], "perf_counter"
            r["noisy"] = r.get("n") in noisy
        rates = {r["n"]: r["flops"] / r["time_s"] for r in rows if r["dtype"] == "float32"}
        return _ceiling(_fit({"matmul": rows}, fx.CPU)[1], "matrix_flops", "float32"), rates

    c, rates = ceiling({1024: 0.4})  # 1024 alone on top (its blocking), larger sizes lower
    assert math.isclose(c.value, rates[1024], rel_tol=1e-9), (c.value, rates)
    assert (c.ci_low, c.ci_high) == pytest.approx((max(rates[2048], rates[4096]), rates[1024]),
                                                  rel=1e-9)
    for noisy in ((), {2048}):  # 4096 alone on top, steady (a noisy point below says nothing)
        c, rates = ceiling({2048: 1.5}, noisy=noisy)
        below = max(v for n, v in rates.items() if n < 4096)
        assert math.isclose(c.value, rates[4096], rel_tol=1e-9), (c.value, rates)
        assert (c.ci_low, c.ci_high) == pytest.approx((below, rates[4096]), rel=1e-9)
        assert "at least this" in c.note and "n = 4096" in c.note and "burst" not in c.note
    c, rates = ceiling({2048: 1.5}, noisy={4096})  # 4096 alone on top, its calls spread wide
    assert math.isclose(c.value, rates[4096], rel_tol=1e-9), (c.value, rates)
    assert (c.ci_low, c.ci_high) == pytest.approx((max(v for n, v in rates.items() if n < 4096),
                                                   rates[4096]), rel=1e-9)
    assert "burst" in c.note and "n = 4096" in c.note, c.note


def test_load_never_raises_a_cpu_gemm_ceiling():
    """Other load only slows a host-clocked point: slowing any of its points by up to 3x (any
    seed) never lifts the best-point ceiling above the quiet one's, and the plateau's top point
    slowed lowers it."""
    def ceiling(slow):
        rows = fx.matmul_rows(fx.CPU, np.random.default_rng(0), (256, 512, 2048, 3072, 4096))
        for r, f in zip(rows, slow):
            r["time_s"] *= f
            r["time_s_min"], r["timer"] = r["time_s"], "perf_counter"
        return _ceiling(_fit({"matmul": rows}, fx.CPU)[1], "matrix_flops", "float32").value

    quiet = ceiling([1.0] * 6)
    for seed in range(20):
        slow = np.exp(np.random.default_rng(seed).uniform(0, math.log(3), 6))
        got = ceiling(slow)
        assert math.isnan(got) or got <= quiet * (1 + 1e-9), (seed, got, quiet)
    assert ceiling([1.0, 1.0, 1.0, 1.0, 1.5, 1.0]) < quiet  # 4096, the fastest, slowed


def test_a_noisy_cpu_point_counts_at_its_best_time_a_contended_one_never():
    """`noisy` is a wide spread around the median, which a best time does not read; `contended`
    (other load seen during the point) drops it whatever its timer."""
    rows = _with_a_fast_minimum(fx.matmul_rows(fx.CPU, np.random.default_rng(0),
                                               (256, 512, 1024, 2048, 3072)), "perf_counter")
    for r in rows:
        r["noisy"] = r.get("n", 0) >= 2048
    _, table = _fit({"matmul": rows}, fx.CPU)
    c = _ceiling(table, "matrix_flops", "float32")
    assert c.n_points >= 2 and not isinstance(c.note, str), (c.n_points, c.note)
    for r in rows:
        r["noisy"], r["contended"] = False, r.get("n", 0) >= 2048
    _, table = _fit({"matmul": rows}, fx.CPU)
    c = _ceiling(table, "matrix_flops", "float32")
    assert math.isnan(c.value) and "contended" in c.note, (c.value, c.note)


def test_a_published_sets_measured_knees_are_read_from_its_folder_not_bootstrapped(tmp_path):
    """A run merges published sets: their decode knees come from the set's knees.parquet (which
    the published folder re-renders to at every commit), keyed to the merged system's name; a
    system of this run, or a set with no such file, is bootstrapped."""
    rng = np.random.default_rng(0)
    folder = tmp_path / "published" / "ref"
    parts = fx.write_files(folder / "parts", {"decode": fx.decode_rows(fx.GPU, rng)}, fx.GPU)
    dataset.collect(parts, out=folder / "measurements.parquet", log=lambda m: None)
    own = dataset.load(folder / "measurements.parquet")
    _, own_knees = decode.predict(own, roofline.fit(own))
    marked = own_knees.assign(measured=own_knees.measured + 1000.0)  # none a bootstrap would give
    marked.to_parquet(folder / "knees.parquet")
    mine = fx.write_files(tmp_path / "run", {"decode": fx.decode_rows(fx.CPU | {"matrix": {
        "bfloat16": 2e12, "float32": 1e12}}, rng)}, fx.CPU)
    dataset.collect(mine, published=[folder / "measurements.parquet"],
                    out=tmp_path / "merged.parquet", log=lambda m: None)
    ds = dataset.load(tmp_path / "merged.parquet")
    known = decode.reused(ds, "knees", ["dtype", "C"])
    _, knees = decode.predict(ds, roofline.fit(ds), known)
    published = knees[knees.system.str.endswith("[published:ref]")]
    assert len(published) == len(own_knees) and len(known) == len(own_knees)
    assert (published.measured.dropna() > 999).all() and published.measured.notna().any()
    run = knees[~knees.system.str.contains("published")]
    assert len(run) and not (run.measured.dropna() > 999).any()  # bootstrapped here
    (folder / "knees.parquet").unlink()
    assert decode.reused(ds, "knees", ["dtype", "C"]) == {}


def test_lookup_takes_the_first_fitted_row_and_sees_a_new_table():
    """lookup's index (built once per table) answers as a mask over the table would: a
    not-fitted row is skipped, dtype None takes any dtype, and another table gets its own."""
    table = pd.DataFrame({
        "system": ["a", "a", "a", "b"], "ceiling": ["matrix_flops"] * 3 + ["dram_bw"],
        "dtype": ["float32", "float32", "bfloat16", None], "value": [math.nan, 2.0, 3.0, 5.0]})
    assert roofline.value(table, "a", "matrix_flops", "float32") == 2.0  # the NaN row skipped
    assert roofline.value(table, "a", "matrix_flops") == 2.0  # any dtype: the first fitted
    assert roofline.value(table, "a", "matrix_flops", "bfloat16") == 3.0
    assert roofline.value(table, "b", "dram_bw") == 5.0
    assert roofline.lookup(table, "b", "dram_bw", "float32") is None
    assert roofline.lookup(table, "c", "dram_bw") is None
    other = table.assign(value=[1.0, 2.0, 3.0, 7.0])
    assert roofline.value(other, "a", "matrix_flops", "float32") == 1.0
    assert roofline.value(other, "b", "dram_bw") == 7.0
