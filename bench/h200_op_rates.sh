#!/usr/bin/env bash
# Issue 20 on one H200: the op_rates experiment alone (experiments/op_rates.py: the FLOP/s or B/s
# torch's convolutions, attention, norms, softmax, GELU, pooling and embedding_bag attain, at
# batches none of the placed calls use), bfloat16 and float32, with the sweep's GPU settings
# (config/config.yaml: job.cuda and experiments.op_rates.cuda). Writes
#   $OUT/op_rates-bfloat16.parquet, $OUT/op_rates-float32.parquet  (the jobs' files)
#   $OUT/op_rates.parquet       (both collected: the file to publish as
#                                results/published/h200/op_rates.parquet)
#   $OUT/placements.parquet     (the published H200 set placed again with these rates)
# and prints the rows, then the h200place calls' error before and after.
#   OUT=/tmp/out bash bench/h200_op_rates.sh       (about 2 minutes)
python3 -m pip install -q --no-index --find-links .whl snakemake hydra-core || exit 1
set -euo pipefail
cd "$(dirname "$0")/.."
export OUT=${OUT:-$PWD/out} PYTHONPATH=$PWD
DEVICE=${DEVICE:-cuda:0}
HOST=h200op
PUB=results/published/h200
mkdir -p "$OUT"
# the sweep's overrides for this device kind, as the workflow's job_args passes them
mapfile -t ARGS < <(python3 - "$DEVICE" <<'PY'
import json, sys
import yaml
cfg = yaml.safe_load(open("config/config.yaml"))
kind = "cpu" if sys.argv[1] == "cpu" else "cuda"
for key, value in cfg["job"].get(kind, {}).items():
    print(f"{key}={json.dumps(value)}")
for key, value in (cfg["experiments"]["op_rates"].get(kind) or {}).items():
    print(f"experiment.{key}={json.dumps(value)}")
PY
)
FILES=()
for DTYPE in bfloat16 float32; do
    F=$OUT/op_rates-$DTYPE.parquet
    time python3 -m experiments experiment=op_rates "device=$DEVICE" "dtype=$DTYPE" "out=$F" \
        "host=$HOST" "${ARGS[@]}" > "$OUT/op_rates-$DTYPE.log" 2>&1 \
        || { tail -30 "$OUT/op_rates-$DTYPE.log"; exit 1; }
    FILES+=("$F")
done
python3 -m experiments.analysis collect "$OUT/op_rates.parquet" "${FILES[@]}"
# the published set with these rates, placed as `python -m experiments.report.published` does
R=$OUT/preview
mkdir -p "$R"
python3 -m experiments.analysis collect "$R/measurements.parquet" "$PUB/measurements.parquet" \
    "$PUB/workloads.parquet" "$PUB/modules.parquet" "$OUT/op_rates.parquet"
python3 -m experiments.analysis roofline "$R/measurements.parquet" --out "$R/ceilings.parquet"
python3 -m experiments.analysis placements "$R/measurements.parquet" \
    --ceilings "$R/ceilings.parquet" --out "$OUT/placements.parquet"
python3 - "$OUT" "$PUB/placements.parquet" <<'PY'
import json
import sys
import pandas as pd
from experiments.analysis.placements import error_stats
pd.set_option("display.width", 250, "display.max_rows", 500, "display.max_colwidth", 70)
out, before = sys.argv[1], pd.read_parquet(sys.argv[2])
r = pd.read_parquet(f"{out}/op_rates.parquet")
r["module"] = [json.loads(p or "{}").get("module") for p in r.params]
print(r[["dtype", "module", "op", "variant", "batch", "status", "time_s", "flop_per_s",
         "byte_per_s", "working_set_bytes", "timer", "noisy", "message"]].to_string(index=False))
after = pd.read_parquet(f"{out}/placements.parquet")
keys = ["workload", "dtype", "batch"]
calls = lambda t: t[(t.kind == "call") & t.system.str.contains("h200place")]  # noqa: E731
both = calls(before)[keys + ["model_error"]].merge(
    calls(after)[keys + ["model_error", "predicted_from", "failed_term"]], on=keys,
    suffixes=("_before", "_after"))
print(both.to_string(index=False))
for name, t in (("before", before), ("after", after)):
    t = t[t.system.str.contains("h200place")]
    for k, v in error_stats(t).items():
        print(f"{name:>6} {k:>5}: n={v['n']:3d}  median |error| {v['median']:.1%}  p90 {v['p90']:.1%}")
PY
