"""Backtest metrics from per-trade records and a per-step PnL series (host-side numpy).

The sweep (``lobsurf.backtest.sweep``) records on the device and reads its buffers back once;
this module turns those records into the summary dict. Every metric, its unit and when it
is undefined (``None``, JSON ``null``) is defined in docs/metrics.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

#: nanoseconds per UTC day: the calendar day of a step for the daily Sharpe ratio.
NS_PER_DAY = 86_400 * 10**9


@dataclass(frozen=True)
class MetricsConfig:
    """Settings of the summary statistics."""

    bootstrap_resamples: int = 1000
    """resamples of the trades for the confidence interval of pnl_per_trade."""
    ci_level: float = 0.95
    """coverage of the percentile bootstrap interval."""
    seed: int = 0
    """seeds the bootstrap (numpy Generator): the interval is reproducible."""
    trading_days_per_year: int = 252
    """annualisation of the daily Sharpe ratio: mean/sd of daily PnL x sqrt(this)."""
    calendar_days_per_year: int = 365
    """the same for an instrument that trades 24/7 (crypto): every day is a trading day."""
    bootstrap_chunk_draws: int = 10_000_000
    """indices drawn at a time (bounds the bootstrap's memory, never its result)."""

    def __post_init__(self) -> None:
        if self.bootstrap_resamples < 1 or not 0 < self.ci_level < 1:
            raise ValueError("need bootstrap_resamples >= 1 and 0 < ci_level < 1")
        if min(self.trading_days_per_year, self.calendar_days_per_year,
               self.bootstrap_chunk_draws) < 1:
            raise ValueError("need trading_days_per_year, calendar_days_per_year and "
                             "bootstrap_chunk_draws >= 1")


@dataclass
class BacktestRecord:
    """What one policy did over a sweep, in time order (host numpy arrays).

    Attributes:
        trade_pnl: [n] float64 realized net PnL of each closed trade (currency).
        trade_holding_steps: [n] int64 steps from the fill that opened each trade to the
            fill that closed it.
        step_pnl: [T] float64 change of equity (realized + unrealized, net of fees) over
            each decision step (currency); positions are flat at the end, so it sums to
            the net PnL.
        step_day: [T] int64 UTC day number of each step's decision row.
        step_hold: [T] bool the policy's action was Hold.
        gross_pnl: realized PnL of closed trades before fees (currency).
        fees: fees of closed trades (currency).
        turnover_lots: lots filled.
        unfilled_lots: lots ordered that the visible depth could not fill.
        step_action: [T] int64 action chosen at each step (None when not recorded).
        step_position: [T] int64 position after each step, lots (None when not recorded).
        step_filled_lots: [T] int64 signed lots filled at each step (+ bought, - sold;
            None when not recorded).
        trade_step: [n] int64 index into the step arrays of the step that closed each
            trade (None when not recorded); a sweep's step i lies in piece i // T.
        around_the_clock: the instrument trades 24/7, so a year has 365 trading days.
    """

    trade_pnl: np.ndarray
    trade_holding_steps: np.ndarray
    step_pnl: np.ndarray
    step_day: np.ndarray
    step_hold: np.ndarray
    gross_pnl: float
    fees: float
    turnover_lots: int
    unfilled_lots: int
    step_action: np.ndarray | None = None
    step_position: np.ndarray | None = None
    step_filled_lots: np.ndarray | None = None
    trade_step: np.ndarray | None = None
    around_the_clock: bool = False


def _ratio(mean: float, sd: float) -> float | None:
    # A Sharpe ratio is undefined (None) when the spread is zero or not finite.
    return mean / sd if sd > 0 and math.isfinite(sd) else None


def bootstrap_mean_ci(x: np.ndarray, cfg: MetricsConfig) -> tuple[float, float] | None:
    """Percentile bootstrap interval of the mean of ``x`` ([n] float64); None when n = 0."""
    n = len(x)
    if n == 0:
        return None
    rng = np.random.default_rng(cfg.seed)
    per_chunk = max(1, cfg.bootstrap_chunk_draws // n)
    means = []
    for lo in range(0, cfg.bootstrap_resamples, per_chunk):
        k = min(per_chunk, cfg.bootstrap_resamples - lo)
        means.append(x[rng.integers(0, n, (k, n))].mean(1))
    tail = (1 - cfg.ci_level) / 2 * 100
    lo, hi = np.percentile(np.concatenate(means), [tail, 100 - tail])
    return float(lo), float(hi)


def max_drawdown(step_pnl: np.ndarray) -> float:
    """Largest fall of cumulative PnL from its running peak (currency, >= 0; start at 0)."""
    equity = np.concatenate(([0.0], np.cumsum(step_pnl)))
    return float((np.maximum.accumulate(equity) - equity).max())


def daily_pnl(step_pnl: np.ndarray, step_day: np.ndarray) -> np.ndarray:
    """[D] PnL summed per UTC day, over the days that have steps, in day order."""
    _, which = np.unique(step_day, return_inverse=True)
    return np.bincount(which.ravel(), weights=step_pnl).astype(np.float64)


def annualised_daily_sharpe(days: np.ndarray, days_per_year: int) -> float | None:
    """mean / sd (ddof 1) of daily PnL x sqrt(days_per_year); None with < 2 days or sd 0."""
    if len(days) < 2:
        return None
    ratio = _ratio(float(days.mean()), float(days.std(ddof=1)))
    return None if ratio is None else ratio * math.sqrt(days_per_year)


def compute_metrics(rec: BacktestRecord, cfg: MetricsConfig = MetricsConfig()) -> dict:
    """The summary metrics of one policy (definitions and units in docs/metrics.md).

    Returns:
        dict of floats and ints; a metric that is undefined for this record is None.
    """
    pnl = np.asarray(rec.trade_pnl, dtype=np.float64)
    n, steps = len(pnl), len(rec.step_pnl)
    wins, losses = pnl[pnl > 0], pnl[pnl < 0]
    net = float(pnl.sum())
    days = daily_pnl(np.asarray(rec.step_pnl, np.float64), np.asarray(rec.step_day))
    ci = bootstrap_mean_ci(pnl, cfg)
    mean_or_none = lambda a: float(a.mean()) if len(a) else None  # noqa: E731
    return {
        "net_pnl": net,
        "gross_pnl": float(rec.gross_pnl),
        "fees": float(rec.fees),
        "trades": n,
        "win_rate": len(wins) / n if n else None,
        "avg_win": mean_or_none(wins),
        "avg_loss": mean_or_none(losses),
        "pnl_per_trade": net / n if n else None,
        "pnl_per_trade_ci": list(ci) if ci is not None else None,
        "sharpe_per_trade": _ratio(float(pnl.mean()), float(pnl.std(ddof=1))) if n >= 2 else None,
        "sharpe_per_day": annualised_daily_sharpe(days, cfg.calendar_days_per_year
                                                  if rec.around_the_clock
                                                  else cfg.trading_days_per_year),
        "days": len(days),
        "max_drawdown": max_drawdown(np.asarray(rec.step_pnl, np.float64)) if steps else 0.0,
        "steps": steps,
        "hold_fraction": float(np.mean(rec.step_hold)) if steps else None,
        "turnover_lots": int(rec.turnover_lots),
        "turnover": rec.turnover_lots / steps if steps else None,
        "avg_holding_steps": float(np.mean(rec.trade_holding_steps)) if n else None,
        "unfilled_lots": int(rec.unfilled_lots),
    }
