"""Ingest: vendor files → validated snapshot chunks → a snapshot store.

Formats:
    ``dbn``     Databento DBN, schema mbp-10 (snapshots as recorded) or mbo (orders replayed
                into a 10-level book by ``mbo_book.MboBookBuilder``), versions 1-3, zstd or not.
    ``lobster`` LOBSTER ``*_orderbook_10.csv`` with its ``*_message_10.csv``.
    ``binance`` Binance spot / USD-M recordings (diff depth rebuilt into a book, bookTicker
                as a check, trades), all files of one stream as one source
                (``readers/binance.py``, ``crypto_sources``).
    ``tardis``  Tardis.dev CSV: incremental_book_L2 (rebuilt), book_snapshot_N, trades.

Crypto sizes are decimals: they are stored as exact integers of the instrument's size unit
(the quantity step, ``--size-unit`` or the gcd of the sizes; a finer size found later
refines it and the rows already written are rescaled), and the multiplier is per unit.

Memory: one file at a time, ``chunk_records`` records at a time. Peak host memory is about
``chunk_records`` × 1.2 KB (the raw 368-byte MBP-10 records, their int64 store-unit copy of
~500 B, masks) plus the zstd window, independent of file size; the default 65,536 records
keep it under ~100 MB (``benchmarks/bench_ingest.py`` measures it).

Trades: each reader reports what traded with the chunk's snapshots (``SourceChunk.trades``:
MBP-10 ``T`` records, MBO ``T`` records, LOBSTER executions; ``lobsurf.data.trades``). A
trade in the interval of a row that validation skips moves to the next row written (across
chunks); one after the file's last written row, or of another book, is left out and
counted (the manifest's ``trades``; docs/data.md has every rule).

MBO anomalies the book builder met (cancels of unknown orders and the like) are counted in
the manifest's ``skipped`` as ``mbo_<kind>``.

One book per file: the first instrument id seen (or ``instrument_id`` if given) and, for
DBN, the first publisher seen with it; rows of other instruments are counted as
``other_instrument``, rows of the same instrument from another publisher (another venue's
book: interleaving both would make one series jump between two books) as
``other_publisher``, and skipped.

Segment breaks beyond time gaps and file starts: a DBN record flagged ``F_MAYBE_BAD_BOOK``
(an unrecoverable gap at Databento) starts a new segment at the snapshot it carries (MBP-10)
or the next snapshot of its book (MBO); flagged records are counted as
``maybe_bad_book``.

Money: DBN and LOBSTER files carry no contract multiplier and no currency. They come from
``multiplier`` / ``currency``, or from a Databento instrument-definition file
(``definitions``); otherwise the multiplier is 1 and marked unknown (``lobsurf ingest``
warns, ``lobsurf info`` says so) and the currency is ``"unknown"``. Fees
(``fee_per_lot``, ``fee_bps``: the taker fee; ``maker_fee_per_lot``, ``maker_fee_bps``: the
maker fee of resting orders, negative for a rebate) are recorded only where given: training
and evaluation charge them unless a run gives its own (``lobsurf.sim.fees``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from lobsurf.data.readers.dbn_read import DbnReader
from lobsurf.data.readers.decimals import SizeUnit, atoms_of
from lobsurf.data.readers.definitions import Definition, read_definitions
from lobsurf.data.readers.mbo_book import F_MAYBE_BAD_BOOK
from lobsurf.data.readers.mbp10 import split_mbp10
from lobsurf.data.schema import FIXED_PRICE_SCALE, SnapshotChunk
from lobsurf.data.store import Instrument, Manifest, StoreWriter
from lobsurf.data.store.crypto_sources import crypto_source
from lobsurf.data.store.generator import recorded_generator
from lobsurf.data.store.inputs import CRYPTO_FORMATS, Format, InputGroup, input_files, plan_groups
from lobsurf.data.store.sources import Source as _Source
from lobsurf.data.store.sources import SourceChunk
from lobsurf.data.store.store import UNKNOWN_CURRENCY
from lobsurf.data.store.summary import money_warnings, summarize  # noqa: F401 (re-exported)
from lobsurf.data.trades import TradeChunk, attach_to_kept, merge_waiting
from lobsurf.data.validate import ValidationState, infer_tick_fixed, validate_chunk
from lobsurf.errors import UserError

#: basis points in the whole notional: a larger --fee-bps charges more than the fill is worth
MAX_FEE_BPS = 10_000.0
#: trades held while they wait for a row that passes validation; beyond this many (a long
#: run of skipped rows) they are merged per side, price and book (about 40 MB held at most;
#: the volume stays exact, left_out_records then counts merged entries)
MAX_WAITING_TRADES = 1 << 20
#: progress callback: (source name, bytes done, bytes total)
Progress = Callable[[str, int, int], None]
#: where ingest says what the user should know (a line without "warning:")
Warn = Callable[[str], None]


@dataclass(frozen=True)
class IngestConfig:
    chunk_records: int = 65_536
    """records decoded and validated at a time (bounds memory)"""
    gap_threshold_s: float = 1800.0
    """a capture-time gap longer than this (seconds) starts a new segment"""
    tick_size: float | None = None
    """the instrument's tick in currency units; None infers it (gcd of all prices)"""
    multiplier: float | None = None
    """contract multiplier: currency per price unit per lot; None: from ``definitions``, else
    1 marked unknown"""
    currency: str | None = None
    """currency of prices; None: from ``definitions``, else ``"unknown"``"""
    definitions: str | os.PathLike | None = None
    """a Databento instrument-definition DBN file: multiplier, currency and tick per
    instrument id (given values win)"""
    instrument_id: int | None = None
    """keep only this instrument id (default: the first one seen in each file)"""
    fee_per_lot: float | None = None
    """fee per lot filled (currency), recorded in the manifest for training and evaluation;
    None with fee_bps None: none recorded (lobsurf.sim.fees' default applies); one None of
    two is recorded as 0"""
    fee_bps: float | None = None
    """fee in basis points of filled notional, recorded likewise"""
    maker_fee_per_lot: float | None = None
    """maker fee per lot a resting order fills (currency; negative: a rebate), recorded
    likewise; None with maker_fee_bps None: none recorded (the simulator charges the taker
    fee); one None of two is recorded as 0"""
    maker_fee_bps: float | None = None
    """maker fee in basis points of filled notional (negative: a rebate), recorded likewise"""
    size_unit: str | None = None
    """crypto formats: the instrument's quantity step in base-asset amount (e.g. "0.00001"),
    the unit store sizes are counted in; None: the gcd of the sizes, inferred and printed"""

    def __post_init__(self) -> None:
        # `not (x > 0)` also refuses NaN; infinities would overflow the int64 conversions.
        if self.chunk_records < 1:
            raise UserError("chunk_records must be >= 1")
        if not (0 < self.gap_threshold_s < math.inf):
            raise UserError(f"gap threshold must be a finite number of seconds > 0, got "
                            f"{self.gap_threshold_s}")
        if self.tick_size is not None and not (0 < self.tick_size < math.inf):
            raise UserError(f"tick size must be finite and > 0, got {self.tick_size}")
        if self.multiplier is not None and not (0 < self.multiplier < math.inf):
            raise UserError(f"multiplier must be finite and > 0, got {self.multiplier}")
        if self.fee_per_lot is not None and not (0 <= self.fee_per_lot < math.inf):
            raise UserError(f"--fee-per-lot must be finite and >= 0, got {self.fee_per_lot}")
        if self.fee_bps is not None and not (0 <= self.fee_bps <= MAX_FEE_BPS):
            raise UserError(f"--fee-bps must be in [0, {MAX_FEE_BPS:g}] (the whole notional), "
                            f"got {self.fee_bps}")
        if self.maker_fee_per_lot is not None and not (-math.inf < self.maker_fee_per_lot
                                                       < math.inf):
            raise UserError(f"--maker-fee-per-lot must be finite, got {self.maker_fee_per_lot}")
        if self.maker_fee_bps is not None and not (-MAX_FEE_BPS <= self.maker_fee_bps
                                                   <= MAX_FEE_BPS):
            raise UserError(f"--maker-fee-bps must be in [-{MAX_FEE_BPS:g}, {MAX_FEE_BPS:g}] "
                            f"(the whole notional either way), got {self.maker_fee_bps}")
        if self.size_unit is not None:
            try:
                atoms_of(self.size_unit)
            except ValueError as exc:
                raise UserError(f"--size-unit {exc}") from None

    @property
    def fees_given(self) -> bool:
        """Whether a fee is to be recorded in the store."""
        return self.fee_per_lot is not None or self.fee_bps is not None

    @property
    def maker_fees_given(self) -> bool:
        """Whether a maker fee is to be recorded in the store."""
        return self.maker_fee_per_lot is not None or self.maker_fee_bps is not None

    @property
    def size_unit_atoms(self) -> int | None:
        return None if self.size_unit is None else atoms_of(self.size_unit)

    @property
    def tick_size_fixed(self) -> int | None:
        if self.tick_size is None:
            return None
        return int(round(self.tick_size * FIXED_PRICE_SCALE))


