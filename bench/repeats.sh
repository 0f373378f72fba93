#!/usr/bin/env bash
# Issue 56: N cold default sweeps of this machine back to back, each from a fresh copy of the tree
# (as a new user's clone: no .snakemake, no results), then `rooflab compare` of each against the
# first. Optionally (COTENANT=1, first) a quick sweep beside another process's bfloat16 matmul loop
# on GPU 0.
#   OUT=/tmp/out N=2 bash bench/repeats.sh
# Files under $OUT: rN.tgz (per run: measurements.parquet, ceilings.parquet, claims.parquet,
# summary.txt, compare.csv against the first, sweep.log, the job logs), shared.tgz with
# COTENANT=1, times.txt, tree.sha (the files that ran; tree.files: each one's hash).
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
OUT=${OUT:-$PWD/out}; N=${N:-2}; HOST=${HOST:-node}; FIRST=${FIRST:-1}
WORK=${WORK:-$(mktemp -d)}; mkdir -p "$WORK" "$OUT/runs"  # WORK: keep r1 for a later call
. bench/device_setup.sh
sweep() {  # sweep NAME [config KEY=VALUE ...]   (PRESET=--quick for a quick one)
  local name=$1; shift
  local tree=$WORK/$name; mkdir -p "$tree"
  tar --exclude=./.whl --exclude=./.snakemake --exclude=./results/run --exclude=./out \
    --exclude=./.git -cf - . | tar -xf - -C "$tree"
  local r=$OUT/runs/$name; mkdir -p "$r"
  local t0=$(date +%s)
  (cd "$tree" && PYTHONPATH=$tree python3 -m experiments.cli.rooflab run ${PRESET:-} \
    --results "$WORK/res-$name" --config "host=$HOST" "$@" > "$r/sweep.log" 2>&1); local rc=$?
  echo "$name rc=$rc $(( $(date +%s) - t0 )) s $*" | tee -a "$OUT/times.txt"
  local res=$WORK/res-$name
  cp "$res/measurements.parquet" "$res/claims.parquet" "$res/summary.txt" "$r/" 2>/dev/null
  cp "$res/roofline/ceilings.parquet" "$r/" 2>/dev/null
  cp -r "$res/logs" "$r/joblogs" 2>/dev/null
  tail -25 "$r/sweep.log"
  local base=${BASE:-r$FIRST}  # BASE: the run the others are compared to
  if [ "$name" != "$base" ] && [ -d "$WORK/res-$base" ]; then
    (PYTHONPATH=$PWD python3 -m experiments.cli.rooflab compare "$WORK/res-$base" "$res" \
       --out "$r/compare.csv" > "$r/compare.txt" 2>&1) || true
    cat "$r/compare.txt"
  fi
  (cd "$OUT/runs" && tar czf "$OUT/$name.tgz" "$name" && rm -r "$name")  # one file a run
}
shared() {  # a quick sweep of GPU 0 beside another process's bfloat16 matmul loop
  python3 - >> "$OUT/times.txt" 2>&1 <<'PY' &
import time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16); b = torch.randn_like(a)
print("co-tenant: a bfloat16 matmul loop on GPU 0 started", flush=True)
t0 = time.time()
while time.time() - t0 < 900:
    for _ in range(20): a @ b
    torch.cuda.synchronize()
PY
  hog=$!; sleep 5
  PRESET=--quick sweep shared 'devices=["cuda:0"]'
  kill $hog 2>/dev/null; wait $hog 2>/dev/null; sleep 3
}
# COTENANT=1: the shared sweep first (before the repeats, so a short call still makes it);
# REPEAT: config values for the repeats (e.g. 'devices=["cuda:0"]'), PRESET=--quick for quick ones
[ "${COTENANT:-0}" = 1 ] && shared
for i in $(seq "$FIRST" $((FIRST + N - 1))); do sweep "r$i" ${REPEAT:-}; done
