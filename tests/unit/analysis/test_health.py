"""What the measurements ran under, as files record it and the analysis reads it: a job file's
conditions, old files without the condition columns, the published set, and the per-system
summaries (experiments/analysis/health.py)."""

import math

import pyarrow.parquet as pq
import pytest

from experiments.analysis import dataset
from experiments.analysis.health import energy_table, plateau_conditions, system_conditions
from experiments.core import store
from experiments.core.schema import LATER_COLUMNS, METADATA_KEY, SCHEMA, to_table

from tests.conftest import ROOT


def _row(**kw):
    return {"experiment": "matmul", "op": "gemm", "host": "h", "device": "cpu",
            "device_kind": "cpu", "dtype": "float32", "status": "ok"} | kw

def test_file_records_the_job_conditions(run_experiment, tmp_path):
    rows = run_experiment("bandwidth", "float32", ["experiment.sizes=[16384]", "experiment.ops=[copy]"])
    meta = store.read_metadata(tmp_path / "bandwidth-float32.parquet")
    cond = meta["conditions"]
    assert cond["contention_threshold"] == 0.1 and len(cond["loadavg_start"]) == 3
    assert cond["any_throttled"] is False and cond["points_judged_throttled"] == 0
    assert cond["points_contended"] == int(rows.contended.fillna(False).sum())
    assert {"device_state_start", "device_state_end"} <= set(meta)
    assert rows.cpu_freq_mhz.notna().all() and rows.energy_j.isna().all()

def test_a_file_with_the_old_schema_still_loads(tmp_path):
    table = to_table([_row(time_s=1.0, flops=2.0)], {"run_id": "old"})
    old = table.drop_columns(list(LATER_COLUMNS) + ["measured_on"])
    path = tmp_path / "old.parquet"
    pq.write_table(old.replace_schema_metadata({METADATA_KEY: b'{"run_id": "old"}'}), path)
    read = store.read_measurements(path)
    assert read.schema == SCHEMA
    assert read.column("energy_j").null_count == 1 and read.column("contended").null_count == 1
    merged = dataset.collect([path, store.write_atomic(to_table([_row(energy_j=1.0)], {}),
                                                       tmp_path / "new.parquet")],
                             log=lambda m: None)
    assert merged.energy_j.isna().sum() == 1 and (merged.energy_j == 1.0).sum() == 1
    assert dataset.load(path).rows.sm_clock_mhz.isna().all()


def test_published_set_records_its_conditions():
    """The published H200 set was measured with the condition columns: GPU rows carry clocks,
    power and energy, and the summary says what the GEMMs ran at."""
    ds = dataset.load(ROOT / "results/published/h200/measurements.parquet")
    # timed by the core timer: not the timing experiment's own methods, nor a workload's aten ops
    # (their times are the profiler's, over a few calls with no conditions around them)
    gpu = ds.rows[ds.rows.device_kind == "cuda"]
    timed = gpu[(gpu.status == "ok") & (gpu.experiment != "timing")
                & gpu.time_s.notna() & (gpu.variant.fillna("") != "aten_op")]
    assert len(timed) > 500 and timed.sm_clock_mhz.notna().all()
    # power and energy only where NVML's energy counter resolves the window, never one the device
    # cannot draw (issue 21): nothing above the 700 W limit by more than 5 %
    assert timed.power_w.notna().sum() >= 20
    assert (timed.energy_j.notna() == timed.power_w.notna()).all()
    assert gpu.power_w.max() <= 700 * 1.05
    summary = system_conditions(gpu)["NVIDIA H200 @ h200"]
    assert "power cap on" in summary["summary"] and summary["median_power_w"] > 50
    table = energy_table(ds.rows)
    gemm = table[(table.experiment == "matmul") & table.system.str.startswith("NVIDIA")].value
    assert gemm.notna().sum() >= 3 and (gemm.dropna() > 0).all()  # the GEMM plateaus ran >= 0.3 s

# -- analysis helpers ---------------------------------------------------------------------------

