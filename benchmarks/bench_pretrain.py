"""Pretraining throughput: labels, snapshot features and the full train step (eager).

Usage:
    python benchmarks/bench_pretrain.py --device cuda --out bench_out/
    python benchmarks/bench_pretrain.py --quick --out /tmp/bench   # tiny shapes on the CPU

Measures, on a random-walk book built in memory (no store, no databento-dbn needed):

* ``labels``: ``compute_labels`` over N rows at horizons (10, 50, 200), rows/s;
* ``features``: ``gather_window`` + ``snapshot_features`` for B windows of K, windows/s;
* ``step``: one ``train_step`` (gather, features, normaliser, encoder, both heads on every
  position, losses, backward, clip, AdamW), windows/s and ms, plus peak GPU memory.

Burn-in, then a timed region bracketed by synchronisation. TF32 on CUDA. Prints a table
last and writes JSON details to --out.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import torch

try:
    import lobsurf  # noqa: F401
except ImportError:  # running from a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from lobsurf.data.dataset import BookTensors, gather_window  # noqa: E402
from lobsurf.data.labels import LabelConfig, compute_labels  # noqa: E402
from lobsurf.models.config import EncoderConfig  # noqa: E402
from lobsurf.models.features import FeatureConfig, snapshot_features  # noqa: E402
from lobsurf.pretrain.config import PretrainConfig  # noqa: E402
from lobsurf.pretrain.loop import build_optimizer, train_step  # noqa: E402
from lobsurf.pretrain.model import PretrainModel  # noqa: E402

LEVELS = 10
#: (batch, window, d_model, layers) cases: issue 4's encoder shapes.
FULL_CASES = [(256, 64, 128, 2), (1024, 64, 128, 2), (1024, 128, 256, 4)]
QUICK_CASES = [(16, 16, 32, 1)]


def random_book(n: int, device: str, seed: int = 0) -> BookTensors:
    """n snapshots of a one-segment random-walk book (spread 1-2 ticks) on ``device``."""
    g = torch.Generator().manual_seed(seed)
    bid0 = 10_000 + torch.randint(-1, 2, (n,), generator=g).cumsum(0)
    spread = torch.randint(1, 3, (n,), generator=g)
    lv = torch.arange(LEVELS)
    size = lambda: torch.randint(0, 60, (n, LEVELS), generator=g, dtype=torch.int32)  # noqa: E731
    ts = 1_700_000_000 * 10**9 + torch.randint(1_000, 5_000_000, (n,), generator=g).cumsum(0)
    book = BookTensors(
        ts_ns=ts, bid_px_ticks=(bid0[:, None] - lv).int(),
        ask_px_ticks=(bid0[:, None] + spread[:, None] + lv).int(),
        bid_sz=size() + 1, ask_sz=size() + 1, bid_ct=size(), ask_ct=size(),
        segment_start=torch.tensor([0]), segment_stop=torch.tensor([n]),
        segment_of_row=torch.zeros(n, dtype=torch.int64), tick_size=0.25, multiplier=50.0,
        price_origin_fixed=0, tick_size_fixed=250_000_000)
    return book.to(device)


def _timed(fn, device: str, iters: int, burn_in: int) -> float:
    # Seconds per call after burn-in, bracketed by synchronisation on CUDA.
    for _ in range(burn_in):
        fn()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / iters


def bench_case(book: BookTensors, case: tuple[int, int, int, int], device: str,
               iters: int, burn_in: int) -> dict:
    batch, window, d_model, layers = case
    cfg = PretrainConfig(window=window, batch_size=batch, device=device,
                         encoder=EncoderConfig(d_model=d_model, n_layers=layers))
    labels = compute_labels(book, cfg.labels)
    rows = torch.arange(window + 1, len(book) - cfg.labels.max_horizon, device=device)
    model = PretrainModel(cfg).to(device)
    opt, _ = build_optimizer(model, cfg)
    gen = torch.Generator(device=device).manual_seed(0)
    end = rows[:batch]
    feat_s = _timed(lambda: snapshot_features(gather_window(book, end, window), cfg.features),
                    device, iters, burn_in)
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    losses = []
    step_s = _timed(lambda: losses.append(train_step(model, opt, book, labels, rows, cfg, gen)),
                    device, iters, burn_in)
    peak = torch.cuda.max_memory_allocated() / 2**20 if device.startswith("cuda") else None
    assert torch.isfinite(torch.stack(losses)).all(), "non-finite training loss"
    return {"batch": batch, "window": window, "d_model": d_model, "layers": layers,
            "features_ms": feat_s * 1e3, "features_windows_per_s": batch / feat_s,
            "step_ms": step_s * 1e3, "step_windows_per_s": batch / step_s,
            "peak_mem_mib": peak}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--out", required=True, help="folder for bench_pretrain.json")
    ap.add_argument("--quick", action="store_true", help="tiny shapes, few iterations (CPU check)")
    ap.add_argument("--rows", type=int, default=None, help="book rows (default 5M, quick 20k)")
    args = ap.parse_args()
    if args.device.startswith("cuda"):
        torch.set_float32_matmul_precision("high")  # TF32, as training runs
    n = args.rows or (20_000 if args.quick else 5_000_000)
    iters, burn_in = (3, 1) if args.quick else (20, 5)
    book = random_book(n, args.device)
    label_s = _timed(lambda: compute_labels(book, LabelConfig()), args.device, iters, burn_in)
    cases = [bench_case(book, c, args.device, iters, burn_in)
             for c in (QUICK_CASES if args.quick else FULL_CASES)]
    report = {"device": args.device,
              "device_name": torch.cuda.get_device_name() if args.device.startswith("cuda")
              else platform.processor(),
              "torch": torch.__version__, "rows": n, "labels_ms": label_s * 1e3,
              "labels_rows_per_s": n / label_s, "cases": cases,
              "feature_count": FeatureConfig().num_features}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench_pretrain.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"labels: {n:,} rows in {label_s * 1e3:.1f} ms ({n / label_s:,.0f} rows/s)")
    print(f"{'B':>5} {'K':>4} {'D':>4} {'L':>2} {'feat ms':>8} {'step ms':>8} "
          f"{'windows/s':>10} {'peak MiB':>9}")
    for c in cases:
        peak = f"{c['peak_mem_mib']:.0f}" if c["peak_mem_mib"] is not None else "-"
        print(f"{c['batch']:>5} {c['window']:>4} {c['d_model']:>4} {c['layers']:>2} "
              f"{c['features_ms']:>8.2f} {c['step_ms']:>8.2f} {c['step_windows_per_s']:>10,.0f} "
              f"{peak:>9}")
    assert all(c["step_windows_per_s"] > 0 for c in cases)


if __name__ == "__main__":
    main()
