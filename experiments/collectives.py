"""Collectives over every GPU of the job's pool: all-reduce, all-gather, reduce-scatter (NCCL).

The job starts its own process group on this one node, no external launcher: one process per
GPU (torch.multiprocessing, spawn), meeting through a FileStore in a temporary folder (no port to
pick or collide on); rank 0 writes the rows, one JSON line per point, and the job reads them.

Bytes, as nccl-tests count them (its "size" column): `bytes` is the size S of the collective's
large buffer, the same S for all three -
- all_reduce: the buffer every rank reduces in place (S each);
- all_gather: the output (S = world x the S/world each rank contributes);
- reduce_scatter: the input (S = world x the S/world each rank receives).
`byte_per_s` = S / time_s is nccl-tests' algbw. busbw, the rate each link carries in the ring's
terms (comparable to the hardware's link bandwidth and across GPU counts), is algbw x 2(n-1)/n for
all-reduce and algbw x (n-1)/n for all-gather and reduce-scatter (n = world size). `params`
record both (algbw_Bps, busbw_Bps), the factor, the world size, bytes per rank and NCCL's version.

Timing: each rank times the same number of calls (the plan is agreed: the slowest rank's estimate)
with CUDA events on its stream; a sample's time is the slowest rank's (a collective ends when its
last rank does), then the median. Calls are eager launches from Python, as a training step issues
them: at 1 KiB the time is launch and NCCL latency. Timed all-reduces use AVG: a SUM repeated in
place multiplies the data by n each call and overflows to inf within ~100 calls; AVG moves the
same bytes through the same algorithm and keeps them finite. The checked call before timing uses
SUM. Checks: all-reduce and reduce-scatter against world x base + (0 + 1 + ... + n-1) (each rank's
input is a shared random base plus its rank: random, never zeros, different per rank), within
float32 rounding; all-gather exactly against every rank's input.

A CPU job or a one-GPU job: every row `not_applicable` ("not measurable here"): no collective of
one.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

# NVLink multicast (NVLS, multimem) stays off: this machine's policy forbids it, and a run with it
# would time another algorithm than the ring/tree these numbers are compared against. Set before
# NCCL (or torch symmetric memory, or NVSHMEM) initialises in any process of the job; the spawned
# ranks inherit the environment.
os.environ["NCCL_NVLS_ENABLE"] = "0"
os.environ["TORCH_SYMM_MEM_DISABLE_MULTICAST"] = "1"
os.environ["NVSHMEM_DISABLE_NVLS"] = "1"

import torch  # noqa: E402
from omegaconf import MISSING

from experiments.core.config import ExperimentConfig  # noqa: E402
from experiments.core.dtypes import itemsize, torch_dtype  # noqa: E402
from experiments.core.device import gpu_group  # noqa: E402
from experiments.core.harness import Point, State  # noqa: E402
from experiments.core.runner import Context  # noqa: E402

NAME = "collectives"
DESCRIPTION = "NCCL all-reduce, all-gather, reduce-scatter over all GPUs: algbw and busbw by size"
ALL_GPUS = True  # the job holds every GPU of its pool (core.runner.run_job)
NOT_ON = ("cpu",)  # no collective of one: a sweep plans no CPU job

OPS = ("all_reduce", "all_gather", "reduce_scatter")
NO_GPU = "not measurable here: a CPU job has no GPUs for a collective"
ONE_GPU = ("not measurable here: one GPU ({dev}): no collective of one; a pool of GPUs "
           "(device cuda:0+1) runs them over all of its GPUs")
WARMUP = 5  # calls before the plan: NCCL sets up its channels on the first
ESTIMATE = 5  # calls timed on the host to plan the samples (a fixed count: every rank does it)
log = logging.getLogger("rooflab")


@dataclass
class CollectivesConfig(ExperimentConfig):
    name: str = NAME
    sizes: list[int] = MISSING  # bytes of the large buffer S (see above)
    ops: list[str] = MISSING
    timeout_s: float = MISSING  # the whole group; past it the ranks are stopped, rows say why

    RULES = {"sizes": "sizes", "timeout_s": "> 0", "ops": OPS}


Config = CollectivesConfig


def bus_factor(op: str, world: int) -> float:
    """nccl-tests' busbw / algbw: 2(n-1)/n for all-reduce, (n-1)/n for all-gather and
    reduce-scatter (doc/PERFORMANCE.md of nccl-tests)."""
    if op == "all_reduce":
        return 2 * (world - 1) / world
    if op in ("all_gather", "reduce_scatter"):
        return (world - 1) / world
    raise ValueError(f"op={op!r}; allowed: {OPS}")


def bandwidths(op: str, nbytes: float, time_s: float, world: int) -> dict:
    """algbw = S / time (S as nccl-tests count it), busbw = algbw x bus_factor."""
    algbw = nbytes / time_s
    return {"algbw_Bps": algbw, "busbw_Bps": algbw * bus_factor(op, world),
            "bus_factor": bus_factor(op, world)}


def layout(op: str, size: int, world: int, elem: int) -> dict:
    """Elements of the large buffer and of each rank's part, for a requested size S in bytes
    (rounded down to whole elements per rank): the row's n, bytes, working set and params."""
    chunk = max(1, size // (world * elem))
    total = chunk * world
    # all_reduce: one buffer of S per rank; the others: S and S/world per rank
    per_rank = total if op == "all_reduce" else total + chunk
    return {"n": total, "chunk": chunk, "bytes": float(total * elem),
            "working_set_bytes": per_rank * elem}


def not_measurable(cfg: CollectivesConfig, reason: str, gpus: int, elem: int = 4) -> list[Point]:
    return [Point(_base(cfg, op, size, max(gpus, 1), elem) | {"params": {"world_size": gpus}},
                  status="not_applicable", message=reason) for op in cfg.ops for size in cfg.sizes]


def _base(cfg: CollectivesConfig, op: str, size: int, world: int, elem: int) -> dict:
    lay = layout(op, size, world, elem)
    return {"op": op, "variant": "nccl", "n": lay["n"], "bytes": lay["bytes"]}


# --- one rank -------------------------------------------------------------------------------

def _inputs(op, lay, rank, world, dev, dtype, seed):
    """(input, output, expected output, exact?) of one rank: input = base + rank."""
    gen = torch.Generator(device=dev).manual_seed(seed)
    base = torch.randn(lay["n"], device=dev, dtype=dtype, generator=gen)
    chunk = lay["chunk"]
    ranks_sum = world * (world - 1) / 2  # 0 + 1 + ... + (n-1)
    if op == "all_reduce":
        x = base + rank
        return x, x, base.double() * world + ranks_sum, False
    if op == "reduce_scatter":
        part = base[rank * chunk:(rank + 1) * chunk]
        return base + rank, torch.empty(chunk, device=dev, dtype=dtype), \
            part.double() * world + ranks_sum, False
    # all_gather: rank r gives chunk r of the base plus r; every rank gets them all
    x = base[rank * chunk:(rank + 1) * chunk] + rank
    offsets = torch.arange(world, device=dev, dtype=dtype).repeat_interleave(chunk)
    return x, torch.empty(lay["n"], device=dev, dtype=dtype), base + offsets, True


def _call(dist, op, x, out, reduce_op):
    if op == "all_reduce":
        return lambda i: dist.all_reduce(x, op=reduce_op)
    # the *_single names are torch >= 2.12's for the *_tensor ones (same arguments, same kernels)
    if op == "all_gather":
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        return lambda i: gather(out, x)
    scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    return lambda i: scatter(out, x, op=dist.ReduceOp.SUM)


def _point(dist, spec, op, size, rank, world, dev) -> dict:
    from experiments.core.conditions import Conditions
    from experiments.core.timer import SAMPLE_TARGET_S, CpuTimer, CudaTimer, plan_counts, summarize

    dtype = torch_dtype(spec["dtype"])
    lay = layout(op, size, world, itemsize(spec["dtype"]))
    x, out, expected, exact = _inputs(op, lay, rank, world, dev, dtype, spec["seed"])
    if out is not x:
        out.fill_(float("nan"))  # poisoned: an output left unwritten fails the check
    sync = (lambda: torch.cuda.synchronize(dev)) if dev.type == "cuda" else (lambda: None)
    _call(dist, op, x, out, dist.ReduceOp.SUM)(0)  # the checked call
    sync()
    if exact:
        err = 0.0 if torch.equal(out, expected) else float("inf")
    else:
        err = float(((out.double() - expected).abs().max() / expected.abs().max()).item())
    # every rank's verdict: the worst error of any rank
    worst = torch.tensor([err], device=dev, dtype=torch.float64)
    dist.all_reduce(worst, op=dist.ReduceOp.MAX)
    err = float(worst.item())
    tolerance = 0.0 if exact else 4 * world * torch.finfo(dtype).eps

    # timed: AVG keeps an in-place all-reduce finite (see the module's docstring); gloo (the CPU
    # tests) has no AVG, and its few calls stay finite
    avg = dist.ReduceOp.AVG if spec["backend"] == "nccl" else dist.ReduceOp.SUM
    fn = _call(dist, op, x, out, avg)
    for i in range(WARMUP):
        fn(i)
    sync()
    t0 = time.perf_counter()
    for i in range(ESTIMATE):
        fn(i)
    sync()
    est = torch.tensor([(time.perf_counter() - t0) / ESTIMATE], device=dev, dtype=torch.float64)
    dist.all_reduce(est, op=dist.ReduceOp.MAX)  # one plan for all: every rank calls alike
    inner, samples = plan_counts(float(est.item()), spec["point_budget_s"], SAMPLE_TARGET_S[dev.type])
    timer = CudaTimer(dev, use_graph=False) if dev.type == "cuda" else CpuTimer()
    with Conditions(dev) as conditions:
        times = timer.run(fn, inner, samples)
    slowest = torch.tensor(times, device=dev, dtype=torch.float64)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)  # a sample ends when its last rank does
    stats = summarize(slowest.cpu().numpy()) | {"inner_reps": inner, "timer": timer.name}
    stats |= conditions.summary(stats["time_s"], spec["contention_threshold"])
    stats["noisy"] = bool(stats["cv"] > spec["cv_threshold"])
    passed = err <= tolerance
    row = {"op": op, "variant": spec["backend"], "n": lay["n"], "bytes": lay["bytes"],
           "working_set_bytes": lay["working_set_bytes"], **stats,
           "rel_error": err, "check_passed": passed,
           "status": "ok" if passed else "wrong_result",
           "params": bandwidths(op, lay["bytes"], stats["time_s"], world) | {
               "world_size": world, "bytes_per_rank": lay["chunk"] * itemsize(spec["dtype"]),
               "requested_bytes": size, "reduce_op_timed": "avg" if op == "all_reduce"
               and spec["backend"] == "nccl" else "sum" if op != "all_gather" else None,
               "tolerance": tolerance, **spec["versions"]}}
    if not passed:
        row["message"] = f"{op}: relative error {err:.3g} above {tolerance:.3g}"
    return row