def test_system_conditions_counts_loaded_and_throttled_points():
    cpu = [_row(n=i, other_cpu_share=s, contended=None if s is None else s > 0.1, time_s=1.0)
           for i, s in enumerate([0.5, 0.02, 0.3, 0.01, None])]
    gpu = [_row(n=i, device="cuda:0", device_kind="cuda", device_name="H", time_s=1.0,
                sm_clock_mhz=c, power_w=p, throttle_reasons=r, throttled=t)
           for i, (c, p, r, t) in enumerate([(1250.0, 700.0, "sw_power_cap", False),
                                             (1980.0, 300.0, "", False),
                                             (900.0, 400.0, "hw_thermal", True),
                                             (1500.0, 690.0, "sw_power_cap", False)])]
    s = system_conditions(dataset.from_rows(cpu + gpu).rows)
    c = next(v for v in s.values() if v["device_kind"] == "cpu")
    assert c["loaded_share"] == 0.5 and c["contended_share"] == 0.5 and c["max_other_cpu_share"] == 0.5
    assert c["summary"] == ("measured under load: 50 % of CPU points had other processes (or the "
                            "VM's host) using > 10 % of the cores, or of a team thread's time (max 50 %)")
    g = next(v for v in s.values() if v["device_kind"] == "cuda")
    assert g["throttled_share"] == 0.25 and g["power_capped_share"] == 0.5
    assert g["median_sm_clock_mhz"] == 1375.0 and g["throttle_reasons"] == ["hw_thermal", "sw_power_cap"]
    assert "25 % of points throttled" in g["summary"] and "power cap on 50 %" in g["summary"]
    assert "host CPU" not in g["summary"]  # its rows recorded no CPU share
    quiet = system_conditions(dataset.from_rows([_row(other_cpu_share=0.02, time_s=1.0)]).rows)
    assert next(iter(quiet.values()))["summary"].startswith("quiet: no CPU point")
    # a VM's host taking its CPUs (steal) is load as much as a process beside the job
    stolen = system_conditions(dataset.from_rows(
        [_row(other_cpu_share=0.0, steal_share=0.3, time_s=1.0)]).rows)
    assert next(iter(stolen.values()))["summary"].startswith(
        "measured under load: 100 % of CPU points") and "(max 30 %)" in next(
        iter(stolen.values()))["summary"]
    # ...and so is a team thread kept off its CPU (one CPU of many: the machine-wide shares low)
    waited = system_conditions(dataset.from_rows(
        [_row(other_cpu_share=0.06, steal_share=0.0, team_off_cpu_share=0.4, time_s=1.0)]).rows)
    (w,) = waited.values()
    assert w["loaded_share"] == 1.0 and "(max 40 %)" in w["summary"]
    assert w["max_team_off_cpu_share"] == 0.4


def test_a_gpu_system_whose_host_cpu_was_loaded_says_so():
    """The banner and every verdict of a GPU system flagged under load must say why: the host
    CPU (its launches are timed there), not only the GPU's clocks."""
    gpu = [_row(n=i, device="cuda:0", device_kind="cuda", device_name="H", time_s=1.0,
                sm_clock_mhz=1980.0, power_w=300.0, throttle_reasons="", throttled=False,
                other_cpu_share=s) for i, s in enumerate([0.4, 0.0, 0.0, 0.0])]
    (g,) = system_conditions(dataset.from_rows(gpu).rows).values()
    assert g["loaded_share"] == 0.25
    assert g["summary"].endswith("; measured under load: 25 % of host-clocked points had other "
                                 "processes (or the VM's host) using > 10 % of the cores, or of a team "
                                 "thread's time (max 40 %)")


def test_a_busy_host_does_not_load_points_timed_on_the_gpu():
    """Kernels timed by CUDA events do not feel other processes on the host: a GPU system whose
    loaded points are all event-timed is not under load (issue 21: a warning always on is none)."""
    gpu = [_row(n=i, device="cuda:0", device_kind="cuda", device_name="H", time_s=1.0,
                timer=t, other_cpu_share=s) for i, (t, s) in enumerate(
                    [("cuda_event", 0.4), ("cuda_event_graph", 0.5), ("perf_counter_sync", 0.0)])]
    (g,) = system_conditions(dataset.from_rows(gpu).rows).values()
    assert g["loaded_share"] == 0 and "under load" not in g["summary"]
    assert g["max_other_cpu_share"] == 0.5  # still recorded


