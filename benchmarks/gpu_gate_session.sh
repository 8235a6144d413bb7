#!/usr/bin/env bash
# Issue 9 device call: the gated norm's gate in the one-chunk scan kernel
# (encoder.scan_gate). MICRO=1 runs bench_scan_gate.py (the kernel alone, against the scan
# and the scan + compiled norm) first; then the step (bf16, compiled, graphed) per "B:layers"
# of ROWS (default 1024:2) for each scan_gate of GATES (default "torch auto"), side by side
# on one machine; last,
# unless TESTS=0, the gate's GPU tests (GATE_TESTS: the test files) and the eager = graphed /
# sync-guard tests.
# Usage (device machine, repo root, .whl carried):
#   ROWS="1024:2 1024:4" GATES="torch auto" bash benchmarks/gpu_gate_session.sh
set -u
SCRATCH=/tmp/gate_out; source "$(dirname "$0")/gpu_in_place.sh"
if [ "${MICRO:-0}" = 1 ]; then
  timeout "${MICRO_LIMIT:-150}" python3 benchmarks/bench_scan_gate.py --batch 1024,2048 \
    --out "$OUT" > "$OUT/gate_micro.log" 2> "$OUT/gate_micro.err"
  echo "gate micro rc=$?"; tail -2 "$OUT/gate_micro.err" | cut -c1-300
  sed -n '/^ms per call/,$p' "$OUT/gate_micro.log"
fi
for row in ${ROWS:-1024:2}; do
  IFS=: read -r b l <<< "$row"
  for gate in ${GATES:-torch auto}; do
    bench_row "${b}_${l}_gate_$gate" "$b" "$l" --scan-gate "$gate"
  done
done
if [ "${TESTS:-1}" = 1 ]; then
  timeout "${TEST_LIMIT:-200}" python3 -m pytest -q -s -p no:cacheprovider -m "gpu or not gpu" \
    ${GATE_TESTS:-tests/models/test_scan_gate.py} > "$OUT/gate_tests.log" 2>&1
  echo "gate tests rc=$?"; grep -E "passed|failed|Error|\{" "$OUT/gate_tests.log" | tail -4
  timeout 150 python3 -m pytest -q -p no:cacheprovider -m "gpu or not gpu" \
    tests/train/test_cuda_graph_gpu.py tests/test_streams.py > "$OUT/graph_tests.log" 2>&1
  echo "graph tests rc=$?"; grep -E "passed|failed|Error" "$OUT/graph_tests.log" | tail -3
fi
cd "$OUT" && tar czf "$FINAL/logs.tgz" ./*.log ./*.err ./*.json 2>/dev/null; ls "$FINAL"
