import json

import numpy as np
import pytest
import torch

from experiments import timing
from experiments import experiment_config


def test_timing_cpu_rows_measure_host_clock_and_mark_cuda_methods(run_experiment):
    rows = run_experiment("timing", "float32", [
        "experiment.kernel_sizes=[16,48]", "experiment.max_samples=5",
        "experiment.launch_kernels=50", "experiment.launch_samples=6"])
    status = {(r.op, r.variant if isinstance(r.variant, str) else None, r.n): r.status
              for r in rows.itertuples()}
    expected = {}
    for n in (16, 48):
        expected |= {("kernel", "host_nosync", n): "ok", ("kernel", "host_sync", n): "ok",
                     ("kernel", "cuda_event", n): "not_applicable"}
    expected |= {("launch_overhead", "eager", 1): "ok", ("launch_overhead", "graph", 1): "not_applicable",
                 ("stream_order", None, 4096): "not_applicable",
                 ("dispatch", "torch_profiler", 16): "not_applicable"}  # C1's evidence: a GPU's
    assert status == expected
    assert rows[rows.status == "not_applicable"].message.str.len().gt(10).all()

    kernel = rows[(rows.op == "kernel") & (rows.status == "ok")]
    n = kernel.n.to_numpy()
    np.testing.assert_array_equal(kernel.flops, 2.0 * n**3)
    np.testing.assert_array_equal(kernel.bytes, 3 * n * n * 4)
    assert kernel.check_passed.all() and (kernel.rel_error < 1e-5).all()
    assert (kernel.samples == 5).all() and (kernel.inner_reps == 1).all()
    assert set(kernel.timer) == {"perf_counter_nosync", "perf_counter_sync"}
    assert kernel.message.str.contains("host_sync is the true time").all()
    assert (kernel.time_s_min <= kernel.time_s).all() and (kernel.time_s > 0).all()
    # the ratio is each method's median over host_sync's (the CPU's true time) at the same n
    for size in (16, 48):
        pick = kernel[kernel.n == size].set_index("variant")
        ratio = pick.params.map(lambda p: json.loads(p)["ratio_to_true"])
        assert ratio["host_sync"] == 1.0
        assert ratio["host_nosync"] == pytest.approx(pick.time_s["host_nosync"] / pick.time_s["host_sync"])

    eager = rows[(rows.op == "launch_overhead") & (rows.variant == "eager")].iloc[0]
    assert eager.check_passed and eager.inner_reps == 50 and eager.samples == 6
    assert 0 < eager.time_s_min <= eager.time_s  # its speed is a measurement, not a test
    assert "dispatch" in eager.message


def test_timing_tf32_kernel_is_not_applicable(run_experiment):
    rows = run_experiment("timing", "tf32", ["experiment.kernel_sizes=[16]",
                                            "experiment.launch_kernels=5", "experiment.launch_samples=6"])
    assert set(rows[rows.op == "kernel"].status) == {"not_applicable"}


@pytest.mark.parametrize("override, key", [("experiment.kernel_sizes=[]", "experiment.kernel_sizes"),
                                           ("experiment.max_samples=2", "experiment.max_samples"),
                                           ("experiment.launch_kernels=0", "experiment.launch_kernels"),
                                           ("experiment.launch_samples=5", "experiment.launch_samples")])
def test_timing_rejects_bad_config(run_experiment, override, key):
    with pytest.raises(ValueError, match=key):
        run_experiment("timing", "float32", [override])


def test_stream_order_check_fails_on_unwritten_or_stale_data():
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(80, 80, generator=g), torch.randn(80, 80, generator=g)
    z = 2 * (a @ b)
    err, ok = timing.stream_order_check(z, a, b, timing.TOLERANCE["float32"])
    assert ok and err < 1e-6
    # the reader ran before the writer: it saw the NaN poison (here past the checked rows)
    poisoned = z.clone()
    poisoned[-1, -1] = float("nan")
    assert timing.stream_order_check(poisoned, a, b, 1e-5)[1] is False
    # ... or an older y (the previous inputs' product)
    stale = 2 * (torch.randn(80, 80, generator=g) @ b)
    err, ok = timing.stream_order_check(stale, a, b, 1e-5)
    assert not ok and err > 0.5


