"""Ingest: vendor files → validated snapshot chunks → a snapshot store.

Formats:
    ``dbn``     Databento DBN, schema mbp-10 (snapshots as recorded) or mbo (orders replayed
                into a 10-level book by ``mbo_book.MboBookBuilder``), versions 1-3, zstd or not.
    ``lobster`` LOBSTER ``*_orderbook_10.csv`` with its ``*_message_10.csv``.

Memory: one file at a time, ``chunk_records`` records at a time. Peak host memory is about
``chunk_records`` × 1.2 KB (the raw 368-byte MBP-10 records, their int64 store-unit copy of
~500 B, masks) plus the zstd window, independent of file size; the default 65,536 records
keep it under ~100 MB (``benchmarks/bench_ingest.py`` measures it).

MBO anomalies the book builder met (cancels of unknown orders and the like) are counted in
the manifest's ``skipped`` as ``mbo_<kind>``.

One instrument per file: the first instrument id seen (or ``instrument_id`` if given); rows
of other instruments are counted as ``other_instrument`` and skipped.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from lobsurf.data.readers.dbn_read import DBN_MAGIC, ZSTD_MAGIC, DbnReader
from lobsurf.data.schema import FIXED_PRICE_SCALE, SnapshotChunk
from lobsurf.data.store import Instrument, Manifest, StoreWriter
from lobsurf.data.validate import ValidationState, infer_tick_fixed, validate_chunk
from lobsurf.errors import UserError

Format = Literal["auto", "dbn", "lobster"]
#: progress callback: (source name, bytes done, bytes total)
Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class IngestConfig:
    chunk_records: int = 65_536
    """records decoded and validated at a time (bounds memory)"""
    gap_threshold_s: float = 1800.0
    """a capture-time gap longer than this (seconds) starts a new segment"""
    tick_size: float | None = None
    """the instrument's tick in currency units; None infers it (gcd of all prices)"""
    multiplier: float = 1.0
    """contract multiplier: currency per price unit per lot"""
    currency: str = "USD"
    """currency of prices"""
    instrument_id: int | None = None
    """keep only this instrument id (default: the first one seen in each file)"""

    def __post_init__(self) -> None:
        # `not (x > 0)` also refuses NaN; infinities would overflow the int64 conversions.
        if self.chunk_records < 1:
            raise UserError("chunk_records must be >= 1")
        if not (0 < self.gap_threshold_s < math.inf):
            raise UserError(f"gap threshold must be a finite number of seconds > 0, got "
                            f"{self.gap_threshold_s}")
        if self.tick_size is not None and not (0 < self.tick_size < math.inf):
            raise UserError(f"tick size must be finite and > 0, got {self.tick_size}")
        if not (0 < self.multiplier < math.inf):
            raise UserError(f"multiplier must be finite and > 0, got {self.multiplier}")

    @property
    def tick_size_fixed(self) -> int | None:
        if self.tick_size is None:
            return None
        return int(round(self.tick_size * FIXED_PRICE_SCALE))


#: LOBSTER orderbook and message file name endings (any number of levels)
_LOBSTER_BOOK = re.compile(r"_orderbook_\d+\.csv$", re.IGNORECASE)
_LOBSTER_MESSAGE = re.compile(r"_message_\d+\.csv$", re.IGNORECASE)


def input_files(paths: list[str | os.PathLike]) -> list[Path]:
    """Check the inputs: existing files, no folders; LOBSTER message files are read with
    their orderbook file, so one given next to its orderbook file (``*.csv``) is dropped."""
    if not paths:
        raise UserError("no input files")
    sources = [Path(p) for p in paths]
    for p in sources:
        if p.is_dir():
            what = "a snapshot store" if (p / "manifest.json").is_file() else "a folder"
            raise UserError(f"{p}: is {what}, not an input file; pass the data files "
                            "(for example DIR/*.dbn.zst)")
        if not p.is_file():
            raise UserError(f"{p}: no such file")
    given = {p.resolve() for p in sources}
    kept = []
    for p in sources:
        match = _LOBSTER_MESSAGE.search(p.name)
        if match is None:
            kept.append(p)
            continue
        book = p.with_name(p.name[:match.start()] + "_orderbook_"
                           + match.group(0)[len("_message_"):])
        if book.resolve() not in given:
            raise UserError(f"{p}: is a LOBSTER message file; pass its orderbook file {book.name} "
                            "(the message file is read with it)")
    return kept


def detect_format(path: Path) -> Literal["dbn", "lobster"]:
    name = path.name.lower()
    if ".dbn" in name:
        return "dbn"
    if _LOBSTER_BOOK.search(name):
        return "lobster"
    if not path.is_file():
        raise UserError(f"{path}: no such file")
    with open(path, "rb") as f:
        head = f.read(4)
    if head[:3] == DBN_MAGIC or head == ZSTD_MAGIC:
        return "dbn"
    raise UserError(
        f"{path}: cannot tell the format (expected *.dbn, *.dbn.zst or *_orderbook_N.csv); "
        "pass --format"
    )


@dataclass
class _Source:
    chunks: Iterator[SnapshotChunk]
    symbol: str
    position: Callable[[], int]
    size: int
    default_tick_fixed: int | None = None
    #: counts of records the source itself skipped or repaired, read after the last chunk
    source_counts: Callable[[], dict[str, int]] = dict


