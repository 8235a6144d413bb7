# Sourced by the issue-9 device scripts that run the carried working tree in place: the
# carried wheels into /tmp/site, the tree's src/ on PYTHONPATH, and the details folder
# $OUT=$SCRATCH (the device tool brings back at most 8 files, so the scripts archive it into
# $FINAL, the tool's $OUT).
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$(pwd)/src:$(pwd)
FINAL=${OUT:-$(pwd)/bench_out}; OUT=${SCRATCH:?set SCRATCH before sourcing}
mkdir -p "$OUT" "$FINAL"

# bench_row TAG B L [lobsurf bench flags...]: the step (bf16, compiled, graphed) at B windows
# and L layers, its log, errors and JSON under $OUT as bench_TAG.*, its steps/s line printed
bench_row() {
  local tag=$1 b=$2 l=$3; shift 3
  timeout "${LIMIT:-150}" python3 -m lobsurf bench --batch "$b" --layers "$l" \
    --precision bf16 --compile --steps 30 --repeats 2 --snapshots 50000 "$@" \
    --json "$OUT/bench_$tag.json" > "$OUT/bench_$tag.log" 2> "$OUT/bench_$tag.err"
  echo "bench B=$b L=$l $* rc=$?"
  grep -E "steps/s \(" "$OUT/bench_$tag.log" | cut -c1-220
}
