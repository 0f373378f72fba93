"""Conditions per point on a GPU, through a fake NVML: clocks, power, energy and throttling, the
retry policy, and a job's summary of them. The CPU's side: test_conditions_cpu.py; what the
analysis makes of them: test_health.py."""

import math
import threading
import time

import numpy as np
import pytest
import torch

from experiments.core.config import ConfigError, Settings
from experiments.core import conditions, timer
from experiments.core.conditions import Conditions, job_conditions
from experiments.core.device import device_facts
from experiments.core.runner import Context
from experiments.core.schema import finish_row
from experiments.core.timer import measure

from tests.conftest import compose_job, wait_for

GPU, CPU = torch.device("cuda", 0), torch.device("cpu")
HW_THERMAL, SW_POWER_CAP = 0x40, 0x4

class NotSupported(Exception):
    """Stands for pynvml.NVMLError_NotSupported."""


class FakeNvml:
    """The pynvml calls conditions.py makes, answering from `state`; names in `unsupported` raise."""

    NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 1, 2, 0

    def __init__(self, unsupported=(), energy_mj=None, **state):
        self.state = {"sm": 1980, "mem": 3200, "power_mw": 400_000, "temp": 50, "reasons": 0,
                      "max_sm": 1980} | state
        self.unsupported, self.energy_mj, self.reads = set(unsupported), energy_mj, 0

    def _ask(self, name):
        self.reads += name == "clock"  # counted even when refused: PhasedTimer waits on polls
        if name in self.unsupported:
            raise NotSupported(name)

    def nvmlDeviceGetClockInfo(self, handle, kind):
        self._ask("clock")
        return self.state["sm"] if kind == self.NVML_CLOCK_SM else self.state["mem"]

    def nvmlDeviceGetMaxClockInfo(self, handle, kind):
        self._ask("max_clock")
        return self.state["max_sm"]

    def nvmlDeviceGetPowerUsage(self, handle):
        self._ask("power")
        return self.state["power_mw"]

    def nvmlDeviceGetTemperature(self, handle, sensor):
        self._ask("temp")
        return self.state["temp"]

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle):
        self._ask("reasons")
        return self.state["reasons"]

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        self._ask("energy")
        if self.energy_mj is None:
            raise NotSupported("energy")
        return self.energy_mj()


@pytest.fixture
def fake_nvml(monkeypatch):
    def install(cls=FakeNvml, **kwargs):  # cls: a FakeNvml that answers more calls
        fake = cls(**kwargs)
        monkeypatch.setattr(conditions, "nvml_handle", lambda index: (fake, "handle"))
        return fake
    return install


class PhasedTimer:
    """Hands out quiet samples; run k sets the fake GPU's state to phases[k-1] for its whole run
    and lasts until the poller has read the GPU a few times."""

    name = "fake"

    def __init__(self, fake, phases, batches=None, polls=6):
        self.fake, self.phases, self.batches, self.runs = fake, phases, batches, 0
        self.polls = polls

    def sync(self):
        pass

    def run(self, fn, inner, samples):
        self.runs += 1
        self.fake.state |= self.phases[min(self.runs, len(self.phases)) - 1]
        start = self.fake.reads  # the poller's readings, however slow a busy machine makes it
        wait_for(lambda: self.fake.reads >= start + self.polls, timeout=60, poll_s=0.002)
        if self.batches:
            return np.asarray(self.batches[min(self.runs, len(self.batches)) - 1], dtype=float)
        return np.array([1.0, 1.01, 0.99, 1.0, 1.0]) * 1e-3


# -- GPU, through a fake NVML -------------------------------------------------------------------

def test_a_gpus_max_clock_is_read_once_per_nvml_and_handle(fake_nvml):
    """Every window needs the max SM clock and the power limit (2.5 ms a read on an H200): read
    once per (NVML, handle); another NVML with an equal handle reads its own."""
    first = fake_nvml(max_sm=1980)
    counted = []
    first.nvmlDeviceGetMaxClockInfo = lambda handle, kind: counted.append(1) or 1980
    assert [Conditions(GPU).max_sm_mhz for _ in range(3)] == [1980] * 3 and counted == [1]
    fake_nvml(max_sm=1410)  # another NVML, the same handle ("handle")
    assert Conditions(GPU).max_sm_mhz == 1410


