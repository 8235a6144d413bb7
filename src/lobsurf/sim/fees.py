"""Where the simulator's fees come from, and whether they leave a policy room to win.

Two fees: the taker fee, paid by market orders, and the maker fee, paid by a resting
order's fills (negative: a rebate). Each is per lot plus bps of notional.

Precedence (``resolve_fees``), for each of the two on its own: the fee given for this run
(``sim.fee_per_lot`` / ``sim.fee_bps``, ``lobsurf eval --fee-per-lot / --fee-bps``; the
maker fee: ``sim.maker_fee_per_lot`` / ``sim.maker_fee_bps``), else the fee recorded in the
store at ingest (``lobsurf ingest --fee-per-lot / --fee-bps / --maker-fee-per-lot /
--maker-fee-bps``, carried by ``BookTensors``), else the default: ``DEFAULT_FEE_BPS`` of
notional for the taker fee, a fee that scales with the instrument, and for the maker fee the
taker fee as resolved (the conservative choice: no rebate, no discount is assumed). Giving
one of a fee's two fields gives that fee: the other is then 0. docs/sim_assumptions.md,
"Fees", has the reasoning behind the defaults.

``fee_warning`` compares one lot's round-trip fee with the mean |mid change| over a
holding horizon: the gross a perfectly timed trade at the mid makes on average. Above it,
even such trades lose on average, and a learner finds nothing to learn. With passive orders
the cheapest round trip counts: two fills at the lower of the two fees.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal

import torch

from lobsurf.data.dataset import BookTensors
from lobsurf.sim.config import SimConfig
from lobsurf.sim.reward import BPS

FeeSource = Literal["config", "store", "default"]

#: fee when neither the run nor the store gives one, basis points of notional: ES at
#: 4,500 x 50 pays 2.25 per lot, a $300 share $0.003 (docs/sim_assumptions.md, "Fees").
DEFAULT_FEE_BPS = 0.1
#: rows (evenly spaced) that measure the typical move at most: bounds its cost on big books.
TYPICAL_MOVE_ROWS = 1_000_000

#: how each source is named where the fee is stated
SOURCE_WORDS: dict[str, str] = {
    "store": "recorded in the store at ingest",
    "default": ("the default: none given for this run, none recorded in the store; "
                "docs/sim_assumptions.md"),
}


@dataclass(frozen=True)
class Fees:
    """The fee schedule a simulator charges, and where it came from."""

    per_lot: float
    """currency per lot filled."""
    bps: float
    """basis points of filled notional (price x multiplier x lots)."""
    source: FeeSource
    """config: given for this run; store: recorded at ingest; default: ``DEFAULT_FEE_BPS``."""
    maker_per_lot: float | None = None
    """maker fee per lot a resting order fills (negative: a rebate); None with maker_bps
    None: the default, the taker fee above."""
    maker_bps: float | None = None
    """maker fee in basis points of filled notional; None: see maker_per_lot."""
    maker_source: FeeSource = "default"
    """where the maker fee comes from (default: it is the taker fee)."""

    @property
    def maker(self) -> tuple[float, float]:
        """The maker fee charged: (per lot, bps); the taker fee where none was given."""
        if self.maker_per_lot is None and self.maker_bps is None:
            return self.per_lot, self.bps
        return self.maker_per_lot or 0.0, self.maker_bps or 0.0

    def applied_to(self, sim: SimConfig) -> SimConfig:
        """``sim`` with these fees written into it (given, so nothing resolves them again);
        a default maker fee stays unset, so it follows the taker fee wherever it is read."""
        maker = {} if self.maker_source == "default" else {
            "maker_fee_per_lot": self.maker[0], "maker_fee_bps": self.maker[1]}
        return replace(sim, fee_per_lot=self.per_lot, fee_bps=self.bps, **maker)

    def per_lot_at(self, price: float, multiplier: float) -> float:
        """One lot's fee (currency) at ``price``: the per-lot fee plus the bps fee."""
        return self.per_lot + self.bps * BPS * price * multiplier

    def maker_per_lot_at(self, price: float, multiplier: float) -> float:
        """One lot's maker fee (currency; negative: a rebate) at ``price``."""
        per_lot, bps = self.maker
        return per_lot + bps * BPS * price * multiplier

    def record(self) -> dict[str, float | str]:
        """The ``fees`` entry of a run_start record (the maker fee only where one was given
        or recorded: the default is the taker fee)."""
        out: dict[str, float | str] = {"per_lot": self.per_lot, "bps": self.bps,
                                       "source": self.source}
        if self.maker_source != "default":
            out |= {"maker_per_lot": self.maker[0], "maker_bps": self.maker[1],
                    "maker_source": self.maker_source}
        return out

    def describe_maker(self, book: BookTensors, given_as: str) -> str:
        """``maker fee -0.20 per lot + 0 bps, a rebate (recorded in the store at ingest)``,
        or that resting orders pay the taker fee (the default)."""
        if self.maker_source == "default":
            return ("maker fee = the taker fee (the default: none given for this run, none "
                    "recorded in the store; docs/sim_assumptions.md)")
        per_lot, bps = self.maker
        text = f"maker fee {money(per_lot)} per lot + {bps:g} bps"
        if bps:
            price = mean_mid_price(book)
            text += (f" of notional (= {money(self.maker_per_lot_at(price, book.multiplier))}"
                     f" per lot at price {price:,.2f})")
        if self.maker_per_lot_at(mean_mid_price(book), book.multiplier) < 0:
            text += ", a rebate"
        return f"{text} ({SOURCE_WORDS.get(self.maker_source, given_as)})"

    def describe(self, book: BookTensors, given_as: str) -> str:
        """``fee 1.00 per lot + 0 bps (recorded in the store at ingest)``; a bps fee also as
        its amount per lot at the book's mean mid price; ``given_as`` names a given fee's
        origin (a flag, a config key)."""
        text = f"fee {money(self.per_lot)} per lot + {self.bps:g} bps"
        if self.bps:
            price = mean_mid_price(book)
            text += (f" of notional (= {money(self.per_lot_at(price, book.multiplier))} per "
                     f"lot at price {price:,.2f})")
        return f"{text} ({SOURCE_WORDS.get(self.source, given_as)})"


