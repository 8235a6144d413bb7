"""Store folders: the manifest's name, the store error, and what a path given as a store is
when it is not one (``Store.open``'s one-line errors, the ``--overwrite`` safety check)."""

from __future__ import annotations

import json
from pathlib import Path

STORE_FORMAT = "lobsurf-store"
MANIFEST = "manifest.json"


class StoreError(Exception):
    """A store folder is missing, incomplete or inconsistent."""


#: file name endings and leading bytes (DBN, zstd, gzip) of market-data inputs that
#: ``lobsurf ingest`` reads
_INPUT_SUFFIXES = (".dbn", ".dbn.zst", ".csv", ".zst", ".gz")
_INPUT_MAGIC = (b"DBN", b"\x28\xb5\x2f\xfd", b"\x1f\x8b")


def _looks_like_market_data(path: Path) -> bool:
    if path.name.lower().endswith(_INPUT_SUFFIXES):
        return True
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError:
        return False
    return head.startswith(_INPUT_MAGIC)


def file_not_store(path: Path) -> str:
    # A store is a folder; a user who passes a data file most likely wants to ingest it.
    if path.name == MANIFEST:
        return f"{path}: is a store's manifest file; pass its folder {path.parent}"
    hint = ""
    if _looks_like_market_data(path):
        hint = (f" (it looks like a market-data file: build a store from it with "
                f"`lobsurf ingest {path} --out STORE`)")
    return f"{path}: is a file, not a store folder{hint}"


def check_replaceable(path: Path) -> None:
    """Raise unless ``path`` is a folder that overwriting may delete: a store or empty.

    ``--overwrite`` removes the old folder, so it must never take a user's data folder, an
    input file or anything else that is not a store with it.
    """
    if path.is_symlink() or not path.is_dir():
        raise StoreError(f"{path} is not a store folder; --overwrite only replaces a store")
    if not any(path.iterdir()):
        return
    try:
        is_store = json.loads((path / MANIFEST).read_text()).get("format") == STORE_FORMAT
    except (OSError, ValueError, AttributeError):
        is_store = False
    if not is_store:
        raise StoreError(f"{path} is a folder but not a lobsurf store; --overwrite only "
                         "replaces a store (remove the folder yourself or choose another --out)")
