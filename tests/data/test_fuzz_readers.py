"""Property-based fuzzing of the DBN (MBP-10, MBO) and LOBSTER readers, through ingest.

Every damaged input must end in one of two ways:

* a one-line ``UserError``/``StoreError`` naming the file (never another exception, a
  traceback or a hang), or
* a store whose every row is a valid book (``validate_chunk`` keeps it) and is what the
  file really says: for DBN the rows must be a subsequence of what Databento's own decoder
  (``databento_dbn.DBNDecoder``; MBO replayed by the slow reference builder) reads from the
  same bytes, for LOBSTER a subsequence of the orderbook lines parsed by plain Python. A
  file the official decoder refuses must not give a store.

Damage: truncation, bit flips, byte overwrites, a wrong DBN version byte or schema, absurd
field values (extreme prices, sizes, times, ids), empty files, a file of one repeated record
or line, zstd on top. About a minute of CI in all (``FUZZ_EXAMPLES`` per reader).
"""

from __future__ import annotations

import os
import signal
import tempfile
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import databento_dbn as dbn
import numpy as np
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lobsurf.data.readers.dbn_encode import write_mbp10_dbn
from lobsurf.data.readers.lobster import ASK_PLACEHOLDER, BID_PLACEHOLDER, PRICE_TO_FIXED
from lobsurf.data.readers.mbo_reference import ReferenceMboBuilder
from lobsurf.data.schema import LEVELS, MBO_DTYPE, MBP10_DTYPE, UNDEF_PRICE, SnapshotChunk
from lobsurf.data.store import Store, StoreError
from lobsurf.data.store.ingest import IngestConfig, ingest
from lobsurf.data.validate import ValidationState, validate_chunk
from lobsurf.errors import UserError
from tests.conftest import random_walk_books
from tests.data.dbn_files import timed, write_dbn

