"""Settings of the baseline policies (``BaselineConfig``): the sizes, lookbacks,
thresholds and seeds of lobsurf.baselines.policies and the imbalance fit's search."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BaselineConfig:
    """Settings of the baseline policies."""

    size_index: int = 0
    """which order size the momentum and oracle policies trade (index into order_sizes_lots)."""
    momentum_lookback_rows: int = 16
    """snapshot-to-snapshot order-flow imbalance summed over this many steps (<= window - 1)."""
    momentum_threshold_lots: float = 20.0
    """|OFI| in lots needed to trade; below it the momentum policy holds."""
    oracle_horizon_rows: int = 50
    """rows after the fill row at which the oracle reads the future mid."""
    seed: int = 0
    """seeds the random policy."""
    imbalance_threshold: float | None = None
    """|top-of-book imbalance| needed to trade; None: fitted on training rows."""
    imbalance_quantiles: tuple[float, ...] = (0.25, 0.5, 0.7, 0.8, 0.9, 0.95)
    """candidate thresholds of the fit: these quantiles of |imbalance| on training rows."""
    imbalance_fit_rows: int = 50_000
    """training rows (at most, in contiguous blocks) the fit sweeps each candidate over."""
    imbalance_fit_blocks: int = 16
    """contiguous blocks, evenly spread over the training rows, that make up the fit rows."""
    imbalance_fit_envs: int = 64
    """environments of the fit's sweep."""
    bayes_imbalance_bins: int = 41
    """bayes: equal bins of the imbalance in [-1, 1] in the DP's state (odd: one centred on 0)."""
    bayes_mc_rows: int = 500_000
    """bayes: snapshots generated from the store's law to estimate its model (whole sessions)."""

    def __post_init__(self) -> None:
        # 0 lookback never trades; a horizon <= 0 reads the present or past: no oracle.
        if self.momentum_lookback_rows < 1:
            raise ValueError(f"momentum lookback must be >= 1, got {self.momentum_lookback_rows}")
        if not 0 <= self.momentum_threshold_lots < float("inf"):  # NaN fails too
            raise ValueError(f"momentum threshold must be >= 0 lots, got "
                             f"{self.momentum_threshold_lots}")
        if self.oracle_horizon_rows < 1:
            raise ValueError(f"oracle horizon must be >= 1 rows, got {self.oracle_horizon_rows}")
        thr = self.imbalance_threshold
        if thr is not None and not 0 <= thr <= 1:  # NaN fails too
            raise ValueError(f"imbalance threshold must be in [0, 1], got {thr}")
        if not self.imbalance_quantiles or not all(0 <= q < 1 for q in self.imbalance_quantiles):
            raise ValueError("imbalance quantiles must be in [0, 1)")
        if min(self.imbalance_fit_rows, self.imbalance_fit_blocks, self.imbalance_fit_envs) < 1:
            raise ValueError("imbalance fit rows, blocks and envs must be >= 1")
        if min(self.bayes_imbalance_bins, self.bayes_mc_rows) < 1:
            raise ValueError("bayes imbalance bins and Monte Carlo rows must be >= 1")
