"""The fused Mamba2 kernels against the compiled PyTorch block, on CUDA.

For each batch of windows (K = 64, the default block: D 128, P 64, N 64, H 4) and precision
(fp32 with TF32 products, bf16 autocast), each call captured in a CUDA graph and replayed
(GPU time, launch overhead gone):

- ``train`` (default): the block's forward + backward with autograd, the PyTorch block
  compiled by torch.compile against the fused core (``encoder.fused_training``) in each
  grid (``fused_core_programs``: a program per window, or per (window, head)) at each warp
  count, and the gradients' agreement with the compiled block (the fused blocks' projections
  and norms run eagerly here, graphed but not compiled; ``profile_mamba2_block.py``
  compiles every variant and times each kernel);
- ``core``: the no-grad forward through the window-grid core, GEMMs compiled around it;
- ``block``: the one-kernel block (``encoder.fused_inference``), which is off on CUDA
  (``mamba2_fused.CUDA_DISABLED``): these rows are an error until that switch goes.

The per-op-fused HBM floor of the PyTorch block's forward (PERFORMANCE.md 4.2: ~8 KB per
token in bf16, 16 KB in fp32) is printed beside the compiled no-grad forward.

    python benchmarks/bench_fused_block.py --batch 1024,2048 --parts train --out OUT
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

import torch

from lobsurf.models.config import EncoderConfig
from lobsurf.models.mamba2 import Mamba2Block

#: bytes per token of one block forward at the per-op-fused floor (PERFORMANCE.md 4.2)
FLOOR_BYTES_PER_TOKEN = {"fp32": 16_000, "bf16": 8_000}
#: H200 HBM bandwidth, bytes/s
HBM_BYTES_PER_S = 4.3e12


def graphed_ms(fn, reps: int) -> float:
    """ms per call of ``fn`` captured in one CUDA graph (warm-up on a side stream)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps


