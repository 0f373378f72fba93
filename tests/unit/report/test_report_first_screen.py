"""The first screen: this run's machines apart from the published sets, what went wrong apart
from what was expected (grey notes), and a ceiling that reads like another says which."""

from __future__ import annotations

from tests import analysis_fixtures as fx
import pandas as pd

from experiments.analysis.dataset import from_rows
from experiments.report import glance


def _ds():
    rows = fx.gpu_rows(seed=0)
    rows["launch"][0] |= {"status": "error", "time_s": None, "message": "RuntimeError: boom"}
    rows["matmul"][0] |= {"status": "oom", "time_s": None, "message": "OutOfMemoryError"}
    rows["matmul"][1] |= {"status": "unsupported", "time_s": None, "message": "no fp8 here"}
    return from_rows([r for rs in rows.values() for r in rs])


def test_the_fma_sweeps_bandwidth_names_the_dram_ceiling():
    ceilings = pd.DataFrame([{"system": "gpu", "ceiling": "dram_bw", "value": 4.2e12},
                             {"system": "gpu", "ceiling": "intensity_bw", "value": 3.9e12},
                             {"system": "cpu", "ceiling": "intensity_bw", "value": 1e11}])
    rows = ceilings.to_dict("records")
    assert glance.beside_dram(ceilings, rows[1]).endswith("DRAM: 4.2 TB/s")
    assert glance.beside_dram(ceilings, rows[0]) == ""
    assert glance.beside_dram(ceilings, rows[2]) == ""  # no DRAM ceiling to name
