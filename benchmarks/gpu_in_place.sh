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

# side_by_side REPEAT ROWS...: for each "B:layers" row the step with the source tree in $OLD
# (a copy of an earlier commit, carried; skipped when OLD is unset) and with the working
# tree, one after the other on this machine, the whole list REPEAT times (tags B_L_old_N,
# B_L_new_N). Each tree has an Inductor cache of its own: a cached graph of one tree, reused
# by the other, keeps the first tree's custom-op output shapes (its size asserts then fail).
side_by_side() {
  local repeat=$1 rep row b l; shift
  for rep in $(seq "$repeat"); do
    for row in "$@"; do
      IFS=: read -r b l <<< "$row"
      if [ -n "${OLD:-}" ]; then
        PYTHONPATH=/tmp/site:$(pwd)/$OLD/src:$(pwd) TORCHINDUCTOR_CACHE_DIR=/tmp/inductor_old \
          bench_row "${b}_${l}_old_$rep" "$b" "$l"
      fi
      TORCHINDUCTOR_CACHE_DIR=/tmp/inductor_new bench_row "${b}_${l}_new_$rep" "$b" "$l"
    done
  done
}

# micro_row TAG SCRIPT [args...]: a kernel micro-benchmark (benchmarks/bench_*.py) at
# B = 1024 and 2048, its log and errors under $OUT as TAG.*, its table printed
micro_row() {
  local tag=$1 script=$2; shift 2
  timeout "${MICRO_LIMIT:-150}" python3 "$script" --batch 1024,2048 --out "$OUT" "$@" \
    > "$OUT/$tag.log" 2> "$OUT/$tag.err"
  echo "$tag rc=$?"; tail -2 "$OUT/$tag.err" | cut -c1-300
  sed -n '/^ms per call/,$p' "$OUT/$tag.log"
}

# gpu_tests TAG FILES...: the given GPU test files (log $OUT/TAG.log), then the eager =
# graphed / sync-guard tests (graph_tests.log), each summary printed
gpu_tests() {
  local tag=$1; shift
  timeout "${TEST_LIMIT:-200}" python3 -m pytest -q -s -p no:cacheprovider -m "gpu or not gpu" \
    "$@" > "$OUT/$tag.log" 2>&1
  echo "$tag rc=$?"; grep -E "passed|failed|Error|\{" "$OUT/$tag.log" | tail -4
  timeout 150 python3 -m pytest -q -p no:cacheprovider -m "gpu or not gpu" \
    tests/train/test_cuda_graph_gpu.py tests/test_streams.py > "$OUT/graph_tests.log" 2>&1
  echo "graph tests rc=$?"; grep -E "passed|failed|Error" "$OUT/graph_tests.log" | tail -3
}
