"""Synthetic rows with known ceilings: an H200-like GPU (every experiment) and a small CPU.

Times follow the roofline model exactly, times lognormal noise, so a fit must recover the truth.
`write_files` writes them as real measurement files (schema + metadata), one per experiment.
"""

from __future__ import annotations

import json
import math
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from experiments.core.schema import to_table
from experiments.core.store import write_atomic

ITEM = {"float32": 4, "tf32": 4, "bfloat16": 2, "float16": 2, "float8_e4m3": 1}
# relative error of a GEMM from rounding randn inputs to the dtype alone (about u * sqrt(2 / 3))
INPUT_ROUNDING = {"float32": 0.0, "tf32": 0.0, "bfloat16": 2e-3, "float16": 3e-4,
                  "float8_e4m3": 3.5e-2}

GPU = {
    "host": "h200-ref", "device": "cuda:0", "device_kind": "cuda", "device_name": "NVIDIA H200",
    "dram_bw": 4.2e12, "l2_bw": 9.0e12, "l2_bytes": 50 * 2**20, "launch_s": 4e-6,
    "l1_bw": 25e12, "l1_bytes_per_sm": 200 * 2**10,
    "matrix": {"float32": 50e12, "tf32": 380e12, "bfloat16": 760e12, "float16": 770e12,
               "float8_e4m3": 1400e12},
    "vector": {"float32": 60e12, "bfloat16": 110e12},
    "errors": {"float32": 1e-6, "tf32": 4e-4, "bfloat16": 3e-3, "float16": 4e-4,
               "float8_e4m3": 1e-2},
    "sms": 132, "memory_bytes": 150_000_000_000,
}
CPU = {
    "host": "laptop", "device": "cpu", "device_kind": "cpu", "device_name": "Test CPU 9000",
    "dram_bw": 40e9, "l2_bw": 200e9, "l2_bytes": 32 * 2**20, "launch_s": 2e-6,
    "matrix": {"float32": 200e9}, "vector": {}, "errors": {"float32": 1e-6},
    "sms": None, "memory_bytes": 16_000_000_000,
}


def _noisy(rng, t, sigma=0.03):
    return t * float(np.exp(rng.normal(0, sigma)))


def _row(dev, experiment, op, dtype, t, flops, nbytes, **extra):
    row = {"experiment": experiment, "op": op, "host": dev["host"], "device": dev["device"],
           "device_kind": dev["device_kind"], "device_name": dev["device_name"], "dtype": dtype,
           "flops": float(flops), "bytes": float(nbytes), "time_s": t, "time_s_q10": t * 0.98,
           "time_s_q90": t * 1.02, "cv": 0.01, "noisy": False, "status": "ok",
           "check_passed": True, "rel_error": 0.0, "samples": 20, "inner_reps": 1,
           "timer": "cuda_event", "measured_at": datetime(2026, 1, 1, tzinfo=timezone.utc),
           "working_set_bytes": None if math.isnan(nbytes) else int(nbytes), "claims": []}
    row.update(extra)
    return row


def bandwidth_rows(dev, rng, dtypes=("float32", "bfloat16"), add_one_factor=1.0):
    rows = []
    l2 = dev["l2_bytes"]
    for dtype in dtypes:
        s = ITEM[dtype]
        for size in [2**k for k in range(16, 33)]:
            for op, arrays, fl in (("copy", 2, 0), ("add_one", 2, 1), ("scale", 2, 1),
                                   ("add", 3, 1), ("triad", 3, 2)):
                n = size // s
                ws = arrays * n * s
                if ws > 0.5 * dev["memory_bytes"]:
                    continue
                # between L2/2 and 2 L2 the bandwidth slides geometrically from L2 to DRAM
                frac = np.clip((math.log2(ws) - math.log2(l2 / 2)) / 2, 0, 1)
                bw = dev["l2_bw"] ** (1 - frac) * dev["dram_bw"] ** frac
                bw *= add_one_factor if op == "add_one" else 1.0
                # graph-replayed launches cost little
                t = _noisy(rng, max(ws / bw, dev["launch_s"] / 40))
                rows.append(_row(dev, "bandwidth", op, dtype, t, fl * n, ws, n=n,
                                 claims=["C8"]))
    return rows


