#!/usr/bin/env bash
# Issue 9 device call: the conv + SiLU and dt softplus inside the gated scan's kernel
# (encoder.scan_conv). Unless MICRO=0, bench_scan_conv.py first (the kernel alone at each
# grid and warps, against the conv kernel + softplus + gated scan it replaces); then the
# step (bf16, compiled, graphed) per "B:layers" of ROWS (default 1024:2) for each launch of
# LAUNCHES, side by side on one machine: "torch" (the conv apart, the default) or
# "auto:PROGRAMS:WARPS" (the kernel with encoder.scan_conv_programs head|window and
# encoder.scan_conv_warps); last, unless TESTS=0, its GPU tests and the eager = graphed /
# sync-guard tests. About 450 s with the defaults (a bench row is 60-100 s), inside one
# call's 600.
# Usage (device machine, repo root, .whl carried):
#   ROWS="1024:2" LAUNCHES="torch auto:head:4 auto:window:8" bash benchmarks/gpu_scan_conv.sh
set -u
SCRATCH=/tmp/scan_conv_out; source "$(dirname "$0")/gpu_in_place.sh"
[ "${MICRO:-1}" = 1 ] && micro_row scan_conv_micro benchmarks/bench_scan_conv.py
for row in ${ROWS:-1024:2}; do
  IFS=: read -r b l <<< "$row"
  for launch in ${LAUNCHES:-torch auto:head:4 auto:window:8}; do
    IFS=: read -r conv programs warps <<< "$launch"
    bench_row "${b}_${l}_scan_conv_${launch//:/_}" "$b" "$l" --scan-conv "$conv" \
      --scan-conv-programs "${programs:-head}" --scan-conv-warps "${warps:-4}"
  done
done
[ "${TESTS:-1}" = 1 ] && gpu_tests scan_conv_tests tests/models/test_scan_conv.py
cd "$OUT" && tar czf "$FINAL/logs.tgz" ./*.log ./*.err ./*.json 2>/dev/null; ls "$FINAL"
