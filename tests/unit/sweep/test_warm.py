"""What the fork server does ahead for its jobs (experiments/sweep/warm.py) is what a job would do
itself: the same config, the same compiled kernels."""

from __future__ import annotations

import pytest
from hydra._internal.hydra import Hydra
from hydra._internal.utils import create_automatic_config_search_path
from hydra.core.global_hydra import GlobalHydra
from hydra.types import RunMode

from tests.conftest import CONFIG_DIR
from experiments.sweep import warm

# a job's command line as the workflow writes it (workflow/rules/common.smk job_args)
JOB = ["experiment=timing", "device=cpu", "dtype=float32", "host='vm'",
       "out='results/measurements/vm/cpu/timing/float32.parquet'", "point_budget_s=0.05",
       "experiment.kernel_sizes=[64, 256]", "cpus=all"]


@pytest.fixture
def hydra(monkeypatch):
    monkeypatch.setattr(Hydra, "get_mode", Hydra.get_mode)  # the test's patch is undone after it
    path = create_automatic_config_search_path(None, "experiments.__main__", CONFIG_DIR)
    yield Hydra.create_main_hydra2(task_name="experiments", config_search_path=path)
    GlobalHydra.instance().clear()


def test_a_forked_job_composes_its_config_once_with_the_mode_hydra_finds(hydra, monkeypatch):
    probe = Hydra.get_mode
    assert probe(hydra, "job", list(JOB)) is None  # config/job.yaml leaves hydra.mode unset
    composed = []
    compose = hydra.compose_config
    monkeypatch.setattr(hydra, "compose_config", lambda *a, **k: composed.append(1) or compose(
        *a, **k))
    for _ in warm.compose_once():
        pass
    assert Hydra.get_mode(hydra, "job", list(JOB)) is None and not composed
    # an override that sets the mode is still read by Hydra's own probe
    assert Hydra.get_mode(hydra, "job", [*JOB, "hydra.mode=MULTIRUN"]) == RunMode.MULTIRUN
    assert composed


def test_preloading_goes_one_step_at_a_time_and_skips_what_fails(tmp_path, monkeypatch):
    (tmp_path / "warm_probe.py").write_text(
        "DONE = []\n\ndef work():\n    for i in range(2):\n        DONE.append(i)\n        yield\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    steps = warm.steps(["json", "no_such_module_here", "warm_probe:work",
                              "warm_probe:no_such_function", warm.EXPERIMENTS])
    assert next(steps) == "json"
    assert next(steps) == "warm_probe:work"  # the import; its work not begun
    import warm_probe

    assert warm_probe.DONE == []
    assert next(steps) == "warm_probe:work" and warm_probe.DONE == [0]
    assert next(steps) == "warm_probe:work" and warm_probe.DONE == [0, 1]
    from experiments import experiment_names

    assert list(steps) == [f"experiments.{name}" for name in experiment_names()]


def test_the_server_is_ready_before_the_numba_kernels():
    """"ready" after what every job imports; the numba kernels (one job's each) come after what
    many jobs share (dynamo and sympy for workload jobs, scipy and matplotlib for the steps)."""
    before, after = warm.plan()
    assert before == warm.PRELOAD
    assert not set(warm.NUMBA) & set(before)
    assert after == warm.PRELOAD_LATER + warm.NUMBA
