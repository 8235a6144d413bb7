#!/usr/bin/env bash
# Issue 9 device call: lobsurf train on CUDA with its defaults (CUDA graph, train.compile
# auto, combo kernels) at B=$ENVS and $PREC, its steps/s per metrics record printed, to
# hold against lobsurf bench's compiled figure. Logs into $OUT/train.tgz.
# LOG_EVERY / CKPT_EVERY set train.log_every / train.checkpoint_every (default 500 / 1000);
# the last line is the rate from step $FROM (default 2000, past compilation) to the end.
# Usage (device machine, repo root, .whl and .gpu_src carried):
#   ENVS=1024 PREC=bf16 STEPS=4000 bash .gpu_src/benchmarks/gpu_train_session.sh
set -u
source "$(dirname "$0")/gpu_env.sh"
LOGS=$OUT/train_logs; mkdir -p "$LOGS"
python3 -c "from lobsurf.data.synth import SynthConfig, write_synth_store as w; w('/tmp/store', SynthConfig(snapshots_per_day=200000, days=2, edge=1.0))"
timeout "${LIMIT:-170}" python3 -m lobsurf train --store /tmp/store --envs "${ENVS:-1024}" \
  --steps "${STEPS:-4000}" --out /tmp/run --overwrite --set "train.precision=\"${PREC:-bf16}\"" \
  --set train.log_every="${LOG_EVERY:-500}" --set train.checkpoint_every="${CKPT_EVERY:-1000}" \
  --no-progress \
  > "$LOGS/train.log" 2>&1
echo "train rc=$?"; grep -v -i warn "$LOGS/train.log" | tail -4 | cut -c1-240
python3 -c "
import json
rows = [json.loads(l) for l in open('/tmp/run/metrics.jsonl')]
rows = [r for r in rows if r.get('event') == 'metrics']
for r in rows[:: max(1, len(rows) // 12)]:
    print('train step', r['step'], 'steps/s %.1f' % r['steps_per_s'])
past = [r for r in rows if r['step'] >= ${FROM:-2000}]
if len(past) > 1:
    a, b = past[0], past[-1]
    print('train steps %d-%d: %.1f steps/s over %.1f s, checkpoints included'
          % (a['step'], b['step'], (b['step'] - a['step']) / (b['wall_s'] - a['wall_s']),
             b['wall_s'] - a['wall_s']))
" | tee "$LOGS/train_rates.txt"
cp /tmp/run/metrics.jsonl "$LOGS/" 2>/dev/null
cd "$OUT" && tar czf train.tgz train_logs && rm -rf train_logs
