#!/usr/bin/env bash
# Issue 9 device call: the step (bf16, compiled, graphed) per "B:layers" of ROWS (default
# 1024:2) side by side on one machine, with the source tree in OLD (a copy of the commit
# before, carried; skipped when unset) and with the working tree, each REPEAT times (default
# 1) alternating; then, unless TIMELINE=0, graph_timeline.py at the first row's shape on the
# working tree; last, unless TESTS is empty, those GPU test files and the eager = graphed /
# sync-guard tests.
# Usage (device machine, repo root, .whl and OLD carried):
#   OLD=.gpu_old ROWS="1024:2" REPEAT=2 TESTS="tests/models/kernels/test_conv_dt.py" \
#     bash benchmarks/gpu_side_by_side.sh
set -u
SCRATCH=/tmp/side_out; source "$(dirname "$0")/gpu_in_place.sh"
ROWS=${ROWS:-1024:2}
# shellcheck disable=SC2086  # ROWS: a list of rows
side_by_side "${REPEAT:-1}" $ROWS
if [ "${TIMELINE:-1}" = 1 ]; then
  IFS=: read -r b l <<< "${ROWS%% *}"
  timeout "${LIMIT:-150}" python3 benchmarks/graph_timeline.py --batch "$b" --layers "$l" \
    --top 30 --json "$OUT/timeline.json" > "$OUT/timeline.log" 2> "$OUT/timeline.err"
  echo "timeline rc=$?"; head -7 "$OUT/timeline.log" | cut -c1-200
fi
# shellcheck disable=SC2086  # TESTS: a list of files
[ -n "${TESTS:-}" ] && gpu_tests side_tests $TESTS
cd "$OUT" && tar czf "$FINAL/logs.tgz" ./*.log ./*.err ./*.json 2>/dev/null; ls "$FINAL"
