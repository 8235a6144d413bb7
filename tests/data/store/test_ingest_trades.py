"""Trades through ingest, per reader: DBN MBP-10 trade records, DBN MBO trades (not fills),
LOBSTER executions; skipped rows, segment starts, other books and the file's end."""

from __future__ import annotations

from pathlib import Path

import databento_dbn as dbn
import numpy as np
import pytest

from lobsurf.cli import main
from lobsurf.data.readers.lobster import iter_lobster_with_trades
from lobsurf.data.readers.mbo_book import F_MAYBE_BAD_BOOK
from lobsurf.data.schema import F_LAST, F_SNAPSHOT
from lobsurf.data.store import Store
from lobsurf.data.store import ingest as ingest_module
from lobsurf.data.store.ingest import IngestConfig, ingest
from lobsurf.data.trades import TradeChunk
from lobsurf.errors import UserError
from tests.data.dbn_files import PX, mbp10, timed, write_dbn
from tests.data.readers.test_lobster import book_row

CFG = IngestConfig(multiplier=50.0, currency="USD")
T0 = 1_700_000_000_000_000_000


def table(store: Store) -> list[tuple[int, float, int, int]]:
    """The trade table as (row, price, size, side) tuples."""
    t = store.trades
    return [(int(r), int(p) / PX, int(s), int(d)) for r, p, s, d in
            zip(t["trade_row"], t["trade_px"], t["trade_sz"], t["trade_side"])]


def mbp10_file(tmp_path: Path, records: list, name: str = "t.mbp-10.dbn") -> Path:
    stamped = []
    for k, record in enumerate(records):
        record.ts_recv, record.ts_event = T0 + 1_000 * k, T0 + 1_000 * k - 5
        stamped.append(record)
    return write_dbn(tmp_path / name, dbn.Schema.MBP_10, stamped)


MBP10_SESSION = [
    mbp10("A", "B", 4000.0, 10),                              # row 0
    mbp10("T", "B", 4000.25, 3, flags=0),                     # a buyer lifts 3 at the ask
    mbp10("C", "A", 4000.25, 3),                              # row 1: the book after it
    mbp10("T", "A", 4000.0, 2, flags=F_MAYBE_BAD_BOOK),       # a seller hits 2 at the bid
    mbp10("A", "B", 4001.0, 1, bid=4001.0, ask=4000.75),      # crossed: skipped
    mbp10("C", "B", 4000.0, 2),                               # row 2 gets the sale; new segment
    mbp10("T", "N", 4000.25, 5, flags=0),                     # aggressor not given
    mbp10("T", "B", 4000.25, 1, flags=0),
    mbp10("A", "A", 4000.25, 6),                              # row 3
    mbp10("T", "B", 4000.50, 4, flags=0),                     # after the last row: left out
]


@pytest.mark.parametrize("chunk_records", [1, 3, 1000])
def test_mbp10_trade_records_are_trades_not_rows(tmp_path, chunk_records):
    path = mbp10_file(tmp_path, MBP10_SESSION)
    manifest = ingest([path], tmp_path / "s", IngestConfig(chunk_records=chunk_records))
    store = Store.open(tmp_path / "s")
    assert len(store) == 4 and manifest.skipped == {"crossed_book": 1, "maybe_bad_book": 1}
    # The flagged trade record's break lands on the next kept book record (row 2).
    assert [(s.start, s.stop) for s in manifest.segments] == [(0, 2), (2, 4)]
    # The sale before the crossed book belongs to row 2, but row 2 starts a segment: out.
    assert table(store) == [(1, 4000.25, 3, 1), (3, 4000.25, 5, 0), (3, 4000.25, 1, 1)]
    trades = manifest.trades
    assert (trades.source_records, trades.source_volume) == (5, 15)
    assert trades.left_out == {"before_segment_start": 2, "after_last_row": 4}
    assert trades.left_out_records == {"before_segment_start": 1, "after_last_row": 1}
    assert (trades.volume, trades.rows, trades.entries) == (9, 2, 3)
    assert (trades.buy_volume, trades.sell_volume, trades.unknown_volume) == (4, 0, 5)


def test_info_shows_the_trades(tmp_path, capsys):
    ingest([mbp10_file(tmp_path, MBP10_SESSION)], tmp_path / "s")
    assert main(["info", str(tmp_path / "s")]) == 0
    assert ("trades       9 lots at 2 rows (3 entries; buyer 4, seller 0, side unknown 5); "
            "left out before_segment_start 2 lots (1 records), after_last_row 4 lots "
            "(1 records)") in capsys.readouterr().out