def _dbn_source(path: Path, cfg: IngestConfig) -> _Source:
    from lobsurf.data.readers.mbo_book import MboBookBuilder

    reader = DbnReader(path)
    symbol = reader.header.symbols[0] if len(reader.header.symbols) == 1 else ""
    builder = MboBookBuilder()

    mbp10_bad_book = {"records": 0}

    def chunks() -> Iterator[SourceChunk]:
        pending_break = False
        with reader:
            for records in reader.chunks(cfg.chunk_records):
                if reader.header.schema == "mbp-10":
                    # Each snapshot carries its own book: a flagged one starts the new series
                    # (a flagged trade record: the next book record does).
                    breaks = (records["flags"] & F_MAYBE_BAD_BOOK) != 0
                    mbp10_bad_book["records"] += int(breaks.sum())
                    book, trades = split_mbp10(records)
                    rows = None if book is None else np.flatnonzero(book)  # faster than a mask
                    publisher = records["publisher_id"]
                    if rows is not None or pending_break:
                        at = np.arange(len(records)) if rows is None else rows
                        breaks, pending_break = carry_breaks(breaks, at, pending_break)
                        publisher = publisher[at]
                    yield SourceChunk(SnapshotChunk.from_mbp10(records, rows), publisher,
                                      breaks, trades)
                    continue
                first = reader.records_read - len(records)
                fed = builder.feed_detailed(records)
                if builder.stats.top_of_book_records:
                    raise UserError(
                        f"{path}: record {first}: top-of-book (F_TOB) MBO feeds are not supported; "
                        "use an MBP-10 file for this venue"
                    )
                yield SourceChunk(fed.chunk, fed.publisher, fed.breaks, fed.trades)

    def counts() -> dict[str, int]:
        if reader.header.schema != "mbo":
            return {"maybe_bad_book": mbp10_bad_book["records"]}
        stats = builder.stats.as_dict()
        return {"maybe_bad_book": stats["maybe_bad_book"],
                **{f"mbo_{name}": stats[name] for name in MBO_ANOMALIES}}

    def why_empty() -> str:
        stats = builder.stats
        if reader.records_read == 0:
            return "no records after the DBN header"
        if reader.header.schema == "mbp-10":
            return (f"all {reader.records_read:,} records are trade reports (action T or F) "
                    "inside event packets, which repeat the book before them: no book state")
        if reader.header.schema == "mbo" and stats.snapshot_records == stats.records:
            return (f"all {stats.records:,} records are the initial book replay (F_SNAPSHOT), "
                    "which builds the book but emits no snapshot; the file has no live records")
        if reader.header.schema == "mbo":
            return (f"none of its {stats.records:,} records ends an event packet (F_LAST) "
                    "outside the initial replay, so no snapshot was emitted")
        return f"{reader.records_read:,} records, no snapshot"

    return _Source(chunks(), symbol, lambda: reader.compressed_bytes_read, reader.file_size,
                   source_counts=counts, why_empty=why_empty)


