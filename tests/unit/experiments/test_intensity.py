import json

import numpy as np
import pytest
import torch

from experiments import intensity
from experiments.kernels import chain
from experiments.core.device import device_facts
from experiments.core.config import Settings
from experiments.core.harness import Point, State
from experiments.core.runner import Context
from experiments import experiment_config

ITEM = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2}
NO_BF16 = pytest.mark.skip(reason="triton's interpreter (3.6 to 3.9) keeps bf16 as uint16, with "
                                  "no bf16 arithmetic; the compile test and the GPU check cover it")


def _fmas(rows):
    return rows.params.map(lambda p: json.loads(p)["fmas"]).to_numpy()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_cpu_rows_count_the_work_and_match_float64(run_experiment, dtype):
    # n = 10000 is no multiple of the kernel's lanes per thread: every slice ends in a tail
    rows = run_experiment("intensity", dtype, ["experiment.n=10000", "experiment.fmas=[0,1,3,40]"])
    assert (rows.status == "ok").all(), rows[["status", "message"]]
    alone = rows.params.map(lambda p: json.loads(p).get("scope")) == "one_cpu"
    team = json.loads(rows.params.iloc[0])["threads"]
    # a team of several CPUs runs the longest chain on its first CPU alone as well
    assert alone.sum() == (team > 1) and (not alone.any() or alone.iloc[-1])
    if alone.any():
        one = json.loads(rows.params.iloc[-1])
        assert one["threads"] == one["cores"] == 1 and one["fmas"] == 40
        assert rows.n.iloc[-1] == 10000 and rows.check_passed.iloc[-1]
    rows = rows[~alone]
    fmas = _fmas(rows)
    np.testing.assert_array_equal(fmas, [0, 1, 3, 40])
    np.testing.assert_array_equal(rows.flops, 2 * fmas * 10000)
    np.testing.assert_array_equal(rows.bytes, 2 * 10000 * ITEM[dtype])
    np.testing.assert_allclose(rows.intensity, fmas / ITEM[dtype])  # 2k FLOPs per 2 items
    assert (rows.variant == "llvmlite").all() and rows.check_passed.all()
    assert (rows.rel_error <= chain.TOLERANCE[dtype]).all()
    assert rows.rel_error.iloc[0] == 0  # fmas=0 is a copy
    placed = json.loads(rows.params.iloc[0])
    assert placed["threads"] == placed["cores"] >= 1 and placed["smt"] is False


def test_a_compute_bound_point_past_call_s_runs_over_a_prefix():
    n, align = 1 << 24, intensity.ALIGN
    copy = [(0, n, 0.1)]  # the first point: the traffic alone
    assert intensity.elements_for(1, n, copy, 0.1) == n  # predicted 0.1 s: within call_s
    # 1 s predicted from 256 FMAs at 0.5 s, 10x the copy's time: a prefix of about 0.1 s
    m = intensity.elements_for(512, n, copy + [(256, n, 0.5)], 0.1)
    assert m == int(n * 0.1 / 1.0) // align * align
    # the rate is per element: a point after a prefix predicts from that prefix's rate
    assert intensity.elements_for(1024, n, copy + [(512, m, 0.1)], 0.1) < m
    # a long call but under 4x the copy's time: near the ridge, a prefix could leave DRAM
    assert intensity.elements_for(16, n, [(0, n, 0.3), (8, n, 0.4)], 0.1) == n
    assert intensity.elements_for(512, n, copy + [(256, n, 0.5)], 0) == n  # 0: no limit
    assert intensity.elements_for(512, 1000, copy + [(256, 1000, 5.0)], 0.1) == align


def test_cpu_points_past_call_s_count_the_work_of_their_prefix(run_experiment):
    n = 1 << 20
    rows = run_experiment("intensity", "float32", [f"experiment.n={n}", "experiment.call_s=1e-4",
                                                  "experiment.fmas=[0,256,1024]"])
    assert (rows.status == "ok").all() and rows.check_passed.all(), rows[["status", "message"]]
    m = rows.n.to_numpy()
    assert m[0] == n and m[2] < n and (m % intensity.ALIGN == 0).all()
    np.testing.assert_array_equal(rows.flops, 2 * _fmas(rows) * m)
    np.testing.assert_array_equal(rows.working_set_bytes, 2 * 4 * m)
    assert (rows.rel_error <= chain.TOLERANCE["float32"]).all()

def test_cpu_half_chains_say_why_they_are_not_measured(run_experiment, monkeypatch):
    from experiments.kernels import cpu_fma_ir
    monkeypatch.setattr(cpu_fma_ir, "native", lambda features=None: False)
    rows = run_experiment("intensity", "float16", ["experiment.n=1000", "experiment.fmas=[0,4]"])
    assert (rows.status == "unsupported").all()
    assert rows.message.str.contains("no half-precision FMAs").all()
    rows = run_experiment("intensity", "bfloat16", ["experiment.n=1000", "experiment.fmas=[0,4]"])
    assert (rows.status == "unsupported").all()
    assert rows.message.str.contains("bf16 dot products, not bf16 FMAs").all()


