"""The terminal's summary: each column headed by device kind and model, each claims line once
per system, and one line saying what the intervals are."""

import pandas as pd

from experiments.analysis.claims import HOLDS, MEASURED
from experiments.report import summary

GPU_NAME, CPU_NAME = "NVIDIA H100 80GB HBM3", "Intel(R) Xeon(R) Gold 6430 CPU @ 2.10GHz"


def _ceiling(system, kind, name, device, ceiling, value, unit, method, dtype=None):
    return {"source": "run", "system": system, "host": "h100", "device": device,
            "device_kind": kind, "device_name": name, "ceiling": ceiling, "dtype": dtype,
            "value": value, "unit": unit, "ci_low": value * 0.97, "ci_high": value * 1.03,
            "method": method}


def _tables(gpus=1):
    rows, claims = [], []
    for i in range(gpus):
        g = f"{GPU_NAME} @ h100" + (f" cuda:{i}" if i else "")
        rows += [_ceiling(g, "cuda", GPU_NAME, f"cuda:{i}", "dram_bw", 3.0e12 + i * 1e11, "B/s",
                          "median of the top plateau of triad"),
                 _ceiling(g, "cuda", GPU_NAME, f"cuda:{i}", "matrix_flops", 700e12, "FLOP/s",
                          "median of the top plateau of GEMM FLOP/s", "bfloat16")]
        claims.append({"kind": MEASURED, "system": g, "claim": "C1", "verdict": HOLDS,
                       "measurement": "", "reason": ""})
    c = f"{CPU_NAME} @ h100"
    rows.append(_ceiling(c, "cpu", CPU_NAME, "cpu", "dram_bw", 120e9, "B/s",
                         "best point of the top plateau of triad (host-clocked; interval: the "
                         "plateau's range)"))
    claims.append({"kind": MEASURED, "system": c, "claim": "C1", "verdict": HOLDS,
                   "measurement": "", "reason": ""})
    return pd.DataFrame(rows), pd.DataFrame(claims)


def test_columns_name_the_device_kind_and_model_not_the_host_twice():
    out = summary.text(*_tables(), None).splitlines()
    head = next(line for line in out if "GPU NVIDIA H100 80GB HBM3" in line)
    assert "CPU Intel Xeon Gold 6430" in head and " h100 " not in f" {head} "
    assert "HBM3  CPU" in head  # two spaces between columns
    assert out.count("claims on GPU NVIDIA H100 80GB HBM3: holds 1") == 1
    assert out.count("claims on CPU Intel Xeon Gold 6430: holds 1") == 1
    assert max(map(len, out)) <= 100, max(out, key=len)


def test_one_line_says_what_each_columns_interval_is():
    text = summary.text(*_tables(), None)
    said = text[text.index("intervals: "):].split("\nclaims on")[0].replace("\n  ", " ")
    assert said.startswith("intervals: GPU: median [95 % interval]; "
                           "CPU: best point [the plateau's range];")
    assert "run-to-run" in said


def test_two_gpus_of_one_model_are_told_apart_by_device():
    out = summary.text(*_tables(gpus=2), None).splitlines()
    assert any("claims on GPU NVIDIA H100 80GB HBM3 (cuda:1)" in line for line in out)
    assert sum(line.startswith("claims on GPU NVIDIA H100 80GB HBM3 (cuda:0)") for line in out) == 1


def test_model_drops_trademarks_and_the_clock():
    assert summary.model(CPU_NAME) == "Intel Xeon Gold 6430"
    assert summary.model("AMD EPYC 7V13 64-Core Processor") == "AMD EPYC 7V13 64-Core Processor"