#: examples per reader: together well under a minute on the 2-core CI machine. A longer,
#: fresh-seeded local hunt: LOBSURF_FUZZ_EXAMPLES=5000 LOBSURF_FUZZ_RANDOM=1 pytest ...
FUZZ_EXAMPLES = int(os.environ.get("LOBSURF_FUZZ_EXAMPLES", 300))
#: CI runs the same examples every time (a failure reproduces); the hunt draws new ones
FUZZ_DERANDOMIZE = not os.environ.get("LOBSURF_FUZZ_RANDOM")
#: seconds one example may take before it counts as a hang
HANG_S = 20
CFG = IngestConfig(multiplier=50.0, chunk_records=7)  # small chunks: damage straddles them
FUZZ = settings(max_examples=FUZZ_EXAMPLES, deadline=None, derandomize=FUZZ_DERANDOMIZE, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
INT64 = np.iinfo(np.int64)
#: several seconds per reader: the full suite runs them, the quick loop (-m "not slow") not
pytestmark = pytest.mark.slow
ABSURD = [0, 1, -1, INT64.min, INT64.max, INT64.max - 1, 2**32 - 1, 2**31, 2**63 // 3,
          -(2**62), 10**18, 255, 0xA0, 0x0A]


@contextmanager
def no_hang(seconds: int = HANG_S):
    def hung(signum, frame):
        raise AssertionError(f"ingest still running after {seconds} s: a hang")
    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def outcome(paths: list[Path], folder: Path, companions: tuple[Path, ...] = ()) -> Store | None:
    """Ingest ``paths``; None after a proper one-line error, else the store.

    The error must name one of ``paths`` or of their ``companions`` (files read with them,
    such as a LOBSTER message file)."""
    out = folder / "store"
    try:
        with no_hang():
            ingest(paths, out, CFG)
    except (UserError, StoreError) as exc:
        message = str(exc)
        assert "\n" not in message, f"error of more than one line: {message!r}"
        named = [*paths, *companions]
        assert any(p.name in message for p in named), f"error names no input file: {message}"
        assert not out.exists(), "an error left a store behind"
        return None
    store = Store.open(out)
    rows = store.rows(0, len(store))
    keep, counts = validate_chunk(rows, ValidationState())
    assert keep.all(), f"store holds invalid books: {counts}"
    return store


def assert_subsequence(stored: SnapshotChunk, candidates: SnapshotChunk) -> None:
    """Every stored row equals some candidate row, in order (nothing invented or altered)."""
    names = ("ts_recv_ns", "ts_event_ns", "instrument_id", "bid_px", "ask_px", "bid_sz",
             "ask_sz", "bid_ct", "ask_ct")
    flat = lambda c: np.concatenate(  # noqa: E731
        [np.asarray(getattr(c, n), np.int64).reshape(len(c), -1) for n in names], axis=1)
    got, want = flat(stored), flat(candidates)
    j = 0
    for i, row in enumerate(got):
        while j < len(want) and not np.array_equal(want[j], row):
            j += 1
        assert j < len(want), f"stored row {i} is not in the file: {row.tolist()}"
        j += 1


# ---- DBN -----------------------------------------------------------------------------------


def _mbp10_base(folder: Path) -> bytes:
    books = random_walk_books(12, seed=5, instrument_id=5482)
    path = folder / "base.mbp-10.dbn"
    write_mbp10_dbn(path, [books], dataset="GLBX.MDP3", symbol="ESH1", instrument_id=5482,
                    start_ns=int(books.ts_recv_ns[0]), end_ns=None)
    return path.read_bytes()


def _mbo_base(folder: Path) -> bytes:
    rows = [("R", "N", 0, 0.0, 0, 32), ("A", "B", 1, 100.0, 5, 32), ("A", "A", 2, 100.5, 5, 160)]
    rows += [("A", "B", 10 + k, 100.0 - 0.25 * (k % 4), 1 + k % 3) for k in range(8)]
    rows += [("M", "B", 10, 99.75, 4), ("C", "B", 11, 99.75, 1), ("A", "A", 30, 100.75, 2),
             ("T", "A", 0, 100.5, 1), ("F", "A", 2, 100.5, 1), ("C", "A", 2, 100.5, 1),
             ("M", "B", 12, 99.5, 0), ("R", "N", 0, 0.0, 0)]
    return write_dbn(folder / "base.mbo.dbn", dbn.Schema.MBO, timed(rows)).read_bytes()


_BASES: dict[str, bytes] = {}


def base(schema: str) -> bytes:
    if schema not in _BASES:
        with tempfile.TemporaryDirectory() as folder:
            _BASES[schema] = (_mbp10_base if schema == "mbp-10" else _mbo_base)(Path(folder))
    return _BASES[schema]


def header_length(data: bytes) -> int:
    return 8 + int.from_bytes(data[4:8], "little")


def _set_field(data: bytearray, dtype: np.dtype, record: int, field: str, value: int) -> None:
    """Overwrite one field of one record in place (``levels.X``: level ``value % 10``)."""
    start = header_length(data)
    count = (len(data) - start) // dtype.itemsize
    if count == 0:
        return
    view = np.frombuffer(data, dtype, count=count, offset=start)  # writable: a bytearray
    i = record % count
    if field.startswith("levels."):
        column = view["levels"][field.removeprefix("levels.")]
        column[i, value % LEVELS] = np.array(value).astype(column.dtype, casting="unsafe")
    elif field in ("action", "side"):
        view[field].view(np.uint8)[i] = value % 256
    else:
        view[field][i] = np.array(value).astype(view[field].dtype, casting="unsafe")


def _other_schema_header(data: bytes, schema: str) -> bytes:
    meta = dbn.Metadata.decode(data[:header_length(data)])
    other = dbn.Metadata(dataset=meta.dataset, start=meta.start, stype_in=meta.stype_in,
                         stype_out=meta.stype_out, schema=dbn.Schema(schema),
                         symbols=list(meta.symbols))
    return bytes(other) + data[header_length(data):]


MBP10_FIELDS = ["price", "size", "ts_recv", "ts_event", "instrument_id", "publisher_id",
                "flags", "length", "rtype", "levels.bid_px", "levels.ask_px", "levels.bid_sz",
                "levels.ask_sz", "levels.bid_ct"]
MBO_FIELDS = ["price", "size", "ts_recv", "order_id", "instrument_id", "publisher_id",
              "flags", "length", "rtype", "action", "side"]

DAMAGE = st.one_of(
    st.tuples(st.just("truncate"), st.integers(0, 10**6)),
    st.tuples(st.just("flip"), st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 7)),
                                        min_size=1, max_size=4)),
    st.tuples(st.just("byte"), st.integers(0, 10**6), st.integers(0, 255)),
    st.tuples(st.just("version"), st.integers(0, 255)),
    st.tuples(st.just("schema"), st.sampled_from(["mbo", "mbp-10", "mbp-1", "trades",
                                                  "definition", "ohlcv-1s"])),
    st.tuples(st.just("field"), st.integers(0, 100), st.integers(0, 100),
              st.sampled_from(ABSURD) | st.integers(INT64.min, INT64.max)),
    st.tuples(st.just("empty")),
    st.tuples(st.just("header_only")),
    st.tuples(st.just("repeat"), st.integers(0, 100), st.integers(1, 40)),
)