def test_a_gpu_windows_ends_read_nothing_from_nvml(fake_nvml):
    """NVML calls take ms each on an H200 (six for a reading, ~15 ms; 4.5 ms for the energy
    counter): the timed thread makes none at the window's ends nor waits for the poller, whose
    readings describe the window."""
    fake = fake_nvml(energy_mj=lambda: 1_000.0)
    on_caller, ask = [], fake._ask
    fake._ask = lambda name: (on_caller.append(name) if threading.current_thread() is
                              threading.main_thread() else None) or ask(name)
    c = Conditions(GPU)
    on_caller.clear()  # the limits (max clock, power limit) are read once per GPU, not here
    with c:
        wait_for(lambda: fake.reads >= 4, timeout=60, poll_s=0.002)  # two of the poller's
    assert on_caller == [] and c.summary(1e-3)["sm_clock_mhz"] == 1980


def test_thermal_slowdown_is_measured_again_then_flagged(fake_nvml):
    fake = fake_nvml()
    hot = {"sm": 900, "reasons": HW_THERMAL, "temp": 91}
    t = PhasedTimer(fake, [hot, hot])
    timing = measure(lambda i: None, GPU, 0.01, timer=t, retries=1, precision=0)  # one run per try
    stats = timing.stats
    assert t.runs == 2
    assert stats["throttled"] is True and stats["throttle_reasons"] == "hw_thermal"
    assert stats["sm_clock_mhz"] == 900 and stats["temperature_c"] == 91
    assert stats["contended"] is None  # this fake NVML lists no processes: not judged


def test_a_clean_retry_replaces_a_throttled_run_even_with_a_higher_cv(fake_nvml):
    fake = fake_nvml()
    quiet, wobbly = [1.0, 1.0, 1.0, 1.0, 1.01], [1.0, 1.3, 0.8, 1.0, 1.2]
    t = PhasedTimer(fake, [{"sm": 900, "reasons": HW_THERMAL}, {"sm": 1980, "reasons": 0}],
                    batches=[quiet, wobbly])
    stats = measure(lambda i: None, GPU, 0.01, timer=t, retries=1, precision=0).stats
    assert t.runs == 2
    assert stats["throttled"] is False and stats["throttle_reasons"] == ""
    assert stats["sm_clock_mhz"] == 1980 and stats["cv"] > 0.1


def test_low_clock_without_a_reason_is_throttled_but_power_cap_is_not(fake_nvml):
    # 1250 of 1980 MHz is under 0.7 x max: a slowdown, unless the power cap explains it
    fake = fake_nvml()
    t = PhasedTimer(fake, [{"sm": 1250, "reasons": 0}])
    assert measure(lambda i: None, GPU, 0.01, timer=t, precision=0).stats["throttled"] is True
    assert t.runs == 2

    fake = fake_nvml()
    t = PhasedTimer(fake, [{"sm": 1250, "reasons": SW_POWER_CAP, "power_mw": 699_000}])
    stats = measure(lambda i: None, GPU, 0.01, timer=t, precision=0).stats
    assert t.runs == 1  # recorded, not measured again
    assert stats["throttled"] is False and stats["throttle_reasons"] == "sw_power_cap"
    # no energy counter, and NVML's 1 s power average cannot speak for a short window: no power
    assert stats["power_w"] is None and stats["sm_clock_mhz"] == 1250


def test_energy_per_call_from_the_counter(fake_nvml):
    # a counter that runs at 500 W: one call of time_s costs 500 W x time_s
    fake = fake_nvml(energy_mj=lambda: 500.0 * time.perf_counter() * 1000)
    stats = measure(lambda i: None, GPU, 0.01, timer=PhasedTimer(fake, [{}], polls=100)).stats
    assert stats["energy_j"] == pytest.approx(500.0 * stats["time_s"], rel=0.03)
    # power from the counter (500 W), not NVML's lagging reading (the fake's 400 W)
    assert stats["power_w"] == pytest.approx(500.0, rel=0.03)
    row = finish_row({"experiment": "x", "op": "y", "host": "h", "device": "cuda:0",
                      "device_kind": "cuda", "dtype": "bfloat16", "status": "ok",
                      "flops": 2e9, "bytes": 4e6, **stats})
    assert row["j_per_flop"] == pytest.approx(stats["energy_j"] / 2e9)
    assert row["j_per_byte"] == pytest.approx(stats["energy_j"] / 4e6)


