#!/usr/bin/env bash
# rooflab's CPU roofline beside STREAM, mixbench-cpu and torch.mm on the H200 node, in ONE command
# (no network there): from the repository root, with .whl and .peers carried (both git-ignored):
#   bash bench/node_cpu.sh
# .peers holds the peers' sources as fetched (STREAM/, mixbench/). numba (rooflab's CPU kernels)
# must be importable: where the image lacks it, a first call carrying .peers-whl (numba and
# llvmlite cp312 wheels: 61 MB, too much to travel beside .whl) installs it:
#   python3 -m pip install -q --no-index --find-links .peers-whl numba
# Runs rooflab's sweep first (snakemake, report included: cold, as from a fresh clone, so its time
# is the user's), then builds the peers (gcc -O3 -march=native -fopenmp) and runs them while
# nothing else runs (load before and after in peers.json), in rounds with rooflab's own DRAM and
# GEMM points (bench/cpu_peers.py _rounds: 3, env ROUNDS), then prints the table.
# Files under $OUT: peers.json, gaps.json (bench/cpu_gaps.py; GAPS=0 skips it), ceilings.parquet,
# claims.parquet, measurements.parquet, cpu_peers.csv, times.txt, logs.tgz (build, load, gaps,
# shadow (bench/cpu_shadow.py; SHADOW=0 skips it), pairs (bench/cpu_triad_pairs.py, its summary
# also printed; PAIRS=0 skips it), sweep and job logs).
python3 -m pip install -q --no-index --find-links .whl snakemake hydra-core || exit 1
python3 -c "import numba" || { echo "numba is missing: install it from .peers-whl first"; exit 1; }
set -euo pipefail
OUT=${OUT:-/tmp/rooflab-node-cpu}
RESULTS=$(mktemp -d)/results
mkdir -p "$OUT"
uptime | tee "$OUT/load.txt"
t0=$(date +%s)
# DEVICES=auto: the default sweep (the CPU and every GPU), as `snakemake --cores all` runs it
DEVICES=${DEVICES:-'["cpu"]'}
python3 -m snakemake --cores all --config "devices=$DEVICES" "host=${HOST:-h200}" \
  "results=$RESULTS" > "$OUT/sweep.log" 2>&1 || { tail -30 "$OUT/sweep.log"; exit 1; }
echo "sweep of devices=$DEVICES (cold, report included): $(( $(date +%s) - t0 )) s" | tee "$OUT/times.txt"
uptime | tee -a "$OUT/load.txt"
if [ "${RUN_PEERS:-1}" = 1 ]; then  # RUN_PEERS=0: the sweep alone (its time, its files)
  python3 bench/cpu_peers.py build "${PEERS:-.peers}" "$OUT/peers-build" > "$OUT/build.log" 2>&1
  python3 bench/cpu_peers.py peers "$OUT/peers-build" "$OUT" 2>&1 | tail -2
else echo "peers skipped" > "$OUT/build.log"; fi
if [ "${SHADOW:-1}" = 1 ]; then  # an LLC shadow past 4x the LLC? (bench/cpu_shadow.py)
  python3 bench/cpu_shadow.py "$OUT" > "$OUT/shadow.log" 2>&1 || true; cat "$OUT/shadow.log"
else echo "shadow skipped" > "$OUT/shadow.log"; fi
if [ "${GAPS:-1}" = 1 ]; then
  python3 bench/cpu_gaps.py "$OUT" > "$OUT/gaps.log" 2>&1 || tail -5 "$OUT/gaps.log"
else echo "gaps skipped" > "$OUT/gaps.log"; fi
if [ "${PAIRS:-1}" = 1 ]; then  # rooflab's triad beside STREAM's loop, call by call
  stream=(); [ -x "$OUT/peers-build/stream" ] && stream=(--stream "$OUT/peers-build/stream")
  python3 bench/cpu_triad_pairs.py "$OUT" "${stream[@]}" > "$OUT/pairs.log" 2>&1 || true
  tail -30 "$OUT/pairs.log"
else echo "pairs skipped" > "$OUT/pairs.log"; fi
rm -rf "$OUT/peers-build"
cp "$RESULTS/roofline/ceilings.parquet" "$RESULTS/claims.parquet" "$OUT/"
cp "$RESULTS/measurements.parquet" "$OUT/"; cp "$RESULTS/report.html" "$OUT/" 2>/dev/null || touch "$OUT/report.html"
[ -f "$OUT/peers.json" ] && python3 bench/cpu_peers.py table "$OUT" "$OUT/ceilings.parquet"
# at most 8 files come back from a device call: the logs travel as one
cp -r "$RESULTS/logs" "$OUT/joblogs"  # each job's own log (its points' timings)
cp -r "$RESULTS/measurements" "$OUT/jobfiles"  # per-job files: their metadata says each start
touch "$OUT/shadow.json" "$OUT/triad_pairs.csv" "$OUT/triad_pairs.json"
(cd "$OUT" && tar czf logs.tgz build.log load.txt gaps.log shadow.log shadow.json sweep.log \
  pairs.log triad_pairs.csv triad_pairs.json report.html joblogs jobfiles &&
  rm -r build.log load.txt gaps.log shadow.log shadow.json sweep.log pairs.log triad_pairs.csv \
  triad_pairs.json report.html joblogs jobfiles)
