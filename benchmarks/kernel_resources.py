"""Registers, spills and shared memory of the Mamba2 scan kernels on a Hopper GPU, found
without one: each kernel compiled ahead of time for sm_90 by Triton, its PTX assembled by the
ptxas that comes with Triton (``ptxas -v``).

Register pressure is what the H200 timings blamed for the slow fused kernels tried before
(benchmarks/RESULTS.md: one window per program keeps many [K, K] fp32 tiles live); here it
is read on any machine with Triton, so a kernel change can be judged for spills before any
device time is spent. The figures are this Triton's and ptxas's; the device's Triton may
allocate differently, so the GPU timing stays the judge.

    python benchmarks/kernel_resources.py [--warps 4,8] [--precision bf16,tf32]
        [--window 64] [--maxnreg R] [--json F]

Runs on the CPU (TRITON_INTERPRET must be unset). Shape: the default block (D 128, P 64,
N 64, H 4, K 64); ``--window`` sets the tile length K (32: what a program of
a 32-row chunk would hold), ``--maxnreg`` caps the registers per thread (128 at 8 warps:
two programs per SM) to read the spills that the cap costs.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import re
import subprocess
import tempfile
import time
from pathlib import Path

#: the default encoder's block: heads, headdim, d_state, the window's tile length
SHAPE = {"H": 4, "P": 64, "N": 64, "KL": 64}
#: arguments that carry the activations' dtype (the rest of the pointers are fp32)
ACTIVATIONS = ("xbc_ptr", "z_ptr", "y_ptr", "dy_ptr", "dxbc_ptr", "ds_ptr", "wz_ptr")
#: the gated forwards' constexprs: with the gate (z read), with z = u W_z^T computed inside
#: (ZPROJ = d_model 128, ``ssd_window_gated_projected``)
VARIANTS = {"scan fwd gated": {"GATED": 1, "ZALIGN": 8},
            "scan fwd zproj": {"GATED": 1, "ZALIGN": 8, "ZPROJ": 128, "ZK": 64}}
#: Hopper, compute capability 9.0
ARCH = 90


def kernels() -> dict:
    from lobsurf.models.kernels import ssd_last_row_triton as last
    from lobsurf.models.kernels import ssd_window_triton as scan

    return {"scan fwd": scan._ssd_window_fwd, "scan fwd gated": scan._ssd_window_fwd,
            "scan fwd zproj": scan._ssd_window_fwd, "scan head bwd": scan._ssd_window_bwd_head,
            "scan scores bwd": scan._ssd_window_bwd_scores,
            "scan last bwd": last._ssd_window_bwd_last,
            "scan last fwd": last._ssd_window_fwd_last}


def ptxas_path() -> str:
    """Triton's own ptxas newest enough for its PTX (the Blackwell build reads newer PTX
    versions and still targets sm_90)."""
    import triton

    folder = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
    for name in ("ptxas-blackwell", "ptxas"):
        if (folder / name).exists():
            return str(folder / name)
    raise SystemExit(f"no ptxas in {folder}")


def signature(fn, activation: str, consts: dict) -> tuple[dict, dict, dict]:
    """The kernel's argument types, its constexprs, and the attributes Triton gives a launch
    on torch tensors: every pointer 16-byte aligned (torch's allocations, and the column
    offsets the kernels are called at, are), so its loads can be vectors. Without them each
    element of a tile is loaded alone, with a 64-bit address of its own: ptxas then reports
    far more registers than a launch uses (a scan kernel with the conv inside, tried in the
    twenty-fifth session: 255 registers and 752 bytes of spill stores without them, 255 and
    12 with them)."""
    sig, cx, attrs = {}, {}, {}
    for i, name in enumerate(inspect.signature(fn.fn).parameters):
        if name in consts:
            sig[name], cx[name] = "constexpr", consts[name]
        elif name.endswith("_ptr"):
            sig[name] = activation if name in ACTIVATIONS else "*fp32"
            attrs[(i,)] = [["tt.divisibility", 16]]
        else:
            sig[name] = "fp32" if name == "eps" else "i32"
    return sig, cx, attrs


def resources(fn, precision: str, warps: int, window: int = SHAPE["KL"],
              maxnreg: int | None = None, variant: dict | None = None) -> dict:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    consts = {**SHAPE, "BF16": int(precision == "bf16"),
              # E, the tile and TF32 in the one-chunk scan's (ssd_window_triton.py) names
              "E": SHAPE["H"] * SHAPE["P"], "Q": window,
              "PREC": "tf32" if precision == "tf32" else "ieee", "LAST_ONLY": 0,
              # the scan forward without its gate (ssd_window_gated)
              "GATED": 0, "ZALIGN": 1, "ZPROJ": 0, "ZK": 0, **(variant or {})}
    options = {"num_warps": warps, **({"maxnreg": maxnreg} if maxnreg else {})}
    sig, cx, attrs = signature(fn, "*bf16" if precision == "bf16" else "*fp32", consts)
    start = time.perf_counter()
    compiled = triton.compile(ASTSource(fn, sig, cx, attrs), target=GPUTarget("cuda", ARCH, 32),
                              options=options)
    seconds = time.perf_counter() - start
    with tempfile.TemporaryDirectory() as tmp:
        ptx = Path(tmp, "k.ptx")
        ptx.write_text(compiled.asm["ptx"])
        report = subprocess.run([ptxas_path(), "-v", f"--gpu-name=sm_{ARCH}a", str(ptx), "-o",
                                 str(Path(tmp, "k.cubin"))], capture_output=True, text=True,
                                check=False)
    text = report.stderr + report.stdout
    regs = re.search(r"Used (\d+) registers", text)
    spill = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, "
                      r"(\d+) bytes spill loads", text)
    if report.returncode or not regs or not spill:
        raise RuntimeError(f"ptxas: {text[-400:]}")
    return {"registers": int(regs.group(1)), "stack_bytes": int(spill.group(1)),
            "spill_store_bytes": int(spill.group(2)), "spill_load_bytes": int(spill.group(3)),
            "shared_bytes": compiled.metadata.shared, "compile_s": round(seconds, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--warps", default="4,8")
    ap.add_argument("--precision", default="bf16,tf32")
    ap.add_argument("--kernels", default=",".join(kernels()))
    ap.add_argument("--window", type=int, default=SHAPE["KL"], help="tile length K")
    ap.add_argument("--maxnreg", type=int, default=None, help="registers per thread, at most")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if os.environ.get("TRITON_INTERPRET") == "1":
        raise SystemExit("unset TRITON_INTERPRET: this compiles the kernels for a GPU")
    # an empty cache, so that every compile_s is a real compilation
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="kernel_resources_")
    table = kernels()
    rows = []
    for precision in args.precision.split(","):
        for warps in (int(w) for w in args.warps.split(",")):
            for name in args.kernels.split(","):
                row = {"kernel": name, "precision": precision, "warps": warps,
                       "window": args.window, "maxnreg": args.maxnreg,
                       **resources(table[name], precision, warps, args.window, args.maxnreg,
                                   VARIANTS.get(name))}
                rows.append(row)
                print(json.dumps(row), flush=True)
    import triton

    print(f"\nTriton {triton.__version__}, sm_{ARCH}, {SHAPE | {'KL': args.window}}, "
          f"maxnreg {args.maxnreg}")
    print(f"{'kernel':>11} {'prec':>5} {'warps':>5} {'regs':>5} {'stack B':>8} "
          f"{'spill st/ld B':>14} {'smem B':>7} {'compile s':>9}")
    for r in rows:
        print(f"{r['kernel']:>11} {r['precision']:>5} {r['warps']:>5} {r['registers']:>5} "
              f"{r['stack_bytes']:>8} {r['spill_store_bytes']:>6}/{r['spill_load_bytes']:<7} "
              f"{r['shared_bytes']:>7} {r['compile_s']:>9}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
