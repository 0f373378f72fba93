import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import torch

from experiments import intensity
from experiments.kernels import chain
from experiments.core.device import device_facts
from experiments.core.runner import Context
from experiments import experiment_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
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
    fmas = _fmas(rows)
    np.testing.assert_array_equal(fmas, [0, 1, 3, 40])
    np.testing.assert_array_equal(rows.flops, 2 * fmas * 10000)
    np.testing.assert_array_equal(rows.bytes, 2 * 10000 * ITEM[dtype])
    np.testing.assert_allclose(rows.intensity, fmas / ITEM[dtype])  # 2k FLOPs per 2 items
    assert (rows.variant == "numba").all() and rows.check_passed.all()
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
    from experiments.kernels import cpu_fma_half
    monkeypatch.setattr(cpu_fma_half, "native", lambda features=None: False)
    rows = run_experiment("intensity", "float16", ["experiment.n=1000", "experiment.fmas=[0,4]"])
    assert (rows.status == "unsupported").all()
    assert rows.message.str.contains("no half-precision FMAs").all()
    rows = run_experiment("intensity", "bfloat16", ["experiment.n=1000", "experiment.fmas=[0,4]"])
    assert (rows.status == "unsupported").all()
    assert rows.message.str.contains("bf16 dot products, not bf16 FMAs").all()


def test_cpu_float16_chain_where_the_isa_has_half_fmas(run_experiment, monkeypatch):
    # the llvmlite kernel's loop logic, run in float32 (this CPU may lack half FMAs); the float16
    # machine code is checked for Sapphire Rapids in test_cpu_kernels.py
    from experiments.kernels import cpu_fma_half
    x = (np.random.default_rng(0).random(10007) + 0.5).astype(np.float32)
    y = np.full_like(x, np.nan)
    cpu_fma_half.fma_chain([0], x, y, 40, chain.A)
    ref = chain.reference(torch.from_numpy(x).double(), 40).numpy()
    assert np.max(np.abs(y - ref) / ref) < chain.TOLERANCE["float32"]
    if not cpu_fma_half.native():
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
    ctx = Context(device=dev, dtype="float32", facts=device_facts(dev), point_budget_s=0.01)
    cfg = experiment_config("intensity", n=1000, block=256, num_warps=4)
    row = intensity._measure(ctx, cfg, 9, 1000, {}, use_triton=True)
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


# Compiles the kernel for sm_90 (an H200) without a GPU as fma_chain launches it in the GPU sweep
# (config defaults: block 4096, 8 warps) and disassembles it: the FMA flavours in the PTX, and the
# instructions of the hot loop in the SASS (the innermost loop with the most FMAs).
AOT = r"""
import json, re, subprocess, sys, tempfile
from triton import knobs
from experiments.kernels.fma_chain import aot_compile
block, warps, out = int(sys.argv[1]), int(sys.argv[2]), {}
for dt in sys.argv[3:]:
    kernel = aot_compile(dt, block=block, num_warps=warps)
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(kernel.asm["cubin"])
        f.flush()
        sass = subprocess.run([knobs.nvidia.cuobjdump.path, "-sass", f.name], check=True,
                              capture_output=True, text=True).stdout
    code = [(int(a, 16), i.strip()) for a, i in re.findall(r"/\*([0-9a-f]{4})\*/\s+([^;]*);", sass)]
    at = {a: k for k, (a, _) in enumerate(code)}
    spans = [(at[int(t, 16)], k) for k, (a, i) in enumerate(code)
             for t in re.findall(r"\bBRA\s+(?:`\(\S+\)\s*)?0x([0-9a-f]+)", i) if int(t, 16) <= a]
    inner = [(lo, hi) for lo, hi in spans  # loops with no loop inside
             if not any(lo <= l2 and h2 <= hi and (l2, h2) != (lo, hi) for l2, h2 in spans)]
    loops = [[i for _, i in code[lo:hi + 1]] for lo, hi in inner]
    loop = max(loops, key=lambda body: sum("FMA" in i.split()[0] for i in body), default=[])
    out[dt] = {"ptx": sorted(set(re.findall(r"fma\.rn\.\w+", kernel.asm["ptx"]))),
               "loop": [re.sub(r"^@!?U?P\w+\s+", "", i) for i in loop]}
print(json.dumps(out))
"""
SM90_FMA = {"fp32": ("fma.rn.f32", {"FFMA"}), "fp64": ("fma.rn.f64", {"DFMA"}),
            "fp16": ("fma.rn.f16x2", {"HFMA2", "HFMA2.MMA"}),
            "bf16": ("fma.rn.bf16x2", {"HFMA2.BF16_V2", "HFMA2.MMA.BF16_V2"})}


def _sm90_toolchain():
    pytest.importorskip("triton")
    try:
        from triton import knobs
        tools = [knobs.nvidia.ptxas.path, knobs.nvidia.cuobjdump.path]
    except Exception as exc:  # noqa: BLE001 - any failure means: no toolchain here
        pytest.skip(f"triton's CUDA toolchain (ptxas, cuobjdump) is not available: {exc}")
    if not all(t and os.path.exists(t) for t in tools):
        pytest.skip(f"triton's CUDA toolchain (ptxas, cuobjdump) is not available: {tools}")


@pytest.mark.system
def test_hot_loop_is_all_full_width_fmas_on_hopper():
    _sm90_toolchain()
    from experiments.kernels.fma_chain import UNROLL, UNROLL_PACKED

    cfg = experiment_config("intensity")
    block, warps = cfg.block, cfg.num_warps
    env = os.environ | {"TRITON_INTERPRET": "0"}  # the interpreter cannot compile
    done = subprocess.run([sys.executable, "-c", AOT, str(block), str(warps), *SM90_FMA],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout)
    per_thread = block // (32 * warps)  # elements per thread: its independent chains
    for dt, (ptx, fma_ops) in SM90_FMA.items():
        loop = found[dt]["loop"]
        ops = [i.split()[0] for i in loop]
        fmas = [i for i, op in zip(loop, ops) if op in fma_ops]
        # half precision stays half, two elements per instruction; no upcast to fp32
        assert found[dt]["ptx"] == [ptx], (dt, found[dt]["ptx"])
        if dt in ("fp16", "bf16"):
            # one register holds two halves and both are live: full-width HFMA2 on every chain
            # (a `.H0_H0` operand is a broadcast half; PRMTs would repack halves every trip),
            # and ptxas splits them between the FMA and the MMA pipes, which is what doubles
            # the rate over FP32 (all on the FMA pipe, half2 runs no faster than FFMA)
            assert len(fmas) == UNROLL_PACKED * per_thread // 2, (dt, ops)
            assert not [i for i in fmas if re.search(r"\.H[01]_H[01]|\.F32", i)], (dt, fmas)
            assert "PRMT" not in ops and {op for op in ops if op in fma_ops} == fma_ops, (dt, ops)
        else:
            assert len(fmas) == UNROLL * per_thread, (dt, ops)
        # the rest is the trip's counter, compare and branch: FMAs are >= 98 % of the issue slots
        assert len(loop) - len(fmas) <= 3, (dt, [i for i in loop if i not in fmas])


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