def test_cpu_float16_chain_where_the_isa_has_half_fmas(run_experiment, monkeypatch):
    # the llvmlite kernel's loop logic, run in float32 (this CPU may lack half FMAs); the float16
    # machine code is checked for Sapphire Rapids in test_cpu_kernels.py
    from experiments.kernels import cpu_fma_ir
    x = (np.random.default_rng(0).random(10007) + 0.5).astype(np.float32)
    y = np.full_like(x, np.nan)
    cpu_fma_ir.fma_chain([0], x, y, 40, chain.A)
    ref = chain.reference(torch.from_numpy(x).double(), 40).numpy()
    assert np.max(np.abs(y - ref) / ref) < chain.TOLERANCE["float32"]
    if not cpu_fma_ir.native():
        pytest.skip("no half-precision FMAs on this CPU: the float16 kernel cannot run here")
    rows = run_experiment("intensity", "float16", ["experiment.n=10000", "experiment.fmas=[0,3]"])
    assert (rows.status == "ok").all() and (rows.variant == "llvmlite").all()
    assert (rows.rel_error <= chain.TOLERANCE["float16"]).all()


def test_reference_is_the_chain_in_float64():
    x = torch.randn(100, dtype=torch.float64)
    y = x.clone()
    for k in range(60):
        torch.testing.assert_close(chain.reference(x, k), y, rtol=1e-13, atol=0)
        y = y * chain.A + x


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64,
                                   pytest.param(torch.bfloat16, marks=NO_BF16)])
@pytest.mark.parametrize("fmas", [0, 1, 13])
def test_triton_kernel_matches_float64_in_interpreter(dtype, fmas):
    fk = pytest.importorskip("experiments.kernels.fma_chain")
    x = torch.randn(1000, dtype=dtype)
    out = torch.full((1100,), float("nan"), dtype=dtype)
    fk.fma_chain(x, out[:1000], fmas, chain.A, block=256, num_warps=4)  # last program masked
    assert torch.isnan(out[1000:]).all(), "the kernel wrote past n"
    name = str(dtype).removeprefix("torch.")
    err = chain.check(name, x, out[:1000], fmas)  # raises on NaN or a large error
    assert err <= chain.TOLERANCE[name]
    if fmas == 0:
        assert torch.equal(out[:1000], x)


def test_gpu_point_body_runs_in_interpreter():
    pytest.importorskip("experiments.kernels.fma_chain")
    dev = torch.device("cpu")
    ctx = Context(device=dev, dtype="float32", facts=device_facts(dev),
                  settings=Settings.defaults().but(point_budget_s=0.01))
    cfg = experiment_config("intensity", n=1000, block=256, num_warps=4)
    point = Point({"n": 1000}, args={"fmas": 9, "triton": True})
    row = intensity.measure(State.alone(ctx, cfg, point))
    assert row["check_passed"] and row["rel_error"] <= 2e-6 and row["time_s"] > 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_programs_stride_over_the_tiles_in_interpreter(dtype):
    fk = pytest.importorskip("experiments.kernels.fma_chain")
    x = torch.randn(1000, dtype=dtype)
    out = torch.full((1100,), float("nan"), dtype=dtype)
    # 16 tiles, the last one short, over 3 programs; 21 FMAs: a full loop trip and a rest
    fk.fma_chain(x, out[:1000], 21, chain.A, block=64, num_warps=2, programs=3)
    assert torch.isnan(out[1000:]).all(), "the kernel wrote past n"
    name = str(dtype).removeprefix("torch.")
    assert chain.check(name, x, out[:1000], 21) <= chain.TOLERANCE[name]


@pytest.mark.parametrize("n_regs, per_sm", [(32, 8), (59, 4), (118, 2), (255, 1)])
def test_persistent_grid_is_one_full_wave(monkeypatch, n_regs, per_sm):
    fk = pytest.importorskip("experiments.kernels.fma_chain")
    from types import SimpleNamespace as NS

    h200 = NS(multi_processor_count=132, max_threads_per_multi_processor=2048,
              shared_memory_per_multiprocessor=233472, major=9, minor=0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: h200)
    compiled = NS(n_regs=n_regs, metadata=NS(shared=0))  # 8 warps: 256 threads a block
    assert fk.wave_slots(torch.empty(0), compiled, num_warps=8) == 132 * per_sm


def test_tf32_is_not_a_storage_type(run_experiment):
    rows = run_experiment("intensity", "tf32", ["experiment.n=1000", "experiment.fmas=[1]"])
    assert list(rows.status) == ["not_applicable"]


@pytest.mark.parametrize("override, key", [("experiment.fmas=[-1]", "experiment.fmas"),
                                           ("experiment.num_warps=3", "experiment.num_warps"),
                                           ("experiment.block=100", "experiment.block"),
                                           ("experiment.n=-1", "experiment.n"),
                                           ("experiment.call_s=-1", "experiment.call_s")])
def test_bad_config_names_the_key(run_experiment, override, key):
    with pytest.raises(ValueError, match=key):
        run_experiment("intensity", "float32", [override])