def test_add_ratios_uses_the_true_variant_and_skips_failed_rows():
    rows = [{"variant": "host_nosync", "status": "ok", "time_s": 1e-5, "params": {"pending_fraction": 1.0}},
            {"variant": "host_sync", "status": "ok", "time_s": 3e-3},
            {"variant": "cuda_event", "status": "ok", "time_s": 2e-3},
            {"variant": "extra", "status": "error", "time_s": None}]
    out = timing.add_ratios(rows, "cuda_event")
    assert [r.get("params", {}).get("ratio_to_true") for r in out] == pytest.approx([5e-3, 1.5, 1.0, None])
    assert out[0]["params"]["pending_fraction"] == 1.0 and out[0]["params"]["true_variant"] == "cuda_event"
    no_true = timing.add_ratios([{"variant": "host_sync", "status": "ok", "time_s": 1.0}], "cuda_event")
    assert "params" not in no_true[0]


def test_timing_rows_record_their_conditions():
    """The timing experiment times with its own clocks; its rows still carry the conditions."""
    from experiments import timing
    from experiments.core import harness
    from experiments.core.config import Settings
    from experiments.core.runner import Context
    from experiments.core.device import device_facts
    import torch
    ctx = Context(device=torch.device("cpu"), dtype="float32",
                  facts=device_facts(torch.device("cpu")),
                  settings=Settings.defaults().but(point_budget_s=0.05))
    cfg = experiment_config("timing", kernel_sizes=[64])
    rows = list(harness.rows(timing, cfg, ctx))
    ok = [r for r in rows if r.get("status", "ok") == "ok" and r.get("time_s")]
    assert ok and all("cpu_freq_mhz" in r and "other_cpu_share" in r for r in ok)


@pytest.mark.parametrize("retries, noisy", [(1, False), (0, True)])
def test_a_noisy_launch_median_is_measured_again(monkeypatch, retries, noisy):
    """The latency floor is the launch row's median, and a fit leaves a noisy one out: the row
    is measured again (ctx.settings.retries times) while noisy, as ctx.time's points are."""
    from experiments.core.device import device_facts
    from experiments.core.config import Settings
    from experiments.core.runner import Context
    cpu = torch.device("cpu")
    ctx = Context(device=cpu, dtype="float32", facts=device_facts(cpu),
                  settings=Settings.defaults().but(retries=retries))
    cfg = experiment_config("timing", launch_kernels=50, launch_samples=6)
    real, runs = timing._conditions, []
    # the samples each run reports (the adds still run): a neighbour took every other sample
    # of the first run (CV 0.55), then a quiet one (CV 0.004)
    noisy_run, quiet_run = np.array([1e-6, 3e-6] * 3), np.array([1e-6, 1.01e-6] * 3)

    def reported(ctx, run):
        _, cond = real(ctx, run)
        runs.append(quiet_run if runs else noisy_run)
        return runs[-1], cond

    monkeypatch.setattr(timing, "_conditions", reported)
    row = timing._launch(ctx, cfg, "eager")
    assert len(runs) == retries + 1 and row["noisy"] is noisy
    assert row["time_s"] == pytest.approx(np.median(runs[-1]))
    assert row["check_passed"]  # the counter counted every run's adds


def test_two_stalls_leave_the_launch_median_known_and_unflagged(monkeypatch):
    """Two stalls in twenty samples (the node's CPU eager rows: CV 0.32) leave the median known
    to a few percent: not noisy, not measured again, though the CV is far past cv_threshold."""
    from experiments.core.device import device_facts
    from experiments.core.config import Settings
    from experiments.core.runner import Context
    cpu = torch.device("cpu")
    ctx = Context(device=cpu, dtype="float32", facts=device_facts(cpu),
                  settings=Settings.defaults().but(retries=1))
    cfg = experiment_config("timing", launch_kernels=50, launch_samples=20)
    real, runs = timing._conditions, []
    stalled = np.linspace(1.00e-6, 1.04e-6, 20)
    stalled[[3, 11]] = 8e-6  # two samples each caught a stall of some milliseconds

    def reported(ctx, run):
        _, cond = real(ctx, run)
        runs.append(stalled)
        # a quiet machine, whatever else runs beside the test: only the spread may retry
        return stalled, lambda t: cond(t) | {"contended": False, "throttled": False}

    monkeypatch.setattr(timing, "_conditions", reported)
    row = timing._launch(ctx, cfg, "eager")
    assert row["cv"] > 3 * ctx.settings.cv_threshold  # what the old rule judged by
    assert len(runs) == 1 and row["noisy"] is False
    assert row["time_s"] == pytest.approx(np.median(stalled))
