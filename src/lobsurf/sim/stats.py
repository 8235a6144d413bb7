"""Summaries of ``SimStats``: per-env tensors -> one dict of totals in currency units.

This is the one place that reads simulator results back to the host (one deliberate sync
per call); never call it inside a step.
"""

from __future__ import annotations

import torch

from lobsurf.sim.state import SimStats


def summarize(stats: SimStats, tick_value: float) -> dict[str, float | int]:
    """Totals over all envs.

    Args:
        stats: per-env accumulators.
        tick_value: currency per tick x lot (tick_size x multiplier).

    Returns:
        net_pnl, gross_pnl, fees (currency); trades, wins, steps, turnover_lots,
        unfilled_lots (counts); win_rate (wins / trades, 0 with no trades); hold_fraction
        (Hold actions / steps); pnl_per_trade (net_pnl / trades, 0 with no trades).
    """
    def total(t: torch.Tensor) -> float | int:
        return t.sum().item()  # deliberate host read: summaries are outside the step

    trades, wins, steps = total(stats.trades), total(stats.wins), total(stats.steps)
    net = float(total(stats.net_pnl))
    return {
        "net_pnl": net,
        "gross_pnl": float(total(stats.gross_pnl_ticks)) * tick_value,
        "fees": float(total(stats.fees)),
        "trades": int(trades),
        "wins": int(wins),
        "win_rate": wins / trades if trades else 0.0,
        "hold_fraction": total(stats.hold_steps) / steps if steps else 0.0,
        "pnl_per_trade": net / trades if trades else 0.0,
        "steps": int(steps),
        "turnover_lots": int(total(stats.turnover_lots)),
        "unfilled_lots": int(total(stats.unfilled_lots)),
    }
