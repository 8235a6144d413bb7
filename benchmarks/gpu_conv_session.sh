#!/usr/bin/env bash
# Issue 9 device call: conv_backend "triton_fwd" (the forward kernel in every forward) as the
# default on a copy of the tree, its GPU tests, the step side by side with "triton_dpre",
# then the conv micro-benchmark. With AUTO=triton_fwd (the default here) the device copy's
# CONV_AUTO_ON_CUDA is switched before anything runs, so the equivalence and sync-guard
# tests run the kernels the way lobsurf train would.
# Usage (device machine, repo root, .whl carried): bash benchmarks/gpu_conv_session.sh
set -u
SCRATCH=/tmp/conv_out; source "$(dirname "$0")/gpu_in_place.sh"
AUTO_LINE="CONV_AUTO_ON_CUDA: ConvBackend = \"${AUTO:-triton_fwd}\""
sed -i "s/^CONV_AUTO_ON_CUDA: ConvBackend = \".*\"/$AUTO_LINE/" src/lobsurf/models/config.py
grep -n "^CONV_AUTO_ON_CUDA" src/lobsurf/models/config.py
timeout 100 python3 -m pytest -q -s -p no:cacheprovider -m "gpu or not gpu" \
  tests/models/test_ssd_triton.py -k "conv_silu_and or backend" > "$OUT/conv_tests.log" 2>&1
echo "conv tests rc=$?"; grep -E "passed|failed|Error" "$OUT/conv_tests.log" | tail -3
timeout 150 python3 -m pytest -q -p no:cacheprovider -m "gpu or not gpu" \
  tests/train/test_cuda_graph_gpu.py tests/test_streams.py > "$OUT/graph_tests.log" 2>&1
echo "graph tests rc=$?"; grep -E "passed|failed|Error" "$OUT/graph_tests.log" | tail -3
for conv in auto triton_dpre; do
  timeout "${LIMIT:-150}" python3 -m lobsurf bench --batch 1024 --layers 2 --precision bf16 \
    --compile --steps 30 --repeats 2 --snapshots 50000 --conv-backend "$conv" \
    --json "$OUT/bench_$conv.json" > "$OUT/bench_$conv.log" 2> "$OUT/bench_$conv.err"
  echo "bench conv $conv rc=$?"; grep -E "steps/s \(" "$OUT/bench_$conv.log" | cut -c1-220
done
timeout 120 python3 benchmarks/bench_conv_dpre.py --batch 1024 --out "$OUT" \
  > "$OUT/conv_micro.log" 2> "$OUT/conv_micro.err"
echo "conv micro rc=$?"; tail -2 "$OUT/conv_micro.err" | cut -c1-300; cat "$OUT/conv_micro.log"
cd "$OUT" && tar czf "$FINAL/logs.tgz" ./*.log ./*.err ./*.json 2>/dev/null; ls "$FINAL"