#: MboStats counters that go into the manifest's skipped counts as ``mbo_<name>``
MBO_ANOMALIES = ("cancel_unknown", "cancel_oversize", "modify_unknown", "modify_to_zero",
                 "add_zero_size", "add_duplicate", "bad_side", "unknown_action")


def _lobster_source(path: Path, cfg: IngestConfig) -> _Source:
    from lobsurf.data.readers.lobster import iter_lobster_with_trades, lobster_instrument

    info = lobster_instrument(path)
    handle = {"rows": 0}
    total_rows = max(1, sum(1 for _ in open(path, "rb")))

    def chunks() -> Iterator[SourceChunk]:
        for chunk, trades in iter_lobster_with_trades(path, chunk_rows=cfg.chunk_records):
            handle["rows"] += len(chunk)
            yield SourceChunk(chunk, trades=trades)

    return _Source(chunks(), info.symbol, lambda: handle["rows"], total_rows,
                   default_tick_fixed=info.tick_size_fixed,
                   default_multiplier=info.multiplier, default_currency=info.currency)


def ingest(
    paths: list[str | os.PathLike],
    out: str | os.PathLike,
    cfg: IngestConfig = IngestConfig(),
    fmt: Format = "auto",
    overwrite: bool = False,
    progress: Progress | None = None,
    warn: Warn | None = None,
) -> Manifest:
    """Build a store at ``out`` from ``paths`` (in the order given; sort them by time; the
    files of one crypto stream are put in time order: ``inputs``)."""
    files = input_files(paths)
    groups = plan_groups(files, fmt)
    definitions = read_definitions(cfg.definitions) if cfg.definitions is not None else {}
    gap_ns = int(cfg.gap_threshold_s * 1e9)
    units: dict[int, SizeUnit] = {}  # per instrument, shared by its crypto sources
    with StoreWriter(out, gap_threshold_ns=gap_ns, overwrite=overwrite) as writer:
        empty = []
        for group in groups:
            if group.kind in CRYPTO_FORMATS:
                unit = units.setdefault(group.key.instrument_id, SizeUnit(cfg.size_unit_atoms))
                source = crypto_source(group, unit, cfg.chunk_records)
            elif group.kind == "dbn":
                source = _dbn_source(group.paths[0], cfg)
            else:
                source = _lobster_source(group.paths[0], cfg)
            why = _ingest_source(group, source, cfg, definitions, writer, progress)
            if why:
                empty.append(f"{group.paths[0] if len(group.paths) == 1 else group.label}: {why}")
            for line in source.notes():
                if warn:
                    warn(f"{group.label}: {line}")
        if writer.rows_written == 0:
            raise UserError("no valid snapshots in the input: " + "; ".join(empty))
        writer.synth = recorded_generator(files)  # None unless every file is lobsurf synth's
        return writer.close()


