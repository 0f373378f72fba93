"""The CPU FMA chain (kernels/chain.py's math) as LLVM IR, in float32, float64 and, for ISAs with
half-precision FMAs (x86 AVX512-FP16, Sapphire Rapids and later; ARMv8.2 FP16), float16: the
intensity experiment's CPU kernel.

numba has no half type on CPUs, so the kernel is LLVM IR compiled by llvmlite, numba's own LLVM
binding (no C compiler, no intrinsics of one ISA: LLVM picks the instructions, and the vector
width comes from the target). A thread steps NV accumulator vectors (half the vector registers)
through the chain together, their x operands held in the other half, so each step is NV
register-only FMAs; a scalar loop takes the tail. Threads are the pinned team (cpu_team.py);
ctypes releases the GIL for the call. Why not kernels/cpu_fma.py's numba loop for float32 and
float64: LLVM keeps its x operands in memory, an FMA with a load each, and it reads less of the
peak (docs/cpu.md, "Kernels").

Without native half FMAs LLVM emulates each step in wider arithmetic (with conversions and a
libcall): that times emulation, not half FMAs, so `native()` gates float16 and the row says why.
"""

from __future__ import annotations

import ctypes

import numpy as np

from experiments.kernels.cpu_team import split, team
from experiments.kernels.numba_host import target_features, vector_registers


def native(features: str | None = None) -> bool:
    """Whether the target has half-precision FMAs in its vector unit."""
    flags = (features or target_features()).split(",")
    return "+avx512fp16" in flags or "+fullfp16" in flags


def shape(features: str | None = None) -> tuple[int, int]:
    """(halves per vector, accumulator vectors): half the registers hold accumulators."""
    width, registers = vector_registers(features)
    return width // 2, registers // 2


TYPES = {"half": ("f16", 2), "float": ("f32", 4), "double": ("f64", 8)}
BY_DTYPE = {np.dtype(np.float16): "half", np.dtype(np.float32): "float",
            np.dtype(np.float64): "double"}


def ir(vw: int, nv: int, ty: str = "half", ticks: int = 0) -> str:
    """The kernel as LLVM IR: chain(x, y, lo, hi, fmas, a, end) over elements [lo, hi) of `ty`.
    With `ticks`, each step also runs a chain of that many dependent one-cycle integer ops (xor,
    add), its last value stored to end: the FMA units' clock (kernels/cpu_clock.py)."""
    suffix = TYPES[ty][0]
    lanes, vt = vw * nv, f"<{vw} x {ty}>"
    # a comes as a float: x86 converts float to half without a libcall (double needs one)
    scalar_a = {"half": "  %a = fptrunc float %a32 to half",
                "float": "  %a = fadd float %a32, 0.0",
                "double": "  %a = fpext float %a32 to double"}[ty]
    js = range(nv)
    loads = "\n".join(
        f"  %px{j} = getelementptr {ty}, ptr %x, i64 %o{j}\n"
        f"  %x{j} = load {vt}, ptr %px{j}, align 2" for j in js)
    offsets = "\n".join(f"  %o{j} = add i64 %s, {j * vw}" for j in js)
    phis = "\n".join(f"  %acc{j} = phi {vt} [%x{j}, %body], [%n{j}, %step]" for j in js)
    steps = "\n".join(f"  %n{j} = call {vt} @llvm.fma.v{vw}{suffix}({vt} %acc{j}, {vt} %av, "
                      f"{vt} %x{j})" for j in js)
    stores = "\n".join(f"  %py{j} = getelementptr {ty}, ptr %y, i64 %o{j}\n"
                       f"  store {vt} %acc{j}, ptr %py{j}, align 2" for j in js)
    tick_phi = f"  %c0 = phi i64 [%s, %body], [%c{ticks}, %step]" if ticks else ""
    tick_ops = "\n".join(f"  %c{i} = {'xor' if i % 2 else 'add'} i64 %c{i - 1}, {0x5BD1E995 + i}"
                         for i in range(1, ticks + 1))
    tick_out = "  store i64 %c0, ptr %end" if ticks else ""
    return f"""
declare {vt} @llvm.fma.v{vw}{suffix}({vt}, {vt}, {vt})
declare {ty} @llvm.fma.{suffix}({ty}, {ty}, {ty})

define void @chain(ptr %x, ptr %y, i64 %lo, i64 %hi, i64 %fmas, float %a32, ptr %end) {{
entry:
{scalar_a}
  %a0 = insertelement {vt} poison, {ty} %a, i32 0
  %av = shufflevector {vt} %a0, {vt} poison, <{vw} x i32> zeroinitializer
  %span = sub i64 %hi, %lo
  %blocks = udiv i64 %span, {lanes}
  %covered = mul i64 %blocks, {lanes}
  %full = add i64 %lo, %covered
  br label %next
next:
  %s = phi i64 [%lo, %entry], [%s1, %done]
  %more = icmp ult i64 %s, %full
  br i1 %more, label %body, label %tail
body:
{offsets}
{loads}
  br label %loop
loop:
  %k = phi i64 [0, %body], [%k1, %step]
{phis}
{tick_phi}
  %go = icmp ult i64 %k, %fmas
  br i1 %go, label %step, label %done
step:
{steps}
{tick_ops}
  %k1 = add i64 %k, 1
  br label %loop
done:
{stores}
{tick_out}
  %s1 = add i64 %s, {lanes}
  br label %next
tail:
  %t = phi i64 [%full, %next], [%t1, %tdone]
  %tmore = icmp ult i64 %t, %hi
  br i1 %tmore, label %tbody, label %exit
tbody:
  %pt = getelementptr {ty}, ptr %x, i64 %t
  %xt = load {ty}, ptr %pt, align 2
  br label %tloop
tloop:
  %tk = phi i64 [0, %tbody], [%tk1, %tstep]
  %v = phi {ty} [%xt, %tbody], [%v1, %tstep]
  %tgo = icmp ult i64 %tk, %fmas
  br i1 %tgo, label %tstep, label %tdone
tstep:
  %v1 = call {ty} @llvm.fma.{suffix}({ty} %v, {ty} %a, {ty} %xt)
  %tk1 = add i64 %tk, 1
  br label %tloop
tdone:
  %pyt = getelementptr {ty}, ptr %y, i64 %t
  store {ty} %v, ptr %pyt, align 2
  %t1 = add i64 %t, 1
  br label %tail
exit:
  ret void
}}
"""


