"""The snapshot store: columnar book snapshots on disk plus a JSON manifest.

Layout of a store folder::

    STORE/manifest.json      format version, instruments, segments, columns, skipped counts,
                             what the trade table holds (``trades``)
    STORE/<column>.bin       raw little-endian arrays, one per column of ``STORE_COLUMNS``
    STORE/trade_*.bin        the trade table (``trade_table``), when the store holds trades

Columns are plain binary files so the writer can append chunk by chunk (bounded memory)
and the reader can memory-map them. The manifest is written last, and the folder is built
under a temporary name and renamed into place at the end: an interrupted write never leaves
a folder that loads as a store (``Store.open`` requires the manifest and checks every
column's length against it).

Versions: 1 has no trade table; 2 adds it (its manifest's ``trades`` is null when a source
gave no trades). Both load.

A *segment* is a contiguous run of rows of one instrument with no session gap inside it
(see ``StoreWriter``); windows and label horizons never cross a segment boundary.
"""

from __future__ import annotations

import json
import os
import shutil
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from lobsurf.data.schema import STORE_COLUMNS, SnapshotChunk
from lobsurf.data.store.folders import (
    MANIFEST,
    STORE_FORMAT,
    StoreError,
    check_replaceable,
    file_not_store,
)
from lobsurf.data.store.instrument import UNKNOWN_CURRENCY, Instrument  # noqa: F401 (re-exported)
from lobsurf.data.store.size_rescale import rescale_written
from lobsurf.data.store.trade_table import (
    TradeSummary,
    TradeTableWriter,
    open_trade_table,
    summary_from_json,
    trades_of_rows,
)
from lobsurf.data.trades import TradeChunk

#: version written; 2 added the trade table
STORE_VERSION = 2
#: versions ``Store.open`` reads (1: written before trades were recorded)
READABLE_VERSIONS = (1, 2)
#: manifest keys without a default: a manifest lacking one is refused, naming it
REQUIRED_KEYS = ("format", "version", "snapshots", "instruments", "segments")


@dataclass
class Segment:
    """Rows [start, stop) of the store: one instrument, one session, no gaps."""

    start: int
    stop: int
    instrument_id: int
    ts_start_ns: int
    ts_end_ns: int
    source: str
    #: lowest best bid and highest best ask in the segment, fixed point (1e-9 units)
    price_min_fixed: int = 0
    price_max_fixed: int = 0

    def __len__(self) -> int:
        return self.stop - self.start


@dataclass
class Manifest:
    snapshots: int
    instruments: list[Instrument]
    segments: list[Segment]
    skipped: dict[str, int] = field(default_factory=dict)
    sources: list[str] = field(default_factory=list)
    gap_threshold_ns: int = 0
    #: the synthetic generator's config (every SynthConfig field) where every row came from
    #: it (``lobsurf.data.store.generator``); None for real data
    synth: dict | None = None
    #: independent checks of rebuilt books, e.g. book_ticker_aligned / book_ticker_agree
    cross_checks: dict[str, int] = field(default_factory=dict)
    format: str = STORE_FORMAT
    version: int = STORE_VERSION
    #: what the trade table holds; None: the store holds no trades
    trades: TradeSummary | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)

    @staticmethod
    def from_json(text: str) -> Manifest:
        """Parse a manifest; every defect is a one-line StoreError naming what is wrong."""
        try:
            raw = json.loads(text)
        except ValueError as exc:
            raise StoreError(f"not valid JSON ({exc})") from None
        if not isinstance(raw, dict):
            raise StoreError(f"not a lobsurf store manifest (a JSON {type(raw).__name__}, "
                             "not an object)")
        missing = [key for key in REQUIRED_KEYS if key not in raw]
        if missing:
            raise StoreError(f"not a lobsurf store manifest: no key {', '.join(missing)}")
        if raw["format"] != STORE_FORMAT:
            raise StoreError(f"not a lobsurf store manifest (format={raw['format']!r})")
        if raw["version"] not in READABLE_VERSIONS:
            raise StoreError(f"store version {raw['version']} is not supported (this lobsurf "
                             f"reads versions {', '.join(map(str, READABLE_VERSIONS))})")
        try:
            manifest = Manifest(
                snapshots=int(raw["snapshots"]),
                instruments=[Instrument(**i) for i in raw["instruments"]],
                segments=[Segment(**s) for s in raw["segments"]],
                skipped=dict(raw.get("skipped", {})),
                sources=list(raw.get("sources", [])),
                gap_threshold_ns=int(raw.get("gap_threshold_ns", 0)),
                version=int(raw["version"]),
                trades=summary_from_json(raw.get("trades")),
                synth=raw.get("synth"),
                cross_checks={str(k): int(v) for k, v in raw.get("cross_checks", {}).items()},
            )
        except (TypeError, ValueError, AttributeError) as exc:
            raise StoreError(f"malformed manifest entry: {exc}") from None
        if manifest.synth is not None and not isinstance(manifest.synth, dict):
            raise StoreError("malformed manifest entry: synth is not an object")
        if manifest.snapshots < 0:
            raise StoreError(f"malformed manifest entry: snapshots {manifest.snapshots} < 0")
        return manifest

    def instrument(self, instrument_id: int) -> Instrument:
        for inst in self.instruments:
            if inst.instrument_id == instrument_id:
                return inst
        raise StoreError(f"instrument {instrument_id} not in store")