def test_power_between_the_counter_steps(fake_nvml):
    """A counter that moves in 40 ms steps at 500 W: the power between its steps is exact,
    where the window's two ends would be off by up to a step."""
    step = 0.04
    fake = fake_nvml(energy_mj=lambda: math.floor(time.perf_counter() / step) * step * 500e3)
    # ~0.5 s of polls: a dozen steps, so a late poll (a loaded machine) moves the answer little
    stats = measure(lambda i: None, GPU, 0.01, timer=PhasedTimer(fake, [{}], polls=100)).stats
    assert stats["power_w"] == pytest.approx(500.0, rel=0.05)


def test_energy_apportions_the_window_to_one_call(fake_nvml):
    fake_nvml(energy_mj=lambda: 0.0)
    c = Conditions(GPU)
    # the first and last polls 2 s apart read 4 J (too few steps between for counter_power_w)
    c.t0, c.t1 = 10.0, 12.5
    c.samples = [{"t": 10.1, "energy": 5_000.0}, {"t": 12.1, "energy": 9_000.0}]
    # 4 J over 2 s, a call of 1 ms: 2 W x 1 ms
    assert c.energy_j(1e-3) == pytest.approx(2e-3)
    # a counter that did not advance: the median sampled power (W) x time_s
    c.samples = [{"t": 11.0, "power": p, "energy": 5_000.0} for p in (300.0, 310.0, 900.0)]
    assert c.energy_j(1e-3) == pytest.approx(0.31)


def test_nvml_not_supported_gives_nulls_not_a_crash(fake_nvml):
    fake = fake_nvml(unsupported={"clock", "max_clock", "power", "temp", "reasons", "energy"})
    # every read refused once is not asked again: nothing to wait for
    stats = measure(lambda i: None, GPU, 0.01, timer=PhasedTimer(fake, [{}], polls=0)).stats
    for key in conditions.GPU_COLUMNS + ("throttled",):
        assert stats[key] is None, key
    assert stats["time_s"] == 1e-3


def test_no_nvml_at_all(monkeypatch):
    monkeypatch.setattr(conditions, "nvml_handle", lambda index: (None, None))
    with Conditions(GPU) as c:
        pass
    summary = c.summary(1e-3)
    assert summary["sm_clock_mhz"] is None and summary["throttled"] is None


# -- the retry policy, on scripted conditions ---------------------------------------------------

def _scripted_conditions(monkeypatch, states):
    """The timer's Conditions, replaced: the k-th timed run is summarised as states[k]."""
    script = iter(states)

    class Scripted:
        def __init__(self, device):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def summary(self, time_s, threshold, team_off=None):
            return dict.fromkeys(conditions.COLUMNS) | next(script)

    monkeypatch.setattr(timer, "Conditions", Scripted)


def test_a_contended_retry_is_never_kept_over_an_uncontended_run(monkeypatch):
    _scripted_conditions(monkeypatch, [{"contended": False}, {"contended": True}])

    class Batches(PhasedTimer):
        def run(self, fn, inner, samples):
            self.runs += 1
            return np.asarray(self.batches[self.runs - 1], dtype=float)

    noisy, quiet = [1.0, 1.0, 5.0, 1.0, 9.0], [2.0, 2.0, 2.0, 2.0, 2.0]
    t = Batches(None, [], batches=[noisy, quiet])
    # one run each
    ctx = Context(device=CPU, dtype="float32", facts=device_facts(CPU),
                  settings=Settings.defaults().but(precision=0.0))
    stats = ctx.time(lambda i: None, timer=t)
    assert t.runs == 2  # noisy: measured again; the retry is quiet but contended
    assert stats["contended"] is False and stats["noisy"] is True and stats["time_s"] == 1.0

def test_reason_names():
    assert conditions.reason_names(SW_POWER_CAP | HW_THERMAL) == ["sw_power_cap", "hw_thermal"]
    assert conditions.reason_names(0) == [] and conditions.reason_names(0x10000) == ["bit_0x10000"]


# -- a job's summary and its threshold ----------------------------------------------------------

@pytest.mark.parametrize("value", ["0", "1.5", "-0.1"])
def test_contention_threshold_is_a_share(value):
    with pytest.raises((ConfigError, ValueError), match="contention_threshold"):
        compose_job(["experiment=bandwidth", f"contention_threshold={value}"])
    assert compose_job(["experiment=bandwidth"]).contention_threshold == 0.1

