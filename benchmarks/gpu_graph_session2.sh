#!/usr/bin/env bash
# Second device call for issue 9: GPU tests again, lobsurf bench with compiled encoders
# (B=16, 1024), B=4096 graphed, and lobsurf train's own steps/s at B=1024 (graph on).
# Usage (device machine, repo root, .whl and .gpu_src carried): bash .gpu_src/benchmarks/gpu_graph_session2.sh
set -u
source "$(dirname "$0")/gpu_env.sh"
timeout 100 python3 -m pytest -q -p no:cacheprovider -m gpu tests/train/test_cuda_graph_gpu.py \
  > "$OUT/gpu_tests.log" 2>&1; echo "gpu tests rc=$?"; tail -2 "$OUT/gpu_tests.log"
python3 -c "from lobsurf.data.synth import SynthConfig, write_synth_store as w; w('/tmp/store', SynthConfig(snapshots_per_day=200000, days=2, edge=1.0))"
timeout 100 python3 -m lobsurf train --store /tmp/store --envs 1024 --steps 600 --out /tmp/run \
  --set train.log_every=100 --set train.checkpoint_every=200 --no-progress > "$OUT/train.log" 2>&1
echo "train rc=$?"; tail -3 "$OUT/train.log"
python3 -c "
import json
for l in open('/tmp/run/metrics.jsonl'):
    r = json.loads(l)
    if r.get('event') == 'metrics': print('train step', r['step'], 'steps/s %.1f' % r['steps_per_s'])
" | tee "$OUT/train_rates.txt"
timeout 90 python3 -m lobsurf bench --batch 4096 --layers 2 --json "$OUT/bench_4096.json" \
  > "$OUT/bench_4096.log" 2> "$OUT/bench_4096.err"; echo "bench 4096 rc=$?"; tail -2 "$OUT/bench_4096.log"
timeout 200 python3 -m lobsurf bench --batch 16,1024 --layers 2 --compile --json "$OUT/bench_compile.json" \
  > "$OUT/bench_compile.log" 2> "$OUT/bench_compile.err"; echo "bench compile rc=$?"
grep -v '^{' "$OUT/bench_compile.err" | tail -5 | cut -c1-300; tail -6 "$OUT/bench_compile.log"
