#!/usr/bin/env bash
# Issue 55: the op model judged out of sample on this machine. From a fresh copy of the tree (no
# .snakemake, no results): the default sweep (the machine's ceilings, GEMM, bandwidth and op-rate
# curves), then `rooflab validate`: standard torch modules drawn from the config's seed
# (experiments/models/heldout.py), never calibration points, measured on every GPU's first card
# in bfloat16 and on the host CPU in float32, placed and judged; then the report with the band.
#   OUT=/tmp/out bash bench/validate.sh            (about 5 minutes on one H100 or H200)
#   SEED=1234 COUNT=39 OUT=/tmp/out bash bench/validate.sh   (another draw, more of it)
#   DEVICE=cuda:0 OUT=/tmp/out bash bench/validate.sh        (the GPU's draws alone)
#   HOST=vm ...  the rows' host label (default node, as bench/repeats.sh's)
#   DEV_SEED=1207 DEV_COUNT=78 ...  then a development draw on the GPU, on the same sweep, into
#                                    $OUT/dev (a seed to study misses with, never to report)
# Files under $OUT: validation/ (summary.txt, summary.parquet, judged.parquet, the job files),
# measurements.parquet, ceilings.parquet, placements.parquet, summary.txt, report.html,
# sweep.log, validate.log, times.txt (each stage's seconds), tree.sha (the files that ran;
# tree.files: each one's hash).
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
OUT=${OUT:-$PWD/out}
. bench/device_setup.sh
WORK=$(mktemp -d); TREE=$WORK/tree; RES=$WORK/results; mkdir -p "$TREE"
tar --exclude=./.whl --exclude=./.snakemake --exclude=./results/run --exclude=./out \
  --exclude=./.git -cf - . | tar -xf - -C "$TREE"
cd "$TREE" && export PYTHONPATH=$TREE
stage() {  # stage NAME COMMAND...: its output to $OUT/NAME.log, its seconds to times.txt
  local name=$1; shift; local t0; t0=$(date +%s)
  "$@" > "$OUT/$name.log" 2>&1; local rc=$?
  echo "$name rc=$rc $(( $(date +%s) - t0 )) s" | tee -a "$OUT/times.txt"
  return $rc
}
stage sweep python3 -m experiments.cli.rooflab run --results "$RES" --config "host=${HOST:-node}" \
  || tail -30 "$OUT/sweep.log"
stage validate python3 -m experiments.cli.rooflab validate --results "$RES" \
  ${SEED:+--seed "$SEED"} ${COUNT:+--count "$COUNT"} ${DEVICE:+--device "$DEVICE"} \
  || tail -30 "$OUT/validate.log"
stage report python3 -m experiments.cli.rooflab report --results "$RES" || tail -30 "$OUT/report.log"
cp -r "$RES/validation" "$OUT/" 2>/dev/null
cp "$RES/measurements.parquet" "$RES/roofline/ceilings.parquet" "$RES/placements.parquet" \
  "$RES/summary.txt" "$RES/report.html" "$OUT/" 2>/dev/null
if [ -n "${DEV_SEED:-}" ]; then
  stage dev python3 -m experiments.cli.rooflab validate --results "$RES" --seed "$DEV_SEED" \
    --count "${DEV_COUNT:-78}" --device "${DEVICE:-cuda:0}" || tail -30 "$OUT/dev.log"
  mkdir -p "$OUT/dev" && cp "$RES"/validation/* "$OUT/dev/" 2>/dev/null
fi
cat "$OUT/times.txt"; cat "$OUT/validation/summary.txt" 2>/dev/null
