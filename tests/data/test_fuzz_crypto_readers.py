"""Property-based fuzzing of the Binance and Tardis readers, through ingest.

As for the other readers (``test_fuzz_readers``): every damaged input ends in a one-line
error naming the file, or in a store whose every row is a valid book. Beyond that, where
the plain Decimal reference (``crypto_reference``) reads the same damaged files without an
exception, the store's rows are exactly the reference's valid rows: the reader invents
nothing, loses nothing and reorders nothing the documented procedure keeps.

Damage: truncation, bit flips, byte overwrites, a line deleted, repeated or moved, a number
in a line replaced by an absurd one (negative, huge, an exponent, many decimals), empty
files, gzip on top (or damage to the gzip bytes themselves).
"""

from __future__ import annotations

import gzip
import re
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from lobsurf.data.readers.crypto_reference import reference_binance, reference_tardis_incremental
from tests.data.crypto_files import MS, T0, random_recording, tardis_incremental, write_recording
from tests.data.readers.test_binance import kept_rows, store_levels
from tests.data.test_fuzz_readers import FUZZ, outcome

pytestmark = pytest.mark.slow

NUMBERS = st.sampled_from(["-1", "0", "1e-05", "1E+30", "99999999999999999999999",
                           "0.0000000000001", "4294967296", "1.5", "00", ".", "", "NaN",
                           "9223372036854775808", "1723161000000000000"])
DAMAGE = st.one_of(
    st.tuples(st.just("truncate"), st.integers(0, 10**6)),
    st.tuples(st.just("flip"), st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 7)),
                                        min_size=1, max_size=3)),
    st.tuples(st.just("byte"), st.integers(0, 10**6), st.integers(0, 255)),
    st.tuples(st.just("delete"), st.integers(0, 1000)),
    st.tuples(st.just("repeat"), st.integers(0, 1000), st.integers(1, 5)),
    st.tuples(st.just("move"), st.integers(0, 1000), st.integers(0, 1000)),
    st.tuples(st.just("number"), st.integers(0, 1000), st.integers(0, 100), NUMBERS),
    st.tuples(st.just("empty")),
)


def damage_lines(text: bytes, how: tuple) -> bytes:
    kind, *args = how
    lines = text.split(b"\n")[:-1]
    if kind == "truncate":
        return text[: args[0] % (len(text) + 1)]
    if kind in ("flip", "byte"):
        out = bytearray(text)
        if not out:
            return bytes(out)
        for at, bit in (args[0] if kind == "flip" else [(args[0], None)]):
            if bit is None:
                out[at % len(out)] = args[1]
            else:
                out[at % len(out)] ^= 1 << bit
        return bytes(out)
    if kind == "empty" or not lines:
        return b""
    i = args[0] % len(lines)
    if kind == "delete":
        del lines[i]
    elif kind == "repeat":
        lines[i + 1:i + 1] = [lines[i]] * args[1]
    elif kind == "move":
        lines.insert(args[1] % len(lines), lines.pop(i))
    else:  # a number token of the line replaced
        tokens = list(re.finditer(rb"-?[0-9][0-9.eE+-]*", lines[i]))
        if tokens:
            m = tokens[args[1] % len(tokens)]
            lines[i] = lines[i][:m.start()] + args[2].encode() + lines[i][m.end():]
    return b"\n".join(lines) + b"\n"


def check(paths: list[Path], folder: Path, reference) -> None:
    store = outcome(paths, folder)
    if store is None:
        return
    try:
        expected = kept_rows(reference(paths).rows)
    except Exception:  # noqa: BLE001 - the reference refuses what it cannot read: no claim
        return
    got = store_levels(store)
    assert [(ts, b, a) for ts, b, a in got] == [(r.ts_recv_ns, r.bids, r.asks)
                                                for r in expected]


_BINANCE: dict[bool, bytes] = {}


def binance_text(futures: bool) -> bytes:
    if futures not in _BINANCE:
        with tempfile.TemporaryDirectory() as folder:
            path = write_recording(Path(folder) / "r", random_recording(25, 7, futures=futures),
                                   gz=False)
            _BINANCE[futures] = path.read_bytes()
    return _BINANCE[futures]


@FUZZ
@given(how=DAMAGE, futures=st.booleans(), compress=st.booleans(),
       damage_compressed=st.booleans())
@example(how=("number", 51, 51, "99999999999999999999999"), futures=False, compress=False,
         damage_compressed=False)  # an event time beyond int64 ns, found by a random hunt
def test_fuzz_binance(how, futures, compress, damage_compressed):
    text = binance_text(futures)
    if compress and damage_compressed:
        data = damage_lines(gzip.compress(text, mtime=0), how)
    else:
        data = damage_lines(text, how)
        data = gzip.compress(data, mtime=0) if compress else data
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "btcusdt_20240808.gz"
        path.write_bytes(data)
        check([path], Path(folder), reference_binance)


def tardis_text() -> bytes:
    rng = np.random.default_rng(3)
    us = T0 // 1000
    rows = [(us, us + 5, True, side, f"{100 + sign * (0.5 + k):.1f}", f"{(k + 1) / 100:.2f}")
            for side, sign in (("bid", -1), ("ask", 1)) for k in range(12)]
    for i in range(40):
        t = us + (i + 1) * 100 * MS // 1000
        for _ in range(int(rng.integers(1, 4))):
            side, sign = ("bid", -1) if rng.random() < 0.5 else ("ask", 1)
            price = 100 + sign * (0.5 + int(rng.integers(0, 12)))
            rows.append((t, t + 7, False, side, f"{price:.1f}",
                         "0" if rng.random() < 0.3 else f"{int(rng.integers(1, 500)) / 100:.2f}"))
    with tempfile.TemporaryDirectory() as folder:
        return tardis_incremental(Path(folder) / "t.csv", rows).read_bytes()


_TARDIS = tardis_text()


@FUZZ
@given(how=DAMAGE, compress=st.booleans())
def test_fuzz_tardis_incremental(how, compress):
    data = damage_lines(_TARDIS, how)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "binance_incremental_book_L2_2024-08-08_BTCUSDT.csv"
        path.write_bytes(gzip.compress(data, mtime=0) if compress else data)
        check([path], Path(folder), reference_tardis_incremental)
