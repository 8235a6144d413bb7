"""Encoder forward+backward throughput: eager vs torch.compile vs CUDA graph, TF32 and bf16.

Usage:
    python benchmarks/bench_encoder.py --device cuda --out bench_out/
    python benchmarks/bench_encoder.py --quick --out /tmp/bench   # tiny shapes on the CPU

One pass = ``Encoder(x, log_dt)`` forward, a scalar loss on the output, and
``torch.autograd.grad`` of every parameter (no optimizer). Shapes (issue 4):
B=1024,K=64,D=128,2 layers; B=256 same; B=1024,K=128,D=256,4 layers. Modes:

* ``eager``        plain PyTorch ops;
* ``compile``      ``torch.compile(encoder, dynamic=False)``, default mode (no Inductor graphs);
* ``graph_eager``  the eager pass captured in one ``torch.cuda.graph``;
* ``graph``        the compiled pass captured in one ``torch.cuda.graph`` (the training setup).

``--ssd-backend/--conv-backend triton`` swap in the fused Triton kernels (default: PyTorch);
``--profile`` writes a torch.profiler table (kernels by self CUDA time) per non-graph mode;
``--shapes`` picks cases by name; ``--last-only`` puts the loss on out.last alone.

Graphs are warmed up on a side stream and captured after the warm-up outputs are freed
(PERFORMANCE.md 3.1). Each compiled module is built once per (shape, precision) after a
``torch._dynamo.reset()``; the timed region runs under ``set_stance("fail_on_recompile")``
so a silent fallback to eager (PERFORMANCE.md 3.2) raises instead. TF32 is on throughout;
``bf16`` adds bf16 autocast around the forward. The analytic FLOP/byte counts and the H200
roofline are in ``encoder_roofline.py``. Prints a table last and writes JSON to --out.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
try:
    import lobsurf  # noqa: F401
except ImportError:  # running from a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from encoder_roofline import Hardware, encoder_pass_cost  # noqa: E402

from lobsurf.models.encoder import Encoder, EncoderConfig  # noqa: E402


@dataclass(frozen=True)
class Shape:
    """One benchmark case."""

    batch: int
    window: int
    d_model: int
    n_layers: int
    chunk_size: int = 64
    """SSD chunk; windows longer than it take the inter-chunk pass."""

    @property
    def name(self) -> str:
        return f"B{self.batch}_K{self.window}_D{self.d_model}_L{self.n_layers}"


FULL_SHAPES = (Shape(1024, 64, 128, 2), Shape(256, 64, 128, 2), Shape(1024, 128, 256, 4))
QUICK_SHAPES = (Shape(8, 16, 32, 2, chunk_size=16), Shape(4, 40, 32, 2, chunk_size=16))
IN_FEATURES = 52  # about the feature count of PERFORMANCE.md's probe
PROFILE_PASSES = 5  # passes recorded by --profile (after the timed ones, so all warm)
LOSS_RTOL = 2e-2  # modes must agree on the loss (TF32 / bf16 rounding differs between them)


def make_pass(module, x, log_dt, params, targets, bf16: bool, last_only: bool):
    device_type = x.device.type
    target_last, target_seq = targets

    def run():
        with torch.autocast(device_type, dtype=torch.bfloat16, enabled=bf16):
            out = module(x, log_dt, return_sequence=not last_only)
        # Fixed random targets make the loss sensitive to every output value, so the
        # cross-mode loss comparison in check() means something.
        loss = (out.last.float() * target_last).mean()
        if out.sequence is not None:
            loss = loss + (out.sequence.float() * target_seq).mean()
        return loss, torch.autograd.grad(loss, params)

    return run


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def capture(run, device: torch.device, warmup: int):
    """Warm up on a side stream, capture one pass (no recompiles allowed), return replay, loss."""
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(warmup):
            loss, grads = run()
        del loss, grads  # no autograd graph from warm-up may survive into capture
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    torch.compiler.set_stance("fail_on_recompile")
    try:
        with torch.cuda.graph(graph):
            static_loss, _static_grads = run()
    finally:
        torch.compiler.set_stance("default")
    return graph.replay, static_loss


def time_mode(mode: str, run, device: torch.device, warmup: int, iters: int) -> dict:
    """Warm up, then time ``iters`` passes between two synchronizes."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    if mode.startswith("graph"):
        call, loss = capture(run, device, warmup)
        call()  # one replay so the first timed one is not special
    else:
        for _ in range(warmup):
            loss, _ = run()
        call = run
    sync(device)
    torch.compiler.set_stance("fail_on_recompile")
    try:
        start = time.perf_counter()
        for _ in range(iters):
            result = call()
        sync(device)
        elapsed = time.perf_counter() - start
    finally:
        torch.compiler.set_stance("default")
    if not mode.startswith("graph"):
        loss = result[0]
    peak = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None
    return {"ms": 1e3 * elapsed / iters, "loss": float(loss.detach()), "peak_gib": peak}