class Store:
    """A finished store, read-only. Columns are numpy memory maps (``store.columns[name]``);
    the trade table's too (``store.trades[name]``, None when the store holds no trades)."""

    def __init__(self, path: Path, manifest: Manifest, columns: dict[str, np.ndarray],
                 trades: dict[str, np.ndarray] | None = None):
        self.path = path
        self.manifest = manifest
        self.columns = columns
        self.trades = trades

    @property
    def has_trades(self) -> bool:
        """Whether the store records what traded at each row (see ``trade_table``)."""
        return self.trades is not None

    @staticmethod
    def open(path: str | os.PathLike) -> Store:
        path = Path(path)
        if path.is_file():
            raise StoreError(file_not_store(path))
        if not path.is_dir():
            raise StoreError(f"{path}: no such store folder")
        manifest_path = path / MANIFEST
        if not manifest_path.is_file():
            raise StoreError(f"{path}: not a finished store (no {MANIFEST}; interrupted ingest?)")
        try:
            manifest = Manifest.from_json(manifest_path.read_text(errors="replace"))
        except StoreError as exc:
            raise StoreError(f"{manifest_path}: {exc}") from None
        columns = {}
        for name, (dtype, row_shape) in STORE_COLUMNS.items():
            file = path / f"{name}.bin"
            row_bytes = np.dtype(dtype).itemsize * int(np.prod(row_shape, dtype=np.int64))
            if not file.is_file() or file.stat().st_size != row_bytes * manifest.snapshots:
                raise StoreError(f"{file}: missing or wrong size for {manifest.snapshots} snapshots")
            if manifest.snapshots == 0:
                columns[name] = np.zeros((0, *row_shape), dtype)
            else:
                columns[name] = np.memmap(file, dtype=dtype, mode="r",
                                          shape=(manifest.snapshots, *row_shape))
        trades = None
        if manifest.trades is not None:
            try:
                trades = open_trade_table(path, manifest.trades.entries)
            except ValueError as exc:
                raise StoreError(str(exc)) from None
        return Store(path, manifest, columns, trades)

    def __len__(self) -> int:
        return self.manifest.snapshots

    def rows(self, start: int, stop: int) -> SnapshotChunk:
        """Rows [start, stop) as an in-memory chunk."""
        return SnapshotChunk(**{name: np.asarray(col[start:stop])
                                for name, col in self.columns.items()})

    def trades_of_rows(self, start: int, stop: int) -> TradeChunk:
        """The trade table's entries of rows [start, stop) (``row``: store rows); empty
        when the store holds no trades (``has_trades`` tells the two apart)."""
        if self.trades is None:
            return TradeChunk.empty()
        return trades_of_rows(self.trades, start, stop)


