"""The report's "Your workloads" rows: the out-of-sample band beside a predicted time, a time
read outside calibration marked as such, a bandwidth above DRAM named or flagged."""

import pandas as pd

from experiments.analysis import bounds, placements, prediction
from experiments.analysis.compute import Placed
from experiments.report import workloads

SYS = "G @ lab"


def _placed(heldout):
    base = {"system": SYS, "roofline_of": SYS, "dtype": "bfloat16", "flops": 1e9, "bytes": 1e6,
            "intensity": 1e3, "measured_time_s": 1e-3, "attained_flop_per_s": 1e12,
            "fraction_of_roof": 0.5, "bound": "compute", "predicted_time_s": 2e-3,
            "model_error": -0.5, "timer": "cuda_event_graph"}
    calls = pd.DataFrame([
        base | {"workload": "a", "batch": 1, "attained_byte_per_s": 1e9,
                "predicted_from": "sum over 1 ops (1 distinct)"},
        base | {"workload": "b", "batch": 2, "attained_byte_per_s": 5e12, "bandwidth_level": "L2",
                "predicted_from": prediction.with_curves("sum over 1 ops", [], "conv far")},
        base | {"workload": "c", "batch": 4, "attained_byte_per_s": 9e12,
                "bandwidth_level": bounds.ABOVE}]).reindex(columns=placements.PLACEMENT_COLUMNS)
    empty = lambda cols: pd.DataFrame(columns=cols)  # noqa: E731
    return Placed(calls, empty(placements.OP_COLUMNS), empty(placements.KNEE_COLUMNS),
                  empty(["device", "workload", "dtype", "batch", "time_s"]), heldout)


def test_rows_show_the_band_the_calibration_and_the_bandwidth_bound():
    held = pd.DataFrame([{"system": SYS, "dtype": "bfloat16", "kind": "call", "class": "all",
                          "n": 26, "median_abs_error": 0.18, "p90_abs_error": 0.55,
                          "seed": 9}])
    rows = {r["workload"]: r for r in workloads.section(_placed(held))["rows"]}
    assert rows["a"]["predicted"] == "2 ms (held out: median 18 %, p90 55 % (26 calls))"
    assert rows["b"]["predicted"].startswith("~2 ms (outside calibration: conv far)")
    assert rows["a"]["bytes"] == "1 GB/s"
    assert rows["b"]["bytes"].endswith("(above DRAM: L2)")
    assert rows["c"]["bytes"].endswith(f"(flagged: {bounds.ABOVE})")


def test_without_a_validation_no_band_is_shown():
    rows = {r["workload"]: r for r in workloads.section(_placed(None))["rows"]}
    assert rows["a"]["predicted"] == "2 ms"
