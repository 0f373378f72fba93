"""numba's target for the CPU kernels: the host's own ISA, at its widest vectors.

LLVM tunes Intel's AVX-512 server cores (Skylake-SP to Sapphire Rapids) to prefer 256-bit
vectors (its `prefer-256-bit` tuning: 512-bit code lowered the clock on early parts). The
kernels here fill half the vector registers with accumulators sized for 512-bit registers; at
256 bits LLVM needs twice the registers, spills, and takes the FMA's x operand from memory,
and the FMA roof reads about half of what the cores can do. Turning the tuning off gives zmm
code everywhere AVX-512 exists; elsewhere nothing changes.
It must run before numba compiles anything in this process (its target machine is made once):
the kernel modules compile through `njit` here, which sets it first, whichever loads first.
"""

from __future__ import annotations

PREFER_256 = "prefer-256-bit"


def target_features() -> str:
    """The LLVM feature string numba compiles for: the user's NUMBA_CPU_FEATURES if set, else the
    host's, with 256-bit preference switched off where AVX-512 exists."""
    import llvmlite.binding as llvm
    from numba.core import config

    features = config.CPU_FEATURES
    if features is None:
        features = llvm.get_host_cpu_features().flatten()
    if "+avx512f" in features.split(",") and PREFER_256 not in features:
        features += f",-{PREFER_256}"
    return features


def use_widest_vectors() -> str:
    """Point numba at target_features(); returns the features in use."""
    from numba.core import config

    config.CPU_FEATURES = target_features()
    return config.CPU_FEATURES


def njit(*args, **kwargs):
    """numba.njit with the target set first: a module compiling at import (cpu_clock) before
    cpu_fma loaded left the whole process at 256-bit FMAs, half the peak of Intel's servers."""
    import numba

    use_widest_vectors()
    return numba.njit(*args, **kwargs)


def vector_bits(features: str | None = None) -> int:
    """Width of the vectors LLVM will use for the kernels, from the features in use."""
    flags = (features or target_features()).split(",")
    if "+avx512f" in flags and f"+{PREFER_256}" not in flags:
        return 512
    if "+avx" in flags:
        return 256
    return 128


def vector_registers(features: str | None = None) -> tuple[int, int]:
    """(bytes per vector register, vector registers) that the kernels compile for (for
    `features`, another target's; else this host's)."""
    import llvmlite.binding as llvm

    features = features or target_features()
    arm = llvm.get_process_triple().startswith(("aarch64", "arm64"))
    return vector_bits(features) // 8, 32 if "+avx512f" in features.split(",") or arm else 16