def micro_args(doc: str, batch: str = "1024,2048") -> argparse.Namespace:
    """The kernel micro-benchmarks' command line: --batch (comma-separated windows per
    call), --reps (graph replays timed), --out (folder for the JSON rows)."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--batch", default=batch)
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--out", default=None)
    return ap.parse_args()


def run_batches(doc: str, rows_of, title: str, file_name: str) -> None:
    """A kernel micro-benchmark's main: ``rows_of(batch, reps)`` for each --batch, each row
    printed as JSON as it comes, then ``report_rows`` (the folder --out made first)."""
    args = micro_args(doc)
    rows = []
    for batch in (int(b) for b in args.batch.split(",")):
        rows.append(rows_of(batch, args.reps))
        print(json.dumps(rows[-1]), flush=True)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
    report_rows(rows, title, args.out, file_name)


def report_rows(rows: list[dict], title: str, out: str | None, file_name: str) -> None:
    """Print each row's figures on one line under ``title``; write them all as JSON to
    ``out``/``file_name`` when ``out`` is given (the kernel micro-benchmarks' report)."""
    print(title)
    for row in rows:
        print("  ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                        for k, v in row.items()))
    if out:
        Path(out, file_name).write_text(json.dumps(rows, indent=1))


def core_rows(row: dict, ref: Mamba2Block, h: torch.Tensor, autocast, want: torch.Tensor,
              args) -> None:
    """No-grad forward through the fused core only (pre-norm, in_proj and out_proj stay
    PyTorch GEMMs/ops around it, compiled), per grid (``--programs``) and warp count."""
    from lobsurf.models.mamba2 import rms_norm

    for programs in args.programs.split(","):
        for warps in (int(w) for w in args.warps.split(",")):
            cfg = dataclasses.replace(ref.mixer.cfg, fused_training="triton",
                                      fused_core_programs=programs, fused_warps=warps,
                                      fused_head_warps=warps)
            fused = Mamba2Block(cfg).cuda()
            fused.load_state_dict(ref.state_dict())

            def core_block(x, fused=fused):
                return x + fused.mixer._fused_core_forward(rms_norm(fused.norm, x), False)

            compiled = torch.compile(core_block, dynamic=False)

            def run(compiled=compiled):
                with torch.no_grad(), autocast:
                    return compiled(h)

            got = run()
            name = _fused_name(programs, warps).removeprefix("fused_")
            row[f"{name}_ms"] = graphed_ms(run, args.reps)
            row[f"{name}_rel_err"] = ((got.float() - want.float()).norm()
                                      / want.float().norm()).item()


def _fused_name(programs: str, warps: int) -> str:
    return f"fused_{'core' if programs == 'window' else 'heads'}_w{warps}"


def train_rows(row: dict, ref: Mamba2Block, h: torch.Tensor, autocast, args) -> None:
    """Forward + backward of the block (autograd on): the PyTorch block compiled against
    the fused core (``fused_training``), both graphed; gradient agreement of the two."""
    h = h.detach().clone().requires_grad_()
    weight = torch.randn_like(h, dtype=torch.float32)
    compiled = torch.compile(ref, dynamic=False)
    cfg = dataclasses.replace(ref.mixer.cfg, fused_training="triton", fused_inference="torch")
    def step(block):
        def run():
            with autocast:
                out = block(h)
            (out.float() * weight).sum().backward()
        return run

    blocks = {"torch_compiled": (compiled, ref)}
    for programs in args.programs.split(","):
        for warps in (int(w) for w in args.warps.split(",")):
            fused = Mamba2Block(dataclasses.replace(cfg, fused_warps=warps, fused_head_warps=warps,
                                                    fused_core_programs=programs)).cuda()
            fused.load_state_dict(ref.state_dict())
            blocks[_fused_name(programs, warps)] = (fused, fused)
    grads = {}
    for name, (block, params) in blocks.items():
        params.zero_grad(set_to_none=False)
        h.grad = None
        step(block)()
        grads[name] = torch.cat([p.grad.flatten().float() for p in params.parameters()])
        row[f"{name}_fwd_bwd_ms"] = graphed_ms(step(block), args.reps)
    base = grads.pop("torch_compiled")
    for name, g in grads.items():
        row[f"{name}_grad_rel_err"] = ((g - base).norm() / base.norm()).item()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", default="1024,2048")
    ap.add_argument("--window", type=int, default=64)
    ap.add_argument("--warps", default="4,8")
    ap.add_argument("--programs", default="window,head",
                    help="fused_core_programs grids of the train rows, comma-separated")
    ap.add_argument("--parts", default="train", help="train, core, block (comma-separated)")
    ap.add_argument("--precision", default="fp32,bf16")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    parts = set(args.parts.split(","))
    torch.backends.cuda.matmul.fp32_precision = "tf32"
    rows = []
    for batch in (int(b) for b in args.batch.split(",")):
        for precision in args.precision.split(","):
            torch.manual_seed(0)
            ref = Mamba2Block(EncoderConfig(fused_inference="torch")).cuda()
            dtype = torch.bfloat16 if precision == "bf16" else torch.float32
            h = torch.randn(batch, args.window, ref.mixer.cfg.d_model, device="cuda",
                            dtype=dtype)
            autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=precision == "bf16",
                                      cache_enabled=False)
            compiled = torch.compile(ref, dynamic=False)

            def torch_block(compiled=compiled, h=h, autocast=autocast):
                with torch.no_grad(), autocast:
                    return compiled(h)

            t0 = time.perf_counter()
            want = torch_block()
            compile_s = time.perf_counter() - t0
            row = {"batch": batch, "window": args.window, "precision": precision,
                   "torch_compiled_ms": graphed_ms(torch_block, args.reps),
                   "torch_compile_s": compile_s}
            tokens = batch * args.window
            row["perop_floor_ms"] = tokens * FLOOR_BYTES_PER_TOKEN[precision] / HBM_BYTES_PER_S * 1e3
            if "block" in parts:
                block_rows(row, ref, h, autocast, want, args)
            if "core" in parts:
                core_rows(row, ref, h, autocast, want, args)
            if "train" in parts:
                t0 = time.perf_counter()
                train_rows(row, ref, h, autocast, args)
                row["train_rows_s"] = time.perf_counter() - t0
            rows.append(row)
            print(json.dumps(row), flush=True)
            torch.cuda.empty_cache()
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        Path(args.out, "fused_block.json").write_text(json.dumps(rows, indent=1))
    print_tables(rows, args, parts)


def block_rows(row: dict, ref: Mamba2Block, h: torch.Tensor, autocast, want: torch.Tensor,
               args) -> None:
    """No-grad forward of the one-kernel block, per warp count."""
    for warps in (int(w) for w in args.warps.split(",")):
        cfg = dataclasses.replace(ref.mixer.cfg, fused_inference="triton", fused_warps=warps)
        fused = Mamba2Block(cfg).cuda()
        fused.load_state_dict(ref.state_dict())

        def fused_block(fused=fused):
            with torch.no_grad(), autocast:
                return fused(h)

        got = fused_block()
        row[f"fused_w{warps}_ms"] = graphed_ms(fused_block, args.reps)
        row[f"fused_w{warps}_rel_err"] = ((got.float() - want.float()).norm()
                                          / want.float().norm()).item()


def print_tables(rows: list[dict], args, parts: set[str]) -> None:
    warps = [int(w) for w in args.warps.split(",")]
    cores = [_fused_name(p, w).removeprefix("fused_") for p in args.programs.split(",")
             for w in warps]
    print(f"\n{torch.cuda.get_device_name()}, torch {torch.__version__}; ms per call, CUDA "
          "graph replay")
    print(f"{'B':>5} {'prec':>4} {'no-grad fwd: torch compiled':>27} {'floor':>7}"
          + ("".join(f" {'block w' + str(w):>9}" for w in warps) if "block" in parts else "")
          + ("".join(f" {n:>14}" for n in cores) if "core" in parts else ""))
    for r in rows:
        print(f"{r['batch']:>5} {r['precision']:>4} {r['torch_compiled_ms']:>27.3f} "
              f"{r['perop_floor_ms']:>7.3f}"
              + ("".join(f" {r[f'fused_w{w}_ms']:>9.3f}" for w in warps)
                 if "block" in parts else "")
              + ("".join(f" {r[f'{n}_ms']:>14.3f}" for n in cores)
                 if "core" in parts else ""))
    if "train" not in parts:
        return
    names = [_fused_name(p, w) for p in args.programs.split(",") for w in warps]
    print("\nforward + backward (autograd on), ms (grad rel err to the compiled block)")
    print(f"{'B':>5} {'prec':>4} {'torch compiled':>14} " + " ".join(f"{n:>24}" for n in names))
    for r in rows:
        print(f"{r['batch']:>5} {r['precision']:>4} {r['torch_compiled_fwd_bwd_ms']:>14.3f} "
              + " ".join(f"{r[f'{n}_fwd_bwd_ms']:>14.3f} ({r[f'{n}_grad_rel_err']:.1e})"
                         for n in names))


if __name__ == "__main__":
    main()
