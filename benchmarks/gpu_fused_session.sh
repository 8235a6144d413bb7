#!/usr/bin/env bash
# Issue 9 fused-kernel device call: GPU tests of the fused kernels and of eager = graphed,
# the micro-benchmark (bench_fused_block.py: --parts $PARTS, default train; grids
# $PROGRAMS, default window,head; precisions $MICRO_PREC, default fp32,bf16), then
# lobsurf bench per "B:layers:precisions" argument with --fused-inference $FUSED_INF
# (default torch), --fused-training $FUSED_TRAIN (default torch,auto),
# --fused-core-programs $FUSED_CORE (default window), --fused-core-no-grad when
# $CORE_NO_GRAD is set, and --compile, each under its own
# limit; $STEPS timed steps per block.
# Usage (device machine, repo root, .whl and .gpu_src carried):
#   TESTS=1 FUSED_CORE=head bash .gpu_src/benchmarks/gpu_fused_session.sh 1024:2:bf16
set -u
source "$(dirname "$0")/gpu_env.sh"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
if [ "${MICRO:-1}" = 1 ]; then
  timeout "${MICRO_LIMIT:-300}" python3 benchmarks/bench_fused_block.py \
    --batch "${MICRO_BATCH:-1024,2048}" --warps "${WARPS:-4,8}" --parts "${PARTS:-train}" \
    --programs "${PROGRAMS:-window,head}" --precision "${MICRO_PREC:-fp32,bf16}" \
    --out "$OUT" > "$OUT/micro.log" 2>&1
  echo "micro rc=$?"; grep -v '^{' "$OUT/micro.log" | tail -22
fi
if [ "${TESTS:-0}" = 1 ]; then
  timeout "${TEST_LIMIT:-200}" python3 -m pytest -x -q --tb=short -p no:cacheprovider -m gpu \
    ${TEST_ARGS:-tests/models/test_mamba2_fused.py tests/models/test_mamba2_fused_core.py \
    tests/train/test_cuda_graph_gpu.py} > "$OUT/gpu_tests.log" 2>&1
  echo "gpu tests rc=$?"; tail -25 "$OUT/gpu_tests.log" | cut -c1-240
fi
for cfg in "$@"; do
  IFS=: read -r b l p <<< "$cfg"
  timeout "${LIMIT:-200}" python3 -m lobsurf bench --batch "$b" --layers "$l" \
    --precision "$p" --fused-inference "${FUSED_INF:-torch}" \
    --fused-training "${FUSED_TRAIN:-torch,auto}" \
    --fused-core-programs "${FUSED_CORE:-window}" ${CORE_NO_GRAD:+--fused-core-no-grad} --compile --steps "${STEPS:-20}" --repeats 2 \
    --snapshots 50000 --json "$OUT/bench_${b}_${l}.json" > "$OUT/bench_${b}_${l}.log" \
    2> "$OUT/bench_${b}_${l}.err"
  echo "bench B=$b L=$l rc=$?"
  grep -v '^{' "$OUT/bench_${b}_${l}.err" | tail -3 | cut -c1-300
  tail -6 "$OUT/bench_${b}_${l}.log" | cut -c1-220
done
cd "$OUT" && tar czf all.tgz ./*.log ./*.err ./*.json ./*.txt 2>/dev/null; ls "$OUT"
