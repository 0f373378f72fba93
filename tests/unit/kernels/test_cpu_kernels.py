"""The numba CPU kernels compile to full-width vector FMAs, checked in the machine code."""

import platform
from pathlib import Path

import pytest

# Sapphire Rapids' AVX-512 features (as LLVM spells them), fixed here so the check does not
# depend on the CPU that runs the test: LLVM only compiles for it, nothing runs
SPR = ("+64bit,+avx,+avx2,+fma,+f16c,+bmi,+bmi2,+popcnt,+sse4.2,+avx512f,+avx512vl,+avx512bw,"
       "+avx512dq,+avx512cd,+avx512bf16,+avx512fp16,+avx512vnni")


def test_widest_vectors_leave_other_isas_alone():
    from experiments.kernels.numba_host import target_features, vector_bits
    from numba.core import config

    saved = config.CPU_FEATURES
    try:
        config.CPU_FEATURES = "+avx,+avx2,+fma"
        assert target_features() == "+avx,+avx2,+fma" and vector_bits() == 256
        config.CPU_FEATURES = SPR
        assert target_features().endswith(",-prefer-256-bit")
        assert vector_bits(target_features()) == 512
        assert vector_bits(SPR + ",+prefer-256-bit") == 256  # a user's choice stands
    finally:
        config.CPU_FEATURES = saved


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"),
                    reason="compiles for an x86 target")
def test_half_chain_is_zmm_half_fmas_on_sapphire_rapids():
    import re

    from experiments.kernels import cpu_fma_ir

    assert cpu_fma_ir.native(SPR) and not cpu_fma_ir.native("+avx512f,+f16c")
    asm = cpu_fma_ir.assembly("sapphirerapids", SPR + ",-prefer-256-bit")
    fmas = re.findall(r"(vfmadd\w+)\s+([^\n]*)", asm)
    vector = [ops for op, ops in fmas if op.endswith("ph")]
    # 16 accumulators of 32 halves, one 512-bit FMA each per chain step; the tail is scalar (sh)
    assert len(vector) == 16 and all("zmm" in ops for ops in vector), fmas
    assert {op for op, _ in fmas} <= {"vfmadd213ph", "vfmadd231ph", "vfmadd132ph",
                                       "vfmadd213sh", "vfmadd231sh", "vfmadd132sh"}, fmas
    assert not re.search(r"\bcall", asm)  # no libcalls: native half arithmetic throughout


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"),
                    reason="compiles for an x86 target")
@pytest.mark.parametrize("ty, suffix", [("float", "ps"), ("double", "pd")])
def test_float_chains_hold_x_in_zmm_registers_on_sapphire_rapids(ty, suffix):
    import re

    from experiments.kernels import cpu_fma_ir

    asm = cpu_fma_ir.assembly("sapphirerapids", SPR + ",-prefer-256-bit", ty)
    vector = [ops for op, ops in re.findall(r"(vfmadd\w+)\s+([^\n]*)", asm)
              if op.endswith(suffix)]
    # a chain step: 16 accumulators, each one 512-bit FMA, its x operand held in a register
    # (16 + 16 + the constant a fill 33 of 32: at most one x is read from the stack each step)
    assert len(vector) == 16 and all("zmm" in ops for ops in vector), vector
    assert sum("(" in ops for ops in vector) <= 1, vector
    assert not re.search(r"\bcall", asm)


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"),
                    reason="compiles for an x86 target")
@pytest.mark.parametrize("ty, suffix", [("half", "ph"), ("float", "ps"), ("double", "pd")])
def test_the_fma_clock_chain_steps_its_integer_ops_beside_the_fmas(ty, suffix):
    import re

    from experiments.kernels import cpu_clock, cpu_fma_ir

    ticks = cpu_clock.tick_ops(2.0, 16)  # Sapphire Rapids: 16 zmm FMAs a step, 2 a cycle
    assert ticks == 12
    asm = cpu_fma_ir.assembly("sapphirerapids", SPR + ",-prefer-256-bit", ty, ticks)
    step = max(asm.split(".LBB"), key=lambda block: block.count("vfmadd"))
    fmas = re.findall(rf"vfmadd\w+{suffix}\s+([^\n]*)", step)
    chain = re.findall(r"\b(xorq|addq)\s+\$\d+, %(\w+)", step)
    # one loop: the same 16 register FMAs as the measured chain, and the ticks on one register,
    # each op on the last one's result (LLVM folded none of them)
    assert len(fmas) == 16 and all("zmm" in ops for ops in fmas), step
    assert len(chain) == ticks and len({reg for _, reg in chain}) == 1, step
    plain = cpu_fma_ir.assembly("sapphirerapids", SPR + ",-prefer-256-bit", ty)
    assert not re.findall(r"\b(xorq)\s+\$\d+", plain)  # the measured chain runs no ticks


