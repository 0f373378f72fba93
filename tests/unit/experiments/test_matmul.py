import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from experiments import matmul
from experiments.core import harness
from experiments.core.config import Settings
from experiments.core.dtypes import torch_dtype

SETTINGS = Settings.defaults()
# a CPU point ends with its cores' clock (kernels/cpu_clock.py): on this process's CPUs
FACTS = SimpleNamespace(extra={})
# a CPU point samples steady_s (0.3 s) at least; these tests read its rows, not its speed
# (test_a_cpu_gemm_point_samples_at_least_steady_s keeps the rule)
QUICK = "experiment.steady_s=0"


def test_matmul_counts_work_and_checks_against_float64(run_experiment):
    rows = run_experiment("matmul", "float32", ["experiment.sizes=[96,32,64]", QUICK])
    assert list(rows.n) == [32, 64, 96]  # measured smallest first, whatever the config order
    assert (rows.status == "ok").all(), rows[["n", "status", "message"]]
    n = rows.n.to_numpy(float)
    np.testing.assert_array_equal(rows.flops, 2 * n**3)
    np.testing.assert_array_equal(rows.bytes, 3 * n * n * 4)  # A, B read once, C written once
    np.testing.assert_allclose(rows.intensity, 2 * n**3 / (12 * n * n))
    assert rows.check_passed.all() and (rows.rel_error < 1e-5).all() and (rows.rel_error > 0).all()
    np.testing.assert_allclose(rows.flop_per_s, rows.flops / rows.time_s)
    # float32 storage: nothing is cast, so the whole error is the arithmetic's
    params = rows.params.map(json.loads)
    assert all(p["input_rounding_error"] == 0 for p in params)
    assert [p["arithmetic_error"] for p in params] == list(rows.rel_error)


# Rounding randn to a dtype of unit roundoff u (2^-8 bf16, 2^-11 fp16, 2^-4 e4m3) leaves an RMS
# relative error of ~0.4 u per element (uniform within a half ulp, over the binade); two inputs
# add in quadrature: ~0.57 u, i.e. 2.2e-3 bf16, 2.8e-4 fp16, 3.6e-2 e4m3 for a GEMM's product
ROUNDING = {"float32": (0.0, 0.0), "bfloat16": (1e-3, 5e-3), "float16": (1e-4, 6e-4)}


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_error_parts_of_a_256_gemm(dtype):
    g = torch.Generator().manual_seed(1)
    a_full, b_full = torch.randn(256, 256, generator=g), torch.randn(256, 256, generator=g)
    a, b = a_full.to(torch_dtype(dtype)), b_full.to(torch_dtype(dtype))
    parts = matmul.error_parts(a, b, a @ b, a_full, b_full)
    low, high = ROUNDING[dtype]
    assert low <= parts["input_rounding_error"] <= high
    assert 0 < parts["arithmetic_error"] < matmul.TOLERANCE[dtype]
    # the total holds both parts: at least the larger, at most their sum (triangle inequality)
    bigger = max(parts["input_rounding_error"], parts["arithmetic_error"])
    assert 0.9 * bigger <= parts["rel_error"] <= 1.01 * (parts["input_rounding_error"]
                                                         + parts["arithmetic_error"])


def test_error_parts_see_a_wrong_product():
    g = torch.Generator().manual_seed(2)
    a, b = torch.randn(64, 64, generator=g), torch.randn(64, 64, generator=g)
    wrong = a @ b
    wrong[0] += 1.0  # one wrong row: the arithmetic part shows it, the rounding part does not
    parts = matmul.error_parts(a.bfloat16(), b.bfloat16(), wrong.bfloat16(), a, b)
    assert parts["arithmetic_error"] > 0.01 and parts["input_rounding_error"] < 5e-3


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_error_is_larger_but_bounded(run_experiment, dtype, monkeypatch):
    monkeypatch.setattr(matmul, "isa_flags", lambda: {"avx512_fp16"})  # as on a Sapphire Rapids
    rows = run_experiment("matmul", dtype, ["experiment.sizes=[64]", QUICK])
    assert list(rows.status) == ["ok"]
    p = json.loads(rows.params.iloc[0])
    # rounding shows, garbage would be ~1; the tolerance bounds the arithmetic part
    assert 1e-6 < p["arithmetic_error"] < matmul.TOLERANCE[dtype]
    low, high = ROUNDING[dtype]
    assert 0.5 * low < p["input_rounding_error"] < 2 * high  # n=64: fewer terms, wider spread
    assert rows.rel_error.iloc[0] >= 0.9 * max(p["arithmetic_error"], p["input_rounding_error"])


