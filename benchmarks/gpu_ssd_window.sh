#!/usr/bin/env bash
# Issue 9 device call: the one-chunk SSD kernels (ssd_backend = "triton_window") on the GPU:
# their tests (compiled kernels against float64), the scan and block micro-benchmark, then
# lobsurf bench rows (bf16, compiled) per "B:layers:ssd_backend[:conv_backend]" argument
# (conv auto by default, as lobsurf train). CONV_MICRO=1 adds bench_conv_dpre.py;
# STEPK=1 adds count_step_kernels.py (STEPK_ARGS: more of its flags); with
# TORCHINDUCTOR_CACHE_DIR set, Inductor's generated code comes back as inductor_code.tgz.
# Usage (device machine, repo root, .whl carried):
#   TESTS=1 MICRO=1 bash benchmarks/gpu_ssd_window.sh 1024:2:auto:torch 1024:2:auto
set -u
# details in a scratch folder; $FINAL (the tool's $OUT) gets the archive and the
# micro-benchmark's log
SCRATCH=/tmp/ssd_window_out; source "$(dirname "$0")/gpu_in_place.sh"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
if [ "${TESTS:-0}" = 1 ]; then
  timeout "${TEST_LIMIT:-200}" python3 -m pytest -q -s --tb=short -p no:cacheprovider \
    -m "gpu or not gpu" tests/models/kernels/test_ssd_window_triton.py ${TEST_EXTRA:-} \
    > "$OUT/gpu_tests.log" 2>&1
  echo "gpu tests rc=$?"; grep -E "passed|failed|error|bf16|tf32|ieee|kernels" \
    "$OUT/gpu_tests.log" | tail -14 | cut -c1-240
fi
if [ "${MICRO:-1}" = 1 ]; then
  timeout "${MICRO_LIMIT:-240}" python3 benchmarks/bench_ssd_window.py \
    --batch "${MICRO_BATCH:-1024}" --parts "${PARTS:-op,block}" \
    --out "$OUT" > "$OUT/micro.log" 2> "$OUT/micro.err"
  echo "micro rc=$?"; tail -3 "$OUT/micro.err" | cut -c1-300
  grep -A30 "^ms per call" "$OUT/micro.log"
fi
if [ "${CONV_MICRO:-0}" = 1 ]; then
  timeout "${MICRO_LIMIT:-240}" python3 benchmarks/bench_conv_dpre.py \
    --batch "${MICRO_BATCH:-1024}" --out "$OUT" > "$OUT/conv_micro.log" 2> "$OUT/conv_micro.err"
  echo "conv micro rc=$?"; tail -3 "$OUT/conv_micro.err" | cut -c1-300
  cat "$OUT/conv_micro.log"
fi
if [ "${STEPK:-0}" = 1 ]; then
  timeout "${STEPK_LIMIT:-200}" python3 benchmarks/count_step_kernels.py --device cuda \
    --batch "${STEPK_BATCH:-1024}" --precision bf16 --top 40 ${STEPK_ARGS:-} \
    > "$OUT/step_kernels.log" 2>&1
  echo "step kernels rc=$?"; tail -2 "$OUT/step_kernels.log" | cut -c1-160
fi
for cfg in "$@"; do
  IFS=: read -r b l backend conv <<< "$cfg"
  conv=${conv:-auto}; tag="${b}_${l}_${backend}_${conv}"
  timeout "${LIMIT:-200}" python3 -m lobsurf bench --batch "$b" --layers "$l" \
    --precision bf16 --compile --steps "${STEPS:-30}" --repeats 2 --snapshots 50000 \
    --ssd-backend "$backend" --conv-backend "$conv" \
    --json "$OUT/bench_$tag.json" \
    > "$OUT/bench_$tag.log" 2> "$OUT/bench_$tag.err"
  echo "bench B=$b L=$l ssd $backend conv $conv rc=$?"
  grep -v '^{' "$OUT/bench_$tag.err" | tail -2 | cut -c1-300
  grep -E "steps/s \(" "$OUT/bench_$tag.log" | cut -c1-220
done
if [ -n "${TORCHINDUCTOR_CACHE_DIR:-}" ]; then
  # Inductor's generated modules: each kernel's source nodes, to name a profile's kernels
  (cd "$TORCHINDUCTOR_CACHE_DIR" && find . -name "*.py" | tar czf "$FINAL/inductor_code.tgz" -T -)
fi
cd "$OUT" && tar czf "$FINAL/logs.tgz" ./*.log ./*.err ./*.json ./*.txt 2>/dev/null
cp micro.log conv_micro.log step_kernels.log "$FINAL/" 2>/dev/null; ls "$FINAL"
