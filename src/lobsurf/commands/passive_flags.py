"""The simulator's resting-order flags (``--passive-orders``, the queue model, the maker
fee) as ``lobsurf eval`` takes them, and the config field each one sets (for errors that
name the flag). The rules behind them: lobsurf.sim.config, docs/sim_assumptions.md."""

from __future__ import annotations

#: SimConfig field (or phrase of its messages) -> the flag a user types
PASSIVE_FLAGS = {
    "passive_orders": "--passive-orders", "queue_model": "--queue-model",
    "queue_power": "--queue-power", "maker fees": "--maker-fee-per-lot and --maker-fee-bps",
}


def add_passive_arguments(g, sim) -> None:
    """Add the resting-order flags to argument group ``g`` (defaults from SimConfig ``sim``)."""
    from lobsurf.sim.config import QUEUE_MODELS

    g.add_argument("--passive-orders", action="store_true",
                   help="resting orders too: post at the best bid or ask, cancel; adds "
                        "baseline:market_maker and baseline:passive_imbalance to baseline:all "
                        "(needs a store with trades)")
    g.add_argument("--queue-model", choices=QUEUE_MODELS, default=sim.queue_model,
                   help="passive orders: how cancels move a resting order up its queue "
                        "(risk_averse: never; docs/sim_assumptions.md)")
    g.add_argument("--queue-power", type=int, default=sim.queue_power,
                   help="passive orders, probabilistic queue: n, a cancel is ahead of the order "
                        "with probability (share ahead) ** n")
    g.add_argument("--maker-fee-per-lot", type=float, default=None,
                   help="passive orders: fee per lot a resting order fills, negative for a rebate "
                        "(default: the store's maker fee recorded at ingest, else the taker fee)")
    g.add_argument("--maker-fee-bps", type=float, default=None,
                   help="passive orders: maker fee in bps of notional, negative for a rebate "
                        "(default: as --maker-fee-per-lot; with one given, the other is 0)")
