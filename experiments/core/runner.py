"""One job: one experiment on one device in one dtype, written as one Parquet file."""

from __future__ import annotations

import gc
import logging
import math
import socket
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, is_dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import torch
from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from experiments.core.cpus import parse_cpus, pin_process
from experiments.core.conditions import job_conditions
from experiments.core.cpu_time import loadavg, own_cpus
from experiments.core.config import Settings
from experiments.core.device import (DeviceFacts, JobDevice, claim_device, context_ahead,
                                     device_facts, device_state)
from experiments.core.harness import Skipped, plan
from experiments.core.isolate import UserCodeFailed
from experiments.core.provenance import code_hash, config_hash, git_state, package_versions
from experiments.core.schema import past_int64, to_table, too_large
from experiments.core.store import write_atomic
from experiments.core.timer import measure

log = logging.getLogger("rooflab")


class Unsupported(Exception):
    """This device or torch build cannot run the point (fp8 on a CPU, say)."""


class NotApplicable(Exception):
    """The point has no meaning on this device (a CUDA graph on a CPU, say)."""


class WrongResult(Exception):
    """The timed operation's output failed its check."""


def is_oom(exc: BaseException) -> bool:
    if isinstance(exc, torch.OutOfMemoryError):
        return True
    text = str(exc)
    return isinstance(exc, (RuntimeError, MemoryError)) and (
        "out of memory" in text or "can't allocate memory" in text or isinstance(exc, MemoryError)
    )


def is_unsupported(exc: BaseException) -> bool:
    text = str(exc)
    return isinstance(exc, (RuntimeError, NotImplementedError, TypeError)) and any(
        key in text for key in ("not implemented for", "not supported", "Could not run",
                                "only supported", "is not supported", "NotImplementedError")
    )


PARALLEL_DRAW = 1 << 22  # elements: a CPU draw at least this large is drawn by a thread pool
DRAW_CHUNK = 1 << 20  # elements one thread draws from one generator


def parallel_randn(shape, dtype, generator: torch.Generator) -> torch.Tensor:
    """torch.randn on the CPU, drawn by a pool of this process's CPUs: torch's CPU randn runs on
    one thread (2 s for a 12288^2 float32 GEMM's A and B, while the other cores wait). Chunk k of
    DRAW_CHUNK elements comes from its own generator seeded from `generator`'s next draw plus k,
    so the values depend on the seed alone, never on the thread count (torch releases the GIL in
    randn, so the threads run at once)."""
    out = torch.empty(shape, dtype=dtype)
    flat = out.view(-1)
    base = int(torch.randint(0, 1 << 62, (1,), generator=generator))

    def draw(k: int):
        part = flat[k * DRAW_CHUNK:(k + 1) * DRAW_CHUNK]
        torch.randn(part.shape, dtype=dtype, out=part,
                    generator=torch.Generator().manual_seed(base + k))

    with ThreadPoolExecutor(len(own_cpus() or [0])) as pool:
        list(pool.map(draw, range(math.ceil(flat.numel() / DRAW_CHUNK))))
    return out


