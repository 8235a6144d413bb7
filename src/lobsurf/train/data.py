"""The data a run trains on: the store (or the bundled default), its time split, and the
training part of the book that the simulator may touch.

The split is pretraining's (``lobsurf.pretrain.split.time_split``): held-out windows start
at the cut row, training windows end at t with t + max_horizon < cut. The simulator gets
only rows [0, cut - max_horizon): every snapshot it fills against, marks at or steps
through lies before that purge gap, so ``lobsurf eval RUN`` can trade the rows from the cut
on as data the agent never saw.

The bundled default is a synthetic data set with a tradeable predictable component
(``lobsurf.presets``), written as genuine DBN files, ingested once and cached under the
user's cache folder (``$XDG_CACHE_HOME/lobsurf`` or ``~/.cache/lobsurf``).
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from lobsurf.data.dataset import BookTensors, load_book_tensors
from lobsurf.data.store import Store
from lobsurf.models.feature_table import with_feature_table
from lobsurf.pretrain.split import TimeSplit, time_split
from lobsurf.train.config import RunConfig

#: Name of the bundled default data set (a preset of lobsurf.presets); bump the cache
#: folder's suffix when the generator or the preset changes.
DEFAULT_PRESET = "tradeable"
DEFAULT_CACHE_NAME = f"default-{DEFAULT_PRESET}-v1"


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "lobsurf"


def default_store(progress: bool = False) -> Path:
    """The bundled default store, generated and ingested on first use (a few seconds)."""
    from lobsurf.data.store.ingest import IngestConfig, ingest
    from lobsurf.data.synth import write_synth
    from lobsurf.presets import preset

    root = cache_root() / DEFAULT_CACHE_NAME
    store = root / "store"
    if (store / "manifest.json").is_file():
        return store
    synth = preset(DEFAULT_PRESET)
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root, prefix="dbn-") as tmp:
        paths = write_synth(tmp, synth, progress=progress)
        ingest(paths, store, IngestConfig(multiplier=synth.multiplier), overwrite=True)
    return store


@dataclass
class TrainingData:
    """The loaded book, its split, and the training book the simulator runs on."""

    store_path: Path
    book: BookTensors
    split: TimeSplit
    train_stop: int
    """Rows [0, train_stop) are the simulator's; train_stop = cut - max label horizon."""
    train_book: BookTensors

    def summary(self) -> dict:
        return {"store": str(self.store_path), "rows": len(self.book),
                "segments": self.book.num_segments, "cut_row": self.split.cut_row,
                "train_stop_row": self.train_stop, "train_windows": len(self.split.train_rows),
                "heldout_windows": len(self.split.test_rows), "tick_size": self.book.tick_size,
                "multiplier": self.book.multiplier}


def head_rows(book: BookTensors, stop: int) -> BookTensors:
    """The book's rows [0, stop) as a BookTensors of their own (segments clipped)."""
    keep = book.segment_start < stop
    seg_start = book.segment_start[keep]
    seg_stop = book.segment_stop[keep].clamp(max=stop)
    sliced = {name: getattr(book, name)[:stop] for name in
              ("ts_ns", "bid_px_ticks", "ask_px_ticks", "bid_sz", "ask_sz", "bid_ct", "ask_ct",
               "segment_of_row")}
    if book.features is not None:
        sliced["features"] = book.features[:stop]
    return replace(book, segment_start=seg_start, segment_stop=seg_stop, **sliced)


def load_training_data(cfg: RunConfig, device: torch.device | str, store_path: Path
                       ) -> TrainingData:
    """Open the store, load the instrument onto ``device`` and split it (see module doc)."""
    store = Store.open(store_path)
    book = load_book_tensors(store, device, instrument_id=cfg.data.instrument_id or None)
    horizons = cfg.labels.horizons_snapshots
    split = time_split(book, cfg.sim.window, min(horizons), max(horizons),
                       cfg.data.train_fraction, cfg.data.split_at_segment)
    train_stop = split.cut_row - cfg.labels.max_horizon
    train_book = head_rows(book, train_stop)
    if cfg.train.feature_table:
        train_book = with_feature_table(train_book, cfg.features)
    return TrainingData(store_path=store_path, book=book, split=split, train_stop=train_stop,
                        train_book=train_book)
