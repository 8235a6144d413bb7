"""DBN MBP-10 records: which are book states (snapshot rows) and which report trades.

Databento's MBP schemas (https://databento.com/docs/schemas/mbp-10 and the action table of
its order-tracking example): action ``T`` (trade) reports a trade and "does not affect the
book"; its ``side`` is the aggressor's (``B`` a buyer, ``A`` a seller, ``N`` not given) and
its levels are the book *before* the trade's effect (the TBBO schema is documented as MBP-1's
trade records with "the BBO immediately before the effect of each trade"). The book change
the trade causes arrives in the records after it. ``F`` (fill) is not an MBP action; were a
feed to carry one it would describe a resting order's side of a ``T``, so counting it too
would count the volume twice.

So a ``T`` or ``F`` record inside an event packet (no ``F_LAST``) is not a snapshot row:
its levels repeat the book before it, and Databento says to examine the book only after a
record with ``F_LAST``. A ``T`` record's trade belongs to the interval of the next book
record. A ``T`` or ``F`` record that ends its packet (``F_LAST``) is a book state like any
other and stays a row (with its trade in its own interval): so files whose trade records
carry the book after the trade, as lobsurf's synthetic files did before they wrote trades
apart, ingest into the same rows as before.
"""

from __future__ import annotations

import numpy as np

from lobsurf.data.schema import F_LAST
from lobsurf.data.trades import TradeChunk, dbn_sides

#: actions of records that report a trade or fill and are no book state of their own
NOT_BOOK_ACTIONS = (ord("T"), ord("F"))
ACTION_TRADE = ord("T")


def split_mbp10(records: np.ndarray) -> tuple[np.ndarray | None, TradeChunk]:
    """Book rows and trades of a chunk of MBP-10 records.

    Returns:
        (None when every record is a book state, else the [N] bool mask of the records that
        are; the chunk's trades with ``row`` = index among those rows of the trade record
        itself when it is one, else of the next book record; N when none follows in this
        chunk).
    """
    action = records["action"].view(np.uint8)
    reports = (action == NOT_BOOK_ACTIONS[0]) | (action == NOT_BOOK_ACTIONS[1])
    not_book = reports & ((records["flags"] & F_LAST) == 0)
    trade = np.flatnonzero(action == ACTION_TRADE)
    if len(trade) == 0 and not not_book.any():
        return None, TradeChunk.empty()
    book = ~not_book
    # Book records up to and including each trade record, less one if it is a book itself.
    rows = np.cumsum(book)[trade] - book[trade]
    if book.all():
        book = None
    trades = TradeChunk(
        row=rows.astype(np.int64),
        price=records["price"][trade].astype(np.int64),
        size=records["size"][trade].astype(np.int64),
        side=dbn_sides(records["side"][trade]),
        instrument_id=records["instrument_id"][trade].astype(np.int64),
        publisher=records["publisher_id"][trade].astype(np.int64),
    )
    return book, trades
