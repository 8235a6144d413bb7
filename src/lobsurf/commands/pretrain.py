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

from lobsurf.errors import UserError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", required=True, help="snapshot store folder")
    p.add_argument("--steps", type=int, default=2000, help="optimisation steps (default 2000)")
    p.add_argument("--out", default=None,
                   help="run folder for the checkpoint (default runs/pretrain-<UTC time>)")
    p.add_argument("--json", action="store_true", help="print one JSON object with the results")
    p.add_argument("--batch", type=int, default=256, help="windows per step (default 256)")
    p.add_argument("--window", type=int, default=64, help="snapshots per window K (default 64)")
    p.add_argument("--horizons", default="10,50,200",
                   help="label horizons in snapshots, comma-separated (default 10,50,200)")
    p.add_argument("--encoder", choices=("mamba2", "cfc"), default="mamba2", help="encoder kind")
    p.add_argument("--d-model", type=int, default=128, help="encoder width (default 128)")
    p.add_argument("--layers", type=int, default=2, help="encoder blocks (default 2)")
    p.add_argument("--lr", type=float, default=1e-3, help="peak AdamW learning rate (default 1e-3)")
    p.add_argument("--seed", type=int, default=0, help="seed of init and sampling (default 0)")
    p.add_argument("--device", default=None, help="torch device (default: cuda if available)")
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

    from lobsurf.pretrain.loop import pretrain

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    try:
        torch.empty(0, device=device)
    except (RuntimeError, AssertionError) as exc:
        raise UserError(f"device {device!r} is not usable: {exc}") from exc
    cfg = _config(args, device)
    out = args.out or f"runs/pretrain-{dt.datetime.now(dt.UTC):%Y%m%d-%H%M%S}"
    torch.manual_seed(cfg.seed)  # global RNGs are seeded here, at the CLI entry, only
    result = pretrain(cfg, args.store, out_dir=out, progress=not args.no_progress)
    if args.json:
        print(json.dumps(result))
    else:
        _print_table(result)
    return 0
