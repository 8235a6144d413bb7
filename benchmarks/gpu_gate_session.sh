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
[ "${MICRO:-0}" = 1 ] && micro_row gate_micro benchmarks/bench_scan_gate.py
for row in ${ROWS:-1024:2}; do
  IFS=: read -r b l <<< "$row"
  for gate in ${GATES:-torch auto}; do
    bench_row "${b}_${l}_gate_$gate" "$b" "$l" --scan-gate "$gate"
  done
done
# shellcheck disable=SC2086  # GATE_TESTS: a list of files
[ "${TESTS:-1}" = 1 ] && gpu_tests gate_tests ${GATE_TESTS:-tests/models/kernels/test_scan_gate.py}
cd "$OUT" && tar czf "$FINAL/logs.tgz" ./*.log ./*.err ./*.json 2>/dev/null; ls "$FINAL"