def test_tf32_is_unsupported_on_a_cpu(run_experiment):
    rows = run_experiment("matmul", "tf32", ["experiment.sizes=[32]"])
    assert list(rows.status) == ["unsupported"] and "TF32" in rows.message.iloc[0]


def test_emulated_cpu_dtypes_say_why_they_are_not_measured(run_experiment, monkeypatch):
    # torch emulates them on a CPU: float16 read 1-3 GFLOP/s on a 2-core EPYC, no ceiling
    rows = run_experiment("matmul", "float8_e4m3", ["experiment.sizes=[32]"])
    assert list(rows.status) == ["unsupported"] and "float8" in rows.message.iloc[0]
    monkeypatch.setattr(matmul, "isa_flags", lambda: {"avx2", "avx512f", "avx512_bf16"})
    rows = run_experiment("matmul", "float16", ["experiment.sizes=[32]"])
    assert list(rows.status) == ["unsupported"]
    assert "no half-precision arithmetic" in rows.message.iloc[0]
    matmul.cpu_supports("float16", {"asimdhp"})  # an ARM core with FP16 runs it


def test_isa_flags_read_x86_and_arm_cpuinfo(tmp_path):
    from experiments.core.cpus import isa_flags
    x86 = tmp_path / "x86"
    x86.write_text("processor\t: 0\nflags\t\t: fpu avx512f avx512_fp16 amx_bf16\n")
    arm = tmp_path / "arm"
    arm.write_text("processor\t: 0\nFeatures\t: fp asimd fphp asimdhp\n")
    assert {"avx512_fp16", "amx_bf16"} <= isa_flags(x86) and "fphp" in isa_flags(arm)
    assert isa_flags(tmp_path / "missing") == set()



def test_a_size_predicted_past_the_time_limit_is_skipped(run_experiment):
    rows = run_experiment("matmul", "float32",
                          ["experiment.sizes=[64,4096]", "experiment.max_call_s=1e-4", QUICK])
    assert list(rows.status) == ["ok", "skipped"]
    assert "max_call_s" in rows.message.iloc[1] and np.isnan(rows.time_s.iloc[1])


@pytest.mark.parametrize("key, value", [("max_call_s", 0), ("rising_call_s", 0),
                                        ("plateau_flat", 0),
                                        ("plateau_past", -1),
                                        ("rotate_bytes_factor", -1), ("steady_s", -0.1)])
def test_bad_settings_are_rejected_by_name(run_experiment, key, value):
    with pytest.raises(ValueError, match=f"experiment.{key}"):
        run_experiment("matmul", "float32", [f"experiment.{key}={value}"])


def test_one_operand_set_where_rotate_bytes_factor_is_0(run_experiment):
    rows = run_experiment("matmul", "float32", ["experiment.sizes=[64]",
                                                "experiment.rotate_bytes_factor=0", QUICK])
    assert json.loads(rows.params.iloc[0])["operand_sets"] == 1


@pytest.mark.parametrize("rates, plateau_flat, measured", [
    ([100, 200, 205, 300, 310], 1, 3),  # 205 gains < 5 % over 200: the plateau showed at 1024
    ([100, 200, 205, 300, 310], 2, 5),  # ...or a step after one flat size (a CPU's oneDNN)
    ([100, 200, 205, 208, 300], 2, 4),  # two flat sizes in a row: 4096 skipped
    ([100, 200, 150, 180, 300], 2, 4),  # a drop gains nothing either: past the plateau
    ([100, 200, 150, 212, 215], 2, 5),  # 212 is 6 % over the best, 200: the count starts again
    ([100, 200, 400, 800, 1600], 1, 5)])  # still rising: every size
