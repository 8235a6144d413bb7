"""Every kernel launch of the default CUDA path, and every other kernel of
``lobsurf.models.kernels`` and ``lobsurf.agent.c51_triton``, compiles for Hopper (sm_90),
checked on the CPU:
``sm90_launches.py`` records the launches a Mamba2 block makes (forward and backward, the
no-grad forwards, every row and the last, fp32 and bf16, z computed in the gated scan or
read by it) and the learner's C51 target, and compiles each with Triton's own compiler.
The other kernel tests run in Triton's interpreter, which accepts code the compiler
rejects; this one fails on such code before a GPU ever sees it (planted: a plain-float
global read inside the last-row forward passes every interpreter test and fails here).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton", reason="compiling a kernel needs Triton (dev extra on Linux)")

#: (kernel, the constexprs that pick its variant) of every launch the block must make
EXPECTED = (
    # every row: under autograd the scan alone; without it the gate in the scan, z read
    # from the in-projection (ZPROJ 0) or computed from the block's input (ZPROJ = d_model)
    {("_ssd_window_fwd", (("BF16", bf16), ("GATED", gated), ("ZPROJ", zproj)))
     for bf16 in (0, 1) for gated, zproj in ((False, 0), (True, 0), (True, 128))}
    # the last row: its forward as vectors, with and without the gate
    | {("_ssd_window_fwd_last", (("BF16", bf16), ("GATED", gated)))
       for bf16 in (0, 1) for gated in (False, True)}
    | {(name, (("BF16", bf16),)) for bf16 in (0, 1)
       for name in ("_ssd_window_bwd_head", "_ssd_window_bwd_scores", "_ssd_window_bwd_last")}
    | {("_conv_walk_fwd_kernel", (("ALIGN", align),)) for align in (4, 8)}
    | {("_conv_dt_bwd_kernel", (("ALIGN", align),)) for align in (4, 8)}
    # the learner's C51 target (train.kernels), the discount a float or per sample
    | {("_c51_target_kernel", (("GAMMA_PER_ROW", rows),)) for rows in (False, True)})
#: the constexprs that tell the expected variants apart
VARIANT_KEYS = ("BF16", "GATED", "ALIGN", "ZPROJ", "GAMMA_PER_ROW")


def _variant(row: dict) -> tuple:
    consts = row["constexprs"]
    return row["kernel"], tuple((k, consts[k]) for k in VARIANT_KEYS if k in consts)


@pytest.mark.slow
def test_every_kernel_and_every_default_launch_compiles_for_sm90() -> None:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_DEFAULT_FP_FUSION"] = "1"  # Triton 3.9 warns without it; 1 = its default
    done = subprocess.run([sys.executable, "-m", "tests.models.kernels.sm90_launches"],
                          capture_output=True, text=True, env=env, timeout=600, check=False,
                          cwd=Path(__file__).resolve().parents[3])  # the repository root
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    rows, defined = lines[:-1], lines[-1]["defined"]
    assert EXPECTED <= {_variant(r) for r in rows}
    assert sorted({r["kernel"] for r in rows}) == defined  # every kernel, compiled
    for r in rows:
        # what a program stages in shared memory fits the H200's 227 KB per block
        assert r["shared"] <= 227 * 1024, r
