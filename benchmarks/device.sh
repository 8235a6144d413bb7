#!/usr/bin/env bash
# The GPU benchmarks, run from the repository root on a machine with a CUDA GPU, in order:
#   (a) the GPU tests: python -m pytest -q -m gpu tests
#   (b) lobsurf bench at the goal rows (B:layers 16:2 256:4 1024:2 1024:4; bf16, compiled),
#       then the rows of PASSIVE_ROWS (default 256:4) again with --passive-orders
#   (c) the proof of learning: python benchmarks/proof_of_learning.py $PROOF_ARGS
# then a short table, one line per part or bench row. Logs and JSON go into
# $OUT/device_details.tgz and the table into $OUT/summary.txt ($OUT if set, else ./bench_out).
# Exit code 1 when any part failed.
#
#   bash benchmarks/device.sh
#   TESTS=0 PROOF=0 ROWS="256:4" PASSIVE_ROWS= bash benchmarks/device.sh   # one bench row
#   TESTS=0 BENCH=0 PROOF_ARGS="--device cuda --scenarios edge-gpu,passive-gpu --train-args=--no-compile" \
#     bash benchmarks/device.sh
#
# Parts: TESTS, BENCH, PROOF (1 runs it, the default; 0 skips it). Settings: TEST_ARGS
# (pytest's paths, default tests), ROWS (the bench rows), BENCH_ARGS (more `lobsurf bench`
# flags, e.g. --no-draw-ahead), PASSIVE_ROWS (bench rows timed with resting orders too; empty:
# none), PROOF_ARGS (default --device cuda), TEST_LIMIT, ROW_LIMIT and
# PROOF_LIMIT (seconds a part, or one bench row, may run: 3600, 900, 7200), WHEELS (default
# .whl: wheels of packages the machine lacks, installed into /tmp/site first). The
# checkout's src/ is what runs.
set -u
ROOT=$(pwd)
if [ ! -f pyproject.toml ] || [ ! -d src/lobsurf ]; then
  echo "benchmarks/device.sh: run it from the repository root" >&2
  exit 2
fi
export PYTHONUNBUFFERED=1
WHEELS=${WHEELS:-.whl}
SITE=
if compgen -G "$WHEELS/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site "$WHEELS"/*.whl \
    || { echo "benchmarks/device.sh: installing $WHEELS/*.whl failed" >&2; exit 1; }
  SITE=/tmp/site:
fi
export PYTHONPATH=${SITE}$ROOT/src
OUT=${OUT:-$ROOT/bench_out}
mkdir -p "$OUT"
DETAILS=$(mktemp -d /tmp/lobsurf_device.XXXXXX)
ROWS=${ROWS:-16:2 256:4 1024:2 1024:4}
PROOF_ARGS=${PROOF_ARGS:-"--device cuda"}
FAILED=0
LINES=()

# row NAME RC FIGURES: one line of the table; a nonzero RC marks the run failed
row() {
  LINES+=("$(printf '%-18s %-7s %s' "$1" "rc $2" "$3")")
  [ "$2" = 0 ] || FAILED=1
}

{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader \
    2>/dev/null || echo "no nvidia-smi"
  python3 -c "import torch; print('torch', torch.__version__, 'CUDA', torch.version.cuda)"
  git rev-parse --short HEAD 2>/dev/null || echo "commit unknown (no .git)"; } \
  > "$DETAILS/machine.txt" 2>&1
echo "== $(head -1 "$DETAILS/machine.txt")"

if [ "${TESTS:-1}" = 1 ]; then
  echo "== (a) GPU tests: ${TEST_ARGS:-tests}"
  timeout "${TEST_LIMIT:-3600}" python3 -m pytest -q -p no:cacheprovider -m gpu \
    ${TEST_ARGS:-tests} > "$DETAILS/gpu_tests.log" 2>&1
  rc=$?
  row "GPU tests" "$rc" "$(grep -E "passed|failed|error|no tests ran" "$DETAILS/gpu_tests.log" \
    | tail -1)"
fi

if [ "${BENCH:-1}" = 1 ]; then
  for point in $ROWS $(for r in ${PASSIVE_ROWS-256:4}; do echo "$r:passive"; done); do
    IFS=: read -r b l passive <<< "$point"
    tag="bench_B${b}_L${l}${passive:+_passive}"
    echo "== (b) lobsurf bench B=$b layers=$l ${passive:+--passive-orders }${BENCH_ARGS:-}"
    timeout "${ROW_LIMIT:-900}" python3 -m lobsurf bench --batch "$b" --layers "$l" \
      --precision bf16 --compile --steps 30 --repeats 2 --snapshots 50000 ${BENCH_ARGS:-} \
      ${passive:+--passive-orders} --json "$DETAILS/$tag.json" > "$DETAILS/$tag.log" 2>&1
    rc=$?
    figures=$(python3 - "$DETAILS/$tag.json" <<'EOF' 2>/dev/null
import json, sys
r = json.load(open(sys.argv[1]))["rows"][0]
c = r.get("compiled") or {}
if "steps_per_s" in c:
    print(f"compiled {c['steps_per_s']:,.1f} steps/s, {c['transitions_learned_per_s']:,.0f} "
          f"transitions/s, {c['graph_nodes']} graph nodes")
else:
    g = r.get("graphed") or r["eager"]
    print(f"{g['steps_per_s']:,.1f} steps/s (not compiled: {c.get('error', 'off')})")
EOF
)
    row "bench B=$b L=$l${passive:+ passive}" "$rc" "${figures:-no figures: see $tag.log}"
  done
fi

if [ "${PROOF:-1}" = 1 ]; then
  echo "== (c) proof of learning: $PROOF_ARGS"
  timeout "${PROOF_LIMIT:-7200}" python3 benchmarks/proof_of_learning.py $PROOF_ARGS \
    > "$DETAILS/proof_of_learning.log" 2>&1
  rc=$?
  tail -n 15 "$DETAILS/proof_of_learning.log"
  row "proof of learning" "$rc" "$([ "$rc" = 0 ] && echo "every criterion met" \
    || echo "a criterion failed or the run broke: see proof_of_learning.log")"
fi

{ echo "benchmarks/device.sh, $(date -u +%Y-%m-%d), $(tr '\n' ' ' < "$DETAILS/machine.txt")"
  printf '%s\n' "${LINES[@]}"; } > "$DETAILS/summary.txt"
cp "$DETAILS/summary.txt" "$OUT/summary.txt"
tar czf "$OUT/device_details.tgz" -C "$DETAILS" .
echo
cat "$OUT/summary.txt"
exit "$FAILED"
