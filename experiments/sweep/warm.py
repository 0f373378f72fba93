"""What the fork server (forkserver.py) loads and does ahead for its jobs: the modules they import
(PRELOAD, then PRELOAD_LATER and NUMBA: plan() orders them) and work named as
"experiments.sweep.warm:<function>". Each function is a generator, one step of work per next():
the server interleaves the steps with the jobs it forks, so a job asking meanwhile waits for one
step at most.

Nothing here changes what a job measures or records: a job finds done what it would otherwise
do itself, the same way. Nothing here touches a GPU or starts a thread (the jobs are forked).
"""

from __future__ import annotations

import importlib

from experiments.sweep import child

# What the jobs import, loaded once in the server. Nothing here may start a thread or touch a GPU
# at import (a fork keeps only the forking thread; CUDA cannot be used after a fork).
# First what every job needs (the server says "ready" after these), then, between requests,
# what only some need: a job forked before those are in does it itself. Each name is a module,
# EXPERIMENTS (every experiment module) or "module:function", a generator of work done ahead
# (below), one step at a time. A later step holds up a job asking meanwhile: big
# packages come in parts (sympy, then dynamo).
EXPERIMENTS = "experiments.*"
PRELOAD = (
    "torch", "numpy", "pandas", "pyarrow", "pyarrow.parquet", "tqdm", "omegaconf", "hydra",
    "hydra.main", "hydra._internal.utils", "hydra._internal.hydra",
    "hydra._internal.config_loader_impl", "experiments.core.config",
    "experiments.core.runner", "experiments.core.store",
    # the rest of what `python -m experiments` imports (a job imported them itself: a fraction of
    # a second)
    "experiments.core.device", "experiments.sweep.checks", EXPERIMENTS,
    "experiments.sweep.warm:compose_once", "experiments.sweep.warm:package_metadata",
    "pynvml",  # a GPU job's NVML (imported, not initialised)
)
# The numba kernels of a CPU job of bandwidth or intensity, compiled (seconds on a small CPU),
# last of all: each serves one job (bandwidth's float32 ops, intensity's chain per dtype),
# so compiling one in the server saves no more than that job would spend on it, while before
# "ready" they held every job back (the first job started seconds later than with them after).
# The server compiles them while Snakemake finishes its DAG and between jobs;
# a job that comes first compiles its own. What PRELOAD_LATER imports serves many jobs.
NUMBA = ("numba", "experiments.sweep.warm:cpu_kernels")
PRELOAD_LATER = (
    # a workload job: the profiler, and what FlopCounterMode's first call imports (dynamo, sympy:
    # a second or several, by host)
    "experiments.cli.place", "experiments.models", "torch.profiler", "sympy",
    "torch.fx.experimental.symbolic_shapes", "torch.distributed.fsdp", "torch._dynamo",
    # the analysis steps
    "experiments.analysis.dataset", "scipy.optimize", "scipy.stats",
    "experiments.analysis.roofline", "experiments.analysis.claims",
    "experiments.analysis.placements", "matplotlib", "matplotlib.pyplot",
    "experiments.report.figures", "experiments.report.render", "seaborn",
    "experiments.report.interactive",  # bokeh: ~1 s of the report step
)


def steps(names):
    """Preloading `names` (PRELOAD's kinds of name), one step per next(); a name that fails (an
    optional package missing) is skipped: its jobs do what they need themselves."""
    for name in names:
        if name == EXPERIMENTS:
            from experiments import experiment_names

            yield from steps([f"experiments.{exp}" for exp in experiment_names()])
            continue
        module, _, function = name.partition(":")
        try:
            loaded = importlib.import_module(module)
            work = getattr(loaded, function)() if function else ()
            child.stamp_loaded()
            yield name
            for _ in work:
                yield name
        except Exception:
            child.stamp_loaded()


def preload(modules=PRELOAD) -> None:
    for _ in steps(modules):
        pass


def plan() -> tuple[tuple, tuple]:
    """(what the server loads before "ready", what it loads after, between jobs)."""
    return PRELOAD, PRELOAD_LATER + NUMBA


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
    """Read the package versions and hash its files once (core/provenance.py), so a job's own
    read finds importlib.metadata's directory listings, platform's answers and the hash cached."""
    from experiments.core.provenance import code_hash, package_versions

    package_versions()
    code_hash()
    yield


def signatures(dtype: str) -> dict:
    """The argument types of each CPU kernel as the jobs call it, for `dtype` arrays: 1-D
    contiguous arrays (torch tensors' .numpy()), Python ints (int64) and floats (float64)."""
    array = f"{dtype}[::1]"
    return {
        "fill": f"void({array}, int64, int64, int64)",  # x, lo, hi, seed
        # a half array's bits: x, lo, hi, seed, 1.0's bits, shift
        "fill_half": "void(uint16[::1], int64, int64, int64, int64, int64)",
        "stream": f"void({array}, {array}, {array}, int64, int64, int64)",  # a, b, out, lo, hi, reps
    }


def cpu_kernels():
    """Compile the CPU kernels of the default sweep's CPU jobs, one kernel a step: intensity's
    in float32 and float64 and the FMA units' clock chains (LLVM IR: kernels/cpu_fma_ir.py,
    kernels/cpu_clock.py), and numba's: bandwidth's in float32 (its other default dtype, bfloat16,
    streams with torch over arrays `_fill_half` draws; a float64 bandwidth job, not in it,
    compiles its own). A job compiled each at its first call (importing numba 0.5 s, each
    kernel 0.1-0.4 s, in every CPU job of bandwidth and intensity); one forked after finds them
    compiled: the same code, for the same signatures and CPU features (set when the modules
    load)."""
    import numpy as np

    from experiments.kernels import cpu_clock, cpu_fma_ir, cpu_stream

    for dtype in JOB_DTYPES:
        sig = signatures(dtype)
        yield cpu_stream._fill.compile(sig["fill"])  # every CPU job of bandwidth and intensity
        yield cpu_fma_ir.kernel(cpu_fma_ir.BY_DTYPE[np.dtype(dtype)])
    for dtype in (*JOB_DTYPES, "float16"):  # the FMA units' clock, each CPU point
        if clock := cpu_clock.fma_kernel(cpu_clock.fma_per_cycle(), dtype):
            yield clock[0]
    for op, kernel in cpu_stream.KERNELS.items():
        yield kernel.compile(signatures("float32")["stream"])
        yield cpu_stream.one_vector_kernel(op, "float32")  # the DRAM window's
    yield cpu_stream._fill_half.compile(signatures("float32")["fill_half"])  # bfloat16 bandwidth
