"""Shared test helpers: compose a job through Hydra's compose API and run it on the CPU."""

from __future__ import annotations

import copy
import gc
import os
import time
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

try:  # Hydra's private repository: a Hydra that moves it only makes composing slower here
    from hydra._internal.config_repository import ConfigRepository
except ImportError:
    ConfigRepository = None

os.environ.setdefault("TRITON_INTERPRET", "1")  # Triton kernels run on the CPU in tests

from experiments.__main__ import CONFIG_DIR, MODULES  # noqa: E402  (registers the configs)
from experiments.core.runner import run_job  # noqa: E402
from experiments.core.config import Settings  # noqa: E402
from experiments.core.device import device_facts  # noqa: E402
from experiments.core.harness import count  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SYSTEM = Path(__file__).resolve().parent / "system"
UNIT = Path(__file__).resolve().parent / "unit"


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(items):
    """tests/system/ holds the slow tests (docs/development.md): each carries the system marker,
    and a test under tests/unit/ that carries it belongs in tests/system/."""
    for item in items:
        if item.path.is_relative_to(SYSTEM):
            item.add_marker(pytest.mark.system)
        elif item.path.is_relative_to(UNIT) and item.get_closest_marker("system"):
            raise pytest.UsageError(f"{item.nodeid} is marked system: move it to tests/system/")


_LOADED: dict = {}  # config path -> what Hydra's repository read there (CONFIG_DIR's alone)


def _load_once(load):
    """Hydra's repository reads and parses the same dozen YAML files and schemas at every compose
    (0.04 of its 0.1 s); CONFIG_DIR is the checkout's, which no test writes: each is read once a
    session and handed out as a copy, since the composition merges into what it gets."""

    def load_config(self, config_path):
        if config_path not in _LOADED:
            _LOADED[config_path] = load(self, config_path)
        return copy.deepcopy(_LOADED[config_path])

    return load_config


def compose_job(overrides: list[str]):
    """The job object Hydra would build from these command-line overrides."""
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"), \
            pytest.MonkeyPatch.context() as mp:
        if hasattr(ConfigRepository, "load_config"):
            mp.setattr(ConfigRepository, "load_config", _load_once(ConfigRepository.load_config))
        cfg = compose(config_name="job", overrides=overrides)
    return OmegaConf.to_object(cfg)


@pytest.fixture
def run_experiment(tmp_path):
    """run_experiment("matmul", "float32", ["experiment.sizes=[64]"]) -> the rows it wrote."""

    def run(name: str, dtype: str, overrides: list[str] = ()) -> pd.DataFrame:
        out = tmp_path / f"{name}-{dtype}.parquet"
        job = compose_job([f"experiment={name}", "device=cpu", f"dtype={dtype}",
                           f"out={out}", "point_budget_s=0.02", *overrides])
        run_job(job, MODULES[name])
        rows = pd.read_parquet(out)
        # the count a job's progress shows up front is the rows it writes
        cpu = SimpleNamespace(device=torch.device("cpu"), devices=[torch.device("cpu")],
                              dtype=dtype, settings=Settings.of(job),
                              facts=device_facts(torch.device("cpu")))
        planned = count(MODULES[name], job.experiment, cpu)  # None: not known up front
        assert planned is None or len(rows) == planned, (name, len(rows), planned)
        return rows

    return run


def wait_for(check, timeout: float = 15.0, poll_s: float = 0.05) -> bool:
    """Poll `check()` until it is true (True) or `timeout` seconds pass (False)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if check():
            return True
        time.sleep(poll_s)
    return False


@pytest.fixture(autouse=True)
def _fewer_knee_resamples(request, monkeypatch):
    """Unit tests judge a fixture's verdict, not the width of a knee's interval: 50 bootstrap
    resamples per knee instead of 200 (the knee bootstrap was 70 % of the claims tests' time).
    System tests keep the real count. (The published-report check needs none: the report reads
    the workloads' knees from the placements step's file, it bootstraps nothing.)"""
    if request.node.get_closest_marker("system") is None:
        from experiments.analysis import knees
        monkeypatch.setattr(knees, "N_BOOT", 50)


@pytest.fixture(scope="session")
def _torch_threads():
    """torch's own thread count, as the session found it (and leaves it)."""
    threads = torch.get_num_threads()
    yield threads
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def _one_torch_thread(request, _torch_threads):
    """Unit tests judge rows, not speed: torch runs their tiny ops on one thread. Its two
    OpenMP threads on a 2-core machine wait for each other whenever another process holds a
    core, and a point planned from a quiet first call then samples 100x its budget (40 s for a
    0.3 s GEMM point). System tests keep torch's own count. Set only on a change (each set
    rebuilds the pool: 1 ms)."""
    system = request.node.get_closest_marker("system") is not None
    want = _torch_threads if system else 1
    if torch.get_num_threads() != want:
        torch.set_num_threads(want)


@pytest.fixture(autouse=True, scope="session")
def _knees_fitted_once():
    """A measured knee is a pure function of its curve (batch sizes, times) and of knees.N_BOOT
    and knees.SEED (its bootstrap's resamples and seed). The claims tests judge dozens of
    fixtures that differ from one another outside the decode rows: each curve is fitted and
    bootstrapped once per session, and read back as it was computed."""
    import numpy as np

    from experiments.analysis import knees, placements

    fit, done, spread = knees.measured_knee, {}, knees.fork_map

    def key(b, t):
        b, t = np.asarray(b, float), np.asarray(t, float)
        return b.tobytes(), t.tobytes(), knees.N_BOOT, knees.SEED

    def measured_knee(b, t):
        if (k := key(b, t)) not in done:
            done[k] = fit(b, t)
        return done[k]

    def fork_map(fn, items):
        """predict's curves are fitted in forked workers, whose caches die with them: only
        the curves not seen yet go to the workers, and what they give comes back to this one."""
        if fn is not knees._measured_knee:
            return spread(fn, items)
        items = list(items)
        todo = {key(*curve): curve for curve in items if key(*curve) not in done}
        done.update(zip(todo, spread(fn, list(todo.values()))))
        return [done[key(*curve)] for curve in items]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(knees, "measured_knee", measured_knee)
        mp.setattr(placements, "measured_knee", measured_knee)
        mp.setattr(knees, "fork_map", fork_map)
        yield


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """A job runs in its own process: the runner's full collections (before its points, and
    after each: experiments/core/runner.py) walk the job's heap. Here they would walk the whole
    test session's (400k-650k objects: 0.3-0.6 s a collection, a third of the fast tests'
    time), so what exists when a test starts is frozen while it runs. The runner collects and
    freezes as it does in a job; its unfreeze, or this one, returns every object to the
    collector after the test."""
    gc.freeze()
    try:
        return (yield)
    finally:
        gc.unfreeze()


@pytest.fixture(autouse=True, scope="session")
def _own_device_locks(tmp_path_factory):
    """A job holds the CPU (or a GPU) through a lock file in a folder per machine and user
    (experiments/core/device.py). The in-process tests take theirs in a folder of their own: a
    test session then never waits for another one's, nor for a real run on the machine (nor
    makes it wait). Tests of the locks between processes name their folder."""
    from experiments.core import device

    with pytest.MonkeyPatch.context() as mp:
        folder = tmp_path_factory.mktemp("device-locks")
        mp.setattr(device, "default_lock_dir", lambda: folder)
        yield folder
