"""A host-clocked CPU's ceilings: each its plateau's best point, on best-time rates that a view of
the rows applies once (docs/claims.md, "Which time" and "A plateau's value")."""

import math

import numpy as np
import pandas as pd
import pytest

from tests import analysis_fixtures as fx
from experiments.analysis import roofline
from tests.unit.analysis.test_analysis_fit import _bandwidth, _ceiling, _fit, _with_a_fast_minimum


def _neighbours_busy_at_the_largest_sizes(dev, timer):
    """The 2-core VM's DRAM window: a neighbour busy while the two largest sizes ran slowed
    every sample of theirs 1.4x (best times too); the smaller sizes caught a quiet moment."""
    rows = _bandwidth(dev, {})
    top = max(r["working_set_bytes"] for r in rows)
    for r in rows:
        r["timer"], r["time_s_min"] = timer, r["time_s"]
        if r["working_set_bytes"] >= top / 4:
            r["time_s"] *= 1.4
            r["time_s_min"] *= 1.4
    return rows


def test_a_host_clocked_dram_ceiling_is_its_best_point_a_busy_moment_does_not_cut_it():
    """Load only slows a host-clocked point, and points past 4x the LLC differ by when they ran,
    not by their size: the DRAM ceiling is the best point, and the largest sizes' busy moment
    does not cut the quiet ones as LLC shadow (which left 1/1.4 of it). A GPU's DRAM keeps its
    median and its shadow cut."""
    dev = fx.CPU
    _, table = _fit({"bandwidth": _neighbours_busy_at_the_largest_sizes(dev, "perf_counter")},
                    dev)
    dram = _ceiling(table, "dram_bw")
    assert math.isclose(dram.value, dev["dram_bw"], rel_tol=0.05), dram.value
    assert "best point" in dram.method and dram.ci_low < dram.value <= dram.ci_high
    _, table = _fit({"bandwidth": _neighbours_busy_at_the_largest_sizes(dev, "cuda_event")}, dev)
    dram = _ceiling(table, "dram_bw")
    assert math.isclose(dram.value, dev["dram_bw"] / 1.4, rel_tol=0.05), dram.value
    assert "median" in dram.method


def test_a_host_clocked_fma_roof_is_its_plateaus_best_point():
    """Past the ridge a host-clocked FMA point is only ever slowed by load: the roof is the
    best, the plateau's range its interval (the VM's float64 at its median read 0.88x
    mixbench-cpu's best twice; at its best 0.91-0.96)."""
    fmas = np.array([1, 2, 4, 8, 16, 64, 128, 256, 512, 1024])
    gflops = np.array([8.8, 17.5, 33.8, 60.0, 80.0, 100.0, 104.0, 96.0, 107.0, 101.0])
    rows = pd.DataFrame({"dtype": "float64", "variant": "numba", "intensity": fmas / 8,
                         "flop_per_s": gflops * 1e9, "device_kind": "cpu",
                         "timer": "perf_counter", "time_s": 1.0, "time_s_min": 0.9})
    roof = next(c for c in roofline.fit_roof(rows) if c["ceiling"] == "vector_flops")
    assert roof["value"] == pytest.approx(107e9) and "best point" in roof["method"]
    assert roof["ci_low"] == pytest.approx(96e9) and roof["ci_high"] == pytest.approx(107e9)
    median = next(c for c in roofline.fit_roof(rows.assign(timer="cuda_event"))
                  if c["ceiling"] == "vector_flops")
    assert median["value"] == pytest.approx(np.median([100, 104, 96, 107, 101]) * 1e9)


def test_the_best_time_view_of_a_view_is_itself():
    """Claims read fit_view's rows and some fit them again (C10's DRAM reference): a second view
    must not scale the best rates once more (it read the node's 85 GB/s as 103)."""
    rows = pd.DataFrame(_with_a_fast_minimum(_bandwidth(fx.CPU, {}), "perf_counter"))
    rows = rows.assign(byte_per_s=rows.bytes / rows.time_s, flop_per_s=rows.flops / rows.time_s)
    once = roofline.fit_view(rows)
    assert np.allclose(once.byte_per_s, rows.byte_per_s * 1.3)
    twice = roofline.fit_view(once)
    assert np.allclose(twice.byte_per_s, once.byte_per_s)
    assert np.allclose(twice.time_s, rows.time_s_min)


