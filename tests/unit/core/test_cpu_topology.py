"""The CPU's topology from sysfs, the teams placed on it and the fits per NUMA node, on a fake
two-socket server (a sysfs tree in tmp_path): 2 sockets x 2 cores x 2 SMT threads, one NUMA node
per socket, 32 KiB L1 and 1 MiB L2 per core, a 16 MiB L3 per socket."""

import json
import math
import os
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch

from experiments import bandwidth
from experiments.analysis import levels
from experiments.core.cpus import format_cpus, read_topology
from experiments.kernels.cpu_team import Team, split

SIBLINGS = {0: "0,4", 1: "1,5", 2: "2,6", 3: "3,7"}
NODES = {0: "0-1,4-5", 1: "2-3,6-7"}
MIB = 1 << 20


def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


@pytest.fixture
def server(tmp_path):
    for cpu in range(8):
        core = cpu % 4
        base = tmp_path / "cpu" / f"cpu{cpu}"
        _write(base / "topology" / "thread_siblings_list", SIBLINGS[core])
        caches = [(1, "Data", "32K", SIBLINGS[core]), (1, "Instruction", "32K", SIBLINGS[core]),
                  (2, "Unified", "1024K", SIBLINGS[core]), (3, "Unified", "16M", NODES[core // 2])]
        for i, (level, kind, size, shared) in enumerate(caches):
            for name, value in (("level", level), ("type", kind), ("size", size),
                                ("shared_cpu_list", shared)):
                _write(base / "cache" / f"index{i}" / name, str(value))
    for node, cpus in NODES.items():
        _write(tmp_path / "node" / f"node{node}" / "cpulist", cpus)
    return tmp_path


def test_one_thread_per_physical_core_and_the_caches_they_hold(server):
    topo = read_topology(server, allowed=range(8))
    assert topo.cores == ((0, 4), (1, 5), (2, 6), (3, 7))
    assert topo.nodes == {0: (0, 1, 4, 5), 1: (2, 3, 6, 7)}
    assert topo.team() == [0, 1, 2, 3] and topo.team(node=1) == [2, 3]
    assert topo.cache_sizes() == {"L1": 32 << 10, "L2": MIB, "L3": 16 * MIB}
    # private L1/L2 add up over the team's cores, each socket's L3 counts once
    assert topo.cache_total([0, 1, 2, 3]) == {"L1": 128 << 10, "L2": 4 * MIB, "L3": 32 * MIB}
    assert topo.cache_total([2, 3]) == {"L1": 64 << 10, "L2": 2 * MIB, "L3": 16 * MIB}
    assert topo.placement([0, 1, 2, 3]) == {"threads": 4, "cores": 4, "smt": False,
                                            "numa_nodes": [0, 1], "cpus": "0-3"}
    assert topo.placement([0, 4]) | {"cpus": ""} == {"threads": 2, "cores": 1, "smt": True,
                                                      "numa_nodes": [0], "cpus": ""}


def test_a_slurm_allocation_keeps_only_its_cpus(server):
    topo = read_topology(server, allowed={0, 1, 4})
    assert topo.cores == ((0, 4), (1,)) and topo.team() == [0, 1]
    assert topo.nodes == {0: (0, 1, 4)}
    assert format_cpus({0, 1, 2, 5, 7, 8}) == "0-2,5,7-8"


def test_each_numa_node_runs_the_dram_sizes_alone(server):
    topo = read_topology(server, allowed=range(8))
    facts = SimpleNamespace(llc_bytes=16 * MIB, cache_bytes=topo.cache_sizes(), extra={
        "team": topo.team(), "cache_total_bytes": topo.cache_total(topo.team()),
        "numa": {str(n): list(c) for n, c in topo.nodes.items()}})
    cfg = SimpleNamespace(from_machine=True, sizes=[1], level_points=2, dram_arrays=[4, 8])
    ctx = SimpleNamespace(device=SimpleNamespace(type="cpu"), dtype="float32", facts=facts)
    sizes = bandwidth.machine_sizes(cfg, facts)
    # from a fraction of the team's L1 to arrays of 8x both sockets' L3
    assert min(sizes) <= (128 << 10) / 16 and max(sizes) == 8 * 32 * MIB
    teams = bandwidth._teams(ctx, sizes)
    assert [(scope, cpus) for scope, cpus, _ in teams] == [
        ("machine", [0, 1, 2, 3]), ("numa0", [0, 1]), ("numa1", [2, 3])]
    assert teams[0][2] == sizes and teams[1][2] == teams[2][2] == [128 * MIB, 256 * MIB]


def test_a_dram_size_past_a_quarter_of_memory_is_left_out():
    # a 2-core VM beside a 480 MiB L3, 24 GiB of memory: 8x arrays would take 11 GiB a triad
    totals = {"L1": 96 << 10, "L2": 4 * MIB, "L3": 480 * MIB}
    facts = SimpleNamespace(llc_bytes=480 * MIB, cache_bytes={}, memory_bytes=24 << 30,
                            extra={"cache_total_bytes": totals})
    cfg = SimpleNamespace(level_points=2, dram_arrays=[4, 8])
    assert max(bandwidth.machine_sizes(cfg, facts)) == 4 * 480 * MIB
    facts.memory_bytes = 128 << 30  # the node's 128 GiB hold both
    assert max(bandwidth.machine_sizes(cfg, facts)) == 8 * 480 * MIB
    # the smallest DRAM size stays even where it does not fit: its rows then say oom
    assert bandwidth.dram_sizes([4, 8], 480 * MIB, 4 << 30) == [4 * 480 * MIB]



def test_half_dtypes_stop_short_of_the_dram_window_where_numba_streams_it(monkeypatch):
    totals = {"L1": 96 << 10, "L2": 4 * MIB, "L3": 32 * MIB}
    facts = SimpleNamespace(llc_bytes=32 * MIB, cache_bytes={}, memory_bytes=24 << 30,
                            extra={"cache_total_bytes": totals, "team": [0, 1]})
    sizes = bandwidth.machine_sizes(SimpleNamespace(level_points=2, dram_arrays=[4, 8]), facts)
    ctx = SimpleNamespace(device=SimpleNamespace(type="cpu"), dtype="bfloat16", facts=facts)
    half = bandwidth._torch_sizes(ctx, sizes)
    assert half == [s for s in sizes if s < 128 * MIB] and max(sizes) == 256 * MIB
    # without numba the torch ops are the only DRAM points: they keep the first DRAM size
    monkeypatch.setattr(bandwidth.importlib.util, "find_spec", lambda name: None)
    assert bandwidth._torch_sizes(ctx, sizes) == half + [128 * MIB]
    # so do a team-less machine's (its float32 job runs torch's ops too)
    monkeypatch.undo()
    facts.extra = {"cache_total_bytes": totals}
    for dtype in ("bfloat16", "float32"):
        ctx.dtype = dtype
        assert bandwidth._torch_sizes(ctx, sizes) == half + [128 * MIB]


def test_a_half_dtype_beside_numbas_float32_takes_one_size_a_level(monkeypatch):
    """Its torch ops' rows are left out of the level fits (levels.own_kernels): one size a level,
    at the top of the level's window; float32's numba job keeps level_points a level, and so
    does a half dtype where torch's ops are the only ones (no numba: its rows are the levels')."""
    totals = {"L1": 96 << 10, "L2": 4 * MIB, "L3": 32 * MIB}
    facts = SimpleNamespace(llc_bytes=32 * MIB, cache_bytes={}, memory_bytes=24 << 30,
                            extra={"cache_total_bytes": totals, "team": [0, 1]})
    cfg = SimpleNamespace(from_machine=True, level_points=3, dram_arrays=[4, 8])
    ctx = SimpleNamespace(device=SimpleNamespace(type="cpu"), dtype="bfloat16", facts=facts)
    full = bandwidth.machine_sizes(cfg, facts)
    tops = [16 << 10, 698880, 5592320]  # each level's capacity / 6, in whole 256 B
    assert bandwidth._sizes(cfg, ctx) == tops + [128 * MIB, 256 * MIB] and set(tops) < set(full)
    ctx.dtype = "float32"
    assert bandwidth._sizes(cfg, ctx) == full and len(full) == 3 * 3 + 2
    monkeypatch.setattr(bandwidth.importlib.util, "find_spec", lambda name: None)
    ctx.dtype = "bfloat16"
    assert bandwidth._sizes(cfg, ctx) == full


def test_dram_window_arrays_take_the_systems_pages_and_cache_sized_ones_huge(monkeypatch):
    """The team's arrays short of the DRAM window ask for huge pages, those in it do not
    (cpu_stream.host_empty: a huge page's first touch can cost more than streaming it)."""
    from experiments.kernels import cpu_stream
    asked = []
    monkeypatch.setattr(cpu_stream, "filled", lambda cpus, n, dt, seed, index=0, huge_pages=True:
                        asked.append((n, huge_pages)) or torch.empty(0))
    facts = SimpleNamespace(llc_bytes=32 * MIB, extra={"cache_total_bytes": {"L3": 32 * MIB},
                                                       "team": [0]})
    ctx = SimpleNamespace(device=torch.device("cpu"), dtype="float32", facts=facts)
    for nbytes in (16 * MIB, 63 * MIB, 64 * MIB, 128 * MIB):  # two arrays: 4x the LLC at 64
        bandwidth._arrays(ctx, nbytes // 4, {}, cpus=[0])
    assert asked == [(n // 4, huge) for n, huge in
                     ((16 * MIB, True), (63 * MIB, True), (64 * MIB, False), (128 * MIB, False))
                     for _ in range(3)]


def _rows(points):
    """Bandwidth rows: (scope, working set, GB/s)."""
    return pd.DataFrame({"working_set_bytes": [w for _, w, _ in points],
                         "byte_per_s": [b * 1e9 for _, _, b in points],
                         "params": [json.dumps({"scope": s}) for s, _, _ in points]})


def test_dram_is_fitted_per_numa_node_and_for_the_machine():
    facts = {"kind": "cpu", "llc_bytes": 32 * MIB, "cache_bytes": {"L3": 32 * MIB}}
    big = [256 * MIB, 384 * MIB, 512 * MIB, 768 * MIB]
    pts = ([("machine", w, b) for w, b in zip(big, [200, 204, 198, 202])]
           + [("numa0", w, b) for w, b in zip(big, [101, 99, 100, 102])]
           + [("numa1", w, b) for w, b in zip(big, [97, 95, 96, 98])])
    fitted = {c["ceiling"]: c for c in levels.fit_bandwidth(_rows(pts), facts)}
    assert fitted["dram_bw"]["value"] == pytest.approx(201e9)
    assert fitted["dram_bw_numa0"]["value"] == pytest.approx(100.5e9)
    assert fitted["dram_bw_numa1"]["value"] == pytest.approx(96.5e9)


def test_dram_leaves_out_the_llc_shadow():
    # what the 2-core VM showed: 200 MB read 50-53 GB/s, its largest sizes 33-36
    facts = {"kind": "cpu", "llc_bytes": 32 * MIB, "cache_bytes": {"L3": 32 * MIB}}
    pts = [("machine", 200 * MIB, b) for b in (50, 53, 51)] + [
        ("machine", 512 * MIB, b) for b in (35, 34, 36)] + [
        ("machine", 768 * MIB, b) for b in (33, 34, 35)]
    dram = next(c for c in levels.fit_bandwidth(_rows(pts), facts) if c["ceiling"] == "dram_bw")
    assert dram["value"] == pytest.approx(34.5e9) and dram["ws_min"] == 512 * MIB
    assert dram["ci_high"] < 40e9


def _host_rows(points):
    """Host-clocked CPU bandwidth rows: (variant, working set, GB/s)."""
    return pd.DataFrame({"working_set_bytes": [w for _, w, _ in points],
                         "byte_per_s": [b * 1e9 for _, _, b in points],
                         "variant": [v for v, _, _ in points], "op": "triad",
                         "device_kind": "cpu", "timer": "perf_counter", "time_s": 1.0,
                         "time_s_min": 1.0})


def test_each_cache_level_is_fitted_from_the_cpus_own_kernels():
    # the 2-core VM at 6d72f0a: numba's L2 206, L3 174; torch's bfloat16 ops 123 in the L2
    # window and 184 in the L3's. Pooled, the L3 read 184 and the L2 stood 1.12x over it (no L2).
    facts = {"kind": "cpu", "llc_bytes": 32 * MIB, "cache_bytes": {"L2": 2 * MIB, "L3": 32 * MIB}}
    numba = ([("numba", w, b) for w, b in [(256 << 10, 200), (512 << 10, 206), (MIB, 204)]]
             + [("numba", w, b) for w, b in [(4 * MIB, 170), (8 * MIB, 174), (16 * MIB, 172)]]
             + [("numba", w, b) for w, b in [(256 * MIB, 40), (512 * MIB, 41)]])
    half = [("torch", w, b) for w, b in [(512 << 10, 123), (MIB, 120), (8 * MIB, 184),
                                         (16 * MIB, 181)]]
    fitted = {c["ceiling"]: c for c in levels.fit_bandwidth(_host_rows(numba + half), facts)}
    assert fitted["l3_bw"]["value"] == pytest.approx(174e9)
    assert fitted["l2_bw"]["value"] == pytest.approx(206e9)
    # where the CPU has no kernels of its own (numba missing), torch's points are its levels
    alone = {c["ceiling"]: c for c in levels.fit_bandwidth(_host_rows(
        [("torch", w, b) for _, w, b in numba] + half), facts)}
    assert alone["l3_bw"]["value"] == pytest.approx(184e9)
    # ...and its L2, 1.12x over that L3, runs at its rate (levels.kept_levels): noted, no step
    assert alone["l2_bw"]["value"] == pytest.approx(206e9)
    assert "no step over the next level: 1.12x" in alone["l2_bw"]["note"]


def test_a_host_clocked_levels_lone_top_size_is_fitted_with_the_next_sizes_best():
    # the node at fa54da6: its L2 window read 1130 GB/s at 2.4 MB (two ops), 708-902 at 1.6 to
    # 17 MB; the plateau held one size and the L2 was left unfitted (at dc870ed 1063 vs 891)
    facts = {"kind": "cpu", "llc_bytes": 150 * MIB, "cache_bytes": {"L2": 32 * MIB,
                                                                    "L3": 150 * MIB}}
    l2 = [(1.5, 871), (2.25, 1130), (2.25, 1050), (4, 867), (6, 708), (10.7, 902), (16, 709)]
    pts = [("numba", int(w * MIB), b) for w, b in l2] + [
        ("numba", w * MIB, b) for w, b in [(64, 185), (96, 289), (120, 187)]] + [
        ("numba", w * MIB, b) for w, b in [(1200, 116), (1600, 118)]]
    fitted = {c["ceiling"]: c for c in levels.fit_bandwidth(_host_rows(pts), facts)}
    l2_bw = fitted["l2_bw"]
    assert l2_bw["value"] == pytest.approx(1130e9) and l2_bw["ci_low"] == pytest.approx(902e9)
    assert l2_bw["ws_max"] == pytest.approx(10.7 * MIB, rel=1e-3)
    # ...and only where the window has another size: one size alone is still no plateau
    one = [p for p in pts if p[1] != int(2.25 * MIB) or p[2] == 1130]
    one = [p for p in one if not (MIB < p[1] <= 32 * MIB) or p[1] == int(2.25 * MIB)]
    alone = {c["ceiling"]: c for c in levels.fit_bandwidth(_host_rows(one), facts)}
    assert math.isnan(alone["l2_bw"]["value"])


def test_a_team_pins_each_worker_to_its_cpu():
    cpus = sorted(os.sched_getaffinity(0))
    seen = {}
    team = Team(cpus)
    try:
        team.run(lambda i: seen.__setitem__(i, os.sched_getaffinity(0)), [(i,) for i in cpus])
    finally:
        team.close()
    assert seen == {c: {c} for c in cpus}


@pytest.mark.parametrize("n, workers, align", [(10, 3, 4), (4096, 2, 64), (1, 4, 16)])
def test_split_covers_every_item_once_on_aligned_bounds(n, workers, align):
    parts = split(n, workers, align)
    assert len(parts) == workers and parts[0][0] == 0 and parts[-1][1] == n
    assert all(a[1] == b[0] for a, b in zip(parts, parts[1:]))
    assert all(lo % align == 0 for lo, _ in parts)
    assert np.all(np.diff([lo for lo, _ in parts]) >= 0)


def test_a_narrow_cache_window_still_gets_two_working_sets():
    # a Sapphire Rapids-like node: 16 cores x 2 MiB L2 = 32 MiB, beside a 157 MB L3 (window
    # [64, 78] MB of working set: no array size puts every op inside it)
    from experiments.analysis.levels import cache_windows
    totals = {"L1": 16 * 48 << 10, "L2": 32 * MIB, "L3": 157_286_400}
    facts = SimpleNamespace(llc_bytes=totals["L3"], cache_bytes={}, extra={
        "cache_total_bytes": totals})
    cfg = SimpleNamespace(level_points=2, dram_arrays=[4, 8])
    sizes = bandwidth.machine_sizes(cfg, facts)
    _, lo, hi, _ = next(w for w in cache_windows({"kind": "cpu", "extra": facts.extra}, 1)
                        if w[0] == "l3_bw")
    inside = {k * s for s in sizes for k in (2, 3) if lo <= k * s <= hi}
    assert len(inside) >= 2
    assert max(sizes) >= 8 * 157_000_000  # the 1.3 GB arrays


def test_openmp_binding_variables_leave_the_environment():
    env = {"OMP_PROC_BIND": "spread", "OMP_PLACES": "cores", "OMP_NUM_THREADS": "4"}
    from experiments.core.cpus import unbind_openmp
    assert unbind_openmp(env) == ["OMP_PROC_BIND=spread", "OMP_PLACES=cores"]
    assert env == {"OMP_NUM_THREADS": "4"}  # the thread count is not a binding


