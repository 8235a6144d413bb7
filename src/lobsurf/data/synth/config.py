"""Every parameter of the synthetic market (``SynthConfig``), with its unit and its checks;
docs/synth.md states the model they drive (lobsurf.data.synth.synth, synth_book,
synth_processes)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from lobsurf.data.schema import FIXED_PRICE_SCALE


@dataclass(frozen=True)
class SynthConfig:
    """Every parameter of the synthetic market. Units in each comment; ``ev`` = events."""

    snapshots_per_day: int = 200_000  # snapshots (= events) per session
    days: int = 2  # sessions, on consecutive weekdays from first_day
    seed: int = 0  # generation is a function of (seed, day)
    edge: float = 0.0  # predictable component in [0, 1]: P(up) = 0.5 + 0.5*edge*I
    # --- instrument and files
    symbol: str = "SYN"  # raw symbol in the DBN metadata and file names
    instrument_id: int = 1  # numeric id in every record
    dataset: str = "LOBSURF.SYNTH"  # DBN dataset code (<= 16 characters)
    publisher_id: int = 0  # DBN publisher id in records (0: not a Databento publisher)
    tick_size_fixed: int = 250_000_000  # price tick, 1e-9 currency units (0.25)
    multiplier: float = 50.0  # currency per price unit per lot (store Instrument)
    fee_per_lot: float = 1.0  # fee per lot filled, currency: ES-like (recorded in its stores)
    fee_bps: float = 0.0  # fee in basis points of filled notional (recorded likewise)
    start_price_fixed: int = 4500 * FIXED_PRICE_SCALE  # opening best bid, 1e-9 units
    overnight_sd_ticks: float = 20.0  # sd of each day's opening offset from start, ticks
    # --- session clock
    first_day: str = "2024-01-02"  # ISO date of day 0; later days skip weekends
    session_open_s: int = 14 * 3600 + 30 * 60  # session open, seconds after 00:00 UTC
    session_duration_s: float = 6.5 * 3600  # nominal session length, s (sets the mean gap)
    calm_regime_s: float = 600.0  # mean duration of a calm regime, s (exponential)
    busy_regime_s: float = 120.0  # mean duration of a busy regime, s (exponential)
    busy_intensity_ratio: float = 10.0  # event rate in busy regimes / rate in calm ones
    recv_latency_min_ns: int = 20_000  # venue-to-capture latency floor, ns
    recv_latency_mean_ns: float = 15_000.0  # mean exponential latency on top, ns
    # --- top of book
    imbalance_phi: float = 0.97  # per-event persistence of the imbalance latent x
    imbalance_sd: float = 0.9  # stationary sd of x; I ~ tanh(x)
    top_depth_log_mean: float = math.log(20.0)  # mean log(b0 + a0 - 2), log lots
    top_depth_log_sd: float = 0.8  # stationary sd of the log top depth, log lots
    top_depth_phi: float = 0.99  # per-event persistence of the log top depth
    # --- deeper levels (1..9)
    deep_log_mean: float = math.log(25.0)  # mean log size at level 1, log lots
    deep_log_slope: float = 0.1  # increase of the mean log size per level, log lots
    deep_log_sd: float = 1.0  # sd of log size (lognormal: heavy tail), log lots
    deep_refresh_prob: float = 0.03  # chance per event that a given level is refreshed
    order_count_exponent: float = 0.7  # orders at a level = round(size ** this), >= 1
    size_cap_lots: int = 1_000_000  # cap on any drawn level size, lots (DBN sizes are uint32)
    # --- prices
    move_prob: float = 0.04  # chance per event of a one-tick mid shift (spread unchanged)
    tight_run_ev: float = 400.0  # mean length of a one-tick-spread run, events
    wide_run_ev: float = 40.0  # mean length of a wide-spread run, events
    three_tick_prob: float = 0.25  # share of wide runs at three ticks (else two)
    # --- trades that leave the level standing (their own streams: the books never change)
    partial_trade_prob: float = 0.1  # chance per event of a trade taking the front of a best queue
    partial_trade_mean_lots: float = 3.0  # mean size of such a trade, lots (geometric, <= displayed)
    partial_trade_lean: float = 0.0  # in [0, 1]: P(buyer aggressor) = 0.5 + 0.5*lean*I_{t-1}
    # --- memory
    chunk_rows: int = 131_072  # snapshots per generated chunk (bounds memory; data unchanged)

    def __post_init__(self) -> None:
        checks = {
            "snapshots_per_day >= 1": self.snapshots_per_day >= 1,
            "days >= 1": self.days >= 1,
            "seed >= 0": self.seed >= 0,
            "instrument_id fits uint32": 0 <= self.instrument_id < 2**32,
            "publisher_id fits uint16": 0 <= self.publisher_id < 2**16,
            "0 <= edge <= 1": 0.0 <= self.edge <= 1.0,
            "tick_size_fixed > 0": self.tick_size_fixed > 0,
            "finite fees >= 0": all(0 <= fee < math.inf for fee in (self.fee_per_lot,
                                                                   self.fee_bps)),
            "start_price_fixed a positive multiple of the tick":
                self.start_price_fixed > 0 and self.start_price_fixed % self.tick_size_fixed == 0,
            "0 < imbalance_phi, top_depth_phi < 1":
                0 < self.imbalance_phi < 1 and 0 < self.top_depth_phi < 1,
            "probabilities in [0, 1]": all(0 <= p <= 1 for p in (
                self.deep_refresh_prob, self.move_prob, self.three_tick_prob,
                self.partial_trade_prob)),
            "partial_trade_mean_lots >= 1": self.partial_trade_mean_lots >= 1,
            "0 <= partial_trade_lean <= 1": 0.0 <= self.partial_trade_lean <= 1.0,
            "spread run lengths >= 1": min(self.tight_run_ev, self.wide_run_ev) >= 1,
            "regime durations > 0": min(self.calm_regime_s, self.busy_regime_s) > 0,
            "busy_intensity_ratio > 0": self.busy_intensity_ratio > 0,
            "session_duration_s > 0": self.session_duration_s > 0,
            "chunk_rows >= 1": self.chunk_rows >= 1,
            "len(dataset) <= 16": len(self.dataset) <= 16,
        }
        failed = [name for name, ok in checks.items() if not ok]
        if failed:
            raise ValueError(f"SynthConfig: need {', '.join(failed)}")

    @property
    def mean_gap_ns(self) -> tuple[float, float]:
        """Mean inter-event gap (calm, busy) in ns, so a session lasts about its duration.

        With busy time share s and intensity ratio r: n = rate_calm * T * (1 - s + s * r).
        """
        busy_share = self.busy_regime_s / (self.calm_regime_s + self.busy_regime_s)
        calm_rate = self.snapshots_per_day / (self.session_duration_s * 1e9) / (
            1 - busy_share + busy_share * self.busy_intensity_ratio)
        return 1 / calm_rate, 1 / (calm_rate * self.busy_intensity_ratio)

    @property
    def mean_regime_ev(self) -> tuple[float, float]:
        """Mean regime length (calm, busy) in events (>= 1): duration / mean gap.

        Geometric event counts of exponential gaps make exponential regime durations: the
        clock is a Markov-modulated Poisson process.
        """
        calm_gap, busy_gap = self.mean_gap_ns
        return (max(1.0, self.calm_regime_s * 1e9 / calm_gap),
                max(1.0, self.busy_regime_s * 1e9 / busy_gap))
