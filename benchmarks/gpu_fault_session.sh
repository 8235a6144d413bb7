#!/usr/bin/env bash
# Issue 9 device call: locate the one-kernel Mamba2 block's illegal memory access in the
# GPU test that found it (benchmarks/repro_fused_block_fault.py, past the kernel's CUDA
# switch; alone with CUDA_LAUNCH_BLOCKING=1, then under compute-sanitizer's memcheck when
# the machine has it, each under $FAULT_LIMIT s), then the rest of gpu_compile_session.sh
# with the same arguments and environment.
# Usage (device machine, repo root, .whl and .gpu_src carried):
#   TEST_ARGS=... bash .gpu_src/benchmarks/gpu_fault_session.sh 16:2:bf16
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
(
  source "$HERE/gpu_env.sh"
  FAULT=benchmarks/repro_fused_block_fault.py::test_kernel_matches_numpy_reference_on_cuda
  mkdir -p "$OUT/fault"
  CUDA_LAUNCH_BLOCKING=1 timeout "${FAULT_LIMIT:-120}" python3 -m pytest -x -q --tb=line \
    -p no:cacheprovider -m gpu "$FAULT" > "$OUT/fault/blocking.log" 2>&1
  echo "fault test (blocking) rc=$?"; tail -3 "$OUT/fault/blocking.log" | cut -c1-240
  CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
  if [ -n "$CS" ]; then
    timeout "${FAULT_LIMIT:-120}" "$CS" --tool memcheck --print-limit 4 python3 -m pytest -x \
      -q --tb=line -p no:cacheprovider -m gpu "$FAULT[32-16-16-37]" > "$OUT/fault/memcheck.log" 2>&1
    echo "memcheck rc=$?"; grep -E "Invalid|at 0x|by thread|Address|ERROR SUMMARY|passed|failed" \
      "$OUT/fault/memcheck.log" | head -14 | cut -c1-240
  else
    echo "no compute-sanitizer on this machine"
  fi
)
bash "$HERE/gpu_compile_session.sh" "$@"
