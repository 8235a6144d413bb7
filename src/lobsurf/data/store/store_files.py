"""Files of a store folder beyond its manifest: telling a data file from a store, and
rewriting the size columns in place when an instrument's size unit is refined."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from lobsurf.data.schema import MAX_SIZE, STORE_COLUMNS

#: rows rescaled at a time when a size unit is refined (bounds memory)
RESCALE_ROWS = 1 << 20


#: file name endings and leading bytes (DBN, zstd, gzip) of market-data inputs that
#: ``lobsurf ingest`` reads
_INPUT_SUFFIXES = (".dbn", ".dbn.zst", ".csv", ".zst", ".gz")
_INPUT_MAGIC = (b"DBN", b"\x28\xb5\x2f\xfd", b"\x1f\x8b")


def looks_like_market_data(path: Path) -> bool:
    if path.name.lower().endswith(_INPUT_SUFFIXES):
        return True
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError:
        return False
    return head.startswith(_INPUT_MAGIC)


def file_not_store(path: Path, manifest: str) -> str:
    """Why a file given where a store folder is expected is not one (with a hint)."""
    # A store is a folder; a user who passes a data file most likely wants to ingest it.
    if path.name == manifest:
        return f"{path}: is a store's manifest file; pass its folder {path.parent}"
    hint = ""
    if looks_like_market_data(path):
        hint = (f" (it looks like a market-data file: build a store from it with "
                f"`lobsurf ingest {path} --out STORE`)")
    return f"{path}: is a file, not a store folder{hint}"


def scale_size_columns(folder: Path, rows: int, instrument_id: int, factor: int) -> bool:
    """Multiply ``bid_sz``/``ask_sz`` of the first ``rows`` rows of ``instrument_id`` in the
    column files of ``folder`` by ``factor``; False (and the ingest is to stop) when a size
    would then exceed the store's uint32."""
    ids = np.memmap(folder / "instrument_id.bin", dtype=STORE_COLUMNS["instrument_id"][0],
                    mode="r", shape=(rows,))
    for name in ("bid_sz", "ask_sz"):
        dtype, shape = STORE_COLUMNS[name]
        column = np.memmap(folder / f"{name}.bin", dtype=dtype, mode="r+", shape=(rows, *shape))
        for lo in range(0, rows, RESCALE_ROWS):
            block = column[lo:lo + RESCALE_ROWS]
            mine = ids[lo:lo + RESCALE_ROWS] == instrument_id
            scaled = block[mine].astype(np.uint64) * np.uint64(factor)
            if scaled.size and int(scaled.max()) > MAX_SIZE:
                return False
            block[mine] = scaled
        column.flush()
        del column
    return True
