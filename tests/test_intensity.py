import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from experiments import intensity
from experiments.core.device import device_facts
from experiments.core.runner import Context

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ITEM = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2}
NO_BF16 = pytest.mark.skip(reason="triton's interpreter (3.6 to 3.9) keeps bf16 as uint16, with "
                                  "no bf16 arithmetic; the compile test and the GPU check cover it")


def _fmas(rows):
    return rows.params.map(lambda p: json.loads(p)["fmas"]).to_numpy()


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
def test_cpu_rows_count_the_work_and_match_float64(run_experiment, dtype):
    # 3000-byte chunks do not divide n: the last chunk is a short one
    rows = run_experiment("intensity", dtype, ["experiment.n=10000", "experiment.fmas=[0,1,3,40]",
                                               "experiment.chunk_bytes=3000"])
    assert (rows.status == "ok").all(), rows[["status", "message"]]
    fmas = _fmas(rows)
    np.testing.assert_array_equal(fmas, [0, 1, 3, 40])
    np.testing.assert_array_equal(rows.flops, 2 * fmas * 10000)
    np.testing.assert_array_equal(rows.bytes, 2 * 10000 * ITEM[dtype])
    np.testing.assert_allclose(rows.intensity, fmas / ITEM[dtype])  # 2k FLOPs per 2 items
    assert (rows.variant == "torch").all() and rows.check_passed.all()
    assert (rows.rel_error <= intensity.TOLERANCE[dtype]).all()
    assert rows.rel_error.iloc[0] == 0  # fmas=0 is a copy


def test_reference_is_the_chain_in_float64():
    x = torch.randn(100, dtype=torch.float64)
    y = x.clone()
    for k in range(60):
        torch.testing.assert_close(intensity.reference(x, k), y, rtol=1e-13, atol=0)
        y = y * intensity.A + x


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64,
                                   pytest.param(torch.bfloat16, marks=NO_BF16)])
@pytest.mark.parametrize("fmas", [0, 1, 13])
def test_triton_kernel_matches_float64_in_interpreter(dtype, fmas):
    fk = pytest.importorskip("experiments.fma_kernel")
    x = torch.randn(1000, dtype=dtype)
    out = torch.full((1100,), float("nan"), dtype=dtype)
    fk.fma_chain(x, out[:1000], fmas, intensity.A, block=256, num_warps=4)  # last program masked
    assert torch.isnan(out[1000:]).all(), "the kernel wrote past n"
    name = str(dtype).removeprefix("torch.")
    err = intensity.check(name, x, out[:1000], fmas)  # raises on NaN or a large error
    assert err <= intensity.TOLERANCE[name]
    if fmas == 0:
        assert torch.equal(out[:1000], x)


def test_gpu_point_body_runs_in_interpreter():
    pytest.importorskip("experiments.fma_kernel")
    dev = torch.device("cpu")
    ctx = Context(device=dev, dtype="float32", facts=device_facts(dev), point_budget_s=0.01)
    cfg = intensity.IntensityConfig(n=1000, block=256, num_warps=4)
    row = intensity._measure(ctx, cfg, 9, {}, use_triton=True)
    assert row["check_passed"] and row["rel_error"] <= 2e-6 and row["time_s"] > 0


# Compiles the kernel for sm_90 (an H200) without a GPU and lists the FMA instructions in its PTX.
AOT = """
import re, sys, triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from experiments.fma_kernel import UNROLL, fma_chain_kernel
for dt in sys.argv[1:]:
    sig = {"x_ptr": "*" + dt, "y_ptr": "*" + dt, "n": "i32", "a": "fp32", "steps": "i32",
           "rest": "i32", "BLOCK": "constexpr", "UNROLL": "constexpr"}
    src = ASTSource(fma_chain_kernel, sig, constexprs={"BLOCK": 1024, "UNROLL": UNROLL})
    ptx = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4}).asm["ptx"]
    print(dt, ",".join(sorted(set(re.findall(r"fma\\.rn\\.\\w+", ptx)))))
"""


def test_kernel_compiles_for_hopper_with_packed_half_math():
    pytest.importorskip("triton")
    env = os.environ | {"TRITON_INTERPRET": "0"}  # the interpreter cannot compile
    done = subprocess.run([sys.executable, "-c", AOT, "fp32", "fp16", "bf16", "fp64"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    found = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    # half precision stays half, two elements per instruction; no upcast to fp32
    assert found == {"fp32": "fma.rn.f32", "fp16": "fma.rn.f16x2", "bf16": "fma.rn.bf16x2",
                     "fp64": "fma.rn.f64"}


def test_tf32_is_not_a_storage_type(run_experiment):
    rows = run_experiment("intensity", "tf32", ["experiment.n=1000", "experiment.fmas=[1]"])
    assert list(rows.status) == ["not_applicable"]


@pytest.mark.parametrize("override, key", [("experiment.fmas=[-1]", "experiment.fmas"),
                                           ("experiment.num_warps=3", "experiment.num_warps"),
                                           ("experiment.block=100", "experiment.block"),
                                           ("experiment.n=0", "experiment.n")])
def test_bad_config_names_the_key(run_experiment, override, key):
    with pytest.raises(ValueError, match=key):
        run_experiment("intensity", "float32", [override])
