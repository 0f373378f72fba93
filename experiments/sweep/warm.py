"""What the fork server does ahead for its jobs, beyond importing their modules (forkserver.py
PRELOAD names these as "experiments.sweep.warm:<function>"). Each function is a generator, one
step of work per next(): the server interleaves the steps with the jobs it forks, so a job asking
meanwhile waits for one step at most.

Nothing here changes what a job measures or records: a job finds done what it would otherwise
do itself, the same way. Nothing here touches a GPU or starts a thread (the jobs are forked).
"""

from __future__ import annotations

JOB_DTYPES = ("float32", "float64")  # the CPU kernels' dtypes (numba has no half arithmetic)


def compose_once():
    """Hydra composes a job's whole config once only to read `hydra.mode` (run or multirun),
    then again to run it: 0.1-0.3 s of every job. config/job.yaml leaves the mode unset, so that
    first composition answers None unless an override sets it; a job forked by the server skips
    it otherwise. (`python -m experiments` is the one Hydra app the server runs.)"""
    from hydra._internal.hydra import Hydra

    probe = Hydra.get_mode
    if not getattr(probe, "rooflab_skips", False):
        def get_mode(self, config_name, overrides):
            if any(o.lstrip("+~").startswith("hydra.mode") for o in overrides):
                return probe(self, config_name, overrides)
            return None

        get_mode.rooflab_skips = True
        Hydra.get_mode = get_mode
    yield


def package_metadata():
    """Read the package versions once (core/provenance.py), so a job's own read finds
    importlib.metadata's directory listings and platform's answers cached."""
    from experiments.core.provenance import package_versions

    package_versions()
    yield


def signatures(dtype: str) -> dict:
    """The argument types of each CPU kernel as the jobs call it, for `dtype` arrays: 1-D
    contiguous arrays (torch tensors' .numpy()), Python ints (int64) and floats (float64)."""
    array = f"{dtype}[::1]"
    return {
        "fill": f"void({array}, int64, int64, int64)",  # x, lo, hi, seed
        "stream": f"void({array}, {array}, {array}, int64, int64, int64)",  # a, b, out, lo, hi, reps
        "chain": f"void({array}, {array}, float64, int64, int64, int64)",  # x, y, a, fmas, lo, hi
    }


def cpu_kernels():
    """Compile the numba CPU kernels (bandwidth's and intensity's) for float32 and float64, one
    kernel a step. A job compiled each at its first call (importing numba 0.5 s, each kernel
    0.2-0.9 s, in every CPU job of bandwidth and intensity); one forked after finds them compiled:
    the same code, for the same signatures and CPU features (set when the modules load)."""
    import numpy as np

    from experiments.kernels import cpu_fma, cpu_stream

    for dtype in JOB_DTYPES:
        sig = signatures(dtype)
        yield cpu_stream._fill.compile(sig["fill"])  # every CPU job of bandwidth and intensity
        chain = cpu_fma.chain_kernel(cpu_fma.lanes(np.dtype(dtype).itemsize))
        yield chain.compile(sig["chain"])
        for kernel in cpu_stream.KERNELS.values():
            yield kernel.compile(sig["stream"])
