"""The op model (experiments/analysis/prediction.py) and the placements file, from synthetic
ceilings: each term, the level a working set fits, ncu's bytes, a call as the sum of its ops,
and the term named on a miss."""

import subprocess
import sys

import pandas as pd
import pytest
from tests.unit.analysis.test_prediction import _dataset, ceilings  # noqa: F401 (fixtures)

SYS = "GPU @ lab"
DRAM, L2, L1, P, V, LAT = 1e12, 4e12, 2e13, 1e14, 1e13, 2e-6
L2_WINDOW = 50e6


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
