"""Conditions per point on the CPU, on the real machine: /proc's jiffies, a busy process, the
job's own CPUs and pinning."""

import math
import os
import subprocess
import sys
import time

import pytest
import torch

from experiments.core import cpu_time
from experiments.core.conditions import Conditions
from experiments.core.device import device_facts
from experiments.core.runner import Context
from experiments.core.timer import CpuTimer
from experiments.core.config import Settings

CPU = torch.device("cpu")


def _tiny_point(threshold=0.1):
    # the runs count the retries
    ctx = Context(device=CPU, dtype="float32", facts=device_facts(CPU),
                  settings=Settings.defaults().but(point_budget_s=0.5, precision=0.0,
                                                   contention_threshold=threshold))
    x = torch.randn(256)
    runs = []

    class Counting(CpuTimer):
        def run(self, fn, inner, samples):
            runs.append(1)
            return super().run(fn, inner, samples)

    return ctx.time(lambda i: x.add(1.0), timer=Counting()), len(runs)


def _busy_share(seconds=0.3) -> float:
    with Conditions(CPU) as c:
        time.sleep(seconds)
    return c.summary()["other_cpu_share"]


@pytest.mark.system
def test_other_processes_busy_on_every_core_flag_the_point_contended():
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
             for _ in range(os.cpu_count() or 1)]
    try:
        time.sleep(0.3)  # let them start spinning
        stats, runs = _tiny_point()
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait(timeout=5)
    assert stats["other_cpu_share"] > 0.1, stats
    assert stats["contended"] is True and runs == 2  # measured again, still contended
    assert stats["throttled"] is None and stats["sm_clock_mhz"] is None  # no GPU here


@pytest.mark.system  # needs an idle machine: skips, saying so, where another process runs
def test_quiet_machine_gives_a_small_other_share():
    stats, runs = _tiny_point()
    assert stats["other_cpu_share"] is not None and stats["cpu_freq_mhz"] != 0
    if stats["other_cpu_share"] >= 0.1 and _busy_share() > 0.05:
        pytest.skip("another process is using this machine's CPUs now")
    assert stats["other_cpu_share"] < 0.1 and stats["contended"] is False
    assert 0 <= stats["steal_share"] <= 1


@pytest.mark.system
def test_a_pinned_job_runs_on_its_cpus(tmp_path):
    script = ("import os, torch; from experiments.core.runner import pin; pin('0', 'cpu'); "
              "print(sorted(os.sched_getaffinity(0)), torch.get_num_threads())")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert done.stdout.split() == ["[0]", "1"], done.stderr[-2000:]


# -- a CPU team's time off its CPUs (core/cpu_time.py, kernels/cpu_team.py) ------------

def _team_share(fn, calls=5) -> float:
    """Off-CPU share of `calls` calls of fn by a one-worker team on this process's last CPU."""
    from experiments.kernels.cpu_team import team
    worker = team([max(os.sched_getaffinity(0))])
    (wall0, off0) = cpu_time.team_ns()
    for _ in range(calls):
        worker.run(fn, [()])
    (wall1, off1) = cpu_time.team_ns()
    return (off1 - off0) / (wall1 - wall0)


def _spin(seconds=0.01):
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        pass


@pytest.mark.system  # needs an idle machine: skips, saying so, where another process runs
def test_a_team_worker_that_waits_is_counted_off_its_cpu_and_one_that_computes_is_not():
    """Wall time less the thread's CPU time: a sleeping worker was off its CPU all along."""
    assert _team_share(lambda: time.sleep(0.01)) > 0.9
    spinning = _team_share(_spin)
    if spinning > 0.1 and _busy_share() > 0.05:
        pytest.skip("another process is using this machine's CPUs now")
    assert spinning < 0.1


@pytest.mark.system
def test_a_process_sharing_the_teams_cpu_flags_its_point_contended():
    """A busy process pinned to the team's one CPU takes about half of it: the team's point is
    contended by its own off-CPU share, whatever the machine-wide shares say. Calls of ~30 ms,
    past the scheduler's slices, so that no sample runs alone (one that did would be clean)."""
    import numpy as np
    from experiments.kernels import cpu_stream
    cpu = max(os.sched_getaffinity(0))
    a, b, out = (np.random.default_rng(k).random(1 << 16) for k in range(3))
    busy = subprocess.Popen([sys.executable, "-c", f"import os; os.sched_setaffinity(0, {{{cpu}}})"
                             "\nwhile True: pass"])
    cpu_stream.run([cpu], "triad", a, b, out, reps=200)  # compiled
    t0 = time.perf_counter()
    cpu_stream.run([cpu], "triad", a, b, out, reps=200)  # timed alone
    reps = 200 * math.ceil(0.03 / max(time.perf_counter() - t0, 1e-4))  # ~30 ms on any CPU
    try:
        time.sleep(0.3)  # let it start spinning
        ctx = Context(device=CPU, dtype="float64", facts=device_facts(CPU),
                      settings=Settings.defaults().but(point_budget_s=0.5, precision=0.0,
                                                       retries=0))
        stats = ctx.time(lambda i: cpu_stream.run([cpu], "triad", a, b, out, reps=reps))
    finally:
        busy.kill()
        busy.wait(timeout=5)
    assert stats["team_off_cpu_share"] > 0.2 and stats["contended"] is True, stats
