"""FP32, FP16, BF16 and Tensor Cores: how much faster, and how much less exact.

Speed is compared across dtypes (each dtype's GEMM ceiling against float32's); the error of each
dtype is measured against float64 products of the full-precision inputs, so it includes rounding
the inputs to the dtype as a user's data would be rounded.
"""

from __future__ import annotations

import math

from experiments.analysis.dataset import param
from experiments.analysis.claims.base import NotMeasurable, Result, claim, section
from experiments.analysis.units import qty

SECTION = section("precision", "FP32, FP16, BF16 and Tensor Cores", "matmul")
TENSOR_CORE = ("tf32", "float16", "bfloat16", "float8_e4m3")
FASTER = 2.0  # the fastest Tensor Core dtype runs GEMM at least this many times float32's rate


@claim("C19", SECTION,
       en="(Section announced, no text) FP32, FP16, BF16 and Tensor Cores.",
       zh="FP32、FP16、BF16 和 Tensor Core（文章只有标题）",
       prediction=lambda: f"Tensor Core dtypes (TF32, FP16, BF16, FP8) run GEMM at least "
                          f"{FASTER:g}x "
                  "faster than FP32, at a larger error against float64 of the full-precision "
                  "inputs.",
       fails_if=lambda: f"no Tensor Core dtype reaches {FASTER:g}x FP32's GEMM ceiling, or one "
                        "is no less "
                "exact than FP32.",
       experiments=("matmul",), limits=("FASTER",))
def c19(s):
    rows = s.exp("matmul")
    peaks = {d: s.ceiling("matrix_flops", d) for d in rows.dtype.unique()}
    peaks = {d: v for d, v in peaks.items() if v}
    errs = rows.groupby("dtype").rel_error.median()
    inputs = param(rows, "input_rounding_error").groupby(rows.dtype).median()
    arith = param(rows, "arithmetic_error").groupby(rows.dtype).median()

    def err(d):
        e = f"error {errs.get(d, math.nan):.1e}"
        if math.isfinite(inputs.get(d, math.nan)):
            e += f" = inputs rounded {inputs[d]:.1e}, arithmetic {arith.get(d, math.nan):.1e}"
        return e
    text = "; ".join(f"{d} {qty(v, 'FLOP/s')} ({err(d)})"
                     for d, v in sorted(peaks.items(), key=lambda kv: -kv[1]))
    if s.kind != "cuda":
        raise NotMeasurable("a CPU has no Tensor Cores (its numbers are shown for reference)",
                            text)
    if "float32" not in peaks:
        raise NotMeasurable("no float32 GEMM ceiling to compare with", text)
    low = {d: v for d, v in peaks.items() if d in TENSOR_CORE}
    if not low:
        raise NotMeasurable("no Tensor Core dtype measured", text)
    faster = max(low.values()) / peaks["float32"]
    less_exact = all(errs.get(d, 0) > errs.get("float32", 0) for d in low)
    return Result(faster >= FASTER and less_exact, f"{text}; best / FP32 = {faster:.1f}x",
                  "fastest Tensor Core GEMM ceiling / float32's", faster,
                  f">= {FASTER:g}, each Tensor Core dtype less exact than float32",
                  "matmul: every dtype's GEMM ceiling and error", len(rows))
