"""Conditions per point on the CPU, on the real machine: /proc's jiffies, a busy process, the
job's own CPUs and pinning."""

import os
import subprocess
import sys
import time

import pytest
import torch

from experiments.core import conditions
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
    assert conditions.proc_stat(str(stat)) == {"busy": 160, "steal": 11, "total": 1178, "ncpu": 2}
    own = tmp_path / "self"
    own.write_text("42 (a (weird) name) R 1 2 3 4 5 6 7 8 9 10 123 45 0 0\n")
    assert conditions.self_ticks(str(own)) == 168
    assert conditions.proc_stat(str(tmp_path / "none")) is None
    assert conditions.self_ticks(str(tmp_path / "none")) is None


def test_cpu_time_is_counted_on_the_jobs_own_cpus(tmp_path):
    stat = tmp_path / "stat"
    stat.write_text("cpu  300 0 100 1000 0 0 0 5 0 0\n"
                    "cpu0 200 0 50 100 0 0 0 5 0 0\n"   # a GPU job's core: busy
                    "cpu1 50 0 25 450 0 0 0 0 0 0\n"
                    "cpu2 50 0 25 450 0 0 0 0 0 0\n")
    every = conditions.proc_stat(str(stat))
    assert every["busy"] == 400 and every["ncpu"] == 3 and every["steal"] == 5
    own = conditions.proc_stat(str(stat), cpus={1, 2})
    assert own["busy"] == 150 and own["ncpu"] == 2 and own["steal"] == 0 and own["total"] == 1050


@pytest.mark.system
def test_a_pinned_job_runs_on_its_cpus(tmp_path):
    script = ("import os, torch; from experiments.core.runner import pin; pin('0', 'cpu'); "
              "print(sorted(os.sched_getaffinity(0)), torch.get_num_threads())")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert done.stdout.split() == ["[0]", "1"], done.stderr[-2000:]