def _plain(value):
    """numpy scalars (a condition flag, say) as the Python values JSON knows."""
    return value.item() if hasattr(value, "item") else str(value)


def worker(rank: int, world: int, store_path: str, out_path: str, spec: dict) -> None:
    """One rank: join the group, run every point in order, rank 0 appends each row to out_path."""
    import torch.distributed as dist

    from experiments.core.cotenants import job_process_is

    job_process_is(os.getppid())  # the job spawned every rank: its siblings are no co-tenants
    if spec["backend"] == "nccl":
        dev = torch.device("cuda", spec["indices"][rank])
        torch.cuda.set_device(dev)
    else:
        dev = torch.device("cpu")
        torch.set_num_threads(1)
    store = dist.FileStore(store_path, world)
    kwargs = {"device_id": dev} if dev.type == "cuda" else {}
    dist.init_process_group(spec["backend"], store=store, rank=rank, world_size=world,
                            timeout=timedelta(seconds=spec["timeout_s"]), **kwargs)
    try:
        for op in spec["ops"]:
            for size in spec["sizes"]:
                row = _point(dist, spec, op, size, rank, world, dev)
                if rank == 0:
                    with open(out_path, "a") as f:
                        f.write(json.dumps(row, default=_plain) + "\n")
                if dev.type == "cuda":
                    torch.cuda.empty_cache()
    finally:
        dist.destroy_process_group()