@dataclass
class Context:
    """What an experiment gets: the device, its facts, the dtype, and the job's measuring rules
    (`settings`: a Context given none measures by config/job.yaml's)."""

    device: torch.device
    dtype: str
    facts: DeviceFacts
    settings: Settings = field(default_factory=Settings.defaults)
    # every GPU the job holds: [device] for most; the whole pool for an experiment between GPUs
    devices: list = field(default_factory=list)
    generator: torch.Generator = field(init=False)

    @classmethod
    def for_job(cls, job, facts: DeviceFacts, devices: list) -> "Context":
        """The Context of a job (JobConfig) on devices[0], its rules the job's."""
        return cls(device=devices[0], dtype=job.dtype.value, facts=facts, devices=devices,
                   settings=Settings.of(job))

    def __post_init__(self):
        self.devices = list(self.devices) or [self.device]
        self.generator = torch.Generator(device=self.device).manual_seed(self.settings.seed)

    def randn(self, *shape, dtype=torch.float32) -> torch.Tensor:
        """Random data on the device (never zeros: they hide bugs and can run faster)."""
        if self.device.type == "cpu" and math.prod(shape) >= PARALLEL_DRAW:
            return parallel_randn(shape, dtype, self.generator)
        return torch.randn(*shape, device=self.device, dtype=dtype, generator=self.generator)

    def time(self, fn: Callable[[int], object], *, device: torch.device | None = None,
             point_budget_s: float | None = None, timer=None, force_graph: bool = False,
             warm_call_s: float | None = None, **changes) -> dict:
        """Time fn(i) within the point budget; returns the row's time columns. `device=` times on
        another GPU the job holds (events on that GPU's current stream); `point_budget_s=`: the
        point's own budget (core/harness.py budget_s), else the job's; `changes`: other settings;
        the rest: timer.measure's."""
        rules = self.settings.but(**changes)
        budget = rules.point_budget_s if point_budget_s is None else point_budget_s
        timing = measure(fn, self.device if device is None else device, budget, settings=rules,
                         timer=timer, force_graph=force_graph, warm_call_s=warm_call_s)
        stats = timing.stats
        stats["noisy"] = bool(stats["cv"] > rules.cv_threshold)
        return stats

    def sync(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def first_call(self, fn: Callable[[], object]) -> float:
        """Seconds fn() took, synchronized: a point's first call (its result check), which
        time(..., warm_call_s=) may take as the point's estimate."""
        t0 = time.perf_counter()
        fn()
        self.sync()
        return time.perf_counter() - t0

    def free_memory(self) -> int:
        """Bytes free for new tensors on the device."""
        if self.device.type == "cuda":
            return torch.cuda.mem_get_info(self.device)[0]
        with open("/proc/meminfo") as f:
            info = dict(line.split(":", 1) for line in f)
        return int(info["MemAvailable"].split()[0]) * 1024

    def point(self, base: dict, body: Callable[[], dict]) -> dict:
        """Run one point; a failure becomes a row with its status instead of ending the job."""
        row = dict(base)
        if big := past_int64(row):  # sizes no row (nor device) can hold: refused before measuring
            return row | dict.fromkeys(big) | {"status": "skipped", "message": too_large(big)}
        try:
            row.update(body())
            row.setdefault("status", "ok")
        except Unsupported as exc:
            row.update(status="unsupported", message=str(exc))
        except NotApplicable as exc:
            row.update(status="not_applicable", message=str(exc))
        except WrongResult as exc:
            row.update(status="wrong_result", message=str(exc))
        except Skipped as exc:
            row.update(status="skipped", message=str(exc))
        except UserCodeFailed as exc:  # a timeout or crash of user code, here or in a worker
            row.update(status=exc.status, message=str(exc))
            log.warning("%s point %s: %s", exc.status, base, row["message"])
        except Exception as exc:
            status = "oom" if is_oom(exc) else "unsupported" if is_unsupported(exc) else "error"
            row.update(status=status, message=f"{type(exc).__name__}: {str(exc)[:500]}")
            log.warning("%s point %s: %s", status, base, row["message"])
        finally:
            gc.collect()
            if self.device.type == "cuda":
                torch.cuda.empty_cache()
        return row


@contextmanager
def frozen_heap():
    """Point() collects garbage after every point (a failed point's traceback can hold its
    tensors in a cycle). With torch loaded a full collection walks ~250k objects: on a small CPU
    more than half of a short point's wall time. Freezing what exists before the
    points (modules, torch's registries) leaves the collector only the points' own objects."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()  # frozen objects are never freed at exit: nanobind (Triton) reports leaks


def _plain(obj):
    return asdict(obj) if is_dataclass(obj) else obj


def pin(cpus: str, device: str) -> None:
    """Run on `cpus` only (experiments/__main__ pinned the process already; this covers jobs run
    from Python); a CPU job sizes torch's thread pool to them."""
    allowed = pin_process(cpus)
    if not allowed:
        if parse_cpus(cpus):
            log.warning("cpus=%s: none of them is available to this process; not pinned", cpus)
        return
    if str(device) == "cpu":
        torch.set_num_threads(len(allowed))
    log.info("pinned to CPUs %s", ",".join(map(str, sorted(allowed))))


def start_line(name: str, device: str, dtype: str, total: int | None,
               point_budget_s: float, sampling_s: float | None = None) -> str:
    """The job's first log line: what it measures and roughly for how long. `sampling_s`: the
    harness's sum of the points' own budgets (core/harness.py sampling_s: some sample longer than
    the job's), else total x point_budget_s."""
    head = f"{name} on {device} in {dtype}:"
    if total is None:
        return f"{head} points not known up front"
    how = f"{total} points x point_budget_s {point_budget_s:g} s"
    if sampling_s is not None and sampling_s > total * point_budget_s:
        how += ", some sampling longer (the experiment's minimum)"
    else:
        sampling_s = total * point_budget_s
    return (f"{head} {total} points, at most about {_duration(sampling_s)} (an estimate: {how}, "
            "before warm-ups and retries; a point stops sooner once its median is known)")


def _duration(seconds: float) -> str:
    return f"{max(seconds, 1):.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


def held_line(device: str, start: dict) -> str:
    """The log line of a job that holds its device: how long it waited, and its CUDA context."""
    line = f"{device} held after {start['device_wait_s']:.2f} s waiting for it"
    if start.get("context_ahead_s") is not None:
        line += f"; its CUDA context made before, in {start['context_ahead_s']:.2f} s"
    elif start.get("context_s") is not None:
        line += f"; its CUDA context made in {start['context_s']:.2f} s"
    return line


def run_job(job, module, device: JobDevice | None = None) -> Path:
    """Measure every point of `module` for the job, then write the file atomically. `device`:
    the job's device, resolved once (None: resolved here from job.device).

    The device is held only while the points are measured: the provenance is read before, the
    table written after, so the next job waiting for the GPU starts sooner.
    A module with ALL_GPUS = True (peer_copy, collectives) holds every GPU of the job's pool at once;
    its rows' `measured_on` is the pool, and its Context's `devices` lists them."""
    all_gpus = bool(getattr(module, "ALL_GPUS", False))
    device = device or JobDevice.resolve(job.device)
    pin(job.cpus, job.device)
    provenance = {"git": git_state(), "code": code_hash(), "packages": package_versions()}
    start = {"context_ahead_s": context_ahead(device, all_gpus)}
    t0 = time.perf_counter()
    with claim_device(device, all_gpus=all_gpus) as held:
        start["device_wait_s"] = time.perf_counter() - t0
        devs = list(held) if all_gpus else [held]
        dev = devs[0]
        # the sweep's device: the pool the job took a free GPU from, else the device itself
        swept = device.name.name if device.pooled else str(dev)
        if dev.type == "cuda":
            # events, graphs and Triton launch on the current device: make it the one measured
            t0 = time.perf_counter()
            torch.cuda.set_device(dev)  # its context, unless context_ahead made it
            start["context_s"] = time.perf_counter() - t0
        measured_on = swept if all_gpus and len(devs) > 1 else str(dev)
        rows, metadata = _measure(job, module, swept, dev, devs, measured_on, provenance, start)
    return write_atomic(to_table(rows, metadata), job.out)


def _measure(job, module, device: str, dev: torch.device, devs, measured_on,
             provenance: dict, start: dict) -> tuple[list[dict], dict]:
    """The job's rows and its file's metadata."""
    facts = device_facts(dev)
    host = job.host or socket.gethostname()
    ctx = Context.for_job(job, facts, devs)
    git = provenance["git"]
    run_id = uuid.uuid4().hex[:12]
    identity = {
        "experiment": module.NAME, "host": host, "device": device, "measured_on": measured_on,
        "device_kind": dev.type,
        "device_name": facts.name, "dtype": ctx.dtype, "run_id": run_id,
        "git_commit": git["commit"], "torch_version": torch.__version__,
    }
    config = {"job": {k: _plain(v) for k, v in asdict(job).items()}}
    started = datetime.now(timezone.utc)
    state_start, load_start = device_state(dev), loadavg()
    todo = plan(module, job.experiment, ctx)
    total = todo.total
    log.info("%s", start_line(module.NAME, measured_on, ctx.dtype, total,
                              ctx.settings.point_budget_s, todo.sampling_s))
    log.info("%s", held_line(measured_on, start))
    t0 = time.perf_counter()
    rows = []
    # A bar only in a terminal (tqdm: disable=None is off when stderr is not a TTY); the row
    # lines are logged through it there, so they do not break the bar.
    with frozen_heap(), logging_redirect_tqdm(), tqdm(
            total=total, unit="point", disable=None,
            desc=f"{module.NAME} {measured_on} {ctx.dtype}") as bar:
        for row in todo.rows:
            # `claims` stays empty here: collect fills it from the claims (analysis/claims/)
            row = identity | {"measured_at": datetime.now(timezone.utc)} | row
            rows.append(row)
            log.info("%s %s %s n=%s: %s %s", module.NAME, row.get("op"), ctx.dtype, row.get("n"),
                     row.get("status"), f"{row.get('time_s', 0) or 0:.3e}s")
            bar.update()
    metadata = {
        "run_id": run_id, "host": host, "experiment": module.NAME, "device": device,
        "measured_on": measured_on, "dtype": ctx.dtype, "device_facts": facts.to_dict(), "git": git,
        "code": provenance["code"], "packages": provenance["packages"], "config": config,
        "config_hash": config_hash(config),
        "started": started.isoformat(), "wall_s": time.perf_counter() - t0, "start": start,
        "device_state_start": state_start, "device_state_end": device_state(dev),
        "conditions": job_conditions(rows, ctx.settings.contention_threshold, load_start,
                                     loadavg()),
    }
    return rows, metadata
