"""LOBSTER reader: files written here in the documented format parse exactly; bad files fail
with the file and line number."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np
import pytest

from lobsurf.data.readers.lobster import (
    LobsterConfig,
    find_message_file,
    iter_lobster,
    lobster_instrument,
    parse_lobster_name,
)
from lobsurf.data.schema import LEVELS, UNDEF_PRICE, SnapshotChunk
from lobsurf.errors import UserError

ASK_EMPTY, BID_EMPTY = 9999999999, -9999999999


def book_row(best_ask: int, best_bid: int, depth: int, levels: int = 10) -> list[int]:
    # ask_px, ask_sz, bid_px, bid_sz per level; levels beyond `depth` are placeholders.
    row = []
    for lv in range(levels):
        if lv < depth:
            row += [best_ask + 100 * lv, 10 + lv, best_bid - 100 * lv, 20 + lv]
        else:
            row += [ASK_EMPTY, 0, BID_EMPTY, 0]
    return row


def write_pair(folder: Path, times: list[str], books: list[list[int]], *,
               date: str = "2012-06-21", levels: int = 10, ticker: str = "AAPL") -> Path:
    stem = f"{ticker}_{date}_34200000_57600000"
    book_path = folder / f"{stem}_orderbook_{levels}.csv"
    book_path.write_text("".join(",".join(map(str, row)) + "\n" for row in books))
    messages = [f"{t},1,{1000 + i},100,{row[2]},1" for i, (t, row) in enumerate(zip(times, books))]
    (folder / f"{stem}_message_{levels}.csv").write_text("\n".join(messages) + "\n")
    return book_path


def utc_ns(year, month, day, hour, minute, second, nanos) -> int:
    stamp = dt.datetime(year, month, day, hour, minute, second, tzinfo=dt.timezone.utc)
    return int(stamp.timestamp()) * 10**9 + nanos


def read_all(path: Path, **kwargs) -> SnapshotChunk:
    return SnapshotChunk.concat(list(iter_lobster(path, **kwargs)))


def test_documented_format_parses_exactly(tmp_path):
    # AAPL 2012-06-21 is summer time: New York = UTC-4.
    books = [book_row(5859400, 5853300, 10), book_row(5859500, 5853300, 3)]
    path = write_pair(tmp_path, ["34200.004241176", "34200.025552"], books)
    chunk = read_all(path)
    assert len(chunk) == 2
    assert chunk.ts_recv_ns.tolist() == [utc_ns(2012, 6, 21, 13, 30, 0, 4_241_176),
                                         utc_ns(2012, 6, 21, 13, 30, 0, 25_552_000)]
    assert np.array_equal(chunk.ts_event_ns, chunk.ts_recv_ns)
    # $585.94 = 5859400 * 1e-4 dollars = 585_940_000_000 * 1e-9.
    assert chunk.ask_px[0, 0] == 585_940_000_000 and chunk.bid_px[0, 0] == 585_330_000_000
    assert chunk.ask_px[0].tolist() == [(5859400 + 100 * lv) * 100_000 for lv in range(LEVELS)]
    assert chunk.bid_sz[0].tolist() == [20 + lv for lv in range(LEVELS)]
    # Placeholder levels: UNDEF price, size 0; LOBSTER has no counts.
    assert chunk.ask_px[1, 3:].tolist() == [UNDEF_PRICE] * 7
    assert chunk.bid_px[1, 3:].tolist() == [UNDEF_PRICE] * 7
    assert chunk.ask_sz[1, 3:].sum() == 0 and chunk.bid_sz[1, 3:].sum() == 0
    assert chunk.ask_ct.sum() == 0 and chunk.bid_ct.sum() == 0
    assert chunk.instrument_id.tolist() == [lobster_instrument(path).instrument_id] * 2
    assert chunk.bid_px.dtype == np.int64


def test_winter_time_and_dst_switch_inside_a_chunk(tmp_path):
    winter = write_pair(tmp_path, ["34200.5"], [book_row(100000, 99900, 1)], date="2012-01-03")
    assert read_all(winter).ts_recv_ns.tolist() == [utc_ns(2012, 1, 3, 14, 30, 0, 500_000_000)]
    # 2012-03-11: clocks go from 02:00 EST to 03:00 EDT. 01:00 EST = 06:00 UTC and
    # 03:30 EDT = 07:30 UTC, in one chunk.
    switch = write_pair(tmp_path, ["3600", "12600"], [book_row(100000, 99900, 1)] * 2,
                        date="2012-03-11")
    assert read_all(switch).ts_recv_ns.tolist() == [utc_ns(2012, 3, 11, 6, 0, 0, 0),
                                                    utc_ns(2012, 3, 11, 7, 30, 0, 0)]


def test_chunks_concatenate_to_the_whole_file_and_fewer_levels_pad(tmp_path):
    times = [f"{34200 + i}.{i:03d}" for i in range(7)]
    books = [book_row(200000 + i * 100, 199000, 1 + i % 5, levels=5) for i in range(7)]
    path = write_pair(tmp_path, times, books, levels=5)
    chunks = list(iter_lobster(path, chunk_rows=3))
    assert [len(c) for c in chunks] == [3, 3, 1]
    whole = read_all(path, chunk_rows=100)
    parts = SnapshotChunk.concat(chunks)
    for name in ("ts_recv_ns", "ask_px", "bid_px", "ask_sz", "bid_sz"):
        assert np.array_equal(getattr(parts, name), getattr(whole, name))
    assert whole.ask_px.shape == (7, LEVELS)
    assert (whole.ask_px[:, 5:] == UNDEF_PRICE).all() and (whole.ask_sz[:, 5:] == 0).all()
    assert whole.ask_px[5, :2].tolist() == [200500 * 100_000, UNDEF_PRICE]  # depth 1


def test_names_message_file_and_instrument(tmp_path):
    path = write_pair(tmp_path, ["34200"], [book_row(100000, 99900, 1)], ticker="MSFT")
    name = parse_lobster_name(path)
    assert (name.ticker, name.date, name.levels, name.kind) == ("MSFT", dt.date(2012, 6, 21),
                                                                 10, "orderbook")
    assert (name.start_ms, name.end_ms) == (34_200_000, 57_600_000)
    assert find_message_file(path).name == "MSFT_2012-06-21_34200000_57600000_message_10.csv"
    inst = lobster_instrument(path)
    assert inst.symbol == "MSFT" and inst.tick_size_fixed == 10_000_000
    assert inst.instrument_id == lobster_instrument(tmp_path / path.name).instrument_id
    assert inst.instrument_id != lobster_instrument(
        write_pair(tmp_path, ["34200"], [book_row(100000, 99900, 1)])).instrument_id
    assert lobster_instrument(path, LobsterConfig(tick_size=0.0001)).tick_size_fixed == 100_000


def good_pair(tmp_path: Path, rows: int = 5) -> Path:
    return write_pair(tmp_path, [f"{34200 + i}.1" for i in range(rows)],
                      [book_row(100000, 99900, 2)] * rows)


def corrupt_line(path: Path, line_no: int, new_text: str) -> None:
    lines = path.read_text().splitlines(keepends=True)
    lines[line_no - 1] = new_text
    path.write_text("".join(lines))


def expect_error(path: Path, pattern: str, **kwargs) -> None:
    with pytest.raises(UserError, match=pattern):
        read_all(path, **kwargs)


def test_wrong_column_count_names_file_and_line(tmp_path):
    path = good_pair(tmp_path)
    corrupt_line(path, 4, ",".join(["1"] * 39) + "\n")
    expect_error(path, r"orderbook_10\.csv:4: expected 40 columns, found 39", chunk_rows=2)


def test_non_numeric_field_names_line_and_column(tmp_path):
    path = good_pair(tmp_path)
    row = book_row(100000, 99900, 2)
    row[5] = "12.5"
    corrupt_line(path, 3, ",".join(map(str, row)) + "\n")
    expect_error(path, r"orderbook_10\.csv:3: column 6: '12.5' is not an integer")


def test_bad_message_lines(tmp_path):
    path = good_pair(tmp_path)
    message = find_message_file(path)
    corrupt_line(message, 2, "34201.1,1,1001,100,abc,1\n")
    expect_error(path, r"message_10\.csv:2: column 5: 'abc' is not an integer")
    corrupt_line(message, 2, "34201.1,1,1001,100\n")
    expect_error(path, r"message_10\.csv:2: expected 6 columns, found 4")
    corrupt_line(message, 2, "9:30:01,1,1001,100,100000,1\n")
    expect_error(path, r"message_10\.csv:2: column 1: .* is not a time")


@pytest.mark.parametrize("short", ["orderbook", "message"])
def test_row_count_mismatch(tmp_path, short):
    path = good_pair(tmp_path, rows=5)
    victim = path if short == "orderbook" else find_message_file(path)
    victim.write_text("".join(victim.read_text().splitlines(keepends=True)[:4]))
    longer = "message" if short == "orderbook" else "orderbook"
    expect_error(path, rf"{longer}_10\.csv:5: row count mismatch", chunk_rows=2)


def test_blank_lines_inside_fail_but_trailing_ones_are_fine(tmp_path):
    path = good_pair(tmp_path, rows=3)
    path.write_text(path.read_text() + "\n\n")
    assert len(read_all(path)) == 3
    lines = path.read_text().splitlines(keepends=True)
    path.write_text(lines[0] + "\n" + "".join(lines[1:]))
    expect_error(path, r"orderbook_10\.csv:2: blank line inside the file")


def test_missing_message_file_bad_name_and_empty_file(tmp_path):
    path = good_pair(tmp_path)
    find_message_file(path).unlink()
    expect_error(path, "message file .* is missing")
    odd = tmp_path / "book.csv"
    odd.write_text("1,2\n")
    expect_error(odd, "not a LOBSTER file name")
    empty = write_pair(tmp_path, [], [], ticker="EMPTY")
    expect_error(empty, "no rows")
    expect_error(tmp_path / "GONE_2012-06-21_34200000_57600000_orderbook_10.csv", "no such file")


def test_undecodable_bytes_fail_with_their_line(tmp_path):
    path = good_pair(tmp_path)
    lines = path.read_bytes().splitlines(keepends=True)
    lines[1] = lines[1].replace(b"99900", b"99\xff00", 1)
    path.write_bytes(b"".join(lines))
    expect_error(path, r"orderbook_10\.csv:2: column 3: .* is not an integer")


@pytest.mark.parametrize("time_text", ["99999999999999999999.5", "86400.0", "123456"])
def test_time_not_of_the_day_is_an_error_naming_the_line(tmp_path, time_text):
    books = [book_row(5859400, 5853300, 3)] * 2
    path = write_pair(tmp_path, ["34200.1", time_text], books)
    with pytest.raises(UserError, match=r"_message_10\.csv:2: column 1: .* not a time of the day"):
        read_all(path)


@pytest.mark.parametrize("column, value, what", [
    (1, 2**64 // 100_000 + 6_000_000_000, "price"),  # would wrap around int64 in fixed point
    (4, -5, "size"), (2, 2**32, "size")])
def test_out_of_range_price_or_size_is_an_error_naming_line_and_column(tmp_path, column, value, what):
    row = book_row(5859400, 5853300, 3)
    row[column - 1] = value
    path = write_pair(tmp_path, ["34200.1", "34200.2"], [book_row(5859400, 5853300, 3), row])
    with pytest.raises(UserError, match=rf"_orderbook_10\.csv:2: column {column}: {what} "):
        read_all(path)
