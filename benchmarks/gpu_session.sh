#!/usr/bin/env bash
# One device call: GPU tests and the GPU benchmarks, each under its own time limit, logs in $OUT.
# Usage (on the GPU machine, from the repo root, .whl carried): bash benchmarks/gpu_session.sh
set -u
export PYTHONUNBUFFERED=1
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:src
else
  export PYTHONPATH=src
fi
OUT=${OUT:-bench_out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
timeout 120 python3 -m pytest -q -p no:cacheprovider -m gpu tests/sim/test_gpu.py \
  tests/pretrain/test_pretrain.py > "$OUT/gpu_tests.log" 2>&1; echo "gpu tests rc=$?"; tail -3 "$OUT/gpu_tests.log"
timeout 150 python3 benchmarks/bench_sim_step.py --device cuda --out "$OUT" > "$OUT/sim.log" 2>&1
echo "sim rc=$?"
timeout 200 python3 benchmarks/bench_encoder.py --device cuda --out "$OUT/enc_k128" \
  --shapes B1024_K128_D256_L4 --modes compile,graph > "$OUT/enc_k128.log" 2>&1; echo "enc k128 rc=$?"
timeout 120 python3 benchmarks/bench_encoder.py --device cuda --out "$OUT/enc_last" \
  --shapes B1024_K64_D128_L2,B256_K64_D128_L2 --modes graph --last-only > "$OUT/enc_last.log" 2>&1
echo "enc last-only rc=$?"
echo "== sim"; tail -12 "$OUT/sim.log"
echo "== encoder K128"; grep -v '^{' "$OUT/enc_k128.log" | tail -8
echo "== encoder last-only"; grep -v '^{' "$OUT/enc_last.log" | tail -8
