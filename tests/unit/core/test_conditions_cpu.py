"""Conditions per point on the CPU, on the real machine: /proc's jiffies, a busy process, the
job's own CPUs and pinning."""

import math

import pytest
import torch

from experiments.core import conditions, cpu_time
from experiments.core.conditions import Conditions

CPU = torch.device("cpu")


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