def l1_rows(dev, rng, sizes=(16384, 32768, 65536, 131072, 524288, 2097152)):
    """Blocks rereading resident tiles: L1 speed while a SM's sets fit, L2 speed past it."""
    rows = []
    for size in sizes:
        ws = size * dev["sms"]
        bw = dev["l1_bw"] if size <= dev["l1_bytes_per_sm"] else dev["l2_bw"]
        nbytes = 4 * 2**30
        rows.append(_row(dev, "l1", "reread", "float32", _noisy(rng, nbytes / bw), nbytes / 4,
                         nbytes, n=ws // 4, working_set_bytes=ws))
    return rows


def matmul_rows(dev, rng, sizes=(256, 512, 1024, 2048, 3072, 4096, 6144, 8192, 16384)):
    rows = []
    for dtype, peak in dev["matrix"].items():
        s = ITEM[dtype]
        for n in sizes:
            flops, nbytes = 2.0 * n**3, 3 * n * n * s
            eff = min(1.0, n / 2048)  # small GEMMs do not fill the chip
            t = _noisy(rng, max(flops / (peak * eff), nbytes / dev["dram_bw"], dev["launch_s"]))
            arith = dev["errors"][dtype] * (n / 1024) ** 0.5
            inputs = INPUT_ROUNDING.get(dtype, 0.0)
            rows.append(_row(dev, "matmul", "gemm", dtype, t, flops, nbytes, n=n, m=n, k=n,
                             rel_error=arith + inputs, params=json.dumps(
                                 {"arithmetic_error": arith, "input_rounding_error": inputs})))
        rows.append(_row(dev, "matmul", "gemm", dtype, math.nan, 2.0 * 2**51, 3 * 2**34 * s,
                         n=2**17, status="oom", message="OutOfMemoryError: CUDA out of memory"))
    return rows


def intensity_rows(dev, rng):
    rows = []
    n = 2**28
    for dtype, peak in dev["vector"].items():
        s = ITEM[dtype]
        for fmas in [2**k for k in range(0, 12)]:
            nbytes, flops = 2 * n * s, 2 * fmas * n
            t = _noisy(rng, max(nbytes / dev["dram_bw"], flops / peak))
            rows.append(_row(dev, "intensity", "fma_chain", dtype, t, flops, nbytes, n=n,
                             variant="triton", params=json.dumps({"fmas": fmas})))
    return rows


def decode_rows(dev, rng, dtypes=("bfloat16", "float32"), cs=(4096, 8192)):
    rows = []
    for dtype in dtypes:
        s = ITEM[dtype]
        for c in cs:
            for b in [2**k for k in range(0, 12)]:
                nbytes, flops = s * (c * c + 2 * b * c), 2.0 * b * c * c
                t = _noisy(rng, max(nbytes / dev["dram_bw"], flops / dev["matrix"][dtype])
                           + dev["launch_s"])
                rows.append(_row(dev, "decode", "gemv_gemm", dtype, t, flops, nbytes, n=c,
                                 batch=b))
        rows += block_rows(dev, rng, dtype)
    return rows


def block_rows(dev, rng, dtype, d=4096, batches=(1, 16), contexts=(512, 4096), timer=None):
    """One transformer block in prefill (b x L tokens) and decode (b tokens over an L cache)."""
    rows, s = [], ITEM[dtype]
    for b in batches:
        for L in contexts:
            for op, tokens in (("block_prefill", b * L), ("block_decode", b)):
                kv, weights = 2.0 * b * L * d * s, 12.0 * d * d * s
                flops = 24.0 * tokens * d * d + 4.0 * b * d * (L * (L + 1) / 2 if "prefill" in op
                                                               else L)
                nbytes = weights + kv + 2.0 * tokens * d * s
                t = _noisy(rng, max(nbytes / dev["dram_bw"], flops / dev["matrix"][dtype]))
                rows.append(_row(dev, "decode", op, dtype, t, flops, nbytes, n=d, m=tokens, k=L,
                                 batch=b, timer=timer or ("cuda_event_graph" if
                                                          dev["device_kind"] == "cuda" else
                                                          "perf_counter"),
                                 params=json.dumps({"kv_bytes": kv, "weight_bytes": weights,
                                                    "phase": op.split("_")[1]})))
    return rows


# the timer each timing method writes (experiments/timing.py): host_nosync times the launch only
TIMERS = {"cuda_event": "cuda_event", "host_sync": "perf_counter_sync",
          "host_nosync": "perf_counter_nosync"}


def timing_rows(dev, rng):
    rows = []
    for n in (128, 512, 2048, 8192):
        true = 2.0 * n**3 / dev["matrix"]["float32"] + dev["launch_s"]
        for variant, t, cv in (("cuda_event", true, 0.01), ("host_sync", true + 15e-6, 0.08),
                               ("host_nosync", min(true, 8e-6), 0.2)):
            rows.append(_row(dev, "timing", "kernel", "float32", _noisy(rng, t), 2.0 * n**3,
                             12 * n * n, n=n, variant=variant, cv=cv, timer=TIMERS[variant]))
    for variant, t in (("eager", 7e-6), ("graph", 2.5e-6)):
        rows.append(_row(dev, "timing", "launch_overhead", "float32", t, 0, 0, n=1,
                         variant=variant))
    rows.append(_row(dev, "timing", "stream_order", "float32", math.nan, 0, 0, n=4096))
    # torch.profiler's view of one matmul on CUDA tensors: the device kernel it launched (C1)
    rows.append(_row(dev, "timing", "dispatch", "float32", math.nan, 0, 0, n=1024,
                     variant="torch_profiler", params=json.dumps(
                         {"aten_op": "aten::mm", "kernel_names": ["sm90_xmma_gemm_f32f32"]})))
    return rows


def transfer_rows(dev, rng):
    rows = []
    for variant, lat, bw in (("h2d_pageable_blocking", 15e-6, 25e9),
                             ("h2d_pinned_blocking", 8e-6, 55e9),
                             ("d2h_pinned_blocking", 8e-6, 52e9)):
        for size in [2**k for k in range(12, 31, 2)]:
            t = _noisy(rng, lat + size / bw)
            rows.append(_row(dev, "transfer", "transfer", "float32", t, 0, size, n=size // 4,
                             variant=variant))
        rows.append(_row(dev, "transfer", "transfer_model", "float32", math.nan, math.nan,
                         math.nan, variant=variant,
                         params=json.dumps({"latency_s": lat, "bandwidth_Bps": bw})))
    for size in (2**20, 2**24, 2**28):
        on = size / dev["dram_bw"] * 3 + 10e-6
        host, move = size / 5e9, 15e-6 + size / 25e9
        for op, t in (("create_on_device", on), ("create_on_host", host),
                      ("move_to_device", move), ("create_then_move", host + move)):
            rows.append(_row(dev, "transfer", op, "float32", _noisy(rng, t), 0, size,
                             n=size // 4))
    for variant, case, raised in (("cpu_plus_cuda", "a CPU tensor plus a CUDA tensor", True),
                                  ("scalar_cpu_plus_cuda", "a 0-dim CPU tensor plus a CUDA "
                                   "tensor", False)):
        rows.append(_row(dev, "transfer", "cross_device", "float32", math.nan, 0, 0,
                         variant=variant, params=json.dumps(
                             {"case": case, "raised": raised, "expected_raise": raised,
                              "error_type": "RuntimeError" if raised else None})))
    return rows


def launch_rows(dev, rng):
    """As experiments/launch.py: a wave sweep at 4 warps, a warp sweep at 1, 2, 4 waves."""
    rows = []
    sms = dev["sms"]
    points = [("wave_sweep", k / 8, 4) for k in range(4, 33)]
    points += [("warp_sweep", w, nw) for nw in (1, 2, 4, 8, 16) for w in (1.0, 2.0, 4.0)]
    for op, waves, warps in points:
        blocks = max(1, round(waves * sms))
        waves = blocks / sms
        per_wave = 12e-6 * max(1.0, 4 / warps)  # under 4 warps an SM's pipes sit idle
        t = _noisy(rng, math.ceil(waves - 1e-9) * per_wave + 3e-6, 0.01)
        rows.append(_row(dev, "launch", op, "float32", t, 2.0 * 8192 * 1024 * blocks,
                         8 * 1024 * blocks, n=1024 * blocks, variant="triton",
                         params=json.dumps({"waves": waves, "sms": sms, "num_warps": warps,
                                            "grid": blocks})))
    return rows


def peer_copy_rows(dev, rng, link_Bps=380e9, latency_s=9e-6):
    """As experiments/peer_copy.py on two GPUs: uni per ordered pair, bi once, both methods."""
    rows = []
    for op in ("copy_engine", "copy_kernel"):
        for variant, pairs in (("uni", [(0, 1), (1, 0)]), ("bi", [(0, 1)])):
            ways = 2 if variant == "bi" else 1
            for src, dst in pairs:
                for size in (4096 * 4**k for k in range(10)):
                    t = _noisy(rng, latency_s + size / link_Bps, 0.01)
                    rows.append(_row(dev, "peer_copy", op, "float32", t, math.nan, ways * size,
                                     n=size // 4, variant=variant, params=json.dumps(
                                         {"src": src, "dst": dst, "link": "nvlink",
                                          "peer_access": True, "gpus": 2})))
    return rows


def collectives_rows(dev, rng, bus_Bps=360e9):
    """As experiments/collectives.py on two GPUs: busbw from nccl-tests' factors."""
    rows = []
    for op, factor in (("all_reduce", 1.0), ("all_gather", 0.5), ("reduce_scatter", 0.5)):
        for size in (1024 * 4**k for k in range(11)):
            t = _noisy(rng, 15e-6 + size * factor / bus_Bps, 0.01)
            rows.append(_row(dev, "collectives", op, "float32", t, math.nan, size, n=size // 4,
                             variant="nccl", params=json.dumps(
                                 {"algbw_Bps": size / t, "busbw_Bps": size / t * factor,
                                  "world_size": 2})))
    return rows


def gpu_rows(seed=0, **overrides):
    rng = np.random.default_rng(seed)
    dev = GPU | overrides
    return {"bandwidth": bandwidth_rows(dev, rng), "matmul": matmul_rows(dev, rng),
            "intensity": intensity_rows(dev, rng), "decode": decode_rows(dev, rng),
            "timing": timing_rows(dev, rng), "transfer": transfer_rows(dev, rng),
            "launch": launch_rows(dev, rng), "l1": l1_rows(dev, rng),
            "peer_copy": peer_copy_rows(dev, rng),
            "collectives": collectives_rows(dev, rng)}


def cpu_rows(seed=1):
    rng = np.random.default_rng(seed)
    dev = CPU
    na = {"status": "not_applicable", "message": "a CPU has no streams"}
    timing = [_row(dev, "timing", "stream_order", "float32", math.nan, 0, 0) | na]
    return {"bandwidth": bandwidth_rows(dev, rng, ("float32",)),
            "matmul": matmul_rows(dev, rng, (256, 512, 1024, 2048, 3072)), "timing": timing}


def metadata(dev, experiment):
    gpu = dev["device_kind"] == "cuda"
    return {
        "run_id": f"{experiment}-synthetic", "host": dev["host"], "experiment": experiment,
        "device": dev["device"],
        "device_facts": {"device": dev["device"], "kind": dev["device_kind"],
                         "name": dev["device_name"], "host": dev["host"],
                         "compute_units": dev["sms"] or 8, "memory_bytes": dev["memory_bytes"],
                         "llc_bytes": dev["l2_bytes"], "cache_bytes": {"L2": dev["l2_bytes"]},
                         "max_clock_mhz": 1980 if gpu else None, "driver": "570.00" if gpu else "",
                         "pcie_generation": 5 if gpu else None, "pcie_width": 16 if gpu else None},
        "git": {"commit": "0123456789abcdef0123456789abcdef01234567", "dirty": False},
        "packages": {"python": "3.12.3", "torch": "2.11.0", "pandas": "3.0.0"},
        "config": {"job": {"experiment": {"name": experiment}}}, "config_hash": "abc123def4567890",
        "device_state_start": {"sm_clock_mhz": 1980, "temperature_c": 35} if gpu else {},
        "device_state_end": {"sm_clock_mhz": 1755, "temperature_c": 71} if gpu else {},
        "started": "2026-01-01T00:00:00+00:00", "wall_s": 90.0,  # each job 1.5 min, all at once
    }


def write_files(directory, rows_by_experiment, dev) -> list[Path]:
    paths = []
    for experiment, rows in rows_by_experiment.items():
        path = Path(directory) / dev["host"] / f"{experiment}.parquet"
        write_atomic(to_table(rows, metadata(dev, experiment)), path)
        paths.append(path)
    return paths
