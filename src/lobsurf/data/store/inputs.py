"""The input files of ``lobsurf ingest``: which are given, and what format each is."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Literal

from lobsurf.data.readers.dbn_read import DBN_MAGIC, ZSTD_MAGIC
from lobsurf.errors import UserError

#: LOBSTER orderbook and message file name endings (any number of levels)
_LOBSTER_BOOK = re.compile(r"_orderbook_\d+\.csv$", re.IGNORECASE)
_LOBSTER_MESSAGE = re.compile(r"_message_\d+\.csv$", re.IGNORECASE)


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


def detect_format(path: Path) -> Literal["dbn", "lobster"]:
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
    raise UserError(
        f"{path}: cannot tell the format (expected *.dbn, *.dbn.zst or *_orderbook_N.csv); "
        "pass --format"
    )
