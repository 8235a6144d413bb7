"""The input files of ``lobsurf ingest``: checked, their format told, grouped into sources.

A *source* is what the store reads as one series. For DBN and LOBSTER that is each file
(a new file starts a new segment). For the crypto formats it is every file of one recorded
stream (Binance: venue and symbol; Tardis: data type, exchange and symbol), read in the
order of their first capture time, with the book carried from file to file: a recording
split at midnight is one series, and only gaps start segments (24/7 markets have no
session to end at midnight).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from lobsurf.data.readers.dbn_read import DBN_MAGIC, ZSTD_MAGIC
from lobsurf.errors import UserError

Format = Literal["auto", "dbn", "lobster", "binance", "tardis"]
FORMATS = ("auto", "dbn", "lobster", "binance", "tardis")
CRYPTO_FORMATS = ("binance", "tardis")

#: LOBSTER orderbook and message file name endings (any number of levels)
_LOBSTER_BOOK = re.compile(r"_orderbook_\d+\.csv$", re.IGNORECASE)
_LOBSTER_MESSAGE = re.compile(r"_message_\d+\.csv$", re.IGNORECASE)
#: the start of a Binance recording line: a capture time in ns, a space, a JSON object
_BINANCE_LINE = re.compile(rb"^\d{16,20} \{")
_TARDIS_HEADER = b"exchange,symbol,timestamp,local_timestamp,"


@dataclass
class InputGroup:
    """The files of one source, in reading order, and the stream they record (crypto)."""

    kind: Literal["dbn", "lobster", "binance", "tardis"]
    paths: list[Path]
    key: object = None
    first_ns: list[int] = field(default_factory=list)

    @property
    def label(self) -> str:
        """The source's name in the manifest and in messages: the file, or first .. last."""
        if len(self.paths) == 1:
            return self.paths[0].name
        return f"{self.paths[0].name} .. {self.paths[-1].name} ({len(self.paths)} files)"


def input_files(paths: list[str | os.PathLike]) -> list[Path]:
    """Check the inputs: existing files, no folders; LOBSTER message files are read with
    their orderbook file, so one given next to its orderbook file (``*.csv``) is dropped."""
    if not paths:
        raise UserError("no input files")
    sources = [Path(p) for p in paths]
    for p in sources:
        if p.is_dir():
            what = "a snapshot store" if (p / "manifest.json").is_file() else "a folder"
            raise UserError(f"{p}: is {what}, not an input file; pass the data files "
                            "(for example DIR/*.dbn.zst)")
        if not p.is_file():
            raise UserError(f"{p}: no such file")
    given = {p.resolve() for p in sources}
    kept = []
    for p in sources:
        match = _LOBSTER_MESSAGE.search(p.name)
        if match is None:
            kept.append(p)
            continue
        book = p.with_name(p.name[:match.start()] + "_orderbook_"
                           + match.group(0)[len("_message_"):])
        if book.resolve() not in given:
            raise UserError(f"{p}: is a LOBSTER message file; pass its orderbook file {book.name} "
                            "(the message file is read with it)")
    return kept


def detect_format(path: Path) -> Literal["dbn", "lobster", "binance", "tardis"]:
    """The format of one file: by name (DBN, LOBSTER), then by its first bytes or line."""
    from lobsurf.data.readers.text_lines import first_lines

    name = path.name.lower()
    if ".dbn" in name:
        return "dbn"
    if _LOBSTER_BOOK.search(name):
        return "lobster"
    if not path.is_file():
        raise UserError(f"{path}: no such file")
    with open(path, "rb") as f:
        head = f.read(4)
    if head[:3] == DBN_MAGIC or head == ZSTD_MAGIC:
        return "dbn"
    try:
        line = next((text for _, text in first_lines(path, 1)), b"")
    except UserError:
        line = b""
    if line.startswith(_TARDIS_HEADER):
        return "tardis"
    if _BINANCE_LINE.match(line):
        return "binance"
    raise UserError(
        f"{path}: cannot tell the format (expected *.dbn, *.dbn.zst, *_orderbook_N.csv, a "
        "Binance recording of '<receive time ns> <JSON>' lines or a Tardis CSV); pass --format")


def plan_groups(paths: list[Path], fmt: Format) -> list[InputGroup]:
    """The sources of ``paths`` in the order their first file was given (module doc)."""
    from lobsurf.data.readers.binance import peek_stream
    from lobsurf.data.readers.tardis import peek_tardis

    groups: list[InputGroup] = []
    streams: dict[tuple, InputGroup] = {}
    for path in paths:
        kind = detect_format(path) if fmt == "auto" else fmt
        if kind not in CRYPTO_FORMATS:
            groups.append(InputGroup(kind, [path]))
            continue
        key, first_ns = (peek_stream if kind == "binance" else peek_tardis)(path)
        group = streams.get((kind, key))
        if group is None:
            group = streams[(kind, key)] = InputGroup(kind, [], key)
            groups.append(group)
        group.paths.append(path)
        group.first_ns.append(first_ns)
    for group in streams.values():
        order = sorted(range(len(group.paths)), key=lambda i: group.first_ns[i])
        group.paths = [group.paths[i] for i in order]
        group.first_ns = [group.first_ns[i] for i in order]
    return groups