def test_trades_waiting_through_a_long_run_of_skipped_rows_keep_their_volume(tmp_path,
                                                                               monkeypatch):
    # 30 crossed books with a trade before each: with 4 records a chunk and at most 3 held,
    # the waiting trades are merged (bounded memory); the table and the counts are those of
    # one big chunk.
    crossed = dict(bid=4001.0, ask=4000.75)
    records = [mbp10("A", "B", 4000.0, 10), mbp10("A", "B", 4000.0, 10)]
    for k in range(30):
        records += [mbp10("T", "AB"[k % 2], 4000.0 + 0.25 * (k % 3), 1 + k % 4, flags=0),
                    mbp10("A", "B", 4001.0, 1, **crossed)]
    records.append(mbp10("C", "A", 4000.25, 3))
    path = mbp10_file(tmp_path, records)
    large = ingest([path], tmp_path / "large", IngestConfig(chunk_records=10_000))
    monkeypatch.setattr(ingest_module, "MAX_WAITING_TRADES", 3)
    small = ingest([path], tmp_path / "small", IngestConfig(chunk_records=4))
    assert table(Store.open(tmp_path / "small")) == table(Store.open(tmp_path / "large"))
    assert small.trades == large.trades and large.trades.source_records == 30
    assert large.trades.volume == sum(1 + k % 4 for k in range(30)) and large.skipped == {
        "crossed_book": 30}


def test_mbp10_other_instruments_trades_are_left_out(tmp_path):
    records = [mbp10("A", "B", 4000.0, 10), mbp10("T", "B", 4000.25, 3, flags=0, instrument=99),
               mbp10("T", "A", 4000.0, 2, flags=0, publisher=2), mbp10("C", "A", 4000.25, 3)]
    manifest = ingest([mbp10_file(tmp_path, records)], tmp_path / "s")
    assert manifest.trades.left_out == {"other_instrument": 3, "other_publisher": 2}
    assert manifest.trades.volume == 0 and Store.open(tmp_path / "s").has_trades


def test_mbp10_file_of_only_invalid_books_names_the_reasons(tmp_path, capsys):
    records = [mbp10("A", "B", 4001.0, 1, bid=4001.0, ask=4000.75),
               mbp10("T", "B", 4000.25, 3, flags=0)]
    with pytest.raises(UserError, match=r"all 1 snapshots skipped \(crossed_book 1\)"):
        ingest([mbp10_file(tmp_path, records)], tmp_path / "s")
    only_reports = [mbp10("T", "B", 4000.25, 3, flags=0), mbp10("T", "A", 4000.0, 1, flags=0)]
    with pytest.raises(UserError, match="all 2 records are trade reports .* inside event packets"):
        ingest([mbp10_file(tmp_path, only_reports, "r.mbp-10.dbn")], tmp_path / "r")


def test_mbp10_trade_record_that_ends_its_packet_is_a_row_with_its_trade(tmp_path):
    # As lobsurf's synthetic files wrote a level-clearing move before they wrote trades apart:
    # a T record with F_LAST carrying the book after it. It stays a row (the store's rows do
    # not change) and its trade is in its own interval.
    records = [mbp10("A", "B", 4000.0, 10), mbp10("T", "B", 4000.25, 10, bid=4000.25, ask=4000.5),
               mbp10("A", "B", 4000.25, 3, bid=4000.25, ask=4000.5)]
    ingest([mbp10_file(tmp_path, records)], tmp_path / "s")
    store = Store.open(tmp_path / "s")
    assert len(store) == 3 and table(store) == [(1, 4000.25, 10, 1)]


# ---- MBO ---------------------------------------------------------------------------------


def mbo_session(extra: list[tuple]) -> list[tuple]:
    """A replayed book (bid 4000 x5, ask 4000.25 x3 + x4), then live packets ``extra``."""
    replay = [("R", "N", 0, 0.0, 0, F_SNAPSHOT), ("A", "B", 1, 4000.0, 5, F_SNAPSHOT),
              ("T", "B", 0, 4000.25, 9, F_SNAPSHOT),  # history inside the replay: not a trade
              ("A", "A", 2, 4000.25, 3, F_SNAPSHOT), ("A", "A", 3, 4000.25, 4, F_SNAPSHOT | F_LAST)]
    return replay + extra