def bench_case(kind: str, shape: Shape, bf16: bool, modes: list[str], args, device) -> list[dict]:
    cfg = EncoderConfig(kind=kind, d_model=shape.d_model, n_layers=shape.n_layers,
                        chunk_size=args.chunk_size or shape.chunk_size,
                        in_proj_pad_multiple=args.in_proj_pad, ssd_backend=args.ssd_backend,
                        conv_backend=args.conv_backend,
                        ssd_triton_warps_fwd=args.ssd_warps[0],
                        ssd_triton_warps_bwd=args.ssd_warps[1])
    if args.quick:
        cfg = replace(cfg, headdim=16, d_state=16, cfc_backbone_units=32)
    torch.manual_seed(0)
    encoder = Encoder(cfg, in_features=IN_FEATURES).to(device)
    params = list(encoder.parameters())
    x = torch.randn(shape.batch, shape.window, IN_FEATURES, device=device)
    log_dt = torch.randn(shape.batch, shape.window, device=device)
    targets = (torch.randn(shape.batch, cfg.d_model, device=device),
               torch.randn(shape.batch, shape.window, cfg.d_model, device=device))
    n_params = sum(p.numel() for p in params)
    cost = encoder_pass_cost(cfg, IN_FEATURES, shape.batch, shape.window, 2 if bf16 else 4,
                             n_params)
    mem_floor, compute_floor = cost.floors_ms(Hardware(), bf16)
    torch._dynamo.reset()  # fresh compile per (shape, precision); guards never accumulate
    compiled = None
    rows = []
    for mode in modes:
        if mode in ("compile", "graph") and compiled is None:
            compiled = torch.compile(encoder, dynamic=False)
        module = compiled if mode in ("compile", "graph") else encoder
        run = make_pass(module, x, log_dt, params, targets, bf16, args.last_only)
        precision = "bf16" if bf16 else ("tf32" if device.type == "cuda" else "fp32")
        row = {"kind": kind, "shape": shape.name, **asdict(shape), "precision": precision,
               "mode": mode, "gflop": cost.flops / 1e9,
               "gbyte": cost.bytes / 1e9, "mem_floor_ms": mem_floor,
               "compute_floor_ms": compute_floor, "n_params": n_params}
        t0 = time.perf_counter()
        try:
            row.update(time_mode(mode, run, device, args.warmup, args.iters))
            row["windows_per_s"] = shape.batch / (row["ms"] / 1e3)
            row["x_mem_floor"] = row["ms"] / mem_floor
            row["tflops"] = cost.flops / (row["ms"] / 1e3) / 1e12
        except Exception as err:  # record and go on: one failing mode must not hide the rest
            row["error"] = f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"
        row["setup_and_run_s"] = time.perf_counter() - t0
        if args.profile and "error" not in row and not mode.startswith("graph"):
            row["profile_file"] = write_profile(run, device, args.out, f"{shape.name}_{precision}"
                                                f"_{mode}", args.profile_rows)
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def write_profile(run, device: torch.device, out: Path, tag: str, n_rows: int) -> str:
    """Profile a few warm passes; write the kernels sorted by self device time to out/."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(PROFILE_PASSES):
            run()
        sync(device)
    sort = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    table = prof.key_averages().table(sort_by=sort, row_limit=n_rows, max_name_column_width=90)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"profile_{tag}.txt"
    path.write_text(f"{PROFILE_PASSES} passes of {tag}\n{table}")
    return path.name


def print_table(rows: list[dict]) -> None:
    head = (f"{'kind':6} {'shape':22} {'prec':5} {'mode':12} {'ms':>8} {'win/s':>10} "
            f"{'GiB':>6} {'TFLOP/s':>8} {'floor ms':>8} {'x floor':>7}")
    print("\n" + head + "\n" + "-" * len(head))
    for r in rows:
        if "error" in r:
            print(f"{r['kind']:6} {r['shape']:22} {r['precision']:5} {r['mode']:12} "
                  f"FAILED {r['error'][:60]}")
            continue
        print(f"{r['kind']:6} {r['shape']:22} {r['precision']:5} {r['mode']:12} {r['ms']:8.3f} "
              f"{r['windows_per_s']:10.0f} {r['peak_gib'] or float('nan'):6.2f} {r['tflops']:8.2f} "
              f"{r['mem_floor_ms']:8.3f} {r['x_mem_floor']:7.1f}")
    print("floor = per-op-fused HBM floor at 4.3 TB/s (encoder_roofline.py); "
          "compute floors are in the JSON.")


def check(rows: list[dict]) -> None:
    """Every mode ran, losses are finite and all modes of a case agree on the loss."""
    failed = [f"{r['shape']}/{r['precision']}/{r['mode']}" for r in rows if "error" in r]
    assert not failed, f"modes failed: {failed}"
    for r in rows:
        assert math.isfinite(r["loss"]) and r["ms"] > 0, r
        # Compare with the case's eager row, or its first row when eager was not run.
        eager = next(e for e in sorted(rows, key=lambda e: e["mode"] != "eager")
                     if e["kind"] == r["kind"] and e["shape"] == r["shape"]
                     and e["precision"] == r["precision"])
        rel = abs(r["loss"] - eager["loss"]) / max(abs(eager["loss"]), 1e-12)
        assert rel < LOSS_RTOL, (f"{r['shape']}/{r['mode']}: loss {r['loss']} "
                                 f"vs eager {eager['loss']}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--out", type=Path, required=True, help="folder for bench_encoder.json")
    parser.add_argument("--quick", action="store_true", help="tiny shapes, CPU-friendly")
    parser.add_argument("--kinds", default="mamba2", help="comma list of mamba2,cfc")
    parser.add_argument("--modes", default=None, help="comma list (default: all for the device)")
    parser.add_argument("--precisions", default=None,
                        help="comma list of tf32,bf16 (default: both on cuda, tf32 for --quick)")
    parser.add_argument("--last-only", action="store_true",
                        help="loss on out.last only (return_sequence=False path)")
    parser.add_argument("--in-proj-pad", type=int, default=1,
                        help="EncoderConfig.in_proj_pad_multiple (e.g. 128: in_proj 644 -> 768)")
    parser.add_argument("--ssd-backend", default="torch", choices=("torch", "triton"),
                        help="EncoderConfig.ssd_backend")
    parser.add_argument("--conv-backend", default="torch", choices=("torch", "triton"),
                        help="EncoderConfig.conv_backend")
    parser.add_argument("--ssd-warps", type=int, nargs=2, default=(4, 8), metavar=("FWD", "BWD"),
                        help="EncoderConfig.ssd_triton_warps_fwd / _bwd")
    parser.add_argument("--chunk-size", type=int, default=0,
                        help="override every shape's SSD chunk (0: the shape's own, 64)")
    parser.add_argument("--shapes", default=None,
                        help="comma list of shape names to run (e.g. B1024_K64_D128_L2)")
    parser.add_argument("--profile", action="store_true",
                        help="also write a torch.profiler table per non-graph mode to --out")
    parser.add_argument("--profile-rows", type=int, default=40, help="rows of each table")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--iters", type=int, default=20)
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error("CUDA is not available; use --device cpu --quick")
    torch.backends.cuda.matmul.fp32_precision = "tf32"
    torch.backends.cudnn.conv.fp32_precision = "tf32"
    torch._dynamo.config.recompile_limit = 64  # we reset between cases; the stance guards
    default_modes = "eager,compile,graph_eager,graph" if device.type == "cuda" else "eager,compile"
    modes = (args.modes or default_modes).split(",")
    if device.type != "cuda" and any(m.startswith("graph") for m in modes):
        parser.error("graph modes need --device cuda")
    shapes = QUICK_SHAPES if args.quick else FULL_SHAPES
    if args.shapes:
        wanted = args.shapes.split(",")
        unknown = set(wanted) - {s.name for s in shapes}
        if unknown:
            parser.error(f"unknown shapes {sorted(unknown)}; known: {[s.name for s in shapes]}")
        shapes = tuple(s for s in shapes if s.name in wanted)
    precisions = (args.precisions or ("tf32" if args.quick else "tf32,bf16")).split(",")
    rows: list[dict] = []
    for kind in args.kinds.split(","):
        for shape in shapes:
            for precision in precisions:
                rows += bench_case(kind, shape, precision == "bf16", modes, args, device)
    args.out.mkdir(parents=True, exist_ok=True)
    meta = {"torch": torch.__version__, "python": platform.python_version(),
            "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
            "hardware_model": asdict(Hardware()), "in_features": IN_FEATURES,
            "warmup": args.warmup, "iters": args.iters, "last_only": args.last_only,
            "in_proj_pad_multiple": args.in_proj_pad, "chunk_size_override": args.chunk_size,
            "ssd_backend": args.ssd_backend, "conv_backend": args.conv_backend,
            "ssd_warps": list(args.ssd_warps)}
    (args.out / "bench_encoder.json").write_text(json.dumps({"meta": meta, "rows": rows},
                                                            indent=1))
    print_table(rows)
    check(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
