"""NumberedLines gives exactly GzipFile's lines and errors, on its zlib fast path and after
handing over to GzipFile (several members, padding, a cut stream, corrupt data)."""

from __future__ import annotations

import gzip
import random
import zlib
from pathlib import Path

import pytest

from lobsurf.data.readers import text_lines
from lobsurf.data.readers.text_lines import NumberedLines
from lobsurf.errors import UserError


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    # many blocks and reads even in a small file: every path runs more than once
    monkeypatch.setattr(text_lines, "BLOCK_BYTES", 997)
    monkeypatch.setattr(text_lines, "READ_BYTES", 331)


def _text(lines: int, seed: int = 1) -> bytes:
    rng = random.Random(seed)
    rows = [f"{1_700_000_000_000_000_000 + i} {rng.getrandbits(160):040x}" for i in range(lines)]
    return ("\r\n".join(rows[:5]) + "\n" + "\n".join(rows[5:])).encode()  # CRLF, no last \n


def _reference(path: Path) -> tuple[list[tuple[int, bytes]], bool, str | None]:
    """(lines, truncated, error) as a plain GzipFile read gives them (the reader's rules:
    a cut stream keeps the lines before the cut; an error names the last good line)."""
    lines: list[bytes] = []
    tail, truncated, error = b"", False, None
    with open(path, "rb") as raw:
        source = gzip.GzipFile(fileobj=raw)
        try:
            while block := source.read1(1 << 20):
                parts = (tail + block).split(b"\n")
                tail = parts.pop()
                lines += parts
        except EOFError:
            truncated = True
        except (OSError, zlib.error) as exc:
            error = f"{path}: corrupt compressed data after line {len(lines)} ({exc})"
    if tail and not truncated and error is None:
        lines.append(tail)
    return [(i + 1, x[:-1] if x.endswith(b"\r") else x) for i, x in enumerate(lines)], \
        truncated, error


def _read(path: Path) -> tuple[list[tuple[int, bytes]], bool, str | None]:
    lines = NumberedLines(path)
    got: list[tuple[int, bytes]] = []
    try:
        for item in lines:
            got.append(item)
    except UserError as exc:
        return got, lines.truncated, str(exc)
    return got, lines.truncated, None


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_plain_and_single_member(tmp_path: Path) -> None:
    text = _text(2000)
    plain = _write(tmp_path / "a.txt", text)
    packed = _write(tmp_path / "a.gz", gzip.compress(text, 6))
    expected = _reference(packed)
    assert expected[1:] == (False, None) and len(expected[0]) == 2000
    assert _read(packed) == expected
    assert _read(plain) == expected


@pytest.mark.parametrize("tail", [b"", b"\x00" * 7, b"more"], ids=["two", "padding", "garbage"])
def test_after_the_first_member(tmp_path: Path, tail: bytes) -> None:
    one, two = gzip.compress(_text(700, 1)), gzip.compress(_text(900, 2))
    data = one + (two if not tail else tail)
    path = _write(tmp_path / "m.gz", data)
    expected = _reference(path)
    assert (expected[2] is not None) == (tail == b"more")
    assert _read(path) == expected


def test_cut_streams_keep_the_lines_before_the_cut(tmp_path: Path) -> None:
    data = gzip.compress(_text(1500))
    for cut in (5, 12, 20, 1000, len(data) // 2, len(data) - 9, len(data) - 1):
        path = _write(tmp_path / f"cut{cut}.gz", data[:cut])
        expected = _reference(path)
        assert expected[1], cut
        assert _read(path) == expected, cut


def test_corrupt_data_names_the_same_line(tmp_path: Path) -> None:
    data = gzip.compress(_text(1500))
    # zlib errors at the start, wrong data caught by the CRC, the CRC itself
    for at, flip in ((11, 0xFF), (200, 0xFF), (len(data) // 3, 0x55), (len(data) - 6, 0x55)):
        bad = bytearray(data)
        bad[at] ^= flip
        path = _write(tmp_path / f"bad{at}.gz", bytes(bad))
        expected = _reference(path)
        assert expected[2] is not None, at
        assert _read(path) == expected, at


def test_a_header_zlib_refuses_and_gzip_reads(tmp_path: Path) -> None:
    # reserved header flag bits: zlib stops at once, GzipFile ignores them and reads on
    data = bytearray(gzip.compress(_text(800)))
    data[3] |= 0x20
    path = _write(tmp_path / "flags.gz", bytes(data))
    expected = _reference(path)
    assert expected[1:] == (False, None) and len(expected[0]) == 800
    assert _read(path) == expected


def test_stopping_early_ends_the_reading_thread(tmp_path: Path) -> None:
    path = _write(tmp_path / "a.gz", gzip.compress(_text(3000)))
    first = list(text_lines.first_lines(path, 10))
    assert [n for n, _ in first] == list(range(1, 11))
    assert first == _reference(path)[0][:10]
