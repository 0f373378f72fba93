#!/usr/bin/env bash
# Issue 20 on one H200: the shipped workloads and torch's standard modules
# (config/presets/modules.yaml: two batch sizes each, every batch per aten op, the fused ones and
# the shipped ones under Nsight Compute), placed on the published H200 roofline and predicted
# (results/placements.parquet). Prints every call's error, then the median and p90 |error| last.
#   OUT=/tmp/out bash bench/h200_place.sh       (about 6-8 minutes)
# (DEVICE=cpu ONLY="linear lstm" runs a part of it anywhere, to check the steps)
python3 -m pip install -q --no-index --find-links .whl snakemake hydra-core || exit 1
set -euo pipefail
cd "$(dirname "$0")/.."
export OUT=${OUT:-$PWD/out} PYTHONPATH=$PWD
R=$OUT/results
HOST=h200place
DEVICE=${DEVICE:-cuda:0}
SLUG=$(python3 -c "from experiments.core.devicenames import slug; print(slug('$DEVICE'))")
mkdir -p "$R"
# the workload jobs alone (the roofline is the published H200 set's: same device model)
TARGETS=$(python3 - <<PY
import yaml
base = yaml.safe_load(open("config/config.yaml"))["workloads"]
mods = yaml.safe_load(open("config/presets/modules.yaml"))["workloads"]
only = "${ONLY:-}".split()
for name, spec in {**base, **mods}.items():
    if only and name not in only:
        continue
    for dtype in (spec.get("dtypes") or base[name]["dtypes"]):
        print(f"$R/measurements/$HOST/$SLUG/workload/{name}-{dtype}.parquet")
PY
)
which ncu || echo "ncu not on PATH: bytes are counted, not measured"
time snakemake --cores all --configfile config/presets/modules.yaml \
    --config "devices=[\"$DEVICE\"]" host=$HOST "results=$R" 'published=[]' \
    --rerun-incomplete -- $TARGETS > "$OUT/snakemake.log" 2>&1 \
    || { tail -40 "$OUT/snakemake.log"; exit 1; }
# modules.parquet: this run's workload rows, the file to publish; then placed on the published set
python3 -m experiments.analysis collect "$OUT/modules.parquet" $TARGETS
python3 -m experiments.analysis collect "$R/measurements.parquet" "$OUT/modules.parquet" \
    --published results/published/h200/measurements.parquet
python3 -m experiments.analysis roofline "$R/measurements.parquet" --out "$R/ceilings.parquet"
python3 -m experiments.analysis placements "$R/measurements.parquet" --ceilings "$R/ceilings.parquet" \
    --out "$OUT/placements.parquet"
python3 - "$OUT/placements.parquet" <<'PY'
import sys
import pandas as pd
from experiments.analysis.placements import error_stats
t = pd.read_parquet(sys.argv[1])
t = t[t.system.str.contains("h200place")]
pd.set_option("display.width", 220, "display.max_rows", 500, "display.max_colwidth", 60)
c = t[t.kind == "call"]
print(c[["workload", "dtype", "batch", "measured_time_s", "predicted_time_s", "model_error",
         "bound", "level", "predicted_from", "failed_term"]].to_string(index=False))
o = t[t.kind == "op"]
print("\nops missed by > 50 %:")
print(o[o.model_error.abs() > 0.5][["workload", "batch", "aten_op", "time_s", "predicted_time_s",
                                    "model_error", "bound", "level", "bytes_source"]]
      .to_string(index=False))
print()
for k, v in error_stats(t).items():
    print(f"{k:>5}: n={v['n']:3d}  median |error| {v['median']:.1%}  p90 {v['p90']:.1%}")
PY