def resolve_fees(sim: SimConfig, book: BookTensors) -> Fees:
    """The fees a simulator over ``book`` charges under ``sim`` (module doc: precedence)."""
    if sim.fee_per_lot is not None or sim.fee_bps is not None:
        taker = Fees(sim.fee_per_lot or 0.0, sim.fee_bps or 0.0, "config")
    elif book.fee_per_lot is not None or book.fee_bps is not None:
        taker = Fees(book.fee_per_lot or 0.0, book.fee_bps or 0.0, "store")
    else:
        taker = Fees(0.0, DEFAULT_FEE_BPS, "default")
    if sim.maker_fee_per_lot is not None or sim.maker_fee_bps is not None:
        return replace(taker, maker_per_lot=sim.maker_fee_per_lot or 0.0,
                       maker_bps=sim.maker_fee_bps or 0.0, maker_source="config")
    if book.maker_fee_per_lot is not None or book.maker_fee_bps is not None:
        return replace(taker, maker_per_lot=book.maker_fee_per_lot or 0.0,
                       maker_bps=book.maker_fee_bps or 0.0, maker_source="store")
    return taker


def holding_rows(max_label_horizon: int, stride: int) -> int:
    """Snapshots a typical trade is held: the longest label horizon, the farthest move the
    agent is taught to foresee (``labels.max_horizon``, 200 = 20 decisions at stride 10),
    and never less than one decision."""
    return max(max_label_horizon, stride)


def typical_move(book: BookTensors, horizon_rows: int) -> float:
    """Mean |mid change| over ``horizon_rows`` snapshots, currency per lot.

    Every row whose horizon stays inside its segment counts (at most ``TYPICAL_MOVE_ROWS``
    of them, evenly spaced); NaN when no row has one.
    """
    rows = _sample_rows(book)
    rows = rows[rows + horizon_rows < book.segment_stop[book.segment_of_row[rows]]]
    if len(rows) == 0:
        return math.nan
    mid2 = book.bid_px_ticks[:, 0].long() + book.ask_px_ticks[:, 0].long()  # [N] 2 x mid
    moves = (mid2[rows + horizon_rows] - mid2[rows]).abs().double()
    return float(moves.mean()) * book.tick_size * book.multiplier / 2


def mean_mid_price(book: BookTensors) -> float:
    """Mean mid price of the book's rows (currency per price unit)."""
    return float(book.price(book.mid_ticks()[_sample_rows(book)]).mean())


def fee_warning(fees: Fees, book: BookTensors, horizon_rows: int, check: str,
                passive: bool = False) -> str | None:
    """The warning when one lot's round-trip fee is above the typical move over
    ``horizon_rows`` snapshots of ``book`` (``check``: what to check, e.g. the fee flags);
    None otherwise, and where the move cannot be measured. ``passive``: resting orders are
    allowed, so the cheapest round trip is two fills at the lower of the taker and the
    maker fee (a maker rebate makes it negative: never a warning)."""
    move = typical_move(book, horizon_rows)
    price = mean_mid_price(book)
    taker = fees.per_lot_at(price, book.multiplier)
    maker = fees.maker_per_lot_at(price, book.multiplier)
    round_trip = 2 * (min(taker, maker) if passive else taker)
    if not round_trip > move:  # NaN: no row to measure on, nothing to say
        return None
    per = ""
    if book.size_unit != 1.0:  # a crypto store: per one base unit, not per 0.00001 BTC
        move, round_trip = move / book.size_unit, round_trip / book.size_unit
        per = " per 1 unit of the base asset"
    what = ("the cheapest round-trip fee (two fills at the lower of the taker and maker fees)"
            if passive else "the round-trip fee")
    return (f"{what} {money(round_trip)}{per} is above the typical move {money(move)} "
            f"over {horizon_rows:,} snapshots: no policy may be able to win; check {check}")


def money(value: float) -> str:
    """Two decimals, or the significant digits of an amount below a cent."""
    return f"{value:,.2f}" if value == 0 or abs(value) >= 0.01 else f"{value:.3g}"


def _sample_rows(book: BookTensors) -> torch.Tensor:
    step = max(1, math.ceil(len(book) / TYPICAL_MOVE_ROWS))
    return torch.arange(0, len(book), step, device=book.device)


def announce_fees(sim, book, horizon_rows: int, given_as: str, check: str,
                  command: str = "eval"):
    """Resolve ``sim``'s fees on ``book``, name them and their source on stderr, and warn
    where their round trip is above the typical move over ``horizon_rows`` snapshots;
    returns ``sim`` with the fees it charges written in."""
    import sys

    fees = resolve_fees(sim, book)
    print(f"{command}: {fees.describe(book, given_as)}", file=sys.stderr)
    if sim.passive_orders:
        print(f"{command}: {fees.describe_maker(book, given_as)}", file=sys.stderr)
    warning = fee_warning(fees, book, horizon_rows, check, passive=sim.passive_orders)
    if warning:
        print(f"lobsurf {command}: warning: {warning}", file=sys.stderr)
    return fees.applied_to(sim)
