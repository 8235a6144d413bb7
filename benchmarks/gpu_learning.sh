#!/usr/bin/env bash
# One device call: optionally the eager train-step benchmark, then longer training runs side
# by side on one GPU (the tradeable preset in fp32 and in bf16 from one seed, its edge-0
# null, the real CME ES session), each evaluated on its held-out rows against every
# baseline. Logs, metrics and JSON under $OUT, in one archive.
# Usage on the GPU machine from the repo root, with .whl and .gpu_data carried:
#   TRAIN_S=270 bash benchmarks/gpu_learning.sh
set -u
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=2
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
# SRC: the source tree to run (default the checkout's; a committed snapshot keeps others'
# work in progress out of a measurement)
SRC=${SRC:-.}; export PYTHONPATH=/tmp/site:$SRC/src
# everything is written to a scratch folder and comes back as one archive in $OUT (the
# device returns only a few files), with the eval tables beside it
FINAL=${OUT:-gpu_out}; OUT=/tmp/gpu_learning_out; mkdir -p "$FINAL" "$OUT"
DEVICE=${DEVICE:-cuda}; TRAIN_S=${TRAIN_S:-270}; EVAL_S=${EVAL_S:-150}; BENCH_S=${BENCH_S:-0}
LS="python3 -m lobsurf.cli"
D=/tmp/lobsurf_data; mkdir -p $D
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"

# ---- data: the tradeable preset, its null, and the real ES MBO session
for p in tradeable tradeable-null; do
  $LS synth --preset $p --out $D/$p --no-progress > /dev/null &&
  $LS ingest $D/$p/*.dbn.zst --out $D/$p-store --multiplier 50 --currency USD --overwrite \
    --no-progress > /dev/null || echo "data $p failed"
done
$LS ingest .gpu_data/esh4-glbx-mdp3-20231225.mbo.dbn.zst --out $D/es-store --multiplier 50 \
  --currency USD --overwrite --no-progress > "$OUT/es_ingest.log" 2>&1 || echo "es ingest failed"

# ---- the GPU tests of the snapshot (eager vs graph, sync guard, ...); GPU_TESTS=0 skips
if [ "${GPU_TESTS:-1}" = 1 ] && [ -d "$SRC/tests" ]; then
  (cd "$SRC" && timeout 300 python3 -m pytest -q -p no:cacheprovider -m gpu tests) \
    > "$OUT/gpu_tests.log" 2>&1; echo "gpu tests rc=$?"; tail -3 "$OUT/gpu_tests.log"
fi

# ---- eager train-step benchmark (alone on the GPU); BENCH_S=0 skips it
[ "$BENCH_S" -gt 0 ] && timeout $BENCH_S python3 $SRC/benchmarks/bench_train_step.py --device $DEVICE --batch 16,256,1024 \
  --steps 20 --json "$OUT/bench_train_step.json" > "$OUT/bench.log" 2>&1; echo "bench rc=$?"

# ---- training runs in parallel; a run killed at its time limit keeps its checkpoints
common="--device $DEVICE --no-progress --steps 200000 --set train.checkpoint_every=500 --set train.log_every=250"
run() {  # name store extra-args...
  local name=$1 store=$2; shift 2
  timeout $TRAIN_S $LS train --store $store --out $D/runs/$name $common "$@" \
    > "$OUT/train_$name.log" 2>&1
}
RUNS=${RUNS:-tradeable tradeable_bf16 null es}
for name in $RUNS; do
  case $name in
    tradeable) run $name $D/tradeable-store --envs 256 & ;;
    tradeable_bf16) run $name $D/tradeable-store --envs 256 --set train.precision=bf16 & ;;
    tradeable_g95) run $name $D/tradeable-store --envs 256 --set learner.gamma=0.95 & ;;
    tradeable_top) run $name $D/tradeable-store --envs 256 --set features.book_levels=1 \
                     --set features.ofi_levels=1 & ;;
    null) run $name $D/tradeable-null-store --envs 256 & ;;
    es) run $name $D/es-store --envs 256 --set train.checkpoint_every=250 & ;;
  esac
done
wait
for name in $RUNS; do
  timeout $EVAL_S $LS eval $D/runs/$name --device $DEVICE --json --no-progress \
    > "$OUT/eval_$name.json" 2> "$OUT/eval_$name.err" &
done
wait
for name in $RUNS; do
  cp $D/runs/$name/metrics.jsonl "$OUT/metrics_$name.jsonl" 2>/dev/null
done
echo "== bench"; grep -v '^{' "$OUT/bench.log" 2>/dev/null | tail -6
# everything in one archive: the device returns at most 8 files
tar czf "$FINAL/gpu_learning.tgz" -C "$OUT" .
python3 - "$OUT" $RUNS <<'EOF'
import json, sys, pathlib
out = pathlib.Path(sys.argv[1])
for name in sys.argv[2:]:
    m = out / f"metrics_{name}.jsonl"
    if m.exists():
        recs = [json.loads(l) for l in m.read_text().splitlines() if l.strip()]
        last = [r for r in recs if r.get("event") == "metrics"][-1:]
        if last:
            r = last[0]
            print(f"{name}: step {r['step']} {r['steps_per_s']:.1f} steps/s l_q {r['l_q']:.3f} "
                  f"win {r['win_rate']} hold {r['hold_fraction']:.2f} ent {r['action_entropy']:.2f}")
    e = out / f"eval_{name}.json"
    try:
        res = json.loads(e.read_text())
    except Exception as exc:  # noqa: BLE001
        print(f"{name}: eval failed ({exc})"); continue
    for pol, v in res["policies"].items():
        print(f"  {pol:10s} net {v['net_pnl']:>12,.0f} trades {v['trades']:>6} "
              f"win {v['win_rate']} ppt {v['pnl_per_trade']} ci {v.get('pnl_per_trade_ci')}")
EOF
