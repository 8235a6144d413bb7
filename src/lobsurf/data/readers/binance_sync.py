"""Binance's diff-depth procedure: which recorded depth events rebuild the book, and where
it must restart. Pure logic over update ids; the reader carries out the steps it returns.

Binance documents how to keep a local book from the diff-depth stream and a REST snapshot
whose ``lastUpdateId`` is L:

* spot: drop events with u <= L; the first applied event has U <= L + 1 <= u; after that
  each event's U is the previous event's u + 1;
* USD-M futures: drop events with u < L; the first applied event has U <= L <= u; after
  that each event's pu is the previous event's u.

A recording interleaves the snapshot line with the stream: events received before the
snapshot line may be the ones that bridge it, so events are buffered while there is no book
(at most ``buffer_limit``; older ones are dropped and counted). An event that breaks the
chain is a gap: the book is dropped, the segment ends, and the book restarts at the next
snapshot that a buffered or later event bridges. A snapshot that arrives while the book is
in sync is kept until the book passes its id (a gap before then restarts from it).

Counts (``COUNTS``): ``depth_stale`` events already inside the snapshot; ``depth_no_book``
events with no book to apply them to (before the first usable snapshot, after a gap, beyond
the buffer, left at the end); ``depth_duplicate`` an event at or behind the book's id while
in sync; ``depth_gap`` chain breaks; ``snapshot_unbridged`` a snapshot whose first later
event starts after it (no event bridges it); ``snapshot_unused`` a snapshot never needed;
``snapshot_used`` the snapshots the book (re)started from.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

#: steps for the reader: load a snapshot into a cleared book; apply an event and emit a row;
#: drop the book (a gap: the next row starts a new segment)
LOAD, APPLY, GAP = "load", "apply", "gap"
COUNTS = ("depth_stale", "depth_no_book", "depth_duplicate", "depth_gap",
          "snapshot_unbridged", "snapshot_unused", "snapshot_used")


@dataclass
class DepthEvent:
    """A depth event's ids (U, u, and pu for USD-M futures) and what the reader needs."""

    first: int
    last: int
    prev: int | None
    payload: Any


class DiffDepthSync:
    """The procedure's state: the book's update id (None: no book), a waiting snapshot, the
    buffered events. ``futures`` (the USD-M rules) is decided by the first event: it has pu."""

    def __init__(self, buffer_limit: int):
        self.buffer_limit = buffer_limit
        self.futures: bool | None = None
        self.book_id: int | None = None
        self.snapshot: tuple[int, Any] | None = None
        self.buffer: deque[DepthEvent] = deque()
        self.counts = dict.fromkeys(COUNTS, 0)

    def on_snapshot(self, last_id: int, payload: Any) -> list[tuple[str, Any]]:
        """A REST snapshot line; returns the steps it makes possible."""
        if self.book_id is not None and last_id <= self.book_id:
            self.counts["snapshot_unused"] += 1  # the book is already past it
            return []
        if self.snapshot is not None:
            self.counts["snapshot_unused"] += 1  # replaced by a newer one before use
        self.snapshot = (last_id, payload)
        return [] if self.book_id is not None else self._try_sync()

    def on_event(self, first: int, last: int, prev: int | None, payload: Any
                 ) -> list[tuple[str, Any]]:
        """A diff-depth event (U, u, pu or None, what the reader needs); returns the steps
        it makes possible."""
        if self.advance(first, last, prev):
            return [(APPLY, payload)]
        return self._event(DepthEvent(first, last, prev, payload))

    def advance(self, first: int, last: int, prev: int | None) -> bool:
        """The common case alone, without building steps: the book is in sync, no snapshot
        waits, and the event continues the chain; then the book's id becomes ``last`` and
        the event is to be applied (True). False: nothing changed, call ``on_event``."""
        if self.book_id is not None and self.snapshot is None and self._continues(first, prev):
            self.book_id = last
            return True
        return False

    def _event(self, event: DepthEvent) -> list[tuple[str, Any]]:
        if self.futures is None:
            self.futures = event.prev is not None
        if self.book_id is None:
            self._buffer(event)
            return self._try_sync()
        if self._continues(event.first, event.prev):
            self.book_id = event.last
            if self.snapshot is not None and self.snapshot[0] <= event.last:
                self.snapshot = None
                self.counts["snapshot_unused"] += 1
            return [(APPLY, event.payload)]
        if event.last <= self.book_id:
            self.counts["depth_duplicate"] += 1
            return []
        self.counts["depth_gap"] += 1
        self.book_id = None
        self._buffer(event)
        return [(GAP, None), *self._try_sync()]

    def finish(self) -> None:
        """End of the recording: what is still waiting counts as unused."""
        self.counts["depth_no_book"] += len(self.buffer)
        self.buffer.clear()
        if self.snapshot is not None:
            self.counts["snapshot_unused"] += 1
            self.snapshot = None

    def _continues(self, first: int, prev: int | None) -> bool:
        """The chain rule: USD-M pu is the book's id; spot U is the book's id + 1."""
        return prev == self.book_id if self.futures else first == self.book_id + 1

    def _stale(self, event: DepthEvent, last_id: int) -> bool:
        return event.last < last_id if self.futures else event.last <= last_id

    def _bridges(self, event: DepthEvent, last_id: int) -> bool:
        if self.futures:
            return event.first <= last_id <= event.last
        return event.first <= last_id + 1 <= event.last

    def _buffer(self, event: DepthEvent) -> None:
        if len(self.buffer) >= self.buffer_limit:
            self.buffer.popleft()
            self.counts["depth_no_book"] += 1
        self.buffer.append(event)

    def _try_sync(self) -> list[tuple[str, Any]]:
        if self.snapshot is None or not self.buffer:
            return []
        last_id, payload = self.snapshot
        while self.buffer and self._stale(self.buffer[0], last_id):
            self.buffer.popleft()
            self.counts["depth_stale"] += 1
        if not self.buffer:
            return []  # wait for the event that bridges it
        self.snapshot = None
        if not self._bridges(self.buffer[0], last_id):
            self.counts["snapshot_unbridged"] += 1
            return []
        self.counts["snapshot_used"] += 1
        first = self.buffer.popleft()
        steps: list[tuple[str, Any]] = [(LOAD, payload), (APPLY, first.payload)]
        self.book_id = first.last
        pending = list(self.buffer)
        self.buffer.clear()
        for event in pending:  # the rest by the chain rule (a gap buffers what follows)
            steps += self._event(event)
        return steps
