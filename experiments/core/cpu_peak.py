"""The silicon's vector peak of a CPU: cores x FMA ports x vector lanes x 2 FLOP x clock.

The CPU's identity (vendor, family, model, ISA flags: /proc/cpuinfo, recorded in each file's
device facts) picks its microarchitecture in TABLE (or BY_FLAG, where a VM masks the model),
which gives the FMA pipes per core and their width; the lanes are that width (or the ISA's, if
narrower) over the element's bits. A microarchitecture neither names, or a dtype the ISA has no
FMA for, gets no peak and the reason: a guess would read as the silicon's limit. docs/cpu.md
says the method."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

AMD, INTEL = "AuthenticAMD", "GenuineIntel"
# The flags a peak (and its clock's source) reads; a file records these alone.
PEAK_FLAGS = {"fma", "avx", "avx2", "avx512f", "avx512_fp16", "avx512_bf16", "f16c", "amx_tile",
              "amx_bf16", "amx_fp16", "aperfmperf", "hypervisor", "asimd", "sve", "fphp",
              "asimdhp", "bf16"}


@dataclass(frozen=True)
class Uarch:
    """FMA units of one microarchitecture: `ports` pipes per core, each `bits` wide (vendors'
    optimization manuals, Agner Fog's tables). A wider instruction runs in parts (Zen4 takes a
    512-bit FMA in two 256-bit passes). `ports` 0: it depends on the part (by_part says how
    many)."""

    name: str
    ports: int
    bits: int


# (vendor, family, model ranges, Uarch). AMD's ranges are Linux's Zen generations
# (arch/x86/kernel/cpu/amd.c, bsp_init_amd); Intel's models are intel-family.h's.
TABLE = (
    (AMD, 0x17, ((0x00, 0x2F), (0x50, 0x5F)), Uarch("Zen1", 2, 128)),
    (AMD, 0x17, ((0x30, 0x4F), (0x60, 0x7F), (0x90, 0x91), (0xA0, 0xAF)), Uarch("Zen2", 2, 256)),
    (AMD, 0x19, ((0x00, 0x0F), (0x20, 0x5F)), Uarch("Zen3", 2, 256)),
    (AMD, 0x19, ((0x10, 0x1F), (0x60, 0xAF)), Uarch("Zen4", 2, 256)),
    # server (Turin) and desktop (Granite Ridge) parts have 512-bit pipes, mobile ones 256-bit
    (AMD, 0x1A, ((0x00, 0x1F), (0x40, 0x4F)), Uarch("Zen5", 2, 512)),
    (AMD, 0x1A, ((0x20, 0x2F),), Uarch("Zen5 mobile", 2, 256)),
    (INTEL, 6, ((0x3C, 0x3C), (0x3F, 0x3F), (0x45, 0x46)), Uarch("Haswell", 2, 256)),
    (INTEL, 6, ((0x3D, 0x3D), (0x47, 0x47), (0x4F, 0x4F), (0x56, 0x56)),
     Uarch("Broadwell", 2, 256)),
    (INTEL, 6, ((0x4E, 0x4E), (0x5E, 0x5E), (0x8E, 0x8E), (0x9E, 0x9E), (0xA5, 0xA6)),
     Uarch("Skylake client", 2, 256)),
    (INTEL, 6, ((0x55, 0x55),), Uarch("Skylake-SP/Cascade Lake", 0, 512)),
    (INTEL, 6, ((0x6A, 0x6A),), Uarch("Ice Lake-SP", 2, 512)),
    (INTEL, 6, ((0x8F, 0x8F),), Uarch("Sapphire Rapids", 2, 512)),
    (INTEL, 6, ((0xCF, 0xCF),), Uarch("Emerald Rapids", 2, 512)),
    (INTEL, 6, ((0xAD, 0xAE),), Uarch("Granite Rapids", 2, 512)),
)
# A VM may report a model number the vendor never gave its part (a client core's, beside AMX
# flags). AMX tiles come only on Xeon cores of Sapphire Rapids and later, each with two 512-bit
# FMA ports, so the flag names the FMA units where the model cannot.
BY_FLAG = ((INTEL, "amx_tile", Uarch("Xeon with AMX (Sapphire Rapids or later)", 2, 512)),)
ELEMENT_BITS = {"float64": 64, "float32": 32, "float16": 16}
# Matrix units that multiply a dtype outside the vector FMA pipes: a GEMM on them can pass
# the vector peak, so it has none here.
MATRIX_UNITS = {"bfloat16": "amx_bf16", "float16": "amx_fp16"}


def by_part(uarch: Uarch, model_name: str) -> int | None:
    """FMA ports of a part whose count varies: Xeon Scalable 1st/2nd generation Platinum and
    Gold 6xxx have two 512-bit FMA units, Silver and Bronze one; other names (Gold 5xxx, W,
    Core X) differ part by part, so None."""
    if uarch.ports:
        return uarch.ports
    if re.search(r"Platinum|Gold 6\d{3}", model_name):
        return 2
    if re.search(r"Silver|Bronze", model_name):
        return 1
    return None


def cpu_identity(path: str | Path = "/proc/cpuinfo") -> dict | None:
    """vendor, family, model, model name and PEAK_FLAGS of the first CPU in cpuinfo; None where
    it is unreadable."""
    try:
        text = Path(path).read_text()
    except OSError:
        return None
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip() and fields:
            break  # the first CPU's block
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    flags = set((fields.get("flags") or fields.get("Features") or "").split())

    def number(key):
        try:
            return int(fields[key])
        except (KeyError, ValueError):
            return None

    return {"vendor": fields.get("vendor_id") or fields.get("CPU implementer"),
            "family": number("cpu family"), "model": number("model"),
            "model_name": fields.get("model name", ""), "flags": sorted(flags & PEAK_FLAGS)}


def microarchitecture(cpu: dict) -> tuple[Uarch | None, str]:
    """The table's entry for this identity (else the one its ISA flags imply), and its name; or
    None and why."""
    vendor, family, model = cpu.get("vendor"), cpu.get("family"), cpu.get("model")
    for v, f, spans, uarch in TABLE:
        if (v, f) == (vendor, family) and any(lo <= (model or -1) <= hi for lo, hi in spans):
            return uarch, uarch.name
    where = (f"family {family:#x} model {model:#x}" if isinstance(family, int)
             and isinstance(model, int) else "no family and model in cpuinfo")
    for v, flag, uarch in BY_FLAG:
        if v == vendor and flag in (cpu.get("flags") or ()):
            return uarch, f"{uarch.name} by its {flag} flag ({where} not in the table)"
    return None, f"unknown microarchitecture: {vendor or 'no vendor'} {where}"


def fma_units(uarch: Uarch, cpu: dict) -> tuple[int | None, int]:
    """(FMA ports a core of this part has, None where by_part cannot tell; the bits each works
    at: the table's width, capped by the ISA the OS shows)."""
    return (by_part(uarch, cpu.get("model_name") or ""),
            min(uarch.bits, isa_bits(cpu.get("flags") or ())))


def isa_bits(flags) -> int:
    """The widest FMA vector the ISA offers, as the OS reports it (a VM can hide AVX-512)."""
    if "avx512f" in flags:
        return 512
    return 256 if {"fma", "avx"} <= set(flags) else 0


def no_fma(dtype: str, flags, matrix: bool) -> str | None:
    """Why `dtype` has no vector FMA peak here (None: it has one)."""
    flags = set(flags)
    unit = MATRIX_UNITS.get(dtype)
    if matrix and unit in flags:
        return f"its GEMM may run on AMX tiles ({unit}), a unit outside the vector FMA pipes"
    if dtype == "float16" and "avx512_fp16" not in flags:
        return "no native float16 FMA: the ISA lacks avx512_fp16 (F16C only converts)"
    if dtype == "bfloat16":
        return ("no bfloat16 FMA in the ISA" + (": avx512_bf16 has only a dot product into "
                                                "float32 (VDPBF16PS)" if "avx512_bf16" in flags
                                                else ""))
    if dtype not in ELEMENT_BITS:
        return f"no {dtype} vector FMA on a CPU"
    return None


@dataclass(frozen=True)
class Peak:
    flops: float  # NaN where there is none
    basis: str  # the product it is, or why there is none


def peak(cpu: dict, cores: int, mhz: float, dtype: str, matrix: bool = False) -> Peak:
    """The FMA peak of `cores` physical cores at `mhz`, in `dtype` (`matrix`: a GEMM's)."""
    uarch, name = microarchitecture(cpu)
    flags = set(cpu.get("flags") or ())
    if uarch is None:
        return Peak(math.nan, name)
    why = no_fma(dtype, flags, matrix)
    ports, bits = fma_units(uarch, cpu)
    if why is None and ports is None:
        why = (f"{name}: 1 or 2 FMA units by part, and the name "
               f"{cpu.get('model_name')!r} does not say which")
    if why is None and not bits:
        why = f"{name}: the ISA offers no FMA instructions here (no fma/avx flags)"
    if why is None and not (cores and mhz and math.isfinite(mhz)):
        why = "no clock recorded" if cores else "no core count recorded"
    if why is not None:
        return Peak(math.nan, why)
    lanes = bits // ELEMENT_BITS[dtype]
    return Peak(cores * ports * lanes * 2 * mhz * 1e6,
                f"{cores} cores x {ports} FMA ports x {lanes} {dtype} lanes x 2 x "
                f"{mhz / 1000:.2f} GHz ({name}, {bits}-bit FMA)")