def damage_dbn(data: bytes, schema: str, how: tuple) -> bytes:
    kind, *args = how
    dtype = MBP10_DTYPE if schema == "mbp-10" else MBO_DTYPE
    out = bytearray(data)
    if kind == "truncate":
        return bytes(out[: args[0] % (len(out) + 1)])
    if kind == "flip":
        for pos, bit in args[0]:
            out[pos % len(out)] ^= 1 << bit
    elif kind == "byte":
        out[args[0] % len(out)] = args[1]
    elif kind == "version":
        out[3] = args[0]
    elif kind == "schema":
        return _other_schema_header(data, args[0])
    elif kind == "field":
        fields = MBP10_FIELDS if schema == "mbp-10" else MBO_FIELDS
        _set_field(out, dtype, args[0], fields[args[1] % len(fields)], int(args[2]))
    elif kind == "empty":
        return b""
    elif kind == "header_only":
        return bytes(out[: header_length(data)])
    elif kind == "repeat":
        start = header_length(data)
        count = (len(data) - start) // dtype.itemsize
        k = args[0] % count
        record = data[start + k * dtype.itemsize: start + (k + 1) * dtype.itemsize]
        return data[:start] + record * args[1]
    return bytes(out)


def official_candidates(path: Path, schema: str) -> SnapshotChunk | None:
    """Snapshots of the file as Databento's decoder reads it; None if it refuses the file."""
    data = path.read_bytes()
    if data[:4] == b"\x28\xb5\x2f\xfd":
        data = zstandard.ZstdDecompressor().stream_reader(data).read()
    decoder = dbn.DBNDecoder(upgrade_policy=dbn.VersionUpgradePolicy.AS_IS)
    try:
        decoder.write(data)
        records = decoder.decode()
    except BaseException:  # noqa: BLE001 - the Rust decoder panics with a BaseException
        return None
    body = b"".join(bytes(r) for r in records[1:])
    if schema == "mbp-10":
        return SnapshotChunk.from_mbp10(np.frombuffer(body, MBP10_DTYPE))
    return ReferenceMboBuilder().feed_detailed(np.frombuffer(body, MBO_DTYPE)).chunk


