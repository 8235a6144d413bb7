"""The one-kernel Mamba2 block (no-grad forward) against the compiled PyTorch block, on CUDA.

For each batch of windows (K = 64, the default block: D 128, P 64, N 64, H 4) and precision
(fp32 with TF32 products, bf16 autocast): the block's forward without autograd as
(a) the PyTorch block compiled by torch.compile and (b) the fused Triton kernel at each
warp count, both captured in a CUDA graph and replayed (GPU time, launch overhead gone);
the output agreement of the two; and the per-op-fused HBM floor of the PyTorch block
(PERFORMANCE.md 4.2: ~8 KB per token in bf16, 16 KB in fp32) next to the fused kernel's
own traffic (block input and output, ~0.5 KB per token in bf16).

    python benchmarks/bench_fused_block.py --batch 1024,2048 --out OUT
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


def core_rows(row: dict, ref: Mamba2Block, h: torch.Tensor, autocast, want: torch.Tensor,
              args) -> None:
    """No-grad forward through the fused core only (pre-norm, in_proj and out_proj stay
    PyTorch GEMMs/ops around it, compiled), per warp count."""
    from lobsurf.models import mamba2_fused_core
    from lobsurf.models.mamba2 import rms_norm

    m = ref.mixer
    for warps in (int(w) for w in args.warps.split(",")):
        def core_block(x, warps=warps):
            o, _ = mamba2_fused_core.mamba2_core(
                m.in_proj(rms_norm(ref.norm, x)), m.conv_weight, m.conv_bias, m.dt_bias,
                m.A_log, m.D, m.norm_weight, m.cfg.headdim, m.cfg.d_state, m.cfg.norm_eps, warps)
            return x + m.out_proj(o)

        compiled = torch.compile(core_block, dynamic=False)

        def run():
            with torch.no_grad(), autocast:
                return compiled(h)

        got = run()
        row[f"core_w{warps}_ms"] = graphed_ms(run, args.reps)
        row[f"core_w{warps}_rel_err"] = ((got.float() - want.float()).norm()
                                        / want.float().norm()).item()


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
    for warps in (int(w) for w in args.warps.split(",")):
        fused = Mamba2Block(dataclasses.replace(cfg, fused_warps=warps)).cuda()
        fused.load_state_dict(ref.state_dict())
        blocks[f"fused_core_w{warps}"] = (fused, fused)
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
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    torch.backends.cuda.matmul.fp32_precision = "tf32"
    rows = []
    for batch in (int(b) for b in args.batch.split(",")):
        for precision in ("fp32", "bf16"):
            torch.manual_seed(0)
            ref = Mamba2Block(EncoderConfig(fused_inference="torch")).cuda()
            dtype = torch.bfloat16 if precision == "bf16" else torch.float32
            h = torch.randn(batch, args.window, ref.mixer.cfg.d_model, device="cuda",
                            dtype=dtype)
            autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=precision == "bf16",
                                      cache_enabled=False)
            compiled = torch.compile(ref, dynamic=False)

            def torch_block():
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
            for warps in (int(w) for w in args.warps.split(",")):
                cfg = dataclasses.replace(ref.mixer.cfg, fused_inference="triton",
                                          fused_warps=warps)
                fused = Mamba2Block(cfg).cuda()
                fused.load_state_dict(ref.state_dict())

                def fused_block():
                    with torch.no_grad(), autocast:
                        return fused(h)

                got = fused_block()
                err = ((got.float() - want.float()).norm() / want.float().norm()).item()
                row[f"fused_w{warps}_ms"] = graphed_ms(fused_block, args.reps)
                row[f"fused_w{warps}_rel_err"] = err
            core_rows(row, ref, h, autocast, want, args)
            train_rows(row, ref, h, autocast, args)
            rows.append(row)
            print(json.dumps(row), flush=True)
            torch.cuda.empty_cache()
    print(f"\n{torch.cuda.get_device_name()}, torch {torch.__version__}; ms per block forward "
          "(no grad, CUDA graph replay)")
    warps = [int(w) for w in args.warps.split(",")]
    print(f"{'B':>5} {'prec':>4} {'torch compiled':>14} {'floor':>7} "
          + " ".join(f"{'fused w' + str(w):>9} {'rel err':>8}" for w in warps) + "  speed-up")
    for r in rows:
        best = min(r[f"fused_w{w}_ms"] for w in warps)
        print(f"{r['batch']:>5} {r['precision']:>4} {r['torch_compiled_ms']:>14.3f} "
              f"{r['perop_floor_ms']:>7.3f} "
              + " ".join(f"{r[f'fused_w{w}_ms']:>9.3f} {r[f'fused_w{w}_rel_err']:>8.1e}"
                         for w in warps)
              + f"  {r['torch_compiled_ms'] / best:>6.2f}x")
    print("\nno-grad forward through the fused core (GEMMs and norms compiled around it), ms")
    print(f"{'B':>5} {'prec':>4} " + " ".join(f"{'core w' + str(w):>9} {'rel err':>8}"
                                              for w in warps))
    for r in rows:
        print(f"{r['batch']:>5} {r['precision']:>4} " + " ".join(
            f"{r[f'core_w{w}_ms']:>9.3f} {r[f'core_w{w}_rel_err']:>8.1e}" for w in warps))
    print("\nforward + backward (autograd on), ms, CUDA graph replay")
    print(f"{'B':>5} {'prec':>4} {'torch compiled':>14} "
          + " ".join(f"{'core w' + str(w):>9} {'grad err':>8}" for w in warps))
    for r in rows:
        print(f"{r['batch']:>5} {r['precision']:>4} {r['torch_compiled_fwd_bwd_ms']:>14.3f} "
              + " ".join(f"{r[f'fused_core_w{w}_fwd_bwd_ms']:>9.3f} "
                         f"{r[f'fused_core_w{w}_grad_rel_err']:>8.1e}" for w in warps))
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        Path(args.out, "fused_block.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
