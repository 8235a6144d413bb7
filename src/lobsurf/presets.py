"""Named synthetic-market presets (``lobsurf synth --preset NAME``): SynthConfig instances.

``tradeable`` has an edge that a top-of-book imbalance rule can trade net of spread and a
realistic fee (``lobsurf eval baseline:imbalance`` makes money on its held-out days);
``tradeable-null`` is the same market with edge 0, where no policy should make money, so a
profit there is a bug. ``tradeable-fast`` and its null are a smaller, sharper pair for the
CI learning proofs. The measured numbers and commands are in docs/synth.md.
"""

from __future__ import annotations

from dataclasses import replace

from lobsurf.data.synth import SynthConfig

#: the tradeable market: every mid move follows the imbalance (edge 1) and moves are
#: frequent (move_prob 0.15), so the drift over a held position outweighs the one-tick
#: spread and the fee (1.0 per lot, recorded in its store at ingest) paid per round trip;
#: 4 days of 100k snapshots keep synth + ingest to seconds and leave one whole session
#: held out by the 0.8 time split. Partial trades (one event in five, 3 lots on average,
#: sellers more often when the imbalance points down: lean 0.5) fill resting orders without
#: a price move and select them adversely (docs/synth.md, "Trades"); they never change the
#: books, which are bit for bit those measured before trades were recorded.
TRADEABLE = SynthConfig(snapshots_per_day=100_000, days=4, seed=0, edge=1.0, move_prob=0.15,
                        fee_per_lot=1.0, fee_bps=0.0, partial_trade_prob=0.2,
                        partial_trade_mean_lots=3.0, partial_trade_lean=0.5)

#: the CI learning proofs' market (tests/training/test_learning.py): tradeable with twice the
#: mid moves, so the edge pays about twice as much per trade and a small network learns it
#: in a few hundred steps on one CPU thread; 3 days of 40k snapshots (one held out).
TRADEABLE_FAST = replace(TRADEABLE, snapshots_per_day=40_000, days=3, move_prob=0.3)

PRESETS: dict[str, SynthConfig] = {
    "tradeable": TRADEABLE,
    "tradeable-null": replace(TRADEABLE, edge=0.0),
    "tradeable-fast": TRADEABLE_FAST,
    "tradeable-fast-null": replace(TRADEABLE_FAST, edge=0.0),
}


def preset(name: str) -> SynthConfig:
    """The preset ``name`` (one of PRESETS); ValueError names the choices otherwise."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
    return PRESETS[name]
