import json
import os
import re
import subprocess
import sys

import pytest

from experiments import experiment_config

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


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
