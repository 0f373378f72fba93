"""GPU to GPU on the CPU: the not-measurable rows (CPU, one GPU), the pairs, the link types, the
bus-bandwidth arithmetic against nccl-tests, the rank machinery (two gloo ranks on the CPU), the
copy kernel (Triton's interpreter), the figures and the report section on synthetic rows."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

from experiments import collectives, holds_all_gpus, peer_copy
from experiments.core import harness
from experiments.core.config import Settings
from experiments.core.harness import Point, State
from experiments.report import render as report
from experiments.analysis.dataset import from_rows
from experiments.report.figures import Inputs, Missing
from experiments.report import figures
from experiments import experiment_config


def test_registered_as_experiments_that_hold_every_gpu():
    assert holds_all_gpus("peer_copy") and holds_all_gpus("collectives")
    assert not holds_all_gpus("bandwidth")


@pytest.mark.parametrize("name, ops", [("peer_copy", set(peer_copy.METHODS)),
                                       ("collectives", set(collectives.OPS))])
def test_cpu_rows_are_not_measurable_here(run_experiment, name, ops):
    rows = run_experiment(name, "float32", ["experiment.sizes=[4096,65536]"])
    assert (rows.status == "not_applicable").all(), rows[["op", "status", "message"]]
    assert rows.message.str.startswith("not measurable here").all()
    one_way = rows[rows.variant != "bi"]  # bi counts both directions: twice the size
    assert set(rows.op) == ops and set(one_way.bytes) == {4096.0, 65536.0}
    assert (rows.measured_on == "cpu").all()


def _one_gpu():
    return SimpleNamespace(devices=[torch.device("cuda", 0)], device=torch.device("cuda", 0),
                           dtype="float32")


def test_one_gpu_has_no_pair_and_no_collective():
    cfg = experiment_config("peer_copy", sizes=[4096, 1 << 30])
    rows = list(harness.rows(peer_copy, cfg, _one_gpu()))
    assert len(rows) == 2 * 2 * 2  # methods x directions x sizes
    assert all(r["status"] == "not_applicable" and "one GPU (cuda:0)" in r["message"]
               and "no peer" in r["message"] for r in rows)
    assert {r["bytes"] for r in rows if r["variant"] == "bi"} == {8192.0, 2.0 * 2**30}
    rows = list(harness.rows(collectives, experiment_config("collectives", sizes=[1024]),
                             _one_gpu()))
    assert [r["op"] for r in rows] == list(collectives.OPS)
    assert all(r["status"] == "not_applicable" and "no collective of one" in r["message"]
               for r in rows)


def test_pairs_are_every_ordered_pair():
    for n in (2, 3, 8):
        pairs = peer_copy.ordered_pairs(n)
        assert len(pairs) == len(set(pairs)) == n * (n - 1)
        assert all(a != b for a, b in pairs) and (1, 0) in pairs and (0, 1) in pairs
        assert len(peer_copy.unordered_pairs(n)) == n * (n - 1) // 2
    assert peer_copy.ordered_pairs(1) == []


def test_link_types_and_bytes():
    assert peer_copy.link_type(True, True) == "nvlink"
    assert peer_copy.link_type(True, False) == "pcie"
    assert peer_copy.link_type(False, True) == "none"  # NVLink without peer access: no P2P copy
    assert peer_copy.link_type(True, None) == "unknown"
    assert peer_copy.copy_bytes(4096, "uni") == 4096 and peer_copy.copy_bytes(4096, "bi") == 8192


def test_a_pair_without_peer_access_says_why():
    ctx = SimpleNamespace(dtype="float32", settings=Settings.defaults())
    point = Point({"op": "copy_engine", "variant": "uni", "n": 1024},
                  args={"a": torch.device("cuda", 0), "b": torch.device("cuda", 1),
                        "link": {"peer_access": False}})
    with pytest.raises(peer_copy.Unsupported, match="no peer access from cuda:0 to cuda:1"):
        peer_copy.measure(State.alone(ctx, None, point))


@pytest.mark.parametrize("op, world, factor", [
    ("all_reduce", 2, 1.0), ("all_reduce", 4, 1.5), ("all_reduce", 8, 1.75),
    ("all_gather", 2, 0.5), ("all_gather", 8, 0.875), ("reduce_scatter", 8, 0.875)])
def test_busbw_is_nccl_tests_arithmetic(op, world, factor):
    # nccl-tests doc/PERFORMANCE.md: busbw = algbw * 2(n-1)/n (all-reduce), (n-1)/n (the others)
    out = collectives.bandwidths(op, 2**30, 2**30 / 400e9, world)
    assert out["algbw_Bps"] == pytest.approx(400e9)
    assert out["busbw_Bps"] == pytest.approx(400e9 * factor)
    with pytest.raises(ValueError, match="broadcast"):
        collectives.bus_factor("broadcast", 2)


def test_layout_counts_the_large_buffer():
    lay = collectives.layout("all_gather", 2**30, 2, 4)
    assert lay["bytes"] == 2**30 and lay["chunk"] == 2**27 and lay["n"] == 2**28
    assert lay["working_set_bytes"] == 2**30 + 2**29  # output S plus this rank's S/2
    assert collectives.layout("all_reduce", 2**30, 2, 4)["working_set_bytes"] == 2**30
    odd = collectives.layout("reduce_scatter", 1000, 3, 4)  # rounded down to whole elements
    assert odd["chunk"] == 83 and odd["bytes"] == 83 * 3 * 4


def test_multicast_stays_off():
    import os
    assert os.environ["NCCL_NVLS_ENABLE"] == "0"
    assert os.environ["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
    assert os.environ["NVSHMEM_DISABLE_NVLS"] == "1"


def test_the_copy_kernel_copies_every_element():
    from experiments.kernels import sm_copy as peer_kernel  # runs under TRITON_INTERPRET=1 (conftest)

    x = torch.randn(peer_kernel.BLOCK * 2 + 7)
    y = torch.full_like(x, float("nan"))
    peer_kernel.copy(x, y)
    assert torch.equal(x, y)


@pytest.mark.parametrize("name, value", [("methods", "[dma]"), ("directions", "[both]"),
                                          ("sizes", "[]")])
def test_peer_copy_rejects_bad_config(run_experiment, name, value):
    with pytest.raises(ValueError, match=f"experiment.{name}"):
        run_experiment("peer_copy", "float32", [f"experiment.{name}={value}"])


# --- analysis on synthetic rows ----------------------------------------------------------------

def _row(**kw):
    base = {"experiment": "peer_copy", "host": "h", "device": "cuda:0+1", "device_kind": "cuda",
            "device_name": "NVIDIA H200", "dtype": "float32", "status": "ok"}
    return base | kw


def synthetic():
    rows = []
    for src, dst in peer_copy.ordered_pairs(2):
        for size, t in ((4096, 10e-6), (2**30, 2**30 / 380e9)):
            params = {"src": src, "dst": dst, "link": "nvlink", "peer_access": True}
            rows.append(_row(op="copy_engine", variant="uni", bytes=float(size), time_s=t,
                             params=params))
    rows.append(_row(op="copy_engine", variant="bi", bytes=2.0**31, time_s=2**31 / 700e9,
                     params={"src": 0, "dst": 1, "link": "nvlink", "peer_access": True}))
    for size in (1024, 2**30):
        t = size / 300e9 + 20e-6
        rows.append(_row(experiment="collectives", op="all_reduce", variant="nccl",
                         bytes=float(size), time_s=t,
                         params=collectives.bandwidths("all_reduce", size, t, 2)
                         | {"world_size": 2}))
    return rows


def _inputs(rows):
    import pandas as pd
    return Inputs(ds=from_rows(rows), ceilings=pd.DataFrame(
        columns=["system", "value", "ceiling", "unit", "dtype"]), sheets=[],
        per_row=pd.DataFrame(), knees=pd.DataFrame())


def test_figures_are_placeholders_without_ok_rows():
    rows = [r | {"status": "not_applicable", "time_s": None, "message": "not measurable here: x"}
            for r in synthetic()]
    for name in ("peer_copy", "collectives"):
        with pytest.raises(Missing, match="no ok"):
            figures.DRAW[name](_inputs(rows))


def test_report_section_tabulates_or_says_not_measurable():
    section = report.gpu2gpu(from_rows(synthetic()))
    (row,) = section["rows"]
    assert row["link"] == "nvlink" and row["uni"] == "380 GB/s" and row["bi"] == "700 GB/s"
    assert row["latency"].startswith("10 µs") and "2 GPUs" in row["allreduce"]
    assert section["not_measurable"] == []
    one = [_row(op="copy_engine", variant="uni", bytes=4096.0, status="not_applicable",
                message=peer_copy.ONE_GPU.format(dev="cuda:0"), params={"gpus": 1})]
    section = report.gpu2gpu(from_rows(one))
    assert section["rows"] == [] and "one GPU (cuda:0)" in section["not_measurable"][0]
    assert json.dumps(section)  # plain values for the template
