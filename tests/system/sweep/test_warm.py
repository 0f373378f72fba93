"""What the fork server does ahead for its jobs (experiments/sweep/warm.py) is what a job would do
itself: the same config, the same compiled kernels."""

from __future__ import annotations

import pytest

from experiments.sweep import warm


@pytest.mark.system
def test_the_kernels_compiled_ahead_are_the_ones_the_jobs_call(run_experiment):
    """A job that called a kernel with other argument types than warm.signatures says would
    compile it again (seconds of every CPU job of bandwidth and intensity): the default sweep's
    (intensity in float32 and float64, bandwidth in float32 and bfloat16) find theirs."""
    pytest.importorskip("numba")
    for _ in warm.cpu_kernels():
        pass
    from experiments.kernels import cpu_fma_ir, cpu_stream

    def compiled():
        kernels = {"fill": cpu_stream._fill, "fill_half": cpu_stream._fill_half,
                   **cpu_stream.KERNELS} | {
            f"{op} {dtype} one vector": kernel
            for (op, dtype), kernel in cpu_stream._ONE_VECTOR_KERNELS.items()}
        # intensity's LLVM IR chains and the FMA units' clock chains: one engine a type and
        # integer ops a step, made once (cpu_fma_ir.kernel)
        return {name: len(kernel.overloads) for name, kernel in kernels.items()} | {
            f"ir {ty} {ticks}": id(entry) for (ty, ticks), entry in cpu_fma_ir._KERNEL.items()}

    ahead = compiled()
    assert {"ir float 0", "ir double 0"} <= set(ahead)
    for dtype in warm.JOB_DTYPES:
        rows = run_experiment("intensity", dtype, ["experiment.n=1000", "experiment.fmas=[0,4]"])
        assert set(rows.variant) == {"llvmlite"}, rows.variant
    rows = run_experiment("bandwidth", "float32", ["experiment.sizes=[4096]"])
    assert set(rows.variant) == {"numba"}, rows.variant
    run_experiment("bandwidth", "bfloat16", ["experiment.sizes=[4096]"])  # drawn as bits
    assert compiled() == ahead