def test_plateau_conditions_is_nan_safe():
    rows = dataset.from_rows([_row(n=1, sm_clock_mhz=1500.0, power_w=None),
                              _row(n=2, sm_clock_mhz=None, power_w=None),
                              _row(n=3, sm_clock_mhz=1700.0, power_w=650.0)]).rows
    p = plateau_conditions(rows)
    assert p["sm_clock_mhz"] == 1600.0 and p["power_w"] == 650.0 and p["points"] == 3
    bare = plateau_conditions(rows.drop(columns=["sm_clock_mhz", "power_w"]))
    assert math.isnan(bare["sm_clock_mhz"]) and math.isnan(bare["power_w"])


def test_energy_table_uses_the_top_plateau_and_dram_rows():
    gpu = dict(device="cuda:0", device_kind="cuda", device_name="H")
    # GEMM: three sizes on the plateau at 1 pJ/FLOP, one launch-bound size far below it at 9
    mm = [_row(n=n, flops=1e12, time_s=t, energy_j=e, sm_clock_mhz=c, power_w=700.0, **gpu)
          for n, t, e, c in [(256, 1.0, 9.0, 1980.0), (4096, 1e-3, 1.0, 1300.0),
                             (8192, 1.05e-3, 1.0, 1400.0), (16384, 1.02e-3, 1.0, 1500.0)]]
    # bandwidth: LLC 1 MB -> DRAM from 4 MB: the 1 MB row (cache) is left out
    bw = [_row(experiment="bandwidth", op="copy", n=i, bytes=b, working_set_bytes=b, time_s=b / 1e12,
               energy_j=b * k * 1e-12, power_w=500.0, **gpu)
          for i, (b, k) in enumerate([(1e6, 50.0), (8e6, 20.0), (1e9, 10.0), (4e9, 30.0)])]
    ds = dataset.from_rows(mm + bw)
    system = ds.rows.system.iloc[0]
    table = energy_table(ds.rows, {system: {"llc_bytes": 1_000_000}}).set_index("experiment")
    assert table.loc["matmul", "unit"] == "pJ/FLOP" and table.loc["matmul", "points"] == 3
    assert table.loc["matmul", "value"] == pytest.approx(1.0)
    assert table.loc["matmul", "sm_clock_mhz"] == 1400.0 and table.loc["matmul", "power_w"] == 700.0
    assert table.loc["bandwidth", "unit"] == "pJ/byte" and table.loc["bandwidth", "points"] == 3
    assert table.loc["bandwidth", "value"] == pytest.approx(20.0)


def test_the_cpu_s_ran_at_names_the_clock_its_cores_counted_beside_the_system_s():
    import json

    from experiments.report.glance import _ran_at

    rows = [_row(n=i, cpu_freq_mhz=2596.0, time_s=1.0,
                 params=json.dumps({"core_mhz": mhz} if mhz else {}))
            for i, mhz in enumerate([3600.0, 3700.0, 3650.0, None])]
    c = next(iter(system_conditions(dataset.from_rows(rows).rows).values()))
    assert c["median_core_mhz"] == 3650.0
    assert _ran_at(c) == "CPU 2596 MHz and 3650 MHz as the cores counted (medians)"
    bare = next(iter(system_conditions(dataset.from_rows([_row(n=1, time_s=1.0)]).rows).values()))
    assert math.isnan(bare["median_core_mhz"]) and "counted" not in _ran_at(bare)
    fma = [_row(n=i, time_s=1.0, params=json.dumps({"core_mhz": 3000.0, "fma_mhz": mhz}))
           for i, mhz in enumerate([2100.0, 2000.0])]
    c = next(iter(system_conditions(dataset.from_rows(fma).rows).values()))
    assert _ran_at(c) == ("3000 MHz as the cores counted and 2050 MHz as their FMA units "
                          "counted (medians)")