def _ingest_source(group: InputGroup, source: _Source, cfg: IngestConfig,
                   definitions: dict[int, Definition], writer: StoreWriter,
                   progress: Progress | None) -> str:
    """Append one source's valid snapshots; return why it gave none ("" if it gave some)."""
    writer.begin_source(group.label)
    state = ValidationState()
    given_tick = cfg.tick_size_fixed
    tick = 0
    chosen = cfg.instrument_id
    publisher = None
    produced, written = 0, 0
    skipped: dict[str, int] = {}
    pending_break = False
    waiting = TradeChunk.empty()  # trades after the last written row so far
    for part in source.chunks:
        chunk = part.chunk
        produced += len(chunk)
        if len(chunk) and chosen is None:
            chosen = int(chunk.instrument_id[0])
        if part.size_rescale > 1:  # a finer size unit: what was stored so far follows it
            writer.scale_sizes(int(group.key.instrument_id), part.size_rescale)
            waiting = replace(waiting, size=waiting.size * part.size_rescale)
        if given_tick is None and chosen in definitions:
            given_tick = definitions[chosen].tick_size_fixed  # the venue's tick: exact
        ours, counts, publisher = _select_book(part, chosen, publisher)
        mine = chunk if ours.all() else chunk.take(ours)
        keep, reasons = validate_chunk(mine, state, given_tick)
        counts.update(reasons)
        kept = np.flatnonzero(ours)[keep]
        valid = mine if keep.all() else mine.take(keep)
        starts = None
        if part.breaks is not None:
            starts, pending_break = carry_breaks(part.breaks, kept, pending_break)
        if given_tick is None:
            tick = infer_tick_fixed(valid, tick)
        writer.count_skipped(counts)
        for reason, n in counts.items():
            skipped[reason] = skipped.get(reason, 0) + n
        trades = None
        if part.trades is not None:
            # Trades still waiting belong to this chunk's first rows: they are at row 0.
            mine = TradeChunk.concat([waiting.with_rows(np.zeros(len(waiting), np.int64)),
                                      part.trades])
            mine = _book_trades(mine, chosen, publisher, writer)
            trades, waiting = attach_to_kept(mine, kept)
            if len(waiting) > MAX_WAITING_TRADES:  # a long run of skipped rows: bound memory
                merged = merge_waiting(waiting)
                writer.count_trade_records_merged(len(waiting) - len(merged))
                waiting = merged
        writer.append(valid, starts, trades)
        written += len(valid)
        if progress:
            progress(group.label, source.position(), source.size)
    writer.count_skipped(source.source_counts())
    waiting = _book_trades(waiting, chosen, publisher, writer)
    writer.count_trades_left_out("after_last_row", len(waiting), waiting.volume)
    writer.count_checks(source.cross_checks())
    if chosen is not None:
        definition = definitions.get(chosen)
        tick = given_tick or source.default_tick_fixed or tick
        if tick <= 0:
            # No valid row to infer from; the instrument has no rows, so no segment uses it.
            tick = 1
        writer.add_instrument(_instrument(chosen, source, int(tick), cfg, definition))
    if written:
        return ""
    if produced == 0:
        return source.why_empty()
    reasons = ", ".join(f"{k} {v:,}" for k, v in sorted(skipped.items()) if v)
    return f"all {produced:,} snapshots skipped ({reasons})"


