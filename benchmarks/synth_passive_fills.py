"""What the synthetic market's trades do to a resting order: fill rate and adverse selection.

Usage:
    python benchmarks/synth_passive_fills.py [--snapshots 100000] [--days 2]

For several trade settings of the ``tradeable`` market (edge 1, move_prob 0.15) and its null
(edge 0), a one-lot bid joins the back of the best bid queue every ``--every`` rows and rests
for at most ``--horizon`` rows, under the most pessimistic queue (``risk_averse``: the queue
ahead shrinks only by trades at its price, and never exceeds the displayed size there).
It fills when sellers trade through its price, or trade more at its price than the queue
ahead of it. Reported per setting: the share of orders filled, the share of fills that came
while the best bid stood at the order's price (no price move: a partial trade), and the
markout, mid price ``--markout`` rows after the fill minus the fill price in ticks (a bid
wants it positive; negative is adverse selection), over all fills and split into fills
while the level stood and the others. Bids only: the market is symmetric.

It reads the device trade columns (``BookTensors``) of stores built by ``write_synth_store``;
the queue walk is plain numpy here, not the simulator's.
"""

from __future__ import annotations

import argparse
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np

from lobsurf.data.dataset import load_book_tensors
from lobsurf.data.synth import write_synth_store
from lobsurf.presets import preset

#: (label, SynthConfig overrides) of the settings compared
SETTINGS = [
    ("no partial trades", {"partial_trade_prob": 0.0}),
    ("partial 0.1, lean 0", {"partial_trade_prob": 0.1, "partial_trade_lean": 0.0}),
    ("partial 0.2, lean 0", {"partial_trade_prob": 0.2, "partial_trade_lean": 0.0}),
    ("partial 0.2, lean 0.5", {"partial_trade_prob": 0.2, "partial_trade_lean": 0.5}),
    ("partial 0.2, lean 1", {"partial_trade_prob": 0.2, "partial_trade_lean": 1.0}),
]


def resting_bids(book, every: int, horizon: int, markout: int) -> dict[str, float]:
    """Walk one-lot bids joined at the back of the best queue (module docstring)."""
    bid_px = book.bid_px_ticks.numpy().astype(np.int64)
    bid_sz = book.bid_sz.numpy().astype(np.int64)
    sell_px = book.sell_trade_px_ticks.numpy().astype(np.int64)
    sell_sz = book.sell_trade_sz.numpy().astype(np.int64)
    mid = (bid_px[:, 0] + book.ask_px_ticks.numpy()[:, 0]) / 2.0
    segment = book.segment_of_row.numpy()
    joins = np.arange(0, len(bid_px) - horizon - markout, every)
    joins = joins[segment[joins] == segment[joins + horizon + markout]]
    price = bid_px[joins, 0]
    ahead = bid_sz[joins, 0].astype(np.float64)
    filled_at = np.full(len(joins), -1)
    standing = np.zeros(len(joins), bool)
    for step in range(1, horizon + 1):
        row = joins + step
        open_ = filled_at < 0
        through = open_ & (sell_px[row] < price)
        at_price = open_ & (sell_px[row] == price)
        ahead = np.where(at_price, ahead - sell_sz[row], ahead)
        done = through | (at_price & (ahead < 0))
        filled_at = np.where(done, row, filled_at)
        standing |= done & (bid_px[row, 0] == price)
        # Displayed size at the order's price now (0 if it is not on the book's 10 levels).
        level = bid_px[row, 0] - price
        on_book = (level >= 0) & (level < bid_px.shape[1])
        shown = np.where(on_book, bid_sz[row, np.clip(level, 0, bid_px.shape[1] - 1)], 0)
        ahead = np.where(filled_at < 0, np.minimum(ahead, shown), ahead)
    fills = filled_at >= 0
    out = mid[filled_at[fills] + markout] - price[fills]
    quiet = standing[fills]

    def mean_se(x: np.ndarray) -> tuple[float, float]:
        return (float(x.mean()), float(x.std() / np.sqrt(len(x)))) if len(x) else (np.nan, np.nan)

    return {"orders": len(joins), "filled": fills.mean(), "no_move": quiet.mean(),
            "markout": mean_se(out), "markout_no_move": mean_se(out[quiet]),
            "markout_moved": mean_se(out[~quiet])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--snapshots", type=int, default=100_000)
    ap.add_argument("--days", type=int, default=2)
    ap.add_argument("--every", type=int, default=5)
    ap.add_argument("--horizon", type=int, default=200)
    ap.add_argument("--markout", type=int, default=50)
    args = ap.parse_args()
    print(f"{'market':<16}{'trades':<22}{'filled':>8}{'no move':>9}{'markout, all':>17}"
          f"{'no-move fills':>17}{'other fills':>17}")
    for market in ("tradeable", "tradeable-null"):
        for label, overrides in SETTINGS:
            cfg = replace(preset(market), snapshots_per_day=args.snapshots, days=args.days,
                          **overrides)
            with tempfile.TemporaryDirectory() as folder:
                book = load_book_tensors(write_synth_store(Path(folder) / "s", cfg))
            r = resting_bids(book, args.every, args.horizon, args.markout)
            marks = "".join(f"{m:>10.2f} ± {se:.2f}" for m, se in
                            (r["markout"], r["markout_no_move"], r["markout_moved"]))
            print(f"{market:<16}{label:<22}{r['filled']:>8.3f}{r['no_move']:>9.3f}{marks}")


if __name__ == "__main__":
    main()
