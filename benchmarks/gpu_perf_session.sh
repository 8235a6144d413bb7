#!/usr/bin/env bash
# Issue 9 precision/compile device call: optional GPU tests, then lobsurf bench per
# "B:layers" argument (fp32 and bf16, eager / graphed / graphed + compiled), each under its
# own time limit; every row's JSON line is kept even if a later one times out.
# Usage (device machine, repo root, .whl and .gpu_src carried):
#   TESTS=1 bash .gpu_src/benchmarks/gpu_perf_session.sh 1024:2 16:2
set -u
source "$(dirname "$0")/gpu_env.sh"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
if [ "${TESTS:-0}" = 1 ]; then
  timeout 120 python3 -m pytest -q -p no:cacheprovider -m gpu tests/train/test_cuda_graph_gpu.py \
    > "$OUT/gpu_tests.log" 2>&1; echo "gpu tests rc=$?"; tail -3 "$OUT/gpu_tests.log"
fi
for cfg in "$@"; do
  b=${cfg%%:*}; l=${cfg##*:}
  timeout "${LIMIT:-150}" python3 -m lobsurf bench --batch "$b" --layers "$l" \
    --precision fp32,bf16 --compile --steps 20 --repeats 2 --snapshots 50000 \
    --json "$OUT/bench_${b}_${l}.json" > "$OUT/bench_${b}_${l}.log" 2> "$OUT/bench_${b}_${l}.err"
  echo "bench B=$b L=$l rc=$?"
  grep -v '^{' "$OUT/bench_${b}_${l}.err" | tail -3 | cut -c1-300
  tail -4 "$OUT/bench_${b}_${l}.log" | cut -c1-200
done
cd "$OUT" && tar czf all.tgz *.log *.err *.json *.txt 2>/dev/null; ls -la "$OUT" | head
