"""The data a run trains on: the store (or the bundled default), its time split, and the
training part of the book that the simulator may touch.

The split is pretraining's (``lobsurf.data.split.time_split``): held-out windows start
at the cut row, training windows end at t with t + max_horizon < cut. The simulator gets
only rows [0, cut - max_horizon): every snapshot it fills against, marks at or steps
through lies before that purge gap, so ``lobsurf eval RUN`` can trade the rows from the cut
on as data the agent never saw.

With ``data.validation_fraction`` > 0 the rows [0, cut - max_horizon) are split again by the
same rules (``time_split`` over them, at that share from their end, not snapped to a
session): validation windows start at or after the validation cut v and end before
cut - max_horizon; the simulator gets only rows [0, v - max_horizon). The policy is chosen
on the validation slice (``lobsurf.training.selection.validate``), so the held-out rows
stay untouched by every choice.

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

from lobsurf.data.dataset import ROW_FIELDS, BookTensors, load_book_tensors
from lobsurf.data.split import TimeSplit, time_split
from lobsurf.data.store import Store
from lobsurf.errors import UserError
from lobsurf.models.feature_table import with_feature_table
from lobsurf.training.config import RunConfig

#: Name of the bundled default data set (a preset of lobsurf.presets); bump the cache
#: folder's suffix when the generator or the preset changes (v2: the store records its fee;
#: v3: it records trades and its generator's law, for baseline:bayes).
DEFAULT_PRESET = "tradeable"
DEFAULT_CACHE_NAME = f"default-{DEFAULT_PRESET}-v3"


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "lobsurf"


def default_store(progress: bool = False) -> Path:
    """The bundled default store, generated and ingested on first use (a few seconds)."""
    from lobsurf.data.store.ingest import ingest
    from lobsurf.data.synth import synth_ingest_config, write_synth
    from lobsurf.presets import preset

    root = cache_root() / DEFAULT_CACHE_NAME
    store = root / "store"
    if (store / "manifest.json").is_file():
        return store
    synth = preset(DEFAULT_PRESET)
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root, prefix="dbn-") as tmp:
        paths = write_synth(tmp, synth, progress=progress)
        # the preset's multiplier and fee go into the store (DBN files carry neither)
        ingest(paths, store, synth_ingest_config(synth), overwrite=True)
    return store


@dataclass
class ValidationSlice:
    """The purged validation slice at the end of the training rows (module doc).

    Attributes:
        cut_row: v, the first snapshot of the slice.
        stop_row: the held-out cut - max label horizon: the slice's rows end before it.
        rows: [n] int64 end rows of validation windows (t - K + 1 >= v, t < stop_row).
        fit_rows: [m] int64 end rows of the simulator's windows (t + max_horizon < v).
    """

    cut_row: int
    stop_row: int
    rows: torch.Tensor
    fit_rows: torch.Tensor

    @property
    def train_slice_rows(self) -> torch.Tensor:
        """The simulator's last end rows, as many as the slice has (the memorisation gauge's
        in-sample sweep: the rows just before the purge gap)."""
        return self.fit_rows[-len(self.rows):]


@dataclass
class TrainingData:
    """The loaded book, its split, and the training book the simulator runs on."""

    store_path: Path
    book: BookTensors
    split: TimeSplit
    train_stop: int
    """Rows [0, train_stop) are the simulator's; train_stop = (the validation cut, or the
    held-out cut without validation) - max label horizon."""
    train_book: BookTensors
    validation: ValidationSlice | None = None
    """The purged validation slice (None: data.validation_fraction = 0)."""

    @property
    def fit_rows(self) -> torch.Tensor:
        """[m] int64 end rows of the windows the simulator may train on."""
        return self.split.train_rows if self.validation is None else self.validation.fit_rows

    def summary(self) -> dict:
        out = {"store": str(self.store_path), "rows": len(self.book),
               "segments": self.book.num_segments, "cut_row": self.split.cut_row,
               "train_stop_row": self.train_stop, "train_windows": len(self.fit_rows),
               "heldout_windows": len(self.split.test_rows), "tick_size": self.book.tick_size,
               "multiplier": self.book.multiplier}
        if self.validation is not None:
            out.update({"validation_cut_row": self.validation.cut_row,
                        "validation_stop_row": self.validation.stop_row,
                        "validation_windows": len(self.validation.rows)})
        return out


def head_rows(book: BookTensors, stop: int) -> BookTensors:
    """The book's rows [0, stop) as a BookTensors of their own (segments clipped)."""
    keep = book.segment_start < stop
    seg_start = book.segment_start[keep]
    seg_stop = book.segment_stop[keep].clamp(max=stop)
    sliced = {name: getattr(book, name)[:stop] for name in ROW_FIELDS
              if getattr(book, name) is not None}
    if book.features is not None:
        sliced["features"] = book.features[:stop]
    return replace(book, segment_start=seg_start, segment_stop=seg_stop, **sliced)


