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
``lobsurf.pretrain.checkpoint.load_checkpoint``), config.json and result.json. ``--out``
must be a new or empty folder, or an earlier pretrain run (its pretrain.pt marks it) with
``--overwrite``; anything else (a store, a data folder) is refused before training starts.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
from pathlib import Path

from lobsurf.commands.args import config_error, int_list
from lobsurf.errors import UserError
from lobsurf.progress import add_progress_flag, status

#: config field → the flag a user types (config errors name the flag).
FLAGS = {"window": "--window", "batch_size": "--batch", "steps": "--steps",
         "seed": "--seed", "d_model": "--d-model", "n_layers": "--layers", "kind": "--encoder",
         "horizons_snapshots": "--horizons"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    from lobsurf.pretrain.config import PretrainConfig

    cfg = PretrainConfig()  # the defaults live in the configs only
    enc, horizons = cfg.encoder, ",".join(map(str, cfg.labels.horizons_snapshots))
    p.add_argument("--store", required=True, help="snapshot store folder")
    p.add_argument("--steps", type=int, default=cfg.steps,
                   help=f"optimisation steps (default {cfg.steps})")
    p.add_argument("--out", default=None,
                   help="run folder for the checkpoint, new or empty (default "
                        "runs/pretrain-<UTC time>)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace the earlier pretrain run in --out")
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
    add_progress_flag(p)


def _config(args: argparse.Namespace, device: str):
    from lobsurf.data.labels import LabelConfig
    from lobsurf.models.config import EncoderConfig
    from lobsurf.pretrain.config import PretrainConfig

    horizons = int_list(args.horizons, "--horizons", "whole numbers of snapshots")
    try:
        # Heads of 32 channels when the model is narrow, so d_model 32..64 stays valid.
        headdim = min(64, args.d_model)
        encoder = EncoderConfig(kind=args.encoder, d_model=args.d_model, n_layers=args.layers,
                                headdim=headdim)
        return PretrainConfig(window=args.window, batch_size=args.batch, steps=args.steps,
                              lr=args.lr, seed=args.seed, device=device,
                              labels=LabelConfig(horizons_snapshots=horizons), encoder=encoder)
    except ValueError as exc:
        raise config_error(exc, FLAGS, "bad pretraining settings: ") from exc


def check_run_folder(out: Path, overwrite: bool) -> None:
    """Refuse an ``--out`` that is not ours to write (checked before training starts).

    A new or empty folder is fine; an earlier pretrain run (it holds the checkpoint) only
    with ``--overwrite``; any other folder (a store, a data folder) or a file never.
    """
    from lobsurf.pretrain.checkpoint import CHECKPOINT_NAME

    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} is a file; pass a run folder")
    if not out.exists() or not any(out.iterdir()):
        return
    if not (out / CHECKPOINT_NAME).is_file():
        raise UserError(f"--out {out} is a folder but not a pretrain run (no {CHECKPOINT_NAME}); "
                        "choose a new or empty folder")
    if not overwrite:
        raise UserError(f"--out {out} holds an earlier pretrain run; pass --overwrite to replace "
                        "it or choose another --out")


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
    check_run_folder(Path(out), args.overwrite)  # before training: files come at the end
    with status(f"pretrain: loading {args.store}", args.progress):
        book = load_book_tensors(Store.open(args.store), device, instrument_id=args.instrument_id)
    torch.manual_seed(cfg.seed)  # global RNGs are seeded here, at the CLI entry, only
    result = pretrain(cfg, book, out_dir=out, progress=args.progress)
    if args.json:
        print(json.dumps(result))
    else:
        _print_table(result)
    return 0