def test_sizes_stop_once_the_plateau_shows(rates, plateau_flat, measured):
    from types import SimpleNamespace
    from experiments import matmul
    sizes = [256, 512, 1024, 2048, 4096]
    rate = dict(zip(sizes, rates))
    ctx = SimpleNamespace(device=SimpleNamespace(type="cuda"), dtype="float32", settings=SETTINGS,
                          facts=FACTS, point=lambda base, body: base | {
                              "status": "ok", "time_s": 2.0 * base["n"] ** 3 / rate[base["n"]]})
    cfg = SimpleNamespace(sizes=sizes, steady_s=0.0, max_call_s=1e9, plateau_gain=0.05,
                          plateau_flat=plateau_flat, plateau_past=0)
    rows = list(harness.rows(matmul, cfg, ctx))
    assert [r["status"] for r in rows] == ["ok"] * measured + ["skipped"] * (5 - measured)
    assert all("plateau showed" in r["message"] for r in rows[measured:])


def test_no_size_up_to_plateau_past_is_skipped():
    """MKL's and oneDNN's curves step late: the node's sgemm (888749c's sweep, hot operands)
    read 1.34 TFLOP/s at 512, 1.18 at 1024, 1.36 at 2048; the rule stopped it there, short of
    the 2.0 it reads at 8192. Sizes up to plateau_past always run."""
    from types import SimpleNamespace
    from experiments import matmul
    sizes = [256, 512, 1024, 2048, 4096, 8192, 10240]
    rate = dict(zip(sizes, [0.95, 1.34, 1.18, 1.36, 1.37, 2.03, 2.05]))
    ctx = SimpleNamespace(device=SimpleNamespace(type="cpu"), dtype="float32", settings=SETTINGS,
                          facts=FACTS, point=lambda base, body: base | {
                              "status": "ok", "time_s": 1.0,
                              "time_s_min": 2.0 * base["n"] ** 3 / (rate[base["n"]] * 1e12)})
    for past, measured in ((0, 4), (8192, 7)):
        cfg = SimpleNamespace(sizes=sizes, steady_s=0.0, max_call_s=float("inf"), plateau_gain=0.05,
                              plateau_flat=2, plateau_past=past)
        rows = list(harness.rows(matmul, cfg, ctx))
        assert sum(r["status"] == "ok" for r in rows) == measured
    # past it, two flat sizes still stop the sweep (the 2-core VM's bfloat16: 10240 skipped)
    rate.update({2048: 2.19, 4096: 2.16, 8192: 1.86})
    rows = list(harness.rows(matmul, cfg, ctx))
    assert [r["status"] for r in rows][-1] == "skipped"


@pytest.mark.parametrize("rates, statuses, limit", [
    # 1024 -> 2048 rose to the best so far: 4096 runs; it rose again, but 8192 (8x) is past
    # rising_call_s too
    ([31.5, 32.8, 29.1, 46.3, 55, 56], ["ok"] * 5 + ["skipped"], "rising_call_s"),
    # ...or 4096 did not rise: 8192 is past max_call_s
    ([31.5, 32.8, 29.1, 46.3, 45.7, 46], ["ok"] * 5 + ["skipped"], "max_call_s"),
    # a rise of 17 % that tops 512's 46 by 2 %: a rise all the same
    ([31.5, 46, 40, 47, 45.7, 46], ["ok"] * 5 + ["skipped"], "max_call_s"),
    # it rose, but a burst at 256 tops it: 4096 could not lift the ceiling
    ([57, 48, 40, 47, 55, 56], ["ok"] * 4 + ["skipped"] * 2, "max_call_s"),
    # the best so far, but 45 gained under 5 % over 44: no rise
    ([31.5, 32.8, 44, 45, 55, 56], ["ok"] * 4 + ["skipped"] * 2, "max_call_s")])
