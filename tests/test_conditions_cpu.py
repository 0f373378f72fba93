"""Conditions per point on the CPU, on the real machine: /proc's jiffies, a busy process, the
job's own CPUs and pinning."""

import math
import os
import subprocess
import sys
import time

import pytest
import torch

from experiments.core import conditions, cpu_time
from experiments.core.conditions import Conditions
from experiments.core.device import device_facts
from experiments.core.runner import Context
from experiments.core.timer import CpuTimer

CPU = torch.device("cpu")


def _tiny_point(threshold=0.1):
    ctx = Context(device=CPU, dtype="float32", facts=device_facts(CPU), point_budget_s=0.5,
                  contention_threshold=threshold, precision=0.0)  # the runs count the retries
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


@pytest.mark.parametrize("steal, other, contended", [
    (60, 0, True),  # the host took 30 % of the VM's CPU time: contended
    (6, 0, False),  # 3 %: not
    (0, 60, True),  # another process here took 30 %
])
def test_a_host_stealing_the_vms_cpus_flags_the_point_contended(steal, other, contended,
                                                                 monkeypatch):
    """Two CPUs over one second at 100 Hz: 200 jiffies, the jiffy error 4 / 200."""
    monkeypatch.setattr(conditions, "_hz", lambda: 100)
    c = Conditions(CPU)
    c.t0, c.t1, c.cpus = 0.0, 1.0, None
    c.stat0 = {"busy": 0, "steal": 0, "total": 0, "ncpu": 2}
    c.stat1 = {"busy": 140 + other, "steal": steal, "total": 200, "ncpu": 2}
    c.self0, c.self1 = 0, 140
    summary = c.summary(contention_threshold=0.1)
    assert summary["steal_share"] == pytest.approx(steal / 200)
    assert summary["contended"] is contended


def test_a_window_too_short_for_jiffies_is_not_judged():
    with Conditions(CPU) as c:
        pass
    summary = c.summary(1e-6)
    assert summary["other_cpu_share"] is None and summary["contended"] is None


def test_proc_readers_parse_and_degrade(tmp_path):
    stat = tmp_path / "stat"
    stat.write_text("cpu  100 5 50 1000 7 3 2 11 4 0\ncpu0 50 0 25 500 3 1 1 5 2 0\n"
                    "cpu1 50 5 25 500 4 2 1 6 2 0\nintr 1\n")
    assert cpu_time.proc_stat(str(stat)) == {"busy": 160, "steal": 11, "total": 1178, "ncpu": 2}
    own = tmp_path / "self"
    own.write_text("42 (a (weird) name) R 1 2 3 4 5 6 7 8 9 10 123 45 0 0\n")
    assert cpu_time.self_ticks(str(own)) == 168
    assert cpu_time.proc_stat(str(tmp_path / "none")) is None
    assert cpu_time.self_ticks(str(tmp_path / "none")) is None


def test_cpu_time_is_counted_on_the_jobs_own_cpus(tmp_path):
    stat = tmp_path / "stat"
    stat.write_text("cpu  300 0 100 1000 0 0 0 5 0 0\n"
                    "cpu0 200 0 50 100 0 0 0 5 0 0\n"   # a GPU job's core: busy
                    "cpu1 50 0 25 450 0 0 0 0 0 0\n"
                    "cpu2 50 0 25 450 0 0 0 0 0 0\n")
    every = cpu_time.proc_stat(str(stat))
    assert every["busy"] == 400 and every["ncpu"] == 3 and every["steal"] == 5
    own = cpu_time.proc_stat(str(stat), cpus={1, 2})
    assert own["busy"] == 150 and own["ncpu"] == 2 and own["steal"] == 0 and own["total"] == 1050


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
        ctx = Context(device=CPU, dtype="float64", facts=device_facts(CPU), point_budget_s=0.5,
                      precision=0.0, retries=0)
        stats = ctx.time(lambda i: cpu_stream.run([cpu], "triad", a, b, out, reps=reps))
    finally:
        busy.kill()
        busy.wait(timeout=5)
    assert stats["team_off_cpu_share"] > 0.2 and stats["contended"] is True, stats


@pytest.mark.parametrize("team_off, contended", [(0.3, True), (0.05, False), (None, False)])
def test_a_teams_off_cpu_share_flags_what_the_machine_wide_shares_miss(team_off, contended,
                                                                       monkeypatch):
    """Sixteen CPUs, one of them taken (6 % of the machine, under the threshold): the team that
    waited on that CPU is contended by its own share."""
    monkeypatch.setattr(conditions, "_hz", lambda: 100)
    c = Conditions(CPU)
    c.t0, c.t1, c.cpus = 0.0, 1.0, None
    c.stat0 = {"busy": 0, "steal": 0, "total": 0, "ncpu": 16}
    c.stat1 = {"busy": 1500 + 100, "steal": 0, "total": 1600, "ncpu": 16}
    c.self0, c.self1 = 0, 1500
    summary = c.summary(contention_threshold=0.1, team_off=team_off)
    assert summary["other_cpu_share"] == pytest.approx(100 / 1600)
    assert summary["team_off_cpu_share"] == team_off and summary["contended"] is contended


def test_the_point_is_judged_by_its_fastest_samples_team_share():
    from experiments.core.timer import best_sample_team_off
    assert best_sample_team_off([3.0, 1.0, 2.0], [0.5, 0.01, 0.4]) == 0.01
    assert best_sample_team_off([3.0, 1.0, 2.0], [0.0, 0.3, 0.0]) == 0.3  # disturbed: read so
    assert best_sample_team_off([1.0, 2.0], [float("nan")] * 2) is None  # torch ops: no team
    assert best_sample_team_off([1.0, 2.0], [0.0]) is None  # not one per sample


def test_a_samples_off_time_is_its_most_delayed_workers_by_either_clock(monkeypatch):
    """Run-queue waits (schedstat) and wall-less-CPU time within calls are two readings of one
    delay: the larger counts, never their sum; a sample without team calls is NaN."""
    class Team:
        tids = (11, 12)

    team, delays = Team(), iter([[0, 0], [2_000_000, 5_000_000], [0, 0], [100, 300]])
    monkeypatch.setattr(cpu_time, "run_delay_ns", lambda tids: next(delays))
    clock = iter([0, 20_000_000, 0, 20_000_000, 0, 10_000_000])
    monkeypatch.setattr(cpu_time, "_LAST_TEAM", [team])
    monkeypatch.setattr(cpu_time, "_TEAM_NS", [0, 0])
    watch = cpu_time.SampleOffCpu(clock_ns=lambda: next(clock))
    watch.start()
    cpu_time.record_team_call(team, 20_000_000, 1_000_000)  # 1 ms off within the call
    assert watch.stop() == pytest.approx(5 / 20)  # worker 12 waited 5 ms to run
    watch.start()
    cpu_time.record_team_call(team, 20_000_000, 4_000_000)  # the host took 4 ms: no run queue
    assert watch.stop() == pytest.approx(4 / 20)
    monkeypatch.setattr(cpu_time, "run_delay_ns", lambda tids: [0, 0])
    watch.start()
    assert math.isnan(watch.stop())  # torch ops: no team ran
