"""An independent check of a rebuilt book against the venue's own best bid and offer.

Binance's ``bookTicker`` stream sends the best bid and ask (price and quantity) with the
update id ``u`` of the book they belong to. Where that id equals the last id of a depth
event the rebuilt book applied, the book after that event must show exactly the same best
levels. Tickers and depth events both arrive in increasing id order (a ticker often before
the depth event that covers it), so both wait in a queue and are matched by id as in a
merge; what can no longer match is dropped.

The ticker's texts are compared through ``decimal.Decimal``, not the readers' own parser,
so a parsing fault cannot hide itself. Counts: ``book_ticker_messages``,
``book_ticker_aligned`` (ids equal to a depth event's last id), ``book_ticker_agree``;
``first_mismatch`` describes the first disagreement (file:line, both tops).
"""

from __future__ import annotations

from collections import deque
from decimal import Decimal

from lobsurf.data.readers.decimals import SIZE_DECIMALS
from lobsurf.data.schema import FIXED_PRICE_SCALE

#: tickers kept waiting for their depth event, and depth tops for their ticker, at most
#: (older ones are dropped unmatched: memory stays bounded in a file without tickers)
MAX_WAITING = 100_000
#: top of book: (bid price fixed, bid size atoms, ask price fixed, ask size atoms)
Top = tuple


class TopOfBookCheck:
    """Matches depth events' tops with tickers by update id (module doc)."""

    def __init__(self) -> None:
        self.depth: deque[tuple[int, Top]] = deque()
        self.tickers: deque[tuple[int, tuple[str, str, str, str], str]] = deque()
        self.counts = {"book_ticker_messages": 0, "book_ticker_aligned": 0,
                       "book_ticker_agree": 0}
        self.first_mismatch = ""

    def on_depth(self, update_id: int, top: Top) -> None:
        """The book's best levels after the depth event whose last id is ``update_id``."""
        self.depth.append((update_id, top))
        if len(self.depth) > MAX_WAITING:
            self.depth.popleft()
        self._match()

    def on_ticker(self, update_id: int, texts: tuple[str, str, str, str], where: str) -> None:
        """A ticker: (bid price, bid qty, ask price, ask qty) as the venue wrote them."""
        self.counts["book_ticker_messages"] += 1
        self.tickers.append((update_id, texts, where))
        if len(self.tickers) > MAX_WAITING:
            self.tickers.popleft()
        self._match()

    def drop_book(self) -> None:
        """The book was dropped (a gap): depth tops waiting can no longer be compared."""
        self.depth.clear()

    def _match(self) -> None:
        depth, tickers = self.depth, self.tickers
        while depth and tickers:
            depth_id, ticker_id = depth[0][0], tickers[0][0]
            if depth_id < ticker_id:
                depth.popleft()
            elif ticker_id < depth_id:
                tickers.popleft()
            else:
                _, top = depth.popleft()
                _, texts, where = tickers.popleft()
                self._compare(top, texts, where)

    def _compare(self, top: Top, texts: tuple[str, str, str, str], where: str) -> None:
        self.counts["book_ticker_aligned"] += 1
        scales = (FIXED_PRICE_SCALE, 10**SIZE_DECIMALS) * 2
        try:
            theirs = tuple(Decimal(t) * s for t, s in zip(texts, scales))
        except ArithmeticError:
            theirs = None
        if theirs is not None and theirs == tuple(Decimal(v or 0) for v in top):
            self.counts["book_ticker_agree"] += 1
        elif not self.first_mismatch:
            ours = ", ".join(f"{v}" for v in top)
            self.first_mismatch = (f"{where}: bookTicker {' '.join(texts)} (bid, qty, ask, qty) "
                                   f"but the rebuilt book has {ours} (fixed-point price, size "
                                   "in 1e-12)")
