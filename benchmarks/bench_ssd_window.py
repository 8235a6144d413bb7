"""The one-chunk SSD kernels (``ssd_backend = "triton_window"``) against the compiled
PyTorch scan, on CUDA.

For each batch of windows (K = 64, the default block: D 128, P 64, N 64, H 4), bf16
autocast, every call captured in a CUDA graph and replayed (GPU time):

- ``op``: the scan alone (y = SSD + D x from xbc, dt, A, D): torch.compile'd
  ``ssd_chunked`` against the kernels at each warp pair, no-grad forward and
  forward + backward;
- ``block``: one Mamba2 block compiled by torch.compile on each backend, no-grad forward
  and forward + backward, each also with the last row only (the encoder's last layer), and
  the gradients' agreement with the PyTorch block;

    python benchmarks/bench_ssd_window.py --batch 1024,2048 --out OUT
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import torch

from lobsurf.models.config import EncoderConfig
from lobsurf.models.mamba2 import Mamba2Block
from lobsurf.models.ssd import ssd_chunked
from lobsurf.models.kernels.ssd_window_triton import ssd_window

from micro import graphed_ms  # noqa: E402  (benchmarks/ is on sys.path)

#: (forward warps, backward warps) tried; 4 x 4 is the config's default (a backward of one
#: program per window looping over the heads, measured beside these in the twelfth session,
#: was dropped: 0.168 ms forward + backward at B = 1024 against the kept kernels' 0.156)
WARPS = [(4, 4), (4, 8)]


def torch_scan(xbc, dt, A, D, heads=4, headdim=64, d_state=64, chunk=64):
    batch, length, _ = xbc.shape
    E = heads * headdim
    x, B, C = torch.split(xbc, (E, d_state, d_state), dim=-1)
    xh = x.reshape(batch, length, heads, headdim)
    y = ssd_chunked(xh, dt, A, B, C, chunk)
    return (y + xh * D[:, None]).reshape(batch, length, E)


def op_rows(row: dict, batch: int, reps: int) -> None:
    g = torch.Generator(device="cuda").manual_seed(0)
    xbc = torch.randn(batch, 64, 384, device="cuda", generator=g).bfloat16()
    dt = torch.nn.functional.softplus(torch.randn(batch, 64, 4, device="cuda", generator=g) - 1)
    A = -(torch.rand(4, device="cuda", generator=g) + 0.1)
    D = torch.randn(4, device="cuda", generator=g)
    leaves = [t.clone().requires_grad_() for t in (xbc, dt, A, D)]
    dy = torch.randn(batch, 64, 256, device="cuda", generator=g).bfloat16()
    variants = {"torch": torch.compile(torch_scan, dynamic=False)}
    for wf, wb in WARPS:
        variants[f"kernels_w{wf}x{wb}"] = lambda *a, wf=wf, wb=wb: ssd_window(*a, 64, 64, wf, wb)
    ref = None
    for name, fn in variants.items():

        def fwd(fn=fn):
            with torch.no_grad():
                return fn(xbc, dt, A, D)

        def fwd_bwd(fn=fn):
            y = fn(*leaves)
            return torch.autograd.grad(y, leaves, dy)

        row[f"op_{name}_fwd_ms"] = graphed_ms(fwd, reps)
        row[f"op_{name}_fwd_bwd_ms"] = graphed_ms(fwd_bwd, reps)
        grads = torch.cat([t.float().flatten() for t in (fwd(), *fwd_bwd())])
        if ref is None:
            ref = grads
        else:
            row[f"op_{name}_rel_diff"] = ((grads - ref).norm() / ref.norm()).item()


def _blocks(ref: Mamba2Block) -> dict[str, Mamba2Block]:
    out = {"torch": ref}
    for wf, wb in WARPS:
        cfg = dataclasses.replace(ref.mixer.cfg, ssd_backend="triton_window",
                                  ssd_window_warps_fwd=wf, ssd_window_warps_bwd=wb)
        block = Mamba2Block(cfg).cuda()
        block.load_state_dict(ref.state_dict())
        out[f"kernels_w{wf}x{wb}"] = block
    return out


def block_rows(row: dict, batch: int, reps: int) -> None:
    torch.manual_seed(0)
    ref = Mamba2Block(EncoderConfig(ssd_backend="torch")).cuda()
    h = torch.randn(batch, 64, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    weight = torch.randn_like(h, dtype=torch.float32)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=False)
    base = None
    for name, block in _blocks(ref).items():
        compiled = torch.compile(block, dynamic=False)

        def fwd(compiled=compiled):
            with torch.no_grad(), autocast:
                return compiled(h)

        def fwd_bwd(compiled=compiled, block=block):
            with autocast:
                out = compiled(h)
            (out.float() * weight).sum().backward()

        last = torch.compile(lambda x, block=block: block(x, last_only=True), dynamic=False)

        def fwd_last(last=last):
            with torch.no_grad(), autocast:
                return last(h)

        def fwd_bwd_last(last=last):
            with autocast:
                out = last(h)
            (out.float() * weight[:, -1]).sum().backward()

        row[f"block_{name}_fwd_last_row_ms"] = graphed_ms(fwd_last, reps)
        row[f"block_{name}_fwd_bwd_last_row_ms"] = graphed_ms(fwd_bwd_last, reps)
        row[f"block_{name}_fwd_ms"] = graphed_ms(fwd, reps)
        row[f"block_{name}_fwd_bwd_ms"] = graphed_ms(fwd_bwd, reps)
        block.zero_grad(set_to_none=False)
        h.grad = None
        fwd_bwd()
        grads = torch.cat([p.grad.flatten().float() for p in block.parameters()]
                          + [h.grad.flatten().float()])
        if base is None:
            base = grads
        else:
            row[f"block_{name}_grad_rel_diff"] = ((grads - base).norm() / base.norm()).item()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", default="1024,2048")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--parts", default="op,block")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    torch.backends.cuda.matmul.fp32_precision = "tf32"
    rows = []
    for batch in (int(b) for b in args.batch.split(",")):
        row = {"batch": batch}
        if "op" in args.parts:
            op_rows(row, batch, args.reps)
        if "block" in args.parts:
            block_rows(row, batch, args.reps)
        rows.append(row)
        print(json.dumps(row), flush=True)
    print("\nms per call (CUDA graph replay), bf16:")
    for row in rows:
        for key in sorted(k for k in row if k.endswith("_ms")):
            print(f"B={row['batch']:5d} {key:40s} {row[key]:.4f}")
        for key in sorted(k for k in row if "rel_diff" in k):
            print(f"B={row['batch']:5d} {key:40s} {row[key]:.2e}")
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        Path(args.out, "ssd_window.json").write_text(json.dumps({"rows": rows}, indent=1))


if __name__ == "__main__":
    main()
