#!/usr/bin/env bash
# Issue 9 device call for the compiled step: GPU tests ($TEST_ARGS), the compiled step's
# kernels and device ms per phase with the top kernels (count_step_kernels.py at
# B=$COUNT_B, $COUNT_PREC; COUNT_B=0 skips), then lobsurf bench --compile per
# "B:layers:precision[:extra bench flag]" argument under each Inductor option set of $INDUCTOR_SETS
# (space-separated; each a comma list of KEY=VALUE for torch._inductor.config, passed as
# --inductor-option so the JSON records them; "default" = none), each run under $LIMIT s. Every log goes into $OUT/all.tgz (the device returns few
# files); the summaries are printed.
# Usage (device machine, repo root, .whl and .gpu_src carried):
#   INDUCTOR_SETS="default combo_kernels=True" bash .gpu_src/benchmarks/gpu_compile_session.sh 16:2:bf16
set -u
source "$(dirname "$0")/gpu_env.sh"
LOGS=$OUT/logs; mkdir -p "$LOGS"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$LOGS/gpu.txt"
if [ -n "${TEST_ARGS:-}" ]; then
  timeout "${TEST_LIMIT:-240}" python3 -m pytest -q --tb=short -p no:cacheprovider -m gpu \
    $TEST_ARGS > "$LOGS/gpu_tests.log" 2>&1
  echo "gpu tests rc=$?"; grep -E "passed|failed|Error|assert" "$LOGS/gpu_tests.log" | tail -12 | cut -c1-240
fi
if [ "${COUNT_B:-0}" != 0 ]; then
  timeout "${COUNT_LIMIT:-150}" python3 benchmarks/count_step_kernels.py --device cuda \
    --batch "$COUNT_B" --precision "${COUNT_PREC:-bf16}" --top "${TOP:-30}" \
    > "$LOGS/count.log" 2>&1
  echo "count rc=$?"; grep -E "^step|^  collect|^  learn|^    (backward|losses)|ms per step|^ +[0-9.]+ ms" \
    "$LOGS/count.log" | head -40 | cut -c1-200
fi
for opts in ${INDUCTOR_SETS:-default}; do
  for cfg in "$@"; do
    IFS=: read -r b l p x <<< "$cfg"
    tag="${b}_${l}_${p}_${opts//[^a-zA-Z0-9]/_}${x//[^a-zA-Z0-9]/_}"
    flags=()
    IFS=, read -ra items <<< "$opts"
    for item in "${items[@]}"; do
      [ "$item" != default ] && flags+=(--inductor-option "$item")
    done
    timeout "${LIMIT:-200}" python3 -m lobsurf bench "${flags[@]}" --batch "$b" --layers "$l" \
      --precision "$p" --compile --steps "${STEPS:-30}" --repeats 2 --snapshots 50000 ${x:-} \
      --json "$LOGS/bench_$tag.json" > "$LOGS/bench_$tag.log" 2> "$LOGS/bench_$tag.err"
    echo "bench B=$b L=$l $p ${x:-} inductor=$opts rc=$?"
    grep -v '^{' "$LOGS/bench_$tag.err" | grep -iv warn | tail -2 | cut -c1-300
    grep -E "compiled encoders|^ +[0-9]+ +[0-9]+ (fp32|bf16)" "$LOGS/bench_$tag.log" | cut -c1-220
  done
done
cd "$OUT" && tar czf all.tgz logs && rm -rf logs && ls "$OUT"
