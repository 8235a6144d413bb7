#!/usr/bin/env bash
# Issue 9 device call: the SSD's last-row backward (ssd_last_row_triton.py, the encoder's
# last layer). MICRO=1 runs bench_ssd_last_row.py (the kernel against the zero-padded
# general backward) first; then the step (bf16, compiled, graphed) per "B:layers" of ROWS
# (default 1024:2), side by side on one machine: with the source tree in OLD (a copy of
# the commit before, carried; skipped when unset) and with the working tree; last, unless
# TESTS=0, the scan's GPU tests and the eager = graphed / sync-guard tests.
# Usage (device machine, repo root, .whl and OLD carried):
#   OLD=.gpu_old ROWS="1024:2 1024:4" bash benchmarks/gpu_last_row_session.sh
set -u
SCRATCH=/tmp/last_row_out; source "$(dirname "$0")/gpu_in_place.sh"
[ "${MICRO:-0}" = 1 ] && micro_row last_micro benchmarks/bench_ssd_last_row.py
# shellcheck disable=SC2086  # ROWS: a list of rows
side_by_side 1 ${ROWS:-1024:2}
# shellcheck disable=SC2086  # LAST_TESTS: a list of files
[ "${TESTS:-1}" = 1 ] && gpu_tests last_tests ${LAST_TESTS:-tests/models/kernels/test_ssd_window_triton.py}
cd "$OUT" && tar czf "$FINAL/logs.tgz" ./*.log ./*.err ./*.json 2>/dev/null; ls "$FINAL"
