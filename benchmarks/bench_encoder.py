"""The Mamba2 encoder's fast path (the Triton kernels its defaults take on CUDA) against its
PyTorch reference, whole and kernel by kernel: ms per call, the speed-up, and how far apart
the two paths' outputs and gradients are.

Parts (``--parts``, both by default):

* ``encoder``: the default encoder (66 features, K = 64, d_model 128) at each ``--shapes``
  B:layers, called as the training step calls it, last row only: without autograd (acting
  on B windows, the target net on 2B) and the learner's forward + backward (every
  parameter's gradient). Fast: ``Encoder.use_kernels_("on")`` (the kernels "auto" takes on
  CUDA); reference: ``"off"``, the PyTorch path. One set of weights.
* ``ops``: each kernel alone against the PyTorch ops it replaces, on the default layer's
  tensors (x, B, C a slice of the in-projection's padded rows, as in the step): the
  one-chunk scan forward and forward + backward, its last row forward + backward, the scan
  with the gated norm's gate (no autograd), the conv + SiLU forward (no autograd), the
  conv + dt softplus forward + backward.

On CUDA (bf16 by default) both sides are compiled by torch.compile (the reference's ops
fused by Inductor, as the step runs them) and captured in one CUDA graph: 3 warm-up calls
on a side stream, the capture, one replay, then ``--reps`` replays timed between two CUDA
events after a synchronize. On CPU the calls run eagerly, timed by the host clock after 2
warm-up calls; the fast path needs Triton's interpreter there (``TRITON_INTERPRET=1``), and
its CPU figures only show that the script works. The table comes last; the script fails
when a fast path and its reference disagree beyond the precision's tolerance.

    python benchmarks/bench_encoder.py --out OUT                  # CUDA: B:layers 256:4,1024:2
    TRITON_INTERPRET=1 python benchmarks/bench_encoder.py --device cpu --quick --out /tmp/enc
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from lobsurf.models.config import EncoderConfig
from lobsurf.models.encoder import Encoder
from lobsurf.models.kernels import conv_dt_triton, conv_triton, ssd_window_triton
from lobsurf.models.mamba2 import gated_rms_norm
from lobsurf.models.ssd import ssd_chunked

#: the default feature set's width F (docs/features.md)
IN_FEATURES = 66
#: snapshots per window K, the training default
WINDOW = 64
#: the --quick model: the smallest the kernels' tiles take (power-of-two sides >= 16)
QUICK_MODEL = dict(d_model=32, headdim=16, d_state=16)
#: the --quick window K
QUICK_WINDOW = 16
#: largest relative difference (norm of the difference over the reference's norm) between
#: the two paths' outputs or gradients, by precision
TOLERANCE = {"bf16": 5e-2, "fp32": 1e-2}
#: warm-up calls before a capture or a timed loop
WARMUP = 3
#: torch.compile's variants of one function before it falls back to eager (its default, 8,
#: is fewer than the fast and reference encoders' calls at every shape)
RECOMPILE_LIMIT = 64


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def ms_per_call(fn, device: torch.device, reps: int) -> float:
    """ms per call of ``fn``: CUDA graph replays between CUDA events, or host time on CPU."""
    if device.type != "cuda":
        for _ in range(WARMUP - 1):
            fn()
        start = time.perf_counter()
        for _ in range(reps):
            fn()
        return (time.perf_counter() - start) * 1e3 / reps
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(WARMUP):
            fn()
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    graph.replay()
    sync(device)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        graph.replay()
    end.record()
    sync(device)
    return start.elapsed_time(end) / reps


def rel_diff(got, want) -> float:
    """‖got - want‖ / ‖want‖ over every tensor of the two (matched) sequences."""
    got = torch.cat([t.detach().double().flatten() for t in got])
    want = torch.cat([t.detach().double().flatten() for t in want])
    return ((got - want).norm() / want.norm()).item()


def compare(name: str, windows: int, fast, reference, call, device: torch.device,
            args) -> dict:
    """One row (``windows`` per call): ``call(fast)`` against ``call(reference)``, timed,
    with their results' relative difference. ``call`` returns a tuple of tensors and takes
    any gradients around ``fast`` and ``reference``, which are compiled on CUDA."""
    if device.type == "cuda":
        fast, reference = (torch.compile(f, dynamic=False) for f in (fast, reference))
    diff = rel_diff(call(fast), call(reference))
    fast_ms = ms_per_call(lambda: call(fast), device, args.reps)
    ref_ms = ms_per_call(lambda: call(reference), device, args.reps)
    row = {"name": name, "windows": windows, "fast_ms": fast_ms, "reference_ms": ref_ms,
           "speedup": ref_ms / fast_ms, "rel_diff": diff}
    print(json.dumps(row), flush=True)
    return row


def autocast(device: torch.device, precision: str):
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")


def encoder_rows(batch: int, layers: int, device: torch.device, args) -> list[dict]:
    """The whole encoder, fast against reference: no-grad at B and 2B, forward + backward."""
    base = EncoderConfig(n_layers=layers, **(QUICK_MODEL if args.quick else {}))
    window = QUICK_WINDOW if args.quick else WINDOW
    torch.manual_seed(0)
    # the fast path insists on the kernels (what "auto" takes on CUDA); the reference never
    reference = Encoder(base, IN_FEATURES).use_kernels_("off").to(device)
    fast = Encoder(base, IN_FEATURES).use_kernels_("on").to(device)
    fast.load_state_dict(reference.state_dict())
    params = {net: list(net.parameters()) for net in (fast, reference)}
    g = torch.Generator(device=device).manual_seed(batch)
    x = torch.randn(2 * batch, window, IN_FEATURES, device=device, generator=g)
    log_dt = torch.randn(2 * batch, window, device=device, generator=g)
    weight = torch.randn(batch, base.d_model, device=device, generator=g)
    rows = []
    for windows in (batch, 2 * batch):

        def forward(net, n=windows):
            with torch.no_grad(), autocast(device, args.precision):
                return (net(x[:n], log_dt[:n], return_sequence=False).last,)

        rows.append(compare(f"encoder B={windows} L={layers} no-grad forward", windows, fast,
                            reference, forward, device, args))

    def learn(net):
        with autocast(device, args.precision):
            out = net(x[:batch], log_dt[:batch], return_sequence=False).last
        loss = (out.float() * weight).sum()
        original = getattr(net, "_orig_mod", net)  # a compiled module's parameters
        return (out, *torch.autograd.grad(loss, params[original]))

    rows.append(compare(f"encoder B={batch} L={layers} forward + backward", batch, fast,
                        reference, learn, device, args))
    return rows


@dataclasses.dataclass(frozen=True)
class LayerInputs:
    """One Mamba2 layer's tensors at B windows, as the in-projection lays them out."""

    cfg: EncoderConfig
    proj: torch.Tensor
    """[B, K, 2E + 2N + H, padded] the in-projection's output: z | x B C | dt | padding."""
    conv_w: torch.Tensor
    conv_b: torch.Tensor
    dt_bias: torch.Tensor
    A: torch.Tensor
    D: torch.Tensor
    norm_w: torch.Tensor

    @property
    def z(self) -> torch.Tensor:
        return self.proj[..., :self.cfg.d_inner]

    @property
    def xbcdt(self) -> torch.Tensor:
        return self.proj[..., self.cfg.d_inner:]

    @property
    def channels(self) -> int:
        return self.cfg.d_inner + 2 * self.cfg.d_state