def test_a_size_past_max_call_s_runs_while_the_curve_still_rises(monkeypatch, rates, statuses,
                                                                 limit):
    """The 2-core Zen 1 VM's float32, GFLOP/s at each size's best call (the second row its run at
    00:50 UTC 2026-12-05, the fourth at 22:05 the day before): where 2048 rose over 1024 to the
    best so far, 4096 (predicted 3 s a call, past max_call_s 1.5, under rising_call_s 4) runs on
    RISING_SAMPLES calls; else max_call_s stops the sweep as before."""
    from types import SimpleNamespace
    from experiments import matmul
    sizes = [256, 512, 1024, 2048, 4096, 8192]
    rate = dict(zip(sizes, [r * 1e9 for r in rates]))
    asked = {}

    def measure(state, min_samples=None):
        n = state.row["n"]
        asked[n] = min_samples
        t = 2.0 * n**3 / rate[n]
        return {"time_s": t, "time_s_min": t}

    monkeypatch.setattr(matmul, "_gemm", measure)
    ctx = SimpleNamespace(device=SimpleNamespace(type="cpu"), dtype="float32", settings=SETTINGS,
                          facts=FACTS, point=lambda base, body: base | {"status": "ok"} | body())
    cfg = SimpleNamespace(sizes=sizes, steady_s=0.0, max_call_s=1.5, rising_call_s=4.0,
                          plateau_gain=0.05, plateau_flat=2, plateau_past=8192)
    rows = list(harness.rows(matmul, cfg, ctx))
    assert [r["status"] for r in rows] == statuses
    assert limit in rows[-1]["message"]
    ran = {r["n"]: r for r in rows if r["status"] == "ok"}
    # a CPU's point counts at its best call: three calls at least, steady_s filling short ones
    assert all(asked[n] == matmul.CPU_SAMPLES == 3 for n in (256, 512, 1024, 2048))
    if 4096 in ran:
        assert asked[4096] == matmul.RISING_SAMPLES and ran[4096]["params"]["past_max_call_s"]
    # rising_call_s at max_call_s: no size past it, however the curve rises
    cfg.rising_call_s = cfg.max_call_s
    assert [r["status"] for r in harness.rows(matmul, cfg, ctx)][4] == "skipped"


def test_a_cpus_plateau_is_judged_at_each_sizes_best_call():
    """A CPU's sizes count at their best call (the ceiling's statistic), a GPU's at the median:
    the medians here still rise 10 % a size, the best calls are flat from 512."""
    from types import SimpleNamespace
    from experiments import matmul
    sizes = [256, 512, 1024, 2048, 4096]
    median = dict(zip(sizes, [100, 110, 121, 133, 146]))
    cfg = SimpleNamespace(sizes=sizes, steady_s=0.0, max_call_s=float("inf"), plateau_gain=0.05,
                          plateau_flat=2, plateau_past=0)
    measured = {}
    for kind in ("cpu", "cuda"):
        ctx = SimpleNamespace(device=SimpleNamespace(type=kind), dtype="float32", settings=SETTINGS,
                              facts=FACTS, point=lambda base, body: base | {
                                  "status": "ok",
                                  "time_s": 2.0 * base["n"] ** 3 / median[base["n"]],
                                  "time_s_min": 2.0 * base["n"] ** 3 / 200})
        rows = list(harness.rows(matmul, cfg, ctx))
        measured[kind] = sum(r["status"] == "ok" for r in rows)
    assert measured == {"cpu": 3, "cuda": 5}


@pytest.mark.parametrize("kind, flag, measured", [
    ("cuda", "noisy", 5), ("cuda", "contended", 5),  # 1024 left out of the count
    ("cpu", "contended", 5), ("cpu", "noisy", 4)])  # a CPU's spread does not move its best
