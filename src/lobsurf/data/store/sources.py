"""What an ingest source hands to the store writer: chunks of snapshots and the facts
about the instrument that only the format knows."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from lobsurf.data.schema import SnapshotChunk
from lobsurf.data.store.instrument import SESSIONS
from lobsurf.data.trades import TradeChunk


@dataclass
class SourceChunk:
    """Snapshots from one source chunk, with what the store needs beyond the columns."""

    chunk: SnapshotChunk
    #: [N] publisher id of each row's book (DBN); None where the format has none
    publisher: np.ndarray | None = None
    #: [N] bool: the row starts a new segment (after an F_MAYBE_BAD_BOOK); None: no breaks
    breaks: np.ndarray | None = None
    #: what traded in the rows' intervals (``row`` indexes the N rows; N: after the last, so
    #: the next chunk's); ``TradeChunk.empty()`` when nothing did; None: the format does not
    #: say what traded (the store then holds no trades)
    trades: TradeChunk | None = None
    #: crypto: the size unit was refined, sizes stored earlier are to be multiplied by this
    size_rescale: int = 1


@dataclass
class Source:
    """One source as ingest reads it: its chunks, progress, and what the format implies."""

    chunks: Iterator[SourceChunk]
    symbol: str
    position: Callable[[], int]
    size: int
    default_tick_fixed: int | None = None
    #: multiplier and currency the format itself implies (LOBSTER: Nasdaq shares in USD)
    default_multiplier: float | None = None
    default_currency: str | None = None
    #: counts of records the source itself skipped or repaired, read after the last chunk
    source_counts: Callable[[], dict[str, int]] = dict
    #: why the source produced no snapshot at all (read only when it produced none)
    why_empty: Callable[[], str] = lambda: "no records"
    #: crypto formats: the size unit in base-asset amount (read after the last chunk), the
    #: market's hours, independent checks of the rebuilt book, lines for the user
    size_unit: Callable[[], float] = lambda: 1.0
    market_hours: str = SESSIONS
    cross_checks: Callable[[], dict[str, int]] = dict
    notes: Callable[[], list[str]] = list
