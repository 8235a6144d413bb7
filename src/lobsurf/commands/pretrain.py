"""``lobsurf pretrain``: supervised pretraining of the encoder and auxiliary heads on a store.

Trains on the store's earlier segments, evaluates on the later ones (a purged time split),
and prints held-out accuracy and log loss per horizon for the model, the class prior and a
logistic regression on the last snapshot's features. ``--json`` prints one object::

    {"horizons": {"10": {"model": {"accuracy", "log_loss", "frd_log_loss"},
                         "prior": {"accuracy", "log_loss", "p_up"},
                         "logistic": {"accuracy", "log_loss"}, "n_test"}, ...},
     "steps", "train_windows", "test_windows", "cut_row", "final_train_loss", "device",
     "checkpoint", "wall_s"}

(docs/pretrain.md defines every key). The run folder gets pretrain.pt (load it with
``lobsurf.pretrain.checkpoint.load_checkpoint``), config.json and result.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
from pathlib import Path

from lobsurf.errors import UserError


def add_arguments(p: argparse.ArgumentParser) -> None:
    from lobsurf.pretrain.config import PretrainConfig

    cfg = PretrainConfig()  # the defaults live in the configs only
    enc, horizons = cfg.encoder, ",".join(map(str, cfg.labels.horizons_snapshots))
    p.add_argument("--store", required=True, help="snapshot store folder")
    p.add_argument("--steps", type=int, default=cfg.steps,
                   help=f"optimisation steps (default {cfg.steps})")
    p.add_argument("--out", default=None,
                   help="run folder for the checkpoint (default runs/pretrain-<UTC time>)")
    p.add_argument("--json", action="store_true", help="print one JSON object with the results")
    p.add_argument("--batch", type=int, default=cfg.batch_size,
                   help=f"windows per step (default {cfg.batch_size})")
    p.add_argument("--window", type=int, default=cfg.window,
                   help=f"snapshots per window K (default {cfg.window})")
    p.add_argument("--horizons", default=horizons,
                   help=f"label horizons in snapshots, comma-separated (default {horizons})")
    p.add_argument("--encoder", choices=("mamba2", "cfc"), default=enc.kind, help="encoder kind")
    p.add_argument("--d-model", type=int, default=enc.d_model,
                   help=f"encoder width (default {enc.d_model})")
    p.add_argument("--layers", type=int, default=enc.n_layers,
                   help=f"encoder blocks (default {enc.n_layers})")
    p.add_argument("--lr", type=float, default=cfg.lr,
                   help=f"peak AdamW learning rate (default {cfg.lr:g})")
    p.add_argument("--seed", type=int, default=cfg.seed,
                   help=f"seed of init and sampling (default {cfg.seed})")
    p.add_argument("--device", default=None, help="torch device (default: cuda if available)")
    p.add_argument("--instrument-id", type=int, default=None,
                   help="instrument to train on when the store holds several (lobsurf info)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def _config(args: argparse.Namespace, device: str):
    from lobsurf.data.labels import LabelConfig
    from lobsurf.models.config import EncoderConfig
    from lobsurf.pretrain.config import PretrainConfig

    try:
        horizons = tuple(int(h) for h in args.horizons.split(","))
        # Heads of 32 channels when the model is narrow, so d_model 32..64 stays valid.
        headdim = min(64, args.d_model)
        encoder = EncoderConfig(kind=args.encoder, d_model=args.d_model, n_layers=args.layers,
                                headdim=headdim)
        return PretrainConfig(window=args.window, batch_size=args.batch, steps=args.steps,
                              lr=args.lr, seed=args.seed, device=device,
                              labels=LabelConfig(horizons_snapshots=horizons), encoder=encoder)
    except ValueError as exc:
        raise UserError(f"bad pretraining settings: {exc}") from exc


def _print_table(result: dict) -> None:
    print(f"held-out windows {result['test_windows']:,} (train {result['train_windows']:,}, "
          f"cut at row {result['cut_row']:,}), {result['steps']} steps, "
          f"{result['wall_s']:.1f} s on {result['device']}")
    print(f"{'horizon':>8} {'n':>8}  {'model acc':>9} {'ll':>6}  {'prior acc':>9} {'ll':>6}"
          f"  {'logit acc':>9} {'ll':>6}")
    for h, r in result["horizons"].items():
        cells = "  ".join(f"{r[k]['accuracy']:>9.4f} {r[k]['log_loss']:>6.4f}"
                          for k in ("model", "prior", "logistic"))
        print(f"{h:>8} {r['n_test']:>8,}  {cells}")
    print(f"checkpoint {result['checkpoint']}")


def run(args: argparse.Namespace) -> int:
    import torch

    from lobsurf.data.dataset import load_book_tensors
    from lobsurf.data.store import Store
    from lobsurf.devices import resolve_device
    from lobsurf.pretrain.loop import pretrain

    device = resolve_device(args.device)
    cfg = _config(args, device)
    out = args.out or f"runs/pretrain-{dt.datetime.now(dt.UTC):%Y%m%d-%H%M%S}"
    if Path(out).exists() and not Path(out).is_dir():
        # checked before training: the run folder is only written at the end
        raise UserError(f"--out {out} is a file; pass a run folder")
    book = load_book_tensors(Store.open(args.store), device, instrument_id=args.instrument_id)
    torch.manual_seed(cfg.seed)  # global RNGs are seeded here, at the CLI entry, only
    result = pretrain(cfg, book, out_dir=out, progress=not args.no_progress)
    if args.json:
        print(json.dumps(result))
    else:
        _print_table(result)
    return 0