def test_a_cpus_dram_ceiling_comes_from_its_own_stream_kernels():
    """Half-dtype CPU bandwidth runs torch's ops (no numba half arithmetic) to one DRAM size; a
    quiet second there must not set the DRAM ceiling over the pinned numba kernels' points."""
    dev = fx.CPU
    own = _bandwidth(dev, {})
    half = fx.bandwidth_rows(dev, np.random.default_rng(1), ("bfloat16",))
    for r in own:
        r.update(variant="numba", timer="perf_counter", time_s_min=r["time_s"])
    for r in half:
        r.update(variant="torch", timer="perf_counter", time_s_min=r["time_s"] / 1.3)
    _, table = _fit({"bandwidth": own + half}, dev)
    # the fixtures' noise goes both ways, so a best point sits a few % off the truth
    assert _ceiling(table, "dram_bw").value < 1.15 * dev["dram_bw"]
    for r in own:
        r["variant"] = "torch"  # no kernels of its own (numba missing): every point counts
    _, table = _fit({"bandwidth": own + half}, dev)
    assert _ceiling(table, "dram_bw").value > 1.25 * dev["dram_bw"]


def _levels(**values):
    """Fitted level rows as fit_levels makes them, smallest level first."""
    from experiments.analysis.plateaus import ceiling_row
    return [ceiling_row(name, v, "B/s", "best point", 5, ci=(0.9 * v, v), ws_min=1.0,
                        ws_max=2.0, capacity_bytes=3.0) for name, v in values.items()]


def test_a_cache_level_at_the_next_ones_rate_is_kept_above_dram():
    """Zen 1 streams from L1 as fast as its L2 fills it (32 bytes a cycle, both): an L1 at or a
    little above its L2, well above DRAM, is a level of its own, with a note saying it has no
    step; one below the L2, or an LLC at DRAM's rate, is not."""
    from experiments.analysis.levels import kept_levels
    gb = 1e9
    # the Zen 1 VM's: L1 152, L2 140, L3 100, DRAM 20 GB/s
    l1, l2, l3, dram = kept_levels(_levels(l1_bw=152 * gb, l2_bw=140 * gb, l3_bw=100 * gb,
                                           dram_bw=20 * gb))
    assert l1["value"] == 152 * gb and "no step over the next level: 1.09x" in l1["note"]
    assert l2["value"] == 140 * gb and not l2.get("note") and l3["value"] == 100 * gb
    # one a little below (within AT_RATE): at its rate
    l1, *_ = kept_levels(_levels(l1_bw=139 * gb, l2_bw=140 * gb, l3_bw=100 * gb, dram_bw=20 * gb))
    assert l1["value"] == 139 * gb and "0.99x" in l1["note"]
    # an L1 further below its L2 ran slower than the L2 fills it: not its own
    l1, l2, *_ = kept_levels(_levels(l1_bw=130 * gb, l2_bw=140 * gb, l3_bw=100 * gb,
                                     dram_bw=20 * gb))
    assert math.isnan(l1["value"]) and "no plateau of its own" in l1["note"]
    assert l2["value"] == 140 * gb
    # an LLC at DRAM's rate is no cache of its own, nor a level at its rate above it
    l2, llc, dram = kept_levels(_levels(l2_bw=22 * gb, l3_bw=21 * gb, dram_bw=20 * gb))
    assert math.isnan(l2["value"]) and math.isnan(llc["value"]) and dram["value"] == 20 * gb
    # without a DRAM value, only a step keeps a level
    l1, l2 = kept_levels(_levels(l1_bw=152 * gb, l2_bw=140 * gb) + [
        _levels(dram_bw=math.nan)[0]])[:2]
    assert math.isnan(l1["value"]) and l2["value"] == 140 * gb