def validation_slice(book: BookTensors, cfg: RunConfig, split: TimeSplit
                     ) -> ValidationSlice | None:
    """The purged validation slice of ``split``'s training side (module doc), or None when
    ``data.validation_fraction`` is 0. Raises UserError when the rows are too few to split."""
    fraction = cfg.data.validation_fraction
    if fraction == 0:
        return None
    horizons = cfg.labels.horizons_snapshots
    stop = split.cut_row - cfg.labels.max_horizon
    try:
        inner = time_split(head_rows(book, stop), cfg.sim.window, min(horizons), max(horizons),
                           1 - fraction, at_segment=False)
    except UserError as exc:
        raise UserError(f"data.validation_fraction {fraction:g}: the {stop:,} rows before the "
                        f"held-out purge are too few for a purged validation slice ({exc}); "
                        "use a larger store or data.validation_fraction=0") from None
    return ValidationSlice(cut_row=inner.cut_row, stop_row=stop, rows=inner.test_rows,
                           fit_rows=inner.train_rows)


def check_validation_slice(book: BookTensors, cfg: RunConfig, vs: ValidationSlice) -> None:
    """Refuse a slice with fewer decision rows than ``train.min_validation_trades`` in each
    of its halves (a sweep closes at most one trade per decision, and the choice needs that
    many trades in the half that chooses and in the half that confirms: no checkpoint
    could ever be chosen)."""
    from lobsurf.backtest.sweep import tile_rows

    need = 2 * cfg.train.min_validation_trades
    try:
        have = len(tile_rows(head_rows(book, vs.stop_row), vs.rows, cfg.sim, 1).rows)
    except ValueError:
        have = 0
    if have < need:
        raise UserError(
            f"data.validation_fraction {cfg.data.validation_fraction:g}: the validation slice "
            f"(rows {vs.cut_row:,}..{vs.stop_row - 1:,}) has {have:,} decision rows (one every "
            f"{cfg.sim.stride}), fewer than the {need} trades a checkpoint needs to be chosen "
            f"({cfg.train.min_validation_trades} in each half, train.min_validation_trades: "
            "one half chooses, the other confirms); raise data.validation_fraction, lower "
            "train.min_validation_trades, or set data.validation_fraction=0 (no validation)")


def load_training_data(cfg: RunConfig, device: torch.device | str, store_path: Path
                       ) -> TrainingData:
    """Open the store, load the instrument onto ``device`` and split it (see module doc)."""
    store = Store.open(store_path)
    book = load_book_tensors(store, device, instrument_id=cfg.data.instrument_id or None)
    horizons = cfg.labels.horizons_snapshots
    split = time_split(book, cfg.sim.window, min(horizons), max(horizons),
                       cfg.data.train_fraction, cfg.data.split_at_segment)
    validation = validation_slice(book, cfg, split)
    if validation is not None:
        check_validation_slice(book, cfg, validation)
    train_stop = (validation or split).cut_row - cfg.labels.max_horizon
    train_book = head_rows(book, train_stop)
    # the training book's features computed once, gathered by row in every forward
    train_book = with_feature_table(train_book, cfg.features)
    return TrainingData(store_path=store_path, book=book, split=split, train_stop=train_stop,
                        train_book=train_book, validation=validation)