def target_machine(cpu: str | None = None, features: str | None = None):
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    target = llvm.Target.from_triple(llvm.get_process_triple())
    return target.create_target_machine(cpu=cpu or llvm.get_host_cpu_name(),
                                        features=features or target_features(), opt=3)


def assembly(cpu: str, features: str, ty: str = "half", ticks: int = 0) -> str:
    """The kernel's machine code for another CPU (what tests check; nothing runs)."""
    import llvmlite.binding as llvm

    halves, nv = shape(features)
    module = llvm.parse_assembly(ir(halves * 2 // TYPES[ty][1], nv, ty, ticks))
    module.verify()
    return target_machine(cpu, features).emit_assembly(module)


_KERNEL: dict = {}
_SIGNATURE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                              ctypes.c_int64, ctypes.c_int64, ctypes.c_float, ctypes.c_void_p)


def kernel(ty: str = "half", ticks: int = 0):
    """(the compiled chain for this host, elements per step), compiled once per process."""
    if (ty, ticks) not in _KERNEL:
        import llvmlite.binding as llvm

        width, nv = shape()
        vw = width * 2 // TYPES[ty][1]
        module = llvm.parse_assembly(ir(vw, nv, ty, ticks))
        module.verify()
        engine = llvm.create_mcjit_compiler(module, target_machine())
        engine.finalize_object()  # the engine owns the code: keep it alive beside the pointer
        _KERNEL[ty, ticks] = (engine, _SIGNATURE(engine.get_function_address("chain")), vw * nv)
    return _KERNEL[ty, ticks][1], _KERNEL[ty, ticks][2]


def lanes(itemsize: int = 2) -> int:
    """Elements of `itemsize` bytes a thread steps together."""
    halves, nv = shape()
    return halves * nv * 2 // itemsize


def fma_chain(cpus, x: np.ndarray, y: np.ndarray, fmas: int, a: float) -> None:
    """y = f(x) over the team of `cpus`, each worker a contiguous slice."""
    ty = BY_DTYPE.get(x.dtype)
    if ty is None or y.dtype != x.dtype:
        raise TypeError(f"float16, float32 or float64 arrays expected, got {x.dtype} and "
                        f"{y.dtype}")
    fn, width = kernel(ty)
    px, py = x.ctypes.data, y.ctypes.data
    parts = split(x.size, len(cpus), width)
    team(cpus).run(fn, [(px, py, lo, hi, fmas, float(a), None) for lo, hi in parts])