def _select_book(part: SourceChunk, instrument: int, publisher: int | None
                 ) -> tuple[np.ndarray, dict[str, int], int | None]:
    """Rows of the file's one book: its instrument and (DBN) its first publisher seen.

    Returns the [N] keep mask, the skip counts and the publisher (chosen on first sight).
    """
    ours = part.chunk.instrument_id == instrument
    counts = {"other_instrument": int((~ours).sum())}
    if part.publisher is not None and ours.any():
        if publisher is None:
            publisher = int(part.publisher[np.argmax(ours)])
        other = ours & (part.publisher != publisher)
        counts["other_publisher"] = int(other.sum())
        ours &= ~other
    return ours, counts, publisher


def _book_trades(trades: TradeChunk, instrument: int | None, publisher: int | None,
                 writer: StoreWriter) -> TradeChunk:
    """The trades of the file's one book; others are counted as left out. Before that book
    is known (no row of it seen yet) they are all kept, to be sorted out later."""
    for book, field, reason in ((instrument, "instrument_id", "other_instrument"),
                                (publisher, "publisher", "other_publisher")):
        ids = getattr(trades, field)
        if book is None or ids is None:
            continue
        other = ids != book
        if other.any():
            writer.count_trades_left_out(reason, int(other.sum()),
                                         int(trades.size[other].sum()))
            trades = trades.take(~other)
    return trades


def _instrument(instrument_id: int, source: _Source, tick_fixed: int, cfg: IngestConfig,
                definition: Definition | None) -> Instrument:
    # Given values win over the definition file, which wins over what the format implies;
    # without any of them nothing is claimed.
    multiplier = (cfg.multiplier or (definition.multiplier if definition else None)
                  or source.default_multiplier)
    unit = source.size_unit()  # crypto: the multiplier is per base amount, the store's per unit
    currency = (cfg.currency or (definition.currency if definition else None)
                or source.default_currency)
    return Instrument(
        instrument_id=instrument_id,
        symbol=source.symbol or (definition.symbol if definition else "") or str(instrument_id),
        tick_size_fixed=tick_fixed,
        multiplier=(multiplier or 1.0) * unit,
        currency=currency or UNKNOWN_CURRENCY,
        multiplier_known=multiplier is not None,
        fee_per_lot=(cfg.fee_per_lot or 0.0) if cfg.fees_given else None,
        fee_bps=(cfg.fee_bps or 0.0) if cfg.fees_given else None,
        maker_fee_per_lot=(cfg.maker_fee_per_lot or 0.0) if cfg.maker_fees_given else None,
        maker_fee_bps=(cfg.maker_fee_bps or 0.0) if cfg.maker_fees_given else None,
        size_unit=unit,
        market_hours=source.market_hours,
    )


def carry_breaks(breaks: np.ndarray, kept: np.ndarray, pending: bool) -> tuple[np.ndarray, bool]:
    """Move segment breaks onto the rows that survive filtering.

    A break on a skipped row must not be lost: it moves to the next kept row, across chunks.

    Args:
        breaks: [N] bool, rows of the chunk that start a new segment.
        kept: [M] int64 increasing positions of the rows that are written.
        pending: a break from earlier chunks not yet placed on a written row.

    Returns:
        ([M] bool breaks of the written rows, the break still pending after this chunk).
    """
    # Rows share a "series number" until the next break; a kept row starts a segment when
    # its number differs from the previous kept row's (or from the pending carry-in).
    series = np.cumsum(breaks) + int(pending)
    ours = series[kept]
    previous = np.concatenate([[0], ours[:-1]])
    starts = ours != previous
    last_placed = int(ours[-1]) if len(ours) else 0
    still_pending = int(series[-1]) != last_placed if len(series) else pending
    return starts, still_pending
