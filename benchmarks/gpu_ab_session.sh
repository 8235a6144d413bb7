#!/usr/bin/env bash
# Issue 9 device call: lobsurf bench (bf16, compiled) of several code trees and flag sets
# side by side on one machine, each under its own limit, then optionally the GPU tests.
# Each argument is "NAME|SRC|B:layers|extra bench flags": SRC is the folder holding the
# lobsurf package (src, or an ignored copy of an earlier commit's src carried along).
# Usage (device machine, repo root, .whl carried):
#   bash benchmarks/gpu_ab_session.sh "base|.gpu_base/src|1024:2|" "new|src|1024:2|"
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
OUT=${OUT:-$(pwd)/bench_out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
for spec in "$@"; do
  IFS='|' read -r name src point flags <<< "$spec"
  IFS=: read -r b l <<< "$point"
  PYTHONPATH=/tmp/site:$(pwd)/$src:$(pwd) timeout "${LIMIT:-200}" python3 -m lobsurf bench \
    --batch "$b" --layers "$l" --precision bf16 --compile --steps "${STEPS:-30}" --repeats 2 \
    --snapshots 50000 $flags --json "$OUT/bench_$name.json" > "$OUT/bench_$name.log" \
    2> "$OUT/bench_$name.err"
  rc=$?; echo "== $name ($src, B=$b L=$l $flags) rc=$rc at ${SECONDS}s"
  grep -E "steps/s \(" "$OUT/bench_$name.log" | cut -c1-220
done
if [ "${TESTS:-0}" = 1 ]; then
  PYTHONPATH=/tmp/site:$(pwd)/src:$(pwd) timeout "${TEST_LIMIT:-240}" python3 -m pytest -x -q \
    --tb=short -p no:cacheprovider -m gpu \
    ${TEST_ARGS:-tests/train/test_cuda_graph_gpu.py tests/test_streams.py} > "$OUT/gpu_tests.log" 2>&1
  echo "gpu tests rc=$?"; tail -3 "$OUT/gpu_tests.log" | cut -c1-240
fi
cd "$OUT" && tar czf logs.tgz ./*.log ./*.err ./*.json ./*.txt 2>/dev/null; ls "$OUT"
