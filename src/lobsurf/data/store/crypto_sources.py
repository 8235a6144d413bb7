"""One crypto stream (Binance recording or Tardis files) as an ingest source.

What the readers do not say and the store needs: the instrument's name and id, its price
currency (the quote asset, from the symbol, for Binance-family venues), whether one unit of
the source's quantity is one base-asset amount (spot and linear futures: the PnL per price
unit per quantity is 1, so the store's multiplier is the size unit) and that the market
trades 24/7.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from dataclasses import dataclass

from lobsurf.data.readers.binance import BinanceConfig, BinanceReader
from lobsurf.data.readers.decimals import SizeUnit
from lobsurf.data.readers.l2_book import CryptoChunk
from lobsurf.data.readers.tardis import INCREMENTAL, TRADES, TardisReader
from lobsurf.data.store.inputs import InputGroup
from lobsurf.data.store.sources import Source, SourceChunk
from lobsurf.data.store.instrument import AROUND_THE_CLOCK

#: venues (Binance's and Tardis's names) whose quantities are base-asset amounts for every
#: instrument: spot markets and USD-M (linear) futures
LINEAR_VENUES = ("binance", "binance-us", "binance-futures", "coinbase", "bitstamp", "kraken",
                 "gemini")
#: quote assets recognised at the end of a Binance-family symbol, longest first
QUOTE_ASSETS = ("FDUSD", "USDT", "USDC", "BUSD", "TUSD", "USDP", "BTC", "ETH", "BNB", "EUR",
                "TRY", "BRL", "JPY", "GBP", "AUD", "DAI", "USD")


def quote_currency(venue: str, symbol: str) -> str | None:
    """The quote asset of a Binance-family symbol (BTCUSDT -> USDT); None elsewhere."""
    if not venue.startswith("binance"):
        return None
    base = symbol.partition("_")[0]  # delivery contracts: BTCUSDT_240927
    return next((q for q in QUOTE_ASSETS if base.endswith(q) and len(base) > len(q)), None)


@dataclass
class CryptoStream:
    """A reader of one stream and the facts the instrument record needs."""

    reader: BinanceReader | TardisReader
    name: str
    instrument_id: int
    currency: str | None
    linear: bool
    kind: str

    def __iter__(self) -> Iterator[CryptoChunk]:
        # Reading makes millions of short-lived containers (parsed JSON, rows) and no
        # reference cycles: the cyclic collector only costs time here (a fifth of a Binance
        # ingest), so it is paused while the stream is read and restored after.
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            yield from self.reader
        finally:
            if was_enabled:
                gc.enable()

    @property
    def size(self) -> int:
        return sum(self.reader.sizes)

    def position(self) -> int:
        return self.reader.position()

    def counts(self) -> dict[str, int]:
        return self.reader.all_counts()

    def checks(self) -> dict[str, int]:
        return self.reader.checks() if self.kind == "binance" else {}

    def first_mismatch(self) -> str:
        return self.reader.check.first_mismatch if self.kind == "binance" else ""

    def why_empty(self) -> str:
        """Why the stream gave no snapshot row (read only when it gave none)."""
        counts = self.counts()
        if self.reader.messages == 0:
            return "no message of its symbol"
        if self.kind == "tardis" and self.reader.key.data_type == TRADES:
            return (f"a trades file ({self.reader.messages:,} trades): it holds no order book; "
                    "pass incremental_book_L2 or book_snapshot_N files")
        if self.kind == "binance" and self.checks()["book_starts"] == 0:
            snapshots = counts["snapshot_unbridged"] + counts["snapshot_unused"]
            return ("no depth snapshot that a depth event bridges "
                    f"({snapshots} snapshot line(s), {counts['depth_no_book']:,} depth events "
                    "without a book); record the REST depth snapshot with the diff stream")
        if self.kind == "tardis" and self.reader.key.data_type == INCREMENTAL:
            return f"no snapshot rows ({counts['depth_no_book']:,} updates without a book)"
        return f"{self.reader.messages:,} messages, no book"


def open_stream(group: InputGroup, unit: SizeUnit, chunk_rows: int) -> CryptoStream:
    """The reader of ``group``'s files (sorted by first capture time) and its facts."""
    key = group.key
    if group.kind == "binance":
        reader = BinanceReader(group.paths, key, unit, BinanceConfig(chunk_rows=chunk_rows))
        venue = key.venue
    else:
        reader = TardisReader(group.paths, key, unit, chunk_rows)
        venue = key.exchange
    return CryptoStream(reader, key.name, key.instrument_id, quote_currency(venue, key.symbol),
                        venue in LINEAR_VENUES, group.kind)


def crypto_source(group: InputGroup, unit: SizeUnit, chunk_rows: int) -> Source:
    """``group``'s stream as an ingest source; ``unit`` is its instrument's size unit."""
    stream = open_stream(group, unit, chunk_rows)

    def chunks() -> Iterator[SourceChunk]:
        for part in stream:
            yield SourceChunk(part.rows, breaks=part.breaks, trades=part.trades,
                              size_rescale=part.size_rescale)

    return Source(chunks(), stream.name, stream.position, stream.size,
                   default_multiplier=1.0 if stream.linear else None,
                   default_currency=stream.currency, source_counts=stream.counts,
                   why_empty=stream.why_empty, size_unit=lambda: unit.base,
                   market_hours=AROUND_THE_CLOCK, cross_checks=stream.checks,
                   notes=lambda: crypto_notes(stream.counts(), stream.checks(),
                                              stream.first_mismatch(), unit))


def crypto_notes(counts: dict[str, int], checks: dict[str, int], mismatch: str,
                 unit: SizeUnit) -> list[str]:
    """What a user of a crypto stream must hear: the size unit (given or inferred), gaps,
    and any disagreement of the rebuilt book with the venue's bookTicker."""
    how = "given" if unit.given else "the gcd of the sizes; --size-unit sets it"
    lines = [f"size unit {unit.text()} of the base asset ({how})"] if unit.atoms else []
    gaps = counts.get("depth_gap", 0) + counts.get("book_restart", 0)
    if gaps:
        lines.append(f"{gaps:,} gap(s) in the depth stream: each ends a segment, the book "
                     "restarts at the next snapshot")
    aligned, agree = checks.get("book_ticker_aligned", 0), checks.get("book_ticker_agree", 0)
    if agree < aligned:
        lines.append(f"warning: {aligned - agree:,} of {aligned:,} id-aligned bookTicker "
                     f"messages disagree with the rebuilt book; first: {mismatch}")
    return lines
