#!/usr/bin/env bash
# Issue 9 device call: a conv_backend as the default on a copy of the tree (AUTO, default
# triton_fwd: the device copy's CONV_AUTO_ON_CUDA is switched before anything runs, so the
# equivalence and sync-guard tests run the kernels the way lobsurf train would), the conv
# kernels' GPU tests (TESTS=0 skips them), then the step (bf16, compiled, graphed) per
# "B:layers" of ROWS (default 1024:2) for each conv_backend of CONVS (default "auto
# triton_dpre") and each conv forward form of WALKS (conv_triton.FWD_WALK_ROWS values,
# default "4": the row walk; 0 the tile kernel), side by side; DX_MICRO=1 runs
# bench_conv_dt.py first, CONV_MICRO=1 then bench_conv_dpre.py (the forward's forms too), at
# DX_BATCH (default 1024,2048) and MICRO_BATCH (default 1024) windows.
# Usage (device machine, repo root, .whl carried):
#   AUTO=triton_dx CONVS="auto triton_fwd" bash benchmarks/gpu_conv_session.sh
set -u
SCRATCH=/tmp/conv_out; source "$(dirname "$0")/gpu_in_place.sh"
AUTO_LINE="CONV_AUTO_ON_CUDA: ConvBackend = \"${AUTO:-triton_fwd}\""
sed -i "s/^CONV_AUTO_ON_CUDA: ConvBackend = \".*\"/$AUTO_LINE/" src/lobsurf/models/config.py
grep -n "^CONV_AUTO_ON_CUDA" src/lobsurf/models/config.py
if [ "${TESTS:-1}" = 1 ]; then
  timeout "${TEST_LIMIT:-150}" python3 -m pytest -q -s -p no:cacheprovider -m "gpu or not gpu" \
    tests/models/kernels/test_conv_dt.py tests/models/kernels/test_ssd_triton.py -k "conv or backend" \
    > "$OUT/conv_tests.log" 2>&1
  echo "conv tests rc=$?"; grep -E "passed|failed|Error" "$OUT/conv_tests.log" | tail -3
  timeout 150 python3 -m pytest -q -p no:cacheprovider -m "gpu or not gpu" \
    tests/train/test_cuda_graph_gpu.py tests/test_streams.py > "$OUT/graph_tests.log" 2>&1
  echo "graph tests rc=$?"; grep -E "passed|failed|Error" "$OUT/graph_tests.log" | tail -3
fi
if [ "${DX_MICRO:-0}" = 1 ]; then
  timeout 200 python3 benchmarks/bench_conv_dt.py --batch "${DX_BATCH:-1024,2048}" --out "$OUT" \
    > "$OUT/conv_dt_micro.log" 2> "$OUT/conv_dt_micro.err"
  echo "conv_dt micro rc=$?"; tail -2 "$OUT/conv_dt_micro.err" | cut -c1-300
  cat "$OUT/conv_dt_micro.log"
fi
if [ "${CONV_MICRO:-0}" = 1 ]; then
  timeout "${MICRO_LIMIT:-120}" python3 benchmarks/bench_conv_dpre.py --batch "${MICRO_BATCH:-1024}" --out "$OUT" \
    > "$OUT/conv_micro.log" 2> "$OUT/conv_micro.err"
  echo "conv micro rc=$?"; tail -2 "$OUT/conv_micro.err" | cut -c1-300; cat "$OUT/conv_micro.log"
fi
for row in ${ROWS:-1024:2}; do
  IFS=: read -r b l <<< "$row"
  for walk in ${WALKS:-4}; do
    sed -i "s/^FWD_WALK_ROWS = [0-9]*/FWD_WALK_ROWS = $walk/" src/lobsurf/models/kernels/conv_triton.py
    for conv in ${CONVS:-auto triton_dpre}; do
      echo "conv forward walk $walk"
      bench_row "${b}_${l}_${conv}_walk$walk" "$b" "$l" --conv-backend "$conv"
    done
  done
done
cd "$OUT" && tar czf "$FINAL/logs.tgz" ./*.log ./*.err ./*.json 2>/dev/null; ls "$FINAL"