def test_mbo_counts_trade_records_not_fills(tmp_path):
    rows = mbo_session([
        ("T", "A", 0, 4000.0, 1, 0),  # before the first snapshot: row 0 starts the segment
        ("C", "B", 1, 4000.0, 1),  # row 0 (bid 4000 x4)
        # A buyer takes 5 at 4000.25: one T, fills of the two resting asks, their cancels.
        ("T", "B", 9, 4000.25, 5, 0), ("F", "A", 2, 4000.25, 3, 0), ("F", "A", 3, 4000.25, 2, 0),
        ("C", "A", 2, 4000.25, 3, 0), ("C", "A", 3, 4000.25, 2),  # row 1
        # A resting bid modified to cross: CME sends a fill for it too (both sides F).
        ("M", "B", 1, 4000.25, 4, 0), ("T", "B", 1, 4000.25, 2, 0),
        ("F", "A", 3, 4000.25, 2, 0), ("F", "B", 1, 4000.25, 2, 0),
        ("C", "A", 3, 4000.25, 2, 0), ("M", "B", 1, 4000.25, 2, 0),
        ("A", "A", 4, 4000.50, 7),  # row 2
        ("T", "N", 0, 4000.50, 3, 0, 2),  # another publisher's book: left out
        ("A", "A", 5, 4000.75, 1),  # row 3
    ])
    path = write_dbn(tmp_path / "t.mbo.dbn", dbn.Schema.MBO, timed(rows))
    manifest = ingest([path], tmp_path / "s", CFG)
    store = Store.open(tmp_path / "s")
    assert len(store) == 4
    assert table(store) == [(1, 4000.25, 5, 1), (2, 4000.25, 2, 1)]
    # The fills sum to 9 lots for these 7 traded: counting them would count 2 twice.
    assert manifest.trades.source_records == 4
    assert manifest.trades.left_out == {"before_segment_start": 1, "other_publisher": 3}


# ---- LOBSTER -----------------------------------------------------------------------------


def write_messages(folder: Path, messages: list[tuple], date: str) -> Path:
    """A LOBSTER pair: one book per message (time, type, id, size, price, direction)."""
    stem = f"AAPL_{date}_34200000_57600000"
    book = book_row(5859400, 5853300, 10)
    (folder / f"{stem}_orderbook_10.csv").write_text(
        "".join(",".join(map(str, book)) + "\n" for _ in messages))
    (folder / f"{stem}_message_10.csv").write_text(
        "".join(",".join(map(str, m)) + "\n" for m in messages))
    return folder / f"{stem}_orderbook_10.csv"


EXECUTIONS = [("34200.1", 1, 11, 100, 5853300, 1),    # submission: no trade
              ("34200.2", 4, 12, 30, 5859400, -1),    # a sell limit order executed: buyer
              ("34200.3", 4, 13, 20, 5853300, 1),     # a buy limit order executed: seller
              ("34200.4", 5, 0, 50, 5856350, 1),      # hidden execution at the midpoint
              ("34200.5", 6, -2, 900, 5856300, -1),   # closing cross: an aggregate, not a trade
              ("34200.6", 3, 11, 100, 5853300, 1)]


@pytest.mark.parametrize("date,hidden_side", [("2012-06-21", -1), ("2014-07-14", 0)])
def test_lobster_executions_are_trades_on_their_rows(tmp_path, date, hidden_side):
    path = write_messages(tmp_path, EXECUTIONS, date)
    (chunk, trades), = list(iter_lobster_with_trades(path))
    assert len(chunk) == len(EXECUTIONS)
    assert trades.row.tolist() == [1, 2, 3]
    assert (trades.price // 100_000).tolist() == [5859400, 5853300, 5856350]
    assert trades.size.tolist() == [30, 20, 50]
    # Direction is the resting order's side; hidden ones are masked from 2014-07-14 on.
    assert trades.side.tolist() == [1, -1, hidden_side]
    # Through ingest: the same table (row 0 holds none), chunking changes nothing.
    manifest = ingest([path], tmp_path / "s", IngestConfig(chunk_records=2))
    assert table(Store.open(tmp_path / "s")) == [
        (1, 585.94, 30, 1), (2, 585.33, 20, -1), (3, 585.635, 50, hidden_side)]
    assert manifest.trades.left_out == {}


def test_lobster_bad_execution_names_the_line(tmp_path):
    path = write_messages(tmp_path, [("34200.1", 1, 1, 5, 5853300, 1),
                                     ("34200.2", 4, 1, 0, 5853300, 1)], "2012-06-21")
    with pytest.raises(UserError, match=r"_message_10.csv:2: an execution needs a size"):
        list(iter_lobster_with_trades(path))


def test_trade_chunk_concat_keeps_book_ids_only_when_all_have_them():
    a = TradeChunk(np.array([0]), np.array([1]), np.array([2]), np.array([1], np.int8),
                   np.array([7]), np.array([1]))
    both = TradeChunk.concat([a, a])
    assert both.instrument_id.tolist() == [7, 7] and len(both) == 2
    assert TradeChunk.concat([a, TradeChunk.empty()]).instrument_id.tolist() == [7]
    no_ids = TradeChunk(a.row, a.price, a.size, a.side)
    assert TradeChunk.concat([a, no_ids]).instrument_id is None
