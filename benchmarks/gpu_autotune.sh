#!/usr/bin/env bash
# Issue 9 device call: the step at "B:layers" ROW (default 1024:2) with Inductor's GEMM
# autotuning (lobsurf bench --max-autotune) under LIMIT seconds (default 450: at B = 1024 /
# 2 layers it prepared in 337 s on an H200), with its autotuning log's last lines. The
# Inductor cache it fills (75 MB compressed at that shape) is too large to come back from
# the device or to be carried, so each call autotunes from scratch.
# Usage (device machine, repo root, .whl carried):
#   ROW=1024:2 LIMIT=450 bash benchmarks/gpu_autotune.sh
set -u
SCRATCH=/tmp/autotune_out; source "$(dirname "$0")/gpu_in_place.sh"
IFS=: read -r b l <<< "${ROW:-1024:2}"
LIMIT=${LIMIT:-450} bench_row "autotune_${b}_$l" "$b" "$l" --max-autotune
grep -E "prepared in" "$OUT/bench_autotune_${b}_$l.log" | cut -c1-220
grep -E "AUTOTUNE|triton_mm" "$OUT/bench_autotune_${b}_$l.err" | tail -4 | cut -c1-300
cd "$OUT" && tar czf "$FINAL/logs.tgz" ./*.log ./*.err ./*.json 2>/dev/null; ls -la "$FINAL"
