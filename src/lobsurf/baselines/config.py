"""Settings of the baseline policies (``BaselineConfig``): the sizes, lookbacks,
thresholds and seeds of lobsurf.baselines.policies, the searches of the fitted baselines
(imbalance, market_maker, passive_imbalance)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass


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
    """contiguous blocks, evenly spread over the training rows, that make up the fit rows
    (of every fitted baseline)."""
    imbalance_fit_envs: int = 64
    """environments of the fit's sweep (of every fitted baseline)."""
    passive_fit_rows: int = 20_000
    """training rows (at most, in contiguous blocks) the fits of market_maker and
    passive_imbalance sweep each candidate over (a step with resting orders costs several
    market-order steps)."""
    market_maker_inventory_limits: tuple[int, ...] = (1, 3)
    """market_maker: candidate inventory limits (lots) of the fit; a quote that could take
    |position| past the limit is pulled."""
    market_maker_pull_quantiles: tuple[float, ...] = (0.25, 0.5, 0.8)
    """market_maker: candidate imbalance pull thresholds of the fit, as quantiles of |I| on
    the training rows (the threshold 1, never pull, is always a candidate too)."""
    market_maker_stops_ticks: tuple[float, ...] = (math.inf, 4.0)
    """market_maker: candidate stops of the fit: flatten at market once the open trade has
    lost this many ticks per lot, marked at the mid net of its fees (inf: no stop)."""
    passive_imbalance_threshold: float | None = None
    """passive_imbalance: |I| at which it joins the favoured side; None: fitted on training
    rows over ``imbalance_quantiles``."""
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
        if min(self.imbalance_fit_rows, self.imbalance_fit_blocks, self.imbalance_fit_envs,
               self.passive_fit_rows) < 1:
            raise ValueError("imbalance fit rows, blocks and envs and passive fit rows must be >= 1")
        thr = self.passive_imbalance_threshold
        if thr is not None and not 0 <= thr <= 1:
            raise ValueError(f"passive imbalance threshold must be in [0, 1], got {thr}")
        if not self.market_maker_inventory_limits or min(self.market_maker_inventory_limits) < 1:
            raise ValueError("market maker inventory limits must be >= 1 lot")
        if not all(0 <= q < 1 for q in self.market_maker_pull_quantiles):
            raise ValueError("market maker pull quantiles must be in [0, 1)")
        if not self.market_maker_stops_ticks or not all(
                s > 0 for s in self.market_maker_stops_ticks):  # NaN fails too
            raise ValueError("market maker stops must be > 0 ticks (inf: no stop)")
        if min(self.bayes_imbalance_bins, self.bayes_mc_rows) < 1:
            raise ValueError("bayes imbalance bins and Monte Carlo rows must be >= 1")

    def as_json(self) -> dict:
        """The settings as an evaluation reports them: JSON has no infinity, so a stop of
        inf (none) is null."""
        out = asdict(self)
        out["market_maker_stops_ticks"] = [s if math.isfinite(s) else None
                                           for s in self.market_maker_stops_ticks]
        return out
