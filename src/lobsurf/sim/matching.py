"""Pure fill functions: market orders walk the 10 visible levels of one snapshot.

One model, written down in docs/sim_assumptions.md:
- a market order takes the levels of the opposite side best-first (level 0, 1, ... 9),
  each up to its displayed size; its cash value is the sum of price x lots over the
  levels it touches (the VWAP times the filled lots), in integer ticks x lots;
- what the 10 visible levels cannot fill is cancelled (reported as unfilled lots);
- the book is not depleted by our own earlier orders (each step sees the recorded book).

Shapes: B environments, L = 10 levels, W = number of order quantities walked at once (the
simulator walks the whole order and its position-closing part in one call, W = 2).
"""

from __future__ import annotations

import torch


def strictly_upper_ones(levels: int, device: torch.device | str) -> torch.Tensor:
    """[L, L] float64 matrix with ones above the diagonal: x @ it = exclusive prefix sums."""
    return torch.ones(levels, levels, dtype=torch.float64, device=device).triu_(1)


def walk_levels(
    px_ticks: torch.Tensor, size_lots: torch.Tensor, want_lots: torch.Tensor,
    strictly_upper: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Fill W quantities against one side of B books, best level first.

    Quantities are filled independently against the same levels, so the fill of a smaller
    quantity is exactly the first lots of the fill of a larger one (the walk order).

    Args:
        px_ticks: [B, L] int price of each level (best first).
        size_lots: [B, L] int displayed size of each level (0 on empty levels).
        want_lots: [B, W] int64 lots wanted (>= 0).
        strictly_upper: ``strictly_upper_ones(L, device)``; pass a cached one to save a
            kernel per call.

    Returns:
        filled_lots: [B, W] int64 lots filled (<= want and <= the visible depth).
        value_ticks: [B, W] int64 sum over levels of price_ticks x lots filled there.

    Example: asks 100 x 2, 101 x 3 (then empty); want 4 -> filled 4, value 2*100 + 2*101 = 402.
    """
    # Depth strictly better than each level: [B, L]. A float64 product with a strictly upper
    # triangular ones-matrix, not cumsum: CUDA's scan over a 10-wide innermost dim took 418 us
    # at B=65536 (65% of the step; benchmarks/RESULTS.md, Simulator step); the GEMM is exact because
    # 10 sizes < 2**32 sum far below 2**53.
    if strictly_upper is None:
        strictly_upper = strictly_upper_ones(size_lots.shape[1], size_lots.device)
    before = (size_lots.double() @ strictly_upper).long()
    # lots taken at each level = clamp(want - depth before, 0, size): [B, W, L]
    take = (want_lots[:, :, None] - before[:, None, :]).clamp_(min=0)
    take = torch.minimum(take, size_lots[:, None, :])
    filled = take.sum(2)
    value = (take * px_ticks[:, None, :]).sum(2)
    return filled, value


def closing_lots(position_abs: torch.Tensor, order_abs: torch.Tensor,
                 target_abs: torch.Tensor) -> torch.Tensor:
    """[B] lots of a signed order o that reduce |position p| (0 when it adds to the position).

    Takes |p|, |o| and |p + o| (the step has them already) and uses
    |p| + |o| - |p + o| = 2 min(|p|, |o|) when p and o have opposite signs, 0 otherwise.
    """
    return (position_abs + order_abs - target_abs) >> 1