def test_a_contended_size_neither_gains_nor_counts_toward_the_plateau(kind, flag, measured):
    from types import SimpleNamespace
    from experiments import matmul
    sizes = [256, 512, 1024, 2048, 4096, 8192]
    rate = dict(zip(sizes, [100, 200, 201, 202, 203, 204]))
    time = lambda n: 2.0 * n**3 / rate[n]
    ctx = SimpleNamespace(device=SimpleNamespace(type=kind), dtype="float32", settings=SETTINGS,
                          facts=FACTS, point=lambda base, body: base | {
                              "status": "ok", flag: base["n"] == 1024,
                              "time_s": time(base["n"]), "time_s_min": time(base["n"])})
    cfg = SimpleNamespace(sizes=sizes, steady_s=0.0, max_call_s=float("inf"), plateau_gain=0.05,
                          plateau_flat=2, plateau_past=0)
    rows = list(harness.rows(matmul, cfg, ctx))
    assert [r["status"] for r in rows] == ["ok"] * measured + ["skipped"] * (6 - measured)


def test_a_cpu_gemm_point_samples_at_least_steady_s(monkeypatch):
    """A CPU point counts at its best call: it samples steady_s whatever the job's budget."""
    from types import SimpleNamespace
    seen = {}

    def time(fn, **kw):
        seen.update(kw)
        fn(0)
        return {"time_s": 1.0}

    g = torch.Generator().manual_seed(1)
    from experiments.core.config import Settings
    ctx = SimpleNamespace(device=torch.device("cpu"), dtype="float32",
                          settings=Settings.defaults().but(point_budget_s=0.15),
                          facts=SimpleNamespace(llc_bytes=1 << 20, extra={}), time=time,
                          first_call=lambda f: (f(), 0.0)[1],
                          randn=lambda *shape: torch.randn(*shape, generator=g))
    cfg = SimpleNamespace(check_max=0, rotate_bytes_factor=1.0, steady_s=0.5, sizes=[64],
                          max_call_s=1.0, rising_call_s=1.0, plateau_gain=0.0)
    point, = matmul.points(cfg, ctx)
    matmul.measure(harness.State.alone(ctx, cfg, point))
    assert seen["point_budget_s"] == 0.5 and seen["min_point_s"] == 0.5


def test_a_large_cpu_draw_is_drawn_by_threads_the_same_values_whatever_their_count(monkeypatch):
    """A CPU GEMM's operands (2 n^2 floats: 2 s at n = 12288 on one thread) come from
    Context.randn's thread pool; the values follow the seed alone."""
    from experiments.core import runner

    def drawn(cpus, shape=(3, runner.DRAW_CHUNK + 7)):
        monkeypatch.setattr(runner, "own_cpus", lambda: set(range(cpus)))
        return runner.parallel_randn(shape, torch.float32, torch.Generator().manual_seed(4))

    one, four = drawn(1), drawn(4)
    assert torch.equal(one, four)
    assert abs(float(one.mean())) < 0.01 and abs(float(one.std()) - 1) < 0.01
    assert not torch.equal(one.view(-1)[:runner.DRAW_CHUNK],  # chunks differ: no repeats
                           one.view(-1)[runner.DRAW_CHUNK:2 * runner.DRAW_CHUNK])
    other = runner.parallel_randn(one.shape, torch.float32, torch.Generator().manual_seed(5))
    assert not torch.equal(one, other)  # the values follow the seed
    ctx = runner.Context(torch.device("cpu"), "float32", facts=None)
    assert ctx.randn(2048, 2048).shape == (2048, 2048)  # past PARALLEL_DRAW: the pool's path


def test_a_cpus_rotated_operand_sets_are_copies_in_memory_of_their_own():
    from types import SimpleNamespace
    g = torch.Generator().manual_seed(3)
    ctx = SimpleNamespace(device=torch.device("cpu"), dtype="bfloat16",
                          randn=lambda *shape: torch.randn(*shape, generator=g))
    triples, full = matmul._operands(ctx, 64, 3, keep_full=True)
    assert len(triples) == 3 and full is not None
    a0, b0, _ = triples[0]
    assert torch.equal(a0, full[0].to(torch.bfloat16)) and a0.abs().sum() > 0
    pointers = {t.data_ptr() for triple in triples for t in triple}
    assert len(pointers) == 9, "every set rotates through its own memory"
    for a, b, c in triples[1:]:
        assert torch.equal(a, a0) and torch.equal(b, b0) and c.shape == (64, 64)
        assert torch.isnan(c).all()  # written now: its pages not first touched by a timed call
