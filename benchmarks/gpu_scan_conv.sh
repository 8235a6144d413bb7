#!/usr/bin/env bash
# Issue 9 device call: the conv + SiLU and dt softplus inside the gated scan's kernel
# (encoder.scan_conv). Unless MICRO=0, bench_scan_conv.py first (the kernel alone at each
# grid and warps, against the conv kernel + softplus + gated scan it replaces); then the
# step (bf16, compiled, graphed) per "B:layers" of ROWS (default 1024:2) for each scan_conv
# of CONVS (default "torch auto"), side by side on one machine, with the kernel's launch as
# ssd_window_conv_triton.PER_HEAD and EncoderConfig.ssd_window_warps_fwd set it; last,
# unless TESTS=0, its GPU tests and the eager = graphed / sync-guard tests.
# Usage (device machine, repo root, .whl carried):
#   ROWS="1024:2" CONVS="torch auto" bash benchmarks/gpu_scan_conv.sh
set -u
SCRATCH=/tmp/scan_conv_out; source "$(dirname "$0")/gpu_in_place.sh"
[ "${MICRO:-1}" = 1 ] && micro_row scan_conv_micro benchmarks/bench_scan_conv.py
for row in ${ROWS:-1024:2}; do
  IFS=: read -r b l <<< "$row"
  for conv in ${CONVS:-torch auto}; do
    bench_row "${b}_${l}_scan_conv_$conv" "$b" "$l" --scan-conv "$conv"
  done
done
[ "${TESTS:-1}" = 1 ] && gpu_tests scan_conv_tests tests/models/test_scan_conv.py
cd "$OUT" && tar czf "$FINAL/logs.tgz" ./*.log ./*.err ./*.json 2>/dev/null; ls "$FINAL"