@pytest.mark.parametrize("huge_pages", [True, False])
@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16", "float16"])
def test_filled_arrays_start_staggered_in_memory(dtype, huge_pages):
    """The streams' arrays: in numpy's memory (which it advises the kernel to back with huge
    pages) or torch's, filled with the team's values, each at its own offset within a 2 MiB page
    (the k-th array streamed together k x STAGGER past its boundary: element i of each in another
    DRAM bank), on a cache line (no vector split over two)."""
    import torch

    from experiments.kernels import cpu_stream

    dt = getattr(torch, dtype)
    t = cpu_stream.filled([0], 3 * 4096 // 2 + 5, dt, seed=4, huge_pages=huge_pages)
    assert t.dtype == dt and t.is_contiguous() and t.numel() == 3 * 4096 // 2 + 5
    assert t.data_ptr() % cpu_stream.HUGE_PAGE == 0
    offsets = [cpu_stream.filled([0], 4096, dt, seed=k, index=k, huge_pages=huge_pages)
               .data_ptr() % cpu_stream.HUGE_PAGE for k in range(3)]
    assert offsets == [0, cpu_stream.STAGGER, 2 * cpu_stream.STAGGER]
    assert cpu_stream.STAGGER % 64 == 0 and len({o % 4096 for o in offsets}) == 3
    v = t.float()
    low, high = (0.5, 1.5) if dtype in ("float32", "float64") else (1.0, 2.0)  # halves: 1.m
    assert bool(((v >= low) & (v < high)).all()) and float(v.std()) > 0.2  # nonzero, varied
    # a half's every mantissa bit is drawn: its values take most of the 2^bits patterns
    bits = {"float16": 10, "bfloat16": 7}.get(dtype)
    assert bits is None or v.unique().numel() > 0.9 * min(2**bits, v.numel())
    again = cpu_stream.filled([0], 1000, dt, seed=4, huge_pages=not huge_pages)
    assert torch.equal(again, t[:1000])  # the same seed, the same values, either memory


def _thp_eligible(address: int) -> bool:
    """Whether the kernel may back the mapping holding `address` with huge pages (smaps)."""
    from pathlib import Path
    mapping = None
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()[0]
        if "-" in head and ":" not in head:
            lo, hi = (int(x, 16) for x in head.split("-"))
            mapping = lo <= address < hi
        elif mapping and head == "THPeligible:":
            return line.split()[1] == "1"
    raise AssertionError(f"no mapping holds {address:#x}")


@pytest.mark.skipif(not Path("/sys/kernel/mm/transparent_hugepage/enabled").exists()
                    or "[madvise]" not in Path("/sys/kernel/mm/transparent_hugepage/enabled")
                    .read_text(), reason="transparent huge pages are not in 'madvise' mode here")
def test_arrays_ask_for_huge_pages_only_short_of_the_dram_window():
    """huge_pages: memory advised for huge pages (numpy's); else the system's default, as
    STREAM's static arrays get (cpu_stream.host_empty). Arrays of 8 MiB: numpy advises from 4."""
    import torch

    from experiments.kernels import cpu_stream

    huge = cpu_stream.host_empty(2 << 20, torch.float32, huge_pages=True)
    plain = cpu_stream.host_empty(2 << 20, torch.float32, huge_pages=False)
    assert _thp_eligible(huge.data_ptr()) and not _thp_eligible(plain.data_ptr())


def test_the_peer_bench_times_half_gemms_only_where_the_cpu_has_their_arithmetic():
    """bench/cpu_peers.py: torch.mm in float16 / bfloat16 on a CPU without them times the
    conversion of every element (the Zen 1 VM's bfloat16 job ran 12 minutes)."""
    import importlib.util
    from pathlib import Path
    spec = importlib.util.spec_from_file_location(
        "cpu_peers", Path(__file__).resolve().parents[3] / "bench" / "cpu_peers.py")
    peers = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(peers)
    assert peers._mm_dtypes({"avx2", "fma"}) == ("float32",)  # the Zen 1 VM
    assert peers._mm_dtypes({"avx512f", "avx512_bf16"}) == ("float32", "bfloat16")  # a Zen 4
    assert peers._mm_dtypes({"avx512f", "avx512_bf16", "amx_bf16", "avx512_fp16"}) == (
        "float32", "bfloat16", "float16")  # Sapphire Rapids
    assert peers._mm_dtypes({"asimd", "asimdhp", "bf16"}) == ("float32", "bfloat16", "float16")