def check_dbn(schema: str, how: tuple, compress: bool, damage_compressed: bool) -> None:
    data = damage_dbn(base(schema), schema, how)
    if compress:
        data = zstandard.ZstdCompressor().compress(data)
        if damage_compressed and len(data) > 8:
            flipped = bytearray(data)
            flipped[len(data) // 2] ^= 0x10
            data = bytes(flipped)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / (f"fuzz.{schema}.dbn" + (".zst" if compress else ""))
        path.write_bytes(data)
        store = outcome([path], Path(folder))
        if store is None:
            return
        candidates = official_candidates(path, schema)
        assert candidates is not None, "a store from a file Databento's decoder refuses"
        assert_subsequence(store.rows(0, len(store)), candidates)


@FUZZ
@given(how=DAMAGE, compress=st.booleans(), damage_compressed=st.booleans())
def test_fuzz_dbn_mbp10(how, compress, damage_compressed):
    check_dbn("mbp-10", how, compress, damage_compressed)


@FUZZ
@given(how=DAMAGE, compress=st.booleans(), damage_compressed=st.booleans())
def test_fuzz_dbn_mbo(how, compress, damage_compressed):
    check_dbn("mbo", how, compress, damage_compressed)


# ---- LOBSTER -------------------------------------------------------------------------------

STEM = "AAPL_2012-06-21_34200000_57600000"


def _lobster_lines() -> tuple[list[str], list[str]]:
    books, messages = [], []
    for i in range(10):
        ask, bid = 5_859_400 + 100 * (i % 3), 5_853_300 - 100 * (i % 2)
        row = []
        depth = LEVELS if i % 2 == 0 else 3 + i % 5  # full books and partial ones
        for lv in range(LEVELS):
            row += ([ask + 100 * lv, 10 + lv, bid - 100 * lv, 20 + lv] if lv < depth
                    else [ASK_PLACEHOLDER, 0, BID_PLACEHOLDER, 0])
        books.append(",".join(map(str, row)))
        messages.append(f"{34200 + i}.{i:09d},1,{1000 + i},100,{bid},1")
    return books, messages


DEEPEST_ASK = 4 * (LEVELS - 1)  # column of the level-10 ask price
WRAPS = [2**64 // PRICE_TO_FIXED + 6_000_000_000 + k for k in range(0, 4)]
LOBSTER_DAMAGE = st.one_of(
    st.tuples(st.just("truncate"), st.booleans(), st.integers(0, 10**5)),
    st.tuples(st.just("char"), st.booleans(), st.integers(0, 10**5),
              st.sampled_from(list(",.-+e x\t\r0123456789") + ["\x00", "\xff", "\n"])),
    st.tuples(st.just("number"), st.booleans(), st.integers(0, 10**4),
              st.sampled_from(["", "-1", "99999999999999999999", str(INT64.max),
                               str(INT64.min), "1e9", "0x10", "nan", "4294967296",
                               str(ASK_PLACEHOLDER), str(BID_PLACEHOLDER), "92233720368547"])),
    # One book cell set to an absurd value; WRAPS are prices whose fixed-point value wraps
    # around int64 onto a plausible deep ask, which validation alone would not notice.
    st.tuples(st.just("cell"), st.integers(0, 100),
              st.just(DEEPEST_ASK) | st.integers(0, 4 * LEVELS - 1),
              st.sampled_from(WRAPS) | st.sampled_from(ABSURD) | st.integers(-(2**40), 2**40)),
    st.tuples(st.just("drop_line"), st.booleans(), st.integers(0, 100)),
    st.tuples(st.just("repeat_line"), st.integers(0, 100), st.integers(1, 30)),
    st.tuples(st.just("empty"), st.booleans()),
)


def damage_lobster(books: list[str], messages: list[str], how: tuple) -> tuple[str, str]:
    kind, *args = how
    files = {True: "\n".join(books) + "\n", False: "\n".join(messages) + "\n"}
    if kind == "repeat_line":
        k = args[0] % len(books)
        return ((books[k] + "\n") * args[1], (messages[k] + "\n") * args[1])
    if kind == "cell":
        row, column, value = args[0] % len(books), args[1], args[2]
        cells = books[row].split(",")
        cells[column] = str(value)
        books = books[:row] + [",".join(cells)] + books[row + 1:]
        return "\n".join(books) + "\n", files[False]
    which = args[0]
    text = files[which]
    if kind == "truncate":
        text = text[: args[1] % (len(text) + 1)]
    elif kind == "char":
        pos = args[1] % len(text)
        text = text[:pos] + args[2] + text[pos + 1:]
    elif kind == "number":
        tokens = text.split(",")
        tokens[args[1] % len(tokens)] = args[2]
        text = ",".join(tokens)
    elif kind == "drop_line":
        lines = text.splitlines(keepends=True)
        del lines[args[1] % len(lines)]
        text = "".join(lines)
    elif kind == "empty":
        text = ""
    files[which] = text
    return files[True], files[False]


def lobster_candidates(book_text: str) -> SnapshotChunk:
    """Every orderbook line plain Python can read, in store units (times not compared)."""
    rows = []
    for line in book_text.splitlines():
        try:
            values = [int(v) for v in line.split(",")]
        except ValueError:
            continue
        if len(values) != 4 * LEVELS:
            continue
        rows.append(values)
    n = len(rows)
    out = {}
    table = np.array(rows, dtype=object).reshape(n, LEVELS, 4) if n else None
    for k, side in ((0, "ask"), (2, "bid")):
        px = np.full((n, LEVELS), UNDEF_PRICE, np.int64)
        sz = np.zeros((n, LEVELS), np.int64)
        for i in range(n):
            for lv in range(LEVELS):
                p, s = table[i, lv, k], table[i, lv, k + 1]
                if p in (ASK_PLACEHOLDER, BID_PLACEHOLDER):
                    continue
                if not (INT64.min <= p * PRICE_TO_FIXED <= INT64.max) or not 0 <= s < 2**32:
                    px[i, lv], sz[i, lv] = 0, -1  # unrepresentable: matches no stored row
                else:
                    px[i, lv], sz[i, lv] = p * PRICE_TO_FIXED, s
        out[f"{side}_px"], out[f"{side}_sz"] = px, sz
        out[f"{side}_ct"] = np.zeros((n, LEVELS), np.int64)
    zeros = np.zeros(n, np.int64)
    return SnapshotChunk(ts_event_ns=zeros, ts_recv_ns=zeros, instrument_id=zeros, **out)


@FUZZ
@given(how=LOBSTER_DAMAGE)
def test_fuzz_lobster(how):
    book_text, message_text = damage_lobster(*_lobster_lines(), how)
    with tempfile.TemporaryDirectory() as folder:
        book = Path(folder) / f"{STEM}_orderbook_10.csv"
        book.write_bytes(book_text.encode("utf-8", "surrogateescape"))
        message = Path(folder) / f"{STEM}_message_10.csv"
        message.write_bytes(message_text.encode("utf-8", "surrogateescape"))
        store = outcome([book], Path(folder), companions=(message,))
        if store is None:
            return
        # Times are the reader's own parse (tested exactly in test_lobster.py); the books
        # must be lines of the file.
        zeros = np.zeros(len(store), np.int64)
        stored = replace(store.rows(0, len(store)), ts_recv_ns=zeros, ts_event_ns=zeros,
                         instrument_id=zeros)
        assert_subsequence(stored, lobster_candidates(book_text))