def _column_for_disk(values: np.ndarray, dtype: np.dtype, name: str) -> np.ndarray:
    # Values arrive in any integer dtype; a cast that would change a value is an error.
    if values.dtype != dtype and values.size:
        info = np.iinfo(dtype)
        if values.min() < info.min or values.max() > info.max:
            raise StoreError(f"column {name}: values outside {dtype} range")
    return np.ascontiguousarray(values, dtype=dtype)


def _write_columns(columns: list[tuple]) -> None:
    for file, values in columns:
        values.tofile(file)


class StoreWriter:
    """Streams validated snapshot chunks into a new store; ``close()`` makes it visible.

    Segments: a new segment starts at each new source file, each change of instrument, and
    wherever the capture-time gap between consecutive rows exceeds ``gap_threshold_ns``.

    Use as a context manager: on an exception the temporary folder is removed and nothing
    appears at ``path``.
    """

    def __init__(self, path: str | os.PathLike, gap_threshold_ns: int, overwrite: bool = False):
        self.path = Path(path)
        if self.path.exists() or self.path.is_symlink():
            if not overwrite:
                raise StoreError(f"{self.path} exists; choose another --out or pass --overwrite")
            check_replaceable(self.path)
        self.gap_threshold_ns = int(gap_threshold_ns)
        self.tmp = self.path.parent / f".{self.path.name}.tmp-{os.getpid()}"
        if self.tmp.exists():
            shutil.rmtree(self.tmp)
        self.tmp.mkdir(parents=True)
        self.files = {name: open(self.tmp / f"{name}.bin", "wb") for name in STORE_COLUMNS}
        self.trade_table = TradeTableWriter(self.tmp)
        # One background writer: numpy releases the GIL while writing, so the next chunk is
        # decoded and validated while this one goes to disk. At most one chunk is in flight
        # (memory stays bounded): append() waits for the previous write first.
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="store-writer")
        self._pending: Future | None = None
        self.rows_written = 0
        self.segments: list[Segment] = []
        self.instruments: dict[int, Instrument] = {}
        self.skipped: dict[str, int] = {}
        self.sources: list[str] = []
        self.cross_checks: dict[str, int] = {}
        self._source = ""
        self._new_source = False
        self.overwrite = overwrite
        #: the generator config to record (Manifest.synth), set by a synthetic source
        self.synth: dict | None = None

    def __enter__(self) -> StoreWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.abort()

    def begin_source(self, source: str) -> None:
        """Start a new input file: the next row starts a new segment."""
        self._source = source
        self._new_source = True
        self.sources.append(source)

    def add_instrument(self, instrument: Instrument) -> None:
        known = self.instruments.get(instrument.instrument_id)
        if known is None:
            self.instruments[instrument.instrument_id] = instrument
        elif known.tick_size_fixed != instrument.tick_size_fixed:
            # Two files disagree on an inferred tick: keep the finer common tick (their gcd).
            known.tick_size_fixed = int(np.gcd(known.tick_size_fixed, instrument.tick_size_fixed))

    def count_skipped(self, counts: dict[str, int]) -> None:
        for reason, n in counts.items():
            if n:
                self.skipped[reason] = self.skipped.get(reason, 0) + int(n)

    def count_checks(self, counts: dict[str, int]) -> None:
        """Add a source's cross-check counts (summed over sources)."""
        for name, n in counts.items():
            self.cross_checks[name] = self.cross_checks.get(name, 0) + int(n)

    def scale_sizes(self, instrument_id: int, factor: int) -> None:
        """The instrument's size unit became ``factor`` times finer: multiply what was
        stored of it (``size_rescale.rescale_written``)."""
        rescale_written(self, instrument_id, factor)

    def count_trades_left_out(self, reason: str, records: int, volume: int) -> None:
        """Count a source's trades that never reach ``append`` (``trade_table.LEFT_OUT_REASONS``)."""
        self.trade_table.summary.leave_out(reason, records, volume)

    def count_trade_records_merged(self, records: int) -> None:
        """Count trade records read that were merged into others (same volume, fewer entries)
        while they waited for a row, so ``source_records`` stays the number read."""
        self.trade_table.summary.source_records += int(records)

    def append(self, chunk: SnapshotChunk, breaks: np.ndarray | None = None,
               trades: TradeChunk | None = None) -> None:
        """Append validated rows (time-ordered within the current source).

        Args:
            chunk: the rows. Its arrays are written in the background: do not modify them
                afterwards.
            breaks: optional [N] bool, rows that start a new segment whatever the time gap
                (the source says the book before is not the same series, e.g. after a
                Databento ``F_MAYBE_BAD_BOOK``).
            trades: what traded in each row's interval (``row`` indexes the chunk's rows;
                an empty TradeChunk when nothing did). None: the source does not say, and
                the store then holds no trades at all. Trades on a row that starts a
                segment are left out (counted): no row before them is in their segment.
        """
        n = len(chunk)
        if n == 0:
            return
        ts = chunk.ts_recv_ns
        inst = chunk.instrument_id
        starts = np.zeros(n, bool)
        starts[1:] = (np.diff(ts) > self.gap_threshold_ns) | (inst[1:] != inst[:-1])
        if breaks is not None:
            starts |= breaks
        last = self.segments[-1] if self.segments else None
        starts[0] = (
            starts[0]
            or self._new_source
            or last is None
            or last.instrument_id != int(inst[0])
            or int(ts[0]) - last.ts_end_ns > self.gap_threshold_ns
        )
        self._new_source = False
        boundaries = np.flatnonzero(starts).tolist() + [n]
        low, high = chunk.bid_px[:, 0], chunk.ask_px[:, 0]
        if boundaries[0] != 0:
            # Rows before the first boundary extend the open segment.
            last.stop += boundaries[0]
            last.ts_end_ns = int(ts[boundaries[0] - 1])
            last.price_min_fixed = min(last.price_min_fixed, int(low[: boundaries[0]].min()))
            last.price_max_fixed = max(last.price_max_fixed, int(high[: boundaries[0]].max()))
        for begin, end in zip(boundaries[:-1], boundaries[1:]):
            self.segments.append(
                Segment(
                    start=self.rows_written + begin,
                    stop=self.rows_written + end,
                    instrument_id=int(inst[begin]),
                    ts_start_ns=int(ts[begin]),
                    ts_end_ns=int(ts[end - 1]),
                    source=self._source,
                    price_min_fixed=int(low[begin:end].min()),
                    price_max_fixed=int(high[begin:end].max()),
                )
            )
        try:
            columns = [(self.files[name], _column_for_disk(getattr(chunk, name), np.dtype(dtype), name))
                       for name, (dtype, _) in STORE_COLUMNS.items()]
            columns += self.trade_table.columns(trades, starts, self.rows_written)
        except (StoreError, ValueError) as exc:
            raise StoreError(f"{self._source}: {exc}") from None
        self._wait_for_write()
        self._pending = self._writer.submit(_write_columns, columns)
        self.rows_written += n

    def _wait_for_write(self) -> None:
        if self._pending is not None:
            pending, self._pending = self._pending, None
            pending.result()  # re-raises a write error (disk full, ...) here

    def close(self) -> Manifest:
        """Flush, write the manifest, and rename the folder into place."""
        self._wait_for_write()
        self._writer.shutdown()
        for f in self.files.values():
            f.close()
        trades = self.trade_table.close(self.tmp)
        used = {s.instrument_id for s in self.segments}
        manifest = Manifest(
            snapshots=self.rows_written,
            instruments=[i for k, i in sorted(self.instruments.items()) if k in used],
            segments=self.segments,
            skipped=dict(sorted(self.skipped.items())),
            sources=self.sources,
            gap_threshold_ns=self.gap_threshold_ns,
            trades=trades,
            synth=self.synth,
            cross_checks=dict(sorted(self.cross_checks.items())),
        )
        (self.tmp / MANIFEST).write_text(manifest.to_json())
        if self.path.exists():
            shutil.rmtree(self.path)
        os.replace(self.tmp, self.path)
        return manifest

    def abort(self) -> None:
        if self._pending is not None:
            self._pending.cancel()
            try:
                self._pending.result()
            except BaseException:  # the write that failed is why we abort; it is reported
                pass
        self._writer.shutdown()
        for f in self.files.values():
            f.close()
        self.trade_table.abort()
        shutil.rmtree(self.tmp, ignore_errors=True)