def _dbn_source(path: Path, cfg: IngestConfig) -> _Source:
    from lobsurf.data.readers.mbo_book import MboBookBuilder

    reader = DbnReader(path)
    symbol = reader.header.symbols[0] if len(reader.header.symbols) == 1 else ""
    builder = MboBookBuilder()

    def chunks() -> Iterator[SnapshotChunk]:
        with reader:
            for records in reader.chunks(cfg.chunk_records):
                if reader.header.schema == "mbp-10":
                    yield SnapshotChunk.from_mbp10(records)
                    continue
                first = reader.records_read - len(records)
                chunk = builder.feed(records)
                if builder.stats.top_of_book_records:
                    raise UserError(
                        f"{path}: record {first}: top-of-book (F_TOB) MBO feeds are not supported; "
                        "use an MBP-10 file for this venue"
                    )
                yield chunk

    def mbo_counts() -> dict[str, int]:
        if reader.header.schema != "mbo":
            return {}
        anomalies = ("cancel_unknown", "cancel_oversize", "modify_unknown", "add_duplicate",
                     "bad_side", "unknown_action")
        stats = builder.stats.as_dict()
        return {f"mbo_{name}": stats[name] for name in anomalies}

    return _Source(chunks(), symbol, lambda: reader.compressed_bytes_read, reader.file_size,
                   source_counts=mbo_counts)


def _lobster_source(path: Path, cfg: IngestConfig) -> _Source:
    from lobsurf.data.readers.lobster import iter_lobster, lobster_instrument

    info = lobster_instrument(path)
    handle = {"rows": 0}
    total_rows = max(1, sum(1 for _ in open(path, "rb")))

    def chunks() -> Iterator[SnapshotChunk]:
        for chunk in iter_lobster(path, chunk_rows=cfg.chunk_records):
            handle["rows"] += len(chunk)
            yield chunk

    return _Source(chunks(), info.symbol, lambda: handle["rows"], total_rows,
                   default_tick_fixed=info.tick_size_fixed)


def ingest(
    paths: list[str | os.PathLike],
    out: str | os.PathLike,
    cfg: IngestConfig = IngestConfig(),
    fmt: Format = "auto",
    overwrite: bool = False,
    progress: Progress | None = None,
) -> Manifest:
    """Build a store at ``out`` from ``paths`` (in the order given; sort them by time)."""
    sources = input_files(paths)
    gap_ns = int(cfg.gap_threshold_s * 1e9)
    with StoreWriter(out, gap_threshold_ns=gap_ns, overwrite=overwrite) as writer:
        for path in sources:
            kind = detect_format(path) if fmt == "auto" else fmt
            source = _dbn_source(path, cfg) if kind == "dbn" else _lobster_source(path, cfg)
            _ingest_source(path, source, cfg, writer, progress)
        if writer.rows_written == 0:
            raise UserError(
                "no valid snapshots in the input; skipped: "
                + ", ".join(f"{k}={v}" for k, v in sorted(writer.skipped.items()) if v)
            )
        return writer.close()


def _ingest_source(path: Path, source: _Source, cfg: IngestConfig, writer: StoreWriter,
                   progress: Progress | None) -> None:
    writer.begin_source(path.name)
    state = ValidationState()
    given_tick = cfg.tick_size_fixed
    tick = 0
    chosen = cfg.instrument_id
    for chunk in source.chunks:
        if len(chunk) and chosen is None:
            chosen = int(chunk.instrument_id[0])
        other = chunk.instrument_id != chosen
        writer.count_skipped({"other_instrument": int(other.sum())})
        chunk = chunk.take(~other) if other.any() else chunk
        keep, counts = validate_chunk(chunk, state, given_tick)
        writer.count_skipped(counts)
        valid = chunk if keep.all() else chunk.take(keep)
        if given_tick is None:
            tick = infer_tick_fixed(valid, tick)
        writer.append(valid)
        if progress:
            progress(path.name, source.position(), source.size)
    writer.count_skipped(source.source_counts())
    if chosen is None:
        return
    tick = given_tick or source.default_tick_fixed or tick
    if tick <= 0:
        # No valid row to infer from; the instrument has no rows, so no segment uses it.
        tick = 1
    writer.add_instrument(Instrument(
        instrument_id=chosen, symbol=source.symbol or str(chosen), tick_size_fixed=int(tick),
        multiplier=cfg.multiplier, currency=cfg.currency,
    ))


def summarize(manifest: Manifest) -> dict:
    """The ``lobsurf info --json`` object: counts, instruments, times, prices in currency."""
    import datetime as dt

    def iso(ns: int) -> str:
        return dt.datetime.fromtimestamp(ns / 1e9, tz=dt.timezone.utc).isoformat()

    segs = manifest.segments
    instruments = [
        {"instrument_id": i.instrument_id, "symbol": i.symbol, "tick_size": i.tick_size,
         "multiplier": i.multiplier, "currency": i.currency}
        for i in manifest.instruments
    ]
    ticks = sorted({i.tick_size for i in manifest.instruments})
    return {
        "snapshots": manifest.snapshots,
        "segments": len(segs),
        "instruments": instruments,
        "start": iso(min(s.ts_start_ns for s in segs)) if segs else None,
        "end": iso(max(s.ts_end_ns for s in segs)) if segs else None,
        "tick_size": ticks[0] if len(ticks) == 1 else ticks,
        "price_min": min(s.price_min_fixed for s in segs) / FIXED_PRICE_SCALE if segs else None,
        "price_max": max(s.price_max_fixed for s in segs) / FIXED_PRICE_SCALE if segs else None,
        "skipped": dict(manifest.skipped),
        "skipped_total": int(np.sum(list(manifest.skipped.values()), dtype=np.int64)),
        "sources": manifest.sources,
        "segment_details": [
            {"index": k, "rows": [s.start, s.stop], "snapshots": len(s),
             "instrument_id": s.instrument_id, "start": iso(s.ts_start_ns), "end": iso(s.ts_end_ns),
             "source": s.source}
            for k, s in enumerate(segs)
        ],
    }
