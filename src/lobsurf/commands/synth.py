"""``lobsurf synth``: write synthetic MBP-10 sessions as genuine DBN files (one per day).

The model and its predictable component (``--edge``) are described in ``docs/synth.md``.
``--preset NAME`` (``lobsurf.presets``: tradeable, tradeable-null, tradeable-fast,
tradeable-fast-null) starts from a named SynthConfig; flags given on the command line
override its values.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path
import sys

from lobsurf.errors import UserError
from lobsurf.progress import add_progress_flag

#: Defaults of the command line without a preset (small: a quick end-to-end run).
DEFAULT_SNAPSHOTS = 200_000
DEFAULT_DAYS = 2
#: flag → SynthConfig field it sets (a flag left out keeps the preset's or default value).
FIELDS = {"snapshots": "snapshots_per_day", "days": "days", "seed": "seed", "edge": "edge",
          "move_prob": "move_prob", "partial_trade_prob": "partial_trade_prob",
          "partial_trade_lean": "partial_trade_lean"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from lobsurf.presets import PRESETS

    # Defaults are None so that a preset's values stand unless a flag is given.
    parser.add_argument("--out", required=True, help="output folder (created if missing)")
    parser.add_argument("--preset", choices=list(PRESETS), default=None,
                        help="start from a named market (docs/synth.md); flags override it")
    parser.add_argument("--snapshots", type=int, default=None,
                        help=f"snapshots per day (default {DEFAULT_SNAPSHOTS:_})")
    parser.add_argument("--days", type=int, default=None,
                        help=f"sessions on consecutive weekdays (default {DEFAULT_DAYS})")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default 0)")
    parser.add_argument("--edge", type=float, default=None,
                        help="predictable component in [0, 1]: P(next mid move up) = "
                             "0.5 + 0.5*edge*imbalance (default 0: none)")
    parser.add_argument("--move-prob", type=float, default=None,
                        help="chance per event of a one-tick mid move (default 0.04)")
    parser.add_argument("--partial-trade-prob", type=float, default=None,
                        help="chance per event of a trade that takes the front of a best queue "
                             "and leaves the level standing (default 0.1)")
    parser.add_argument("--partial-trade-lean", type=float, default=None,
                        help="in [0, 1]: partial trades' buyers lean with the imbalance, "
                             "P(buyer) = 0.5 + 0.5*lean*imbalance (default 0)")
    add_progress_flag(parser)


def synth_config(args: argparse.Namespace):
    """The SynthConfig of the flags: the preset (or the defaults), then each flag given."""
    from lobsurf.data.synth import SynthConfig
    from lobsurf.presets import preset

    base = (preset(args.preset) if args.preset else
            SynthConfig(snapshots_per_day=DEFAULT_SNAPSHOTS, days=DEFAULT_DAYS))
    given = {field: getattr(args, flag) for flag, field in FIELDS.items()
             if getattr(args, flag) is not None}
    if given.get("snapshots_per_day", 1) < 1 or given.get("days", 1) < 1:
        raise UserError("--snapshots and --days must be at least 1")
    if not 0.0 <= given.get("edge", 0.0) <= 1.0:
        raise UserError(f"--edge must be in [0, 1], got {args.edge}")
    for flag in ("move_prob", "partial_trade_prob", "partial_trade_lean"):
        if not 0.0 <= given.get(flag, 0.0) <= 1.0:
            raise UserError(f"--{flag.replace('_', '-')} must be in [0, 1], got {given[flag]}")
    if given.get("seed", 0) < 0:
        raise UserError(f"--seed must be >= 0, got {args.seed}")
    return replace(base, **given)


def run(args: argparse.Namespace) -> int:
    from lobsurf.data.synth import write_synth

    cfg = synth_config(args)
    total = cfg.snapshots_per_day * cfg.days
    try:
        paths = write_synth(args.out, cfg, progress=args.progress)
    except OSError as exc:
        raise UserError(f"cannot write to {args.out}: {exc}") from exc
    for path in paths:
        print(f"wrote {path} ({cfg.snapshots_per_day:_} snapshots, {path.stat().st_size:_} bytes)")
    print(f"synth: {total:_} snapshots of {cfg.symbol} in {len(paths)} file(s), seed {cfg.seed}, "
          f"edge {cfg.edge}, move_prob {cfg.move_prob}, partial_trade_prob "
          f"{cfg.partial_trade_prob}, tick {cfg.tick_size_fixed / 1e9:g}"
          + (f" (preset {args.preset})" if args.preset else ""))
    # DBN files carry no multiplier and no fee: the ingest that records the market's own
    bps = f" --fee-bps {cfg.fee_bps:g}" if cfg.fee_bps else ""
    print(f"next: lobsurf ingest {Path(args.out) / '*.mbp-10.dbn.zst'} --out STORE "
          f"--multiplier {cfg.multiplier:g} --currency USD --fee-per-lot {cfg.fee_per_lot:g}{bps}")
    others = sorted(set(Path(args.out).glob("*.dbn*")) - set(paths))
    if others:
        # Same-named days were replaced; older files stay and a later glob would mix runs.
        print(f"synth: warning: {args.out} also holds {len(others)} DBN file(s) from earlier runs "
              f"(e.g. {others[0].name}); ingest only this run's files or use a fresh folder",
              file=sys.stderr)
    return 0