def test_job_conditions_summarises_rows():
    rows = [{"other_cpu_share": 0.3, "contended": True, "throttled": None},
            {"other_cpu_share": 0.01, "contended": False},
            {"sm_clock_mhz": 1500.0, "throttled": True, "throttle_reasons": "sw_power_cap,hw_thermal",
             "power_w": 690.0},
            {"other_cpu_share": float("nan")}]
    s = job_conditions(rows, 0.1, [1.0, 0.5, 0.2], [2.0, 0.7, 0.3])
    assert s["max_other_cpu_share"] == 0.3 and s["points_contended"] == 1
    assert s["points_judged_contended"] == 2 and s["any_throttled"] is True
    assert s["throttle_reasons_seen"] == ["hw_thermal", "sw_power_cap"]
    assert s["power_w_max"] == 690.0 and s["loadavg_end"] == [2.0, 0.7, 0.3]


# -- power a device can draw: a stepping energy counter -------------------------------------------

def _stepping_window(rng, power_w, window_s, poll_s=0.005):
    """A Conditions whose polls saw an energy counter that steps every 20-100 ms (each step exact
    at its own time), over a window of window_s; NVML's power reading lags at 230 W."""
    c = Conditions.__new__(Conditions)
    c.poll_s, c.power_limit_w, c.energy_note = poll_s, 700.0, ""
    c.t0 = float(rng.uniform(0, 0.1))
    c.t1 = c.t0 + window_s
    steps, t = [], 0.0
    while t < c.t1 + 0.2:
        t += float(rng.uniform(0.02, 0.1))
        steps.append(t)

    def counter(at):  # mJ: the energy at the last step before `at`
        last = max([s for s in steps if s <= at], default=0.0)
        return last * power_w * 1000

    polls = np.arange(c.t0, c.t1 + 1e-12, poll_s)
    c.samples = [{"t": float(p), "energy": counter(p), "power": 230.0} for p in polls]
    return c


@pytest.mark.parametrize("window_s", [0.005, 0.02, 0.05, 0.1, 0.2, 0.4, 1.0, 2.0])
def test_power_from_a_stepping_counter_is_resolved_or_null_never_impossible(window_s):
    rng = np.random.default_rng(int(window_s * 1000))
    resolved = 0
    for _ in range(30):
        for true in (300.0, 700.0):
            c = _stepping_window(rng, true, window_s)
            p = c.mean_power_w()
            if p is None:
                assert conditions.ENERGY_UNRESOLVED in c.energy_note or \
                    conditions.ABOVE_LIMIT in c.energy_note, c.energy_note
                assert c.energy_j(1e-3) is None
                continue
            resolved += 1
            assert p <= c.power_limit_w * (1 + conditions.POWER_TOLERANCE)
            assert p == pytest.approx(true, rel=conditions.POWER_TOLERANCE), (window_s, p)
    if window_s >= 0.2:  # a few steps fit: the counter resolves it
        assert resolved > 0
    if window_s < 0.05:  # under a step or two: never a number
        assert resolved == 0


def test_a_reading_above_the_enforced_limit_is_null_with_the_reason():
    c = _stepping_window(np.random.default_rng(0), 900.0, 1.0)  # the counter says 900 W at 700
    assert c.mean_power_w() is None and conditions.ABOVE_LIMIT in c.energy_note


@pytest.mark.parametrize("state, runs", [({"contended": False}, 1), ({"contended": True}, 2)])
def test_a_noisy_cpu_point_is_retried_only_when_other_load_was_seen(monkeypatch, state, runs):
    """A CPU point counts at its best time, which a wide spread does not move: noise alone earns
    no second run there (it does on a GPU: the retry test above); other load still does."""
    _scripted_conditions(monkeypatch, [state, state])
    seen = []

    class Noisy(timer.CpuTimer):
        def run(self, fn, inner, samples):
            seen.append(1)
            return np.asarray([1.0, 1.0, 5.0, 1.0, 9.0], dtype=float)

    ctx = Context(device=CPU, dtype="float32", facts=device_facts(CPU),
                  settings=Settings.defaults().but(precision=0.0, retries=1))
    stats = ctx.time(lambda i: None, timer=Noisy())
    assert len(seen) == runs and stats["noisy"] is True
