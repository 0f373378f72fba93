"""The op model (experiments/analysis/prediction.py) and the placements file, from synthetic
ceilings: each term, the level a working set fits, ncu's bytes, a call as the sum of its ops,
and the term named on a miss."""

import subprocess
import sys

import pandas as pd
import pytest

SYS = "GPU @ lab"
DRAM, L2, L1, P, V, LAT = 1e12, 4e12, 2e13, 1e14, 1e13, 2e-6
L2_WINDOW = 50e6


def ceilings():
    rows = [("dram_bw", None, DRAM, None), ("l2_bw", None, L2, L2_WINDOW), ("l1_bw", None, L1, None),
            ("matrix_flops", "bfloat16", P, None), ("vector_flops", "bfloat16", V, None),
            ("latency_graph", None, LAT, None), ("latency_eager", None, 3 * LAT, None)]
    return pd.DataFrame([{"system": SYS, "ceiling": c, "dtype": d, "value": v, "ci_low": v,
                          "ci_high": v, "ws_max": w, "capacity_bytes": w, "device_name": "G"}
                         for c, d, v, w in rows])


def _dataset():
    ops = [["aten::addmm", "[]", 1, 2e11, 4e6, 4e6, "matrix", "FlopCounterMode"],
           ["aten::gelu", "[]", 1, 1e6, 2e6, 0.0, "vector", "formula"]]
    predicted = 2e11 / P + max(LAT, 2e6 / L2)
    base = {"experiment": "workload", "op": "mlp", "dtype": "bfloat16", "status": "ok",
            "system": SYS, "device_name": "G", "timer": "cuda_event_graph", "flops": 2e11 + 1e6,
            "bytes": 4e6}
    calls = [base | {"batch": 1, "time_s": predicted * 1.1, "params": {"ops": ops}},
             base | {"batch": 2, "time_s": predicted * 3, "params": {"ops": ops}}]
    op = base | {"variant": "aten_op", "batch": 1, "flops": 1e6, "bytes": 2e6, "time_s": 0.5e-6,
                 "timer": "torch_profiler",
                 "params": {"aten_op": "aten::gelu", "input_shapes": "[[1]]", "kind": "vector",
                            "cold_bytes": 0.0, "calls_per_step": 1}}
    return pd.DataFrame(calls + [op]), predicted


@pytest.mark.system
def test_the_placements_command_writes_the_file(tmp_path):
    ds, _ = _dataset()
    data, ceil, out = tmp_path / "m.parquet", tmp_path / "c.parquet", tmp_path / "p.parquet"
    import pyarrow.parquet as pq
    from experiments.core.schema import to_table
    rows = [{k: v for k, v in r.items() if k != "system" and v == v} | {
        "host": "lab", "device": "cuda:0", "device_kind": "cuda"} for r in ds.to_dict("records")]
    pq.write_table(to_table(rows, {}), data)
    c = ceilings()
    c.assign(system="G @ lab").to_parquet(ceil)  # the label the dataset gives these rows
    ceilings().to_parquet(ceil)
    run = subprocess.run([sys.executable, "-m", "experiments.steps", "placements", str(data),
                          "--ceilings", str(ceil), "--out", str(out)], capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "placements ->" in run.stderr and len(pd.read_parquet(out)) == 3
