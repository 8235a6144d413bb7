#!/usr/bin/env bash
# One device call for issue 9: GPU tests of the CUDA-graph step, the planted-bug check, and
# lobsurf bench (eager and graphed). Runs from a snapshot of the tree in .gpu_src (made
# right before the call, so a colleague's edits in progress do not travel half-done).
# Usage (device machine, repo root, .whl carried): bash .gpu_src/benchmarks/gpu_graph_session.sh
set -u
source "$(dirname "$0")/gpu_env.sh"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv,noheader | tee "$OUT/gpu.txt"
timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/train/test_cuda_graph_gpu.py \
  tests/sim/test_gpu.py > "$OUT/gpu_tests.log" 2>&1; echo "gpu tests rc=$?"; tail -25 "$OUT/gpu_tests.log"
timeout 90 python3 benchmarks/graph_planted_bug.py > "$OUT/planted.log" 2>&1; echo "planted rc=$?"; tail -3 "$OUT/planted.log"
timeout ${BENCH2_S:-240} python3 -m lobsurf bench --batch ${BATCH2:-16,256,1024,4096} --layers 2 \
  --json "$OUT/bench_l2.json" > "$OUT/bench_l2.log" 2> "$OUT/bench_l2.err"; echo "bench L2 rc=$?"
tail -4 "$OUT/bench_l2.err" | cut -c1-400; tail -8 "$OUT/bench_l2.log"
timeout ${BENCH4_S:-180} python3 -m lobsurf bench --batch ${BATCH4:-256,1024} --layers 4 \
  --json "$OUT/bench_l4.json" > "$OUT/bench_l4.log" 2> "$OUT/bench_l4.err"; echo "bench L4 rc=$?"
tail -4 "$OUT/bench_l4.err" | cut -c1-400; tail -5 "$OUT/bench_l4.log"
cd "$OUT" && tar czf logs.tgz *.log *.err *.json *.txt 2>/dev/null; ls "$OUT"
