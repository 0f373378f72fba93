#!/usr/bin/env bash
# Issue 21 on an H200: re-measure the default sweep (as results/published/h200 was) and show that
# no GPU row reads power above the enforced limit by more than 5 %, how many rows have no power
# (window too short for NVML's energy counter), the GEMM plateau's power beside its clock, and the
# claims' verdicts. One command, from the repository root on the GPU host:
#   python3 -m pip install -q --no-index --find-links .whl snakemake hydra-core || exit 1; bash bench/h200_power.sh
# Writes $OUT/h200 (measurements.parquet, ceilings, knees, claims, report.html); prints a table last.
set -euo pipefail
OUT=${OUT:-/tmp/h200_power}
RES="$OUT/h200"
mkdir -p "$RES"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
python3 -c "import sys; from experiments.cli.rooflab import main; sys.exit(main())" run \
    --results "$RES" --config 'devices=["cuda:0"]' host=h200 'published=[]' > "$OUT/run.log" 2>&1 \
    || { tail -40 "$OUT/run.log"; exit 1; }
python3 - "$RES" <<'PY'
import sys
from pathlib import Path

import pandas as pd

from experiments.analysis import dataset, health
from experiments.core.store import read_metadata

res = Path(sys.argv[1])
raw = pd.read_parquet(res / "measurements.parquet")
gpu = raw[(raw.device_kind == "cuda") & (raw.status == "ok")]
meta = read_metadata(res / "measurements.parquet").get("sources", {})
limits = {(m.get("conditions") or {}).get("power_limit_w") for m in meta.values()} - {None}
limit = max(limits) if limits else 700.0
timed = gpu[gpu.time_s.notna() & (gpu.variant.fillna("") != "aten_op")]
print(f"enforced power limit recorded: {sorted(limits) or 'none (700 W assumed)'}")
print(f"GPU ok rows {len(gpu)}; timed {len(timed)}; with power {timed.power_w.notna().sum()}; "
      f"without {timed.power_w.isna().sum()} (window too short for the counter, or above the limit)")
over = timed[timed.power_w > 1.05 * limit]
print(f"rows above {1.05 * limit:.0f} W (limit + 5 %): {len(over)}  (published set: 89 of 624)")
print(f"power max {timed.power_w.max():.0f} W; 99th pct {timed.power_w.quantile(0.99):.0f} W")
print(timed.groupby("experiment").power_w.agg(["count", "size", "median", "max"]).round(0)
      .to_string())
ds = dataset.load(res / "measurements.parquet")
e = health.energy_table(ds.rows)
print(e[["dtype", "experiment", "value", "unit", "sm_clock_mhz", "power"]].to_string(index=False))
c = pd.read_parquet(res / "claims.parquet")
m = c[c.kind == "measured"]
print(m[["claim", "verdict", "points_contended"]].to_string(index=False))
print(m.verdict.value_counts().to_string())
PY
