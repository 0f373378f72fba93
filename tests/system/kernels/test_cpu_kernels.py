"""The numba CPU kernels compile to full-width vector FMAs, checked in the machine code."""

import json
import os
import platform
import subprocess
import sys

import pytest
from tests.unit.kernels.test_cpu_kernels import SPR  # noqa: F401 (fixtures)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
# Sapphire Rapids' AVX-512 features (as LLVM spells them), fixed here so the check does not
# depend on the CPU that runs the test: LLVM only compiles for it, nothing runs
COMPILE = """
import json, re, sys
from numba import types
from experiments.kernels import cpu_fma
out = {}
for name, nb, size in (("float32", types.float32, 4), ("float64", types.float64, 8)):
    k = cpu_fma.chain_kernel(cpu_fma.lanes(size))
    arr = types.Array(nb, 1, "C")
    k.compile((arr, arr, types.float64, types.int64, types.int64, types.int64))
    asm = list(k.inspect_asm().values())[-1]
    found = re.findall(r"(vfmadd\\w+)\\s+([^\\n]*)", asm)
    fmas = [f for _, f in found]
    out[name] = {"lanes": cpu_fma.lanes(size), "zmm": sum("zmm" in f for f in fmas),
                 "ymm": sum("ymm" in f for f in fmas), "memory": sum("(" in f for f in fmas),
                 # the chain's step: the block with the most FMAs (the tail's are scalar)
                 "step_scalar": sum(m.endswith(("sd", "ss")) for m in re.findall(
                     r"vfmadd\\w+", max(asm.split(".LBB"), key=lambda b: b.count("vfmadd"))))}
print(json.dumps(out))
"""


def _compiled_for(cpu_name: str, features: str, first: str = "") -> dict:
    """COMPILE's counts, from a fresh interpreter whose numba targets that CPU, after the
    statement `first`."""
    env = os.environ | {"NUMBA_CPU_NAME": cpu_name, "NUMBA_CPU_FEATURES": features}
    done = subprocess.run([sys.executable, "-c", first + "\n" + COMPILE], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.system  # a fresh interpreter imports numba and compiles: 2 s
@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"),
                    reason="compiles for an x86 target")
def test_fma_chain_is_zmm_register_fmas_on_sapphire_rapids():
    # LLVM's tuning for Intel's AVX-512 servers prefers 256-bit vectors: without numba_host's
    # override the chain compiled to ymm FMAs taking x from memory (0.54x mixbench-cpu on the node)
    for dtype, found in _compiled_for("sapphirerapids", SPR).items():
        # 16 accumulator registers of 512 bits; each chain step is one FMA per register
        assert found["lanes"] * {"float32": 4, "float64": 8}[dtype] == 16 * 64, (dtype, found)
        assert found["ymm"] == 0 and found["zmm"] >= 16, (dtype, found)
        assert found["memory"] <= 1, (dtype, found)  # x lives in registers, not memory


@pytest.mark.system  # a fresh interpreter imports numba and compiles: 2 s
@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"),
                    reason="compiles for an x86 target")
def test_fma_chain_is_zmm_after_another_kernel_compiled_first():
    # cpu_clock compiles its chain at import; loaded before cpu_fma (as bench/cpu_cores.py did),
    # it fixed numba's target at 256-bit preference and the FMA chain compiled to ymm
    for dtype, found in _compiled_for("sapphirerapids", SPR,
                                      "from experiments.kernels import cpu_clock").items():
        assert found["ymm"] == 0 and found["zmm"] >= 16, (dtype, found)


# An AVX2 core (Haswell to Zen 3, most laptops): 16 registers of 256 bits
AVX2 = "+64bit,+avx,+avx2,+fma,+f16c,+bmi,+bmi2,+popcnt,+sse4.2"


@pytest.mark.system  # a fresh interpreter imports numba and compiles: 2 s
@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"),
                    reason="compiles for an x86 target")
def test_fma_chain_is_vector_fmas_on_avx2():
    # half of AVX2's registers hold 32 float64 lanes: LLVM unrolled that step whole and left it
    # scalar (vfmadd213sd from memory, 15 GFLOP/s on two Zen 4 cores against 108 at 48 lanes)
    for dtype, found in _compiled_for("haswell", AVX2).items():
        assert found["step_scalar"] == 0 and found["ymm"] >= 8 and found["zmm"] == 0, (dtype, found)


STREAM_STEPS = """
import json, re
from numba import types
from experiments.kernels import cpu_stream
arr = types.Array(types.float64, 1, "C")
sig = (arr, arr, arr, types.int64, types.int64, types.int64)

def stores_a_step(asm):
    # the loop's step: the block with the most vector FMAs (a triad's b + s c)
    step = max(asm.split(".LBB"), key=lambda b: len(re.findall(r"vfmadd\\w+p[sd]", b)))
    return len(re.findall(r"vmovup[sd]\\s+%zmm", step))

f32 = types.Array(types.float32, 1, "C")
cpu_stream._triad.compile(sig)
one = cpu_stream.one_vector_kernel("triad", "float64")
cpu_stream._triad.compile((f32, f32, f32) + sig[3:])  # compiled after: LLVM's own step again
asm = cpu_stream._triad.inspect_asm()
print(json.dumps({"llvm": [stores_a_step(a) for a in asm.values()],
                  "one": stores_a_step(list(one.inspect_asm().values())[-1])}))
"""


@pytest.mark.system  # a fresh interpreter imports numba and compiles: 2 s
@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"),
                    reason="compiles for an x86 target")
def test_dram_kernels_step_one_vector_and_cache_kernels_four():
    # LLVM interleaves a stream loop four vectors deep; the DRAM window's kernels are compiled
    # one vector a step (cpu_stream.ONE_VECTOR: 13-21 % more in DRAM on a Zen 4), and the option
    # is put back after, so the cache kernels compiled before and after keep LLVM's step
    env = os.environ | {"NUMBA_CPU_NAME": "sapphirerapids", "NUMBA_CPU_FEATURES": SPR}
    done = subprocess.run([sys.executable, "-c", STREAM_STEPS], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.splitlines()[-1])
    assert found == {"llvm": [4, 4], "one": 1}, found