def layer_inputs(cfg: EncoderConfig, batch: int, window: int, dtype, device) -> LayerInputs:
    g = torch.Generator(device=device).manual_seed(batch)
    E, N, H = cfg.d_inner, cfg.d_state, cfg.n_heads
    width = -(-(2 * E + 2 * N + H) // 8) * 8  # padded as on CUDA (models/align.py)

    def randn(*shape, scale=1.0):
        return (scale * torch.randn(*shape, device=device, generator=g)).to(dtype)

    return LayerInputs(
        cfg, randn(batch, window, width), randn(cfg.d_conv, E + 2 * N, scale=0.5),
        randn(E + 2 * N, scale=0.5), torch.rand(H, device=device, generator=g) - 3.0,
        -(torch.rand(H, device=device, generator=g) + 0.1),
        torch.randn(H, device=device, generator=g),
        1 + 0.1 * torch.randn(E, device=device, generator=g))


def torch_conv(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    padded = F.pad(x, (0, 0, weight.shape[0] - 1, 0))
    return conv_triton.torch_conv_silu(padded, weight, bias, x.shape[1])


def torch_scan(xbc, dt, A, D, cfg: EncoderConfig) -> torch.Tensor:
    batch, length, _ = xbc.shape
    x, B, C = torch.split(xbc, (cfg.d_inner, cfg.d_state, cfg.d_state), dim=-1)
    xh = x.reshape(batch, length, cfg.n_heads, cfg.headdim)
    y = ssd_chunked(xh, dt, A, B, C, cfg.chunk_size)
    return (y + xh * D[:, None].to(y.dtype)).reshape(batch, length, cfg.d_inner)


def op_rows(batch: int, device: torch.device, args) -> list[dict]:
    """Each kernel of the fast path alone against the PyTorch ops it replaces."""
    cfg = EncoderConfig(**(QUICK_MODEL if args.quick else {}))
    window = QUICK_WINDOW if args.quick else WINDOW
    dtype = torch.bfloat16 if args.precision == "bf16" else torch.float32
    t = layer_inputs(cfg, batch, window, dtype, device)
    P, N, C, H, E = cfg.headdim, cfg.d_state, t.channels, cfg.n_heads, cfg.d_inner
    with torch.no_grad():
        xbc = torch_conv(t.xbcdt[..., :C], t.conv_w, t.conv_b).contiguous()
        dt = F.softplus(t.xbcdt[..., C:C + H].float() + t.dt_bias)
    scan_in = (xbc, dt, t.A, t.D)
    leaves = [v.clone().requires_grad_() for v in scan_in]
    dy = torch.randn(batch, window, E, device=device).to(dtype)

    def no_grad(*inputs):
        def call(fn):
            with torch.no_grad():
                return (fn(*inputs),)
        return call

    def with_grads(seeds, *inputs):
        def call(fn):
            outs = fn(*inputs)
            outs = outs if isinstance(outs, tuple) else (outs,)
            seeds_ = [s.to(o.dtype) for s, o in zip(seeds, outs)]
            return (*outs, *torch.autograd.grad(outs, inputs, seeds_))
        return call

    def fast_scan(*a):
        return ssd_window_triton.ssd_window(*a, P, N)

    def ref_scan(*a):
        return torch_scan(*a, cfg)

    def fast_last(*a):
        return ssd_window_triton.ssd_window(*a, P, N, last_only=True)

    def ref_last(*a):
        return torch_scan(*a, cfg)[:, -1]

    def fast_gated(xbc, dt, A, D, z, w):
        gw, ss = ssd_window_triton.ssd_window_gated(xbc, dt, A, D, z, w, P, N)
        return gw.float() * torch.rsqrt(ss.sum(-1, keepdim=True) / E + cfg.norm_eps)

    def ref_gated(xbc, dt, A, D, z, w):
        return gated_rms_norm(torch_scan(xbc, dt, A, D, cfg), z, w, cfg.norm_eps)

    def ref_conv_dt(proj, w, b, dt_bias):
        return torch_conv(proj[..., :C], w, b), F.softplus(proj[..., C:C + H].float() + dt_bias)

    def fast_conv_dt(proj, w, b, dt_bias):
        return conv_dt_triton.conv_dt(proj, w, b, dt_bias, C, H)

    x = t.xbcdt[..., :C]  # a view of the in-projection's rows, as in the step
    conv_leaves = [v.clone().requires_grad_() for v in (t.xbcdt, t.conv_w, t.conv_b,
                                                         t.dt_bias)]
    conv_seeds = (torch.randn(batch, window, C, device=device),
                  torch.randn(batch, window, H, device=device))
    cases = (
        ("scan no-grad forward", fast_scan, ref_scan, no_grad(*scan_in)),
        ("scan forward + backward", fast_scan, ref_scan, with_grads((dy,), *leaves)),
        ("scan last row forward + backward", fast_last, ref_last,
         with_grads((dy[:, -1],), *leaves)),
        ("gated scan no-grad forward", fast_gated, ref_gated,
         no_grad(*scan_in, t.z, t.norm_w)),
        ("conv no-grad forward", conv_triton.conv_silu, torch_conv,
         no_grad(x, t.conv_w, t.conv_b)),
        ("conv + dt forward + backward", fast_conv_dt, ref_conv_dt,
         with_grads(conv_seeds, *conv_leaves)),
    )
    return [compare(f"{name} B={batch}", batch, fast, reference, call, device, args)
            for name, fast, reference, call in cases]


def print_table(rows: list[dict], header: str) -> None:
    print(f"\n{header}")
    print(f"{'call':52} {'fast ms':>9} {'torch ms':>9} {'speed-up':>8} {'fast win/s':>11} "
          f"{'rel diff':>9}")
    for r in rows:
        print(f"{r['name']:52} {r['fast_ms']:9.4f} {r['reference_ms']:9.4f} "
              f"{r['speedup']:7.2f}x {r['windows'] / r['fast_ms'] * 1e3:11,.0f} "
              f"{r['rel_diff']:9.1e}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--parts", default="encoder,ops", help="comma list of encoder,ops")
    ap.add_argument("--shapes", default=None,
                    help="encoder B:layers, comma-separated (default 256:4,1024:2; --quick 2:2)")
    ap.add_argument("--batch", default=None,
                    help="windows per op call, comma-separated (default 1024; --quick 2)")
    ap.add_argument("--precision", default=None, choices=("bf16", "fp32"),
                    help="default bf16 on CUDA, fp32 on CPU")
    ap.add_argument("--reps", type=int, default=None,
                    help="timed calls (default 50 on CUDA, 3 on CPU)")
    ap.add_argument("--quick", action="store_true", help="the smallest model the kernels take")
    ap.add_argument("--out", type=Path, default=None, help="folder for bench_encoder.json")
    args = ap.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: CUDA is not available (try --device cpu --quick with "
                 "TRITON_INTERPRET=1)")
    args.precision = args.precision or ("bf16" if device.type == "cuda" else "fp32")
    args.reps = args.reps or (50 if device.type == "cuda" else 3)
    if device.type == "cuda":
        torch.backends.cuda.matmul.fp32_precision = "tf32"
        # one compiled variant per path, call and shape of the same forward code
        torch._dynamo.config.recompile_limit = RECOMPILE_LIMIT
    shapes = args.shapes or ("2:2" if args.quick else "256:4,1024:2")
    batches = args.batch or ("2" if args.quick else "1024")
    parts = args.parts.split(",")
    encoder, ops = [], []
    if "encoder" in parts:
        for shape in shapes.split(","):
            b, layers = (int(v) for v in shape.split(":"))
            encoder += encoder_rows(b, layers, device, args)
    if "ops" in parts:
        for b in batches.split(","):
            ops += op_rows(int(b), device, args)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    meta = {"device": name, "torch": torch.__version__, "python": platform.python_version(),
            "date": time.strftime("%Y-%m-%d"), "precision": args.precision,
            "reps": args.reps, "quick": args.quick}
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "bench_encoder.json").write_text(
            json.dumps({"meta": meta, "encoder": encoder, "ops": ops}, indent=1))
    title = f"{name}, torch {torch.__version__}, {args.precision}, {meta['date']}"
    if encoder:
        print_table(encoder, f"encoder, fast path against PyTorch ({title})")
    if ops:
        print_table(ops, f"kernels alone against the PyTorch ops they replace ({title})")
    bad = [r["name"] for r in encoder + ops
           if not r["rel_diff"] < TOLERANCE[args.precision] or not r["fast_ms"] > 0]
    assert not bad, f"fast path and reference disagree beyond {TOLERANCE[args.precision]}: {bad}"
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
