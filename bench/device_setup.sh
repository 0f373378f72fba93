# Sourced by the device scripts (repeats.sh, validate.sh) in the repository root, OUT set: installs
# what the lent GPU image lacks from .whl (../shared/device/wheels.sh), then writes what ran:
# $OUT/tree.files (each file's hash) and $OUT/tree.sha (their hash).
python3 -m pip install -q --no-index --find-links .whl snakemake hydra-core || exit 1
# optional: the report's interactive plots, NVML's process list (.whl: wheels.sh bokeh nvidia-ml-py)
for extra in bokeh nvidia-ml-py; do
  python3 -m pip install -q --no-index --find-links .whl "$extra" 2>/dev/null \
    || echo "no $extra wheel in .whl: going on without it"
done
mkdir -p "$OUT"
# the device's .git can lag the tree, so hash the files themselves, in C order (a locale collates
# otherwise, and the same files would hash apart); a tree.sha unlike a checkout's is diffed by file
git ls-files -co --exclude-standard | grep -v "^\.whl/" | LC_ALL=C sort | while read -r f; do
  [ -f "$f" ] && sha256sum "$f"; done > "$OUT/tree.files"
sha256sum < "$OUT/tree.files" | cut -c1-16 > "$OUT/tree.sha"
command -v nvidia-smi > /dev/null && nvidia-smi \
  --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv,noheader \
  >> "$OUT/times.txt" 2>&1 || true
