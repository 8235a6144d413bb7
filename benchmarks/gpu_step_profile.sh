#!/usr/bin/env bash
# Issue 9 device call: GPU tests of eager = graphed at HEAD, the whole step's kernels by
# phase with Inductor's generated code kept (output_code.log.gz, to read off the GPU), one
# block's kernel table, and lobsurf bench at the given "B:layers" points (bf16, compiled).
# Usage (device machine, repo root, .whl carried):
#   TESTS=1 bash benchmarks/gpu_step_profile.sh 1024:2 256:4
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$(pwd)/src:$(pwd)
OUT=${OUT:-$(pwd)/bench_out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
if [ "${TESTS:-0}" = 1 ]; then
  timeout "${TEST_LIMIT:-240}" python3 -m pytest -x -q --tb=short -p no:cacheprovider -m gpu \
    ${TEST_ARGS:-tests/train/test_cuda_graph_gpu.py tests/test_streams.py} \
    > "$OUT/gpu_tests.log" 2>&1
  echo "gpu tests rc=$?"; tail -4 "$OUT/gpu_tests.log" | cut -c1-240
fi
if [ "${PROFILE:-1}" = 1 ]; then
  TORCH_LOGS=output_code timeout "${PROFILE_LIMIT:-200}" python3 benchmarks/count_step_kernels.py \
    --device cuda --batch "${PROFILE_BATCH:-1024}" --precision bf16 --top 60 \
    > "$OUT/step_kernels.log" 2> "$OUT/output_code.log"
  echo "step kernels rc=$?"; gzip -f "$OUT/output_code.log"
  grep -A40 "^device kernels" "$OUT/step_kernels.log" | head -40 | cut -c1-160
fi
for cfg in "$@"; do
  IFS=: read -r b l <<< "$cfg"
  timeout "${LIMIT:-200}" python3 -m lobsurf bench --batch "$b" --layers "$l" \
    --precision bf16 --compile --steps "${STEPS:-30}" --repeats 2 --snapshots 50000 \
    ${BENCH_FLAGS:-} --json "$OUT/bench_${b}_${l}.json" > "$OUT/bench_${b}_${l}.log" \
    2> "$OUT/bench_${b}_${l}.err"
  echo "bench B=$b L=$l rc=$?"; grep -v '^{' "$OUT/bench_${b}_${l}.err" | tail -2 | cut -c1-300
  tail -5 "$OUT/bench_${b}_${l}.log" | cut -c1-220
done
cd "$OUT" && tar czf logs.tgz ./*.log ./*.err ./*.json ./*.txt 2>/dev/null; ls "$OUT"
