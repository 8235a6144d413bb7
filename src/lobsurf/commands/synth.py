"""``lobsurf synth``: write synthetic MBP-10 sessions as genuine DBN files (one per day).

The model and its predictable component (``--edge``) are described in ``docs/synth.md``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
import sys

from lobsurf.errors import UserError

#: Defaults of the command line (small: a quick end-to-end run).
DEFAULT_SNAPSHOTS = 200_000
DEFAULT_DAYS = 2
#: Show a progress bar from this many snapshots in total (when stderr is a terminal).
PROGRESS_MIN_SNAPSHOTS = 1_000_000


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, help="output folder (created if missing)")
    parser.add_argument("--snapshots", type=int, default=DEFAULT_SNAPSHOTS,
                        help=f"snapshots per day (default {DEFAULT_SNAPSHOTS:_})")
    parser.add_argument("--days", type=int, default=DEFAULT_DAYS,
                        help=f"sessions on consecutive weekdays (default {DEFAULT_DAYS})")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--edge", type=float, default=0.0,
                        help="predictable component in [0, 1]: P(next mid move up) = "
                             "0.5 + 0.5*edge*imbalance (default 0: none)")
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                        help="progress bar (default: on for long runs in a terminal)")


def run(args: argparse.Namespace) -> int:
    from lobsurf.data.synth import SynthConfig, write_synth

    if args.snapshots < 1 or args.days < 1:
        raise UserError("--snapshots and --days must be at least 1")
    if not 0.0 <= args.edge <= 1.0:
        raise UserError(f"--edge must be in [0, 1], got {args.edge}")
    if args.seed < 0:
        raise UserError(f"--seed must be >= 0, got {args.seed}")
    cfg = SynthConfig(snapshots_per_day=args.snapshots, days=args.days, seed=args.seed,
                      edge=args.edge)
    total = cfg.snapshots_per_day * cfg.days
    progress = args.progress
    if progress is None:
        progress = total >= PROGRESS_MIN_SNAPSHOTS and sys.stderr.isatty()
    try:
        paths = write_synth(args.out, cfg, progress=progress)
    except OSError as exc:
        raise UserError(f"cannot write to {args.out}: {exc}") from exc
    for path in paths:
        print(f"wrote {path} ({cfg.snapshots_per_day:_} snapshots, {path.stat().st_size:_} bytes)")
    print(f"synth: {total:_} snapshots of {cfg.symbol} in {len(paths)} file(s), seed {cfg.seed}, "
          f"edge {cfg.edge}, tick {cfg.tick_size_fixed / 1e9:g}")
    others = sorted(set(Path(args.out).glob("*.dbn*")) - set(paths))
    if others:
        # Same-named days were replaced; older files stay and a later glob would mix runs.
        print(f"synth: warning: {args.out} also holds {len(others)} DBN file(s) from earlier runs "
              f"(e.g. {others[0].name}); ingest only this run's files or use a fresh folder",
              file=sys.stderr)
    return 0
