"""Issue 9 diagnostic: which shapes and precisions of the one-kernel Mamba2 block
(lobsurf.models.mamba2_fused) fault on the GPU. Each case runs in its own process (an
illegal memory access poisons the CUDA context) with CUDA_LAUNCH_BLOCKING=1.

Usage (device machine, from the .gpu_src snapshot):
    python3 benchmarks/probe_fused_block_fault.py            # every case, one line each
    python3 benchmarks/probe_fused_block_fault.py 32,16,16,37,bf16,4   # one case
    python3 benchmarks/probe_fused_block_fault.py 32,16,16,37,fp32,4,last   # last_only
    python3 benchmarks/probe_fused_block_fault.py sequence   # the GPU test's three calls
"""

from __future__ import annotations

import os
import subprocess
import sys

CASES = [(32, 16, 16, 37, "bf16", 4), (32, 16, 16, 37, "fp32", 4), (32, 16, 16, 64, "bf16", 4),
         (128, 64, 64, 37, "bf16", 4), (64, 32, 32, 37, "bf16", 4)]


def one(d: int, p: int, n: int, length: int, prec: str, warps: int, last_only: bool) -> None:
    import torch

    from lobsurf.models import mamba2_fused
    from lobsurf.models.config import EncoderConfig
    from tests.models.conftest import perturbed_block

    torch.backends.cuda.matmul.fp32_precision = "tf32"
    block = perturbed_block(EncoderConfig(d_model=d, headdim=p, d_state=n,
                                          fused_inference="triton"), length).cuda()
    h = torch.randn(5, length, d, device="cuda")
    if prec == "bf16":
        h = h.bfloat16()
    with torch.no_grad():
        out = mamba2_fused._launch(h, *block.kernel_parameters(), p, n, block.mixer.cfg.norm_eps,
                                   last_only, warps)
    torch.cuda.synchronize()
    print(f"ok, |out| max {float(out.float().abs().max()):.3g}")


def main(argv: list[str]) -> int:
    if argv and argv[0] == "sequence":  # the GPU test's order, in one process
        for prec, last in (("fp32", False), ("fp32", True), ("bf16", False)):
            one(32, 16, 16, 37, prec, 4, last)
        return 0
    if argv:
        d, p, n, length, prec, warps, *last = argv[0].split(",")
        one(int(d), int(p), int(n), int(length), prec, int(warps), last == ["last"])
        return 0
    env = {**os.environ, "CUDA_LAUNCH_BLOCKING": "1"}
    for case in CASES:
        arg = ",".join(map(str, case))
        r = subprocess.run([sys.executable, __file__, arg], env=env, capture_output=True, check=False,
                           text=True, timeout=240)
        last = (r.stdout + r.stderr).strip().splitlines()
        print(f"D,P,N,L,prec,warps={arg}: rc={r.returncode} {last[-1][:160] if last else ''}",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