def run_group(spec: dict, world: int, timeout_s: float) -> tuple[list[dict], str | None]:
    """Start `world` ranks (spawn), wait at most timeout_s; (rows rank 0 wrote, why it stopped
    early or None)."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory(prefix="rooflab-collectives-") as tmp:
        store, out = str(Path(tmp, "store")), str(Path(tmp, "rows.jsonl"))
        ctx = mp.start_processes(worker, args=(world, store, out, spec), nprocs=world,
                                 join=False, start_method="spawn")
        deadline = time.monotonic() + timeout_s
        why = None
        try:
            while not ctx.join(timeout=1.0):
                if time.monotonic() > deadline:
                    why = f"the ranks did not finish within {timeout_s:g} s; stopped"
                    break
        except Exception as exc:  # a rank raised: ProcessRaisedException with its traceback
            why = f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1][:400]}"
        finally:
            for proc in ctx.processes:  # only the ranks this job started
                if proc.is_alive():
                    proc.kill()
                    proc.join()
        rows = [json.loads(line) for line in Path(out).read_text().splitlines()] \
            if Path(out).exists() else []
    return rows, why


def _versions(backend: str) -> dict:
    nccl = None
    if backend == "nccl":
        try:
            v = torch.cuda.nccl.version()
            nccl = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
        except Exception:
            pass
    return {"nccl_version": nccl, "nccl_nvls_enable": os.environ.get("NCCL_NVLS_ENABLE")}


def spec_for(cfg: CollectivesConfig, ctx: Context, backend: str, indices: list[int],
             budget_s: float) -> dict:
    return {"backend": backend, "indices": indices, "ops": list(cfg.ops),
            "sizes": list(cfg.sizes), "dtype": ctx.dtype, "seed": ctx.settings.seed,
            "point_budget_s": budget_s,
            "cv_threshold": ctx.settings.cv_threshold,
            "contention_threshold": ctx.settings.contention_threshold, "timeout_s": cfg.timeout_s,
            "versions": _versions(backend)}


def measure_group(cfg: CollectivesConfig, spec: dict, world: int) -> list[dict]:
    """Every point's row: those the ranks wrote, and an `error` row for each point they did not
    reach, with the reason."""
    rows, why = run_group(spec, world, cfg.timeout_s)
    done = {(r["op"], r["params"]["requested_bytes"]) for r in rows}
    return rows + [_base(cfg, op, size, world, itemsize(spec["dtype"])) | {
        "variant": spec["backend"], "status": "error",
        "message": why or "the ranks ended without this point",
        "params": {"world_size": world, "requested_bytes": size}}
        for op in cfg.ops for size in cfg.sizes if (op, size) not in done]


def points(cfg: CollectivesConfig, ctx: Context) -> list[Point]:
    gpus, why = gpu_group(ctx.devices, NO_GPU, ONE_GPU)
    return not_measurable(cfg, why, len(gpus)) if why else [
        Point(_base(cfg, op, size, len(gpus), itemsize(ctx.dtype)), args={"size": size,
              "gpus": gpus}) for op in cfg.ops for size in cfg.sizes]


def measure(state: State) -> dict:
    """The point's row, from the ranks' run of every point at once (the first point starts it;
    the ranks open their own CUDA contexts, this process keeps its own idle meanwhile)."""
    if "rows" not in state.memo:
        gpus = state.args["gpus"]
        spec = spec_for(state.cfg, state.ctx, "nccl", [d.index for d in gpus], state.budget_s)
        state.memo["rows"] = {(r["op"], r["params"]["requested_bytes"]): r
                              for r in measure_group(state.cfg, spec, len(gpus))}
    return state.memo["rows"][(state.row["op"], state.args["size"])]
