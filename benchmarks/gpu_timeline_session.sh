#!/usr/bin/env bash
# Issue 9 device call: the graphed, compiled step stream by stream (graph_timeline.py) per
# "B:layers" of ROWS (default 1024:2), then, unless KERNELS=0, count_step_kernels.py's
# per-phase kernel table at the first row's shape.
# FLAGS: further graph_timeline.py flags; TAG: a suffix of the output files' names.
# Usage (device machine, repo root, .whl carried):
#   ROWS="1024:2 256:4" bash benchmarks/gpu_timeline_session.sh
set -u
SCRATCH=/tmp/timeline_out; source "$(dirname "$0")/gpu_in_place.sh"
ROWS=${ROWS:-1024:2}
for row in $ROWS; do
  IFS=: read -r b l <<< "$row"
  timeout "${LIMIT:-200}" python3 benchmarks/graph_timeline.py --batch "$b" --layers "$l" \
    --top "${TOP:-25}" ${FLAGS:-} --json "$OUT/timeline_${b}_${l}${TAG:-}.json" \
    > "$OUT/timeline_${b}_${l}${TAG:-}.log" 2> "$OUT/timeline_${b}_${l}${TAG:-}.err"
  echo "timeline B=$b L=$l ${FLAGS:-} rc=$?"; tail -3 "$OUT/timeline_${b}_${l}${TAG:-}.err" | cut -c1-300
  head -"${HEAD:-12}" "$OUT/timeline_${b}_${l}${TAG:-}.log" | cut -c1-200
done
if [ "${KERNELS:-1}" = 1 ]; then
  IFS=: read -r b l <<< "${ROWS%% *}"
  timeout "${LIMIT:-200}" python3 benchmarks/count_step_kernels.py --device cuda --batch "$b" \
    --layers "$l" --precision bf16 --top 45 --no-combo > "$OUT/kernels.log" 2> "$OUT/kernels.err"
  echo "kernels rc=$?"
fi
cd "$OUT" && tar czf "$FINAL/logs.tgz" ./*.log ./*.err ./*.json 2>/dev/null; ls "$FINAL"
