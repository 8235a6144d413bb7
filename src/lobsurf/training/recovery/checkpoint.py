"""Checkpoints of a training run: everything a step reads, so a resume continues exactly.

One file per checkpoint under RUN/checkpoints/step_NNNNNNNN.pt (its layout:
``lobsurf.training.recovery.checkpoint_file``: a ``weights_only``-loadable header and the tensors packed
raw), holding plain types and tensors only:

    format, version    "lobsurf-train", 1
    step               steps completed
    config             RunConfig as a dict
    controllers        {name: value} of every controller, and the registry table
    online, target     network state dicts (normaliser statistics and noise buffers included)
    optimizer          Adam state dict
    replay             storage, priorities, ring pointer, fill count, generator state
    sim_state, sim_stats, env_generator    the simulator's cursors, positions, stats, RNG
    noise_generator, acting_generator      RNG states
    metric_sums        device metric sums not yet logged
    metrics_bytes      size of metrics.jsonl when the checkpoint was taken (a resume cuts
                       the file back to it: no duplicated or torn lines)
    meta               data summary, versions

Writing goes to a temporary file in the same folder, is flushed to disk, then renamed into
place, so a crash never leaves a half-written ``step_*.pt``. Then a complete-marker
``step_NNNNNNNN.pt.sha256`` (``sha256sum -c`` format) is written the same way: a checkpoint
counts only when its marker exists and the file's SHA-256 matches it, so a file renamed but
not yet marked, torn by a failing disk or truncated by a copy is never loaded
(``load_payload`` raises ``CorruptCheckpoint``; ``newest_valid_checkpoint`` skips it with a
warning and takes the previous one). The newest ``keep`` are kept.

A multi-process run (docs/distributed.md) adds ``world_size`` to rank 0's file and each
other rank R writes ``step_NNNNNNNN.rankR.pt`` (+ marker) beside it with the part it owns
(``local_payload``: replay, simulator, generators, metric sums; lobsurf.training.recovery.rank_shards);
pruning removes a step's shards with it.

A failing write (disk full, read-only folder) raises a one-line ``UserError`` naming the
file; the temporary file is removed and the previous checkpoints are untouched.

``lobsurf train`` (one process) packs the payload in the
loop (device-side copies into pinned host memory, no host sync; only the small tree of
names and numbers is pickled there) and hands the rest (waiting for the copies, hashing,
writing, syncing, pruning) to a ``CheckpointWriter`` thread; the loop waits for it before
the next checkpoint, a rollback and the end of the run. No pickling runs on the writer's
thread: ``torch.save``'s pickler holds the GIL, and run beside the loop it took the GIL from
the loop at every CUDA-graph launch (the GIL's 5 ms switch interval per step), so a
background ``torch.save`` of the whole payload stalled the loop longer than a synchronous
one (H200, B = 16: ~150 against ~75 ms per checkpoint). Hashing, file writes and fsync of
large buffers release the GIL.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
import threading
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import Any, BinaryIO

import torch

from lobsurf.agent.controllers import controller_table
from lobsurf.agent.state import TrainState
from lobsurf.errors import UserError
from lobsurf.sim.state import SimState, SimStats
from lobsurf.training.recovery import pause_points
from lobsurf.training.recovery.checkpoint_file import Packed, pack, unpack_file

CHECKPOINT_FORMAT = "lobsurf-train"
CHECKPOINT_VERSION = 1
CHECKPOINT_DIR = "checkpoints"
_NAME = re.compile(r"^step_(\d{8})\.pt$")
MARKER_SUFFIX = ".sha256"
#: bytes read at a time when hashing a checkpoint file (bounds host memory)
HASH_CHUNK_BYTES = 1 << 20
#: bytes handed to the file at a time when writing one (a fault test's kill lands between)
WRITE_CHUNK_BYTES = 1 << 20


class CorruptCheckpoint(ValueError):
    """A checkpoint file without its complete-marker, or whose bytes do not match it."""


def checkpoint_path(run_dir: Path, step: int) -> Path:
    return run_dir / CHECKPOINT_DIR / f"step_{step:08d}.pt"


def list_checkpoints(run_dir: Path) -> list[Path]:
    """Finished checkpoints of a run, oldest first (temporary files are ignored)."""
    folder = run_dir / CHECKPOINT_DIR
    if not folder.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in folder.iterdir() if (m := _NAME.match(p.name))]
    return [p for _, p in sorted(found)]


def _fields(obj: SimState | SimStats) -> dict[str, torch.Tensor]:
    return {f.name: getattr(obj, f.name) for f in fields(obj)}


def local_payload(state: TrainState) -> dict[str, Any]:
    """What each rank of a multi-process run owns (see ``restore_local_``): the state's own
    tensors (``pack`` copies them)."""
    return {
        "replay": state.replay.state_dict(),
        "sim_state": _fields(state.env.state),
        "sim_stats": _fields(state.env.stats),
        "env_generator": state.env.generator.get_state(),
        "noise_generator": state.noise_generator.get_state(),
        "acting_generator": state.acting_generator.get_state(),
        "metric_sums": state.metrics.as_dict(),
    }


def checkpoint_payload(state: TrainState, step: int, config: dict, metrics_bytes: int,
                       meta: dict) -> dict[str, Any]:
    """Everything a checkpoint holds (module docstring): the state's own tensors, which
    ``pack`` copies."""
    return {
        "format": CHECKPOINT_FORMAT,
        "version": CHECKPOINT_VERSION,
        "step": step,
        "config": config,
        "controllers": state.controllers.as_dict(),
        "controller_table": controller_table(),
        "online": state.online.state_dict(),
        "target": state.target.state_dict(),
        "optimizer": state.optimizer.state_dict(),
        **local_payload(state),
        "step_count": state.step_count,
        "metrics_bytes": metrics_bytes,
        "meta": meta,
    }


class _HashingWriter:
    """File wrapper that hashes what is written through it (no second read of the file)."""

    def __init__(self, fh: BinaryIO) -> None:
        self.fh, self.digest, self._first = fh, hashlib.sha256(), True

    def write(self, data: bytes | memoryview) -> int:
        self.digest.update(data)
        written = self.fh.write(data)
        if self._first and data:
            self._first = False
            self.fh.flush()
            pause_points.pause_point("checkpoint_write")  # a test's kill lands mid-file here
        return written

    def flush(self) -> None:
        self.fh.flush()


def marker_path(path: Path) -> Path:
    return path.with_name(path.name + MARKER_SUFFIX)


def _write_atomic(path: Path, write: Any) -> Any:
    """``write(fh)`` into a temporary file beside ``path``, fsync, rename into place, sync
    the folder; returns what ``write`` returned."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open(tmp, "wb") as fh:
            result = write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        tmp.replace(path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise UserError(f"cannot write {path}: {exc.strerror or exc} (disk full or "
                        "read-only? the previous checkpoint is intact)") from exc
    _sync_folder(path.parent)
    return result


def _sync_folder(folder: Path) -> None:
    # Makes the rename durable across a power cut. Best effort: some file systems (and
    # platforms) cannot open or sync a folder, and the file itself is already on disk.
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class CheckpointWriter:
    """Writes checkpoint files on a background thread, one at a time, so the training loop
    stalls only for packing the payload (on an H200 at B = 16 a synchronous write took about
    75 ms, 110 steps' worth, every 1,000 steps).

    A write's error is raised in the loop by the next ``submit``, ``check`` or ``wait``; the
    files stay as atomic as before (temporary file, fsync, rename, marker), so a crash
    mid-write leaves the previous checkpoint the newest complete one. ``background=False``
    writes inside ``submit``.
    """

    def __init__(self, background: bool = True) -> None:
        self.background = background
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def submit(self, write: Callable[[], Any]) -> None:
        """Run ``write()`` after the previous write has finished (raising its error)."""
        self.wait()
        if not self.background:
            write()
            return

        def run() -> None:
            try:
                write()
            except BaseException as exc:  # handed to the loop's thread
                self._error = exc

        self._thread = threading.Thread(target=run, name="lobsurf-checkpoint")
        self._thread.start()

    def check(self) -> None:
        """Raise the error of a write that has finished, without waiting for one that has
        not."""
        if self._thread is not None and not self._thread.is_alive():
            self.wait()

    def wait(self) -> None:
        """Wait for the write in flight, if any; raise its error."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            error, self._error = self._error, None
            raise error


def save_checkpoint(run_dir: Path, state: TrainState, step: int, config: dict,
                    metrics_bytes: int, meta: dict, keep: int, extra: dict | None = None,
                    writer: CheckpointWriter | None = None,
                    before_write: Callable[[], None] | None = None) -> Path:
    """Write step ``step``'s checkpoint and its complete-marker atomically, prune to the
    newest ``keep``. ``extra``: loop bookkeeping stored beside the state (e.g. rollbacks).
    ``before_write`` runs first where the files are written (the metrics file's fsync: the
    ``metrics_bytes`` recorded must be on disk before a checkpoint that records them).
    With ``writer`` the payload is packed now (its copies queued on the device) and the
    files are written by it, on its thread; the returned path exists once ``writer.wait()``
    returns."""
    path = checkpoint_path(run_dir, step)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot create {path.parent}: {exc.strerror or exc}") from exc
    payload = checkpoint_payload(state, step, config, metrics_bytes, meta)
    payload.update(extra or {})
    data = pack(payload)  # on this thread: before the next step, and pickling (docstring)

    def write() -> None:
        if before_write is not None:
            before_write()
        _write_and_prune(run_dir, path, data, keep)
    if writer is None:
        write()
    else:
        writer.submit(write)
    return path


def _write_and_prune(run_dir: Path, path: Path, data: Packed, keep: int) -> None:
    write_marked_bytes(path, data)
    for old in list_checkpoints(run_dir)[:-keep]:
        for shard in rank_shard_paths(old):  # the other ranks' parts of a multi-process run
            shard.unlink(missing_ok=True)
        marker_path(old).unlink(missing_ok=True)
        old.unlink()


def write_marked(path: Path, payload: dict[str, Any]) -> None:
    """``payload`` to ``path`` atomically, then its complete-marker."""
    write_marked_bytes(path, pack(payload))


def write_marked_bytes(path: Path, data: Packed) -> None:
    """Packed checkpoint ``data`` to ``path`` atomically (once its device copies are done),
    then its complete-marker."""
    def write_payload(fh: BinaryIO) -> str:
        writer = _HashingWriter(fh)
        for chunk in data.chunks(WRITE_CHUNK_BYTES):
            writer.write(chunk)
        return writer.digest.hexdigest()

    digest = _write_atomic(path, write_payload)
    _write_atomic(marker_path(path), lambda fh: fh.write(f"{digest}  {path.name}\n".encode()))


def write_packed_atomic(path: Path, payload: dict[str, Any]) -> None:
    """``payload`` packed to ``path`` atomically (temporary file, fsync, rename) and without
    a complete-marker: the rename alone makes the file whole, so there is no moment at
    which a reader finds a file and a marker that disagree (RUN/chosen.pt)."""
    data = pack(payload)

    _write_atomic(path, lambda fh: fh.writelines(data.chunks(WRITE_CHUNK_BYTES)))


def write_text_atomic(path: Path, text: str) -> None:
    """``text`` to ``path`` atomically (temporary file, fsync, rename)."""
    _write_atomic(path, lambda fh: fh.write(text.encode()))


def rank_shard_path(path: Path, rank: int) -> Path:
    """step_N.rankR.pt: rank R's replay, simulator and generators beside main file ``path``."""
    return path.with_name(f"{path.stem}.rank{rank}{path.suffix}")


def rank_shard_paths(path: Path) -> list[Path]:
    """Every rank shard of main file ``path`` and their markers."""
    return sorted(path.parent.glob(f"{path.stem}.rank*"))


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(HASH_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def verify_checkpoint(path: Path) -> None:
    """Raise ``CorruptCheckpoint`` unless ``path`` is complete (see module doc)."""
    marker = marker_path(path)
    try:
        expected = marker.read_text().split()[0]
    except (OSError, IndexError):
        raise CorruptCheckpoint(f"{path.name}: no complete-marker {marker.name} "
                                "(write interrupted)") from None
    if file_sha256(path) != expected:
        raise CorruptCheckpoint(f"{path.name}: SHA-256 does not match {marker.name} "
                                "(torn or altered file)")


def load_payload(path: Path) -> dict[str, Any]:
    """The verified payload of one checkpoint file."""
    verify_checkpoint(path)
    payload = unpack_file(path)
    if not isinstance(payload, dict) or payload.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(f"{path}: not a lobsurf training checkpoint")
    if payload.get("version") != CHECKPOINT_VERSION:
        raise ValueError(f"{path}: checkpoint version {payload.get('version')} is not "
                         f"{CHECKPOINT_VERSION}")
    return payload


def newest_valid_checkpoint(run_dir: Path) -> tuple[Path, dict[str, Any]] | None:
    """The newest checkpoint that verifies and its payload; newer broken ones are skipped
    with a warning and removed (they would otherwise outlive good ones when pruning)."""
    for path in reversed(list_checkpoints(run_dir)):
        try:
            return path, load_payload(path)
        except (CorruptCheckpoint, RuntimeError, EOFError, ValueError) as exc:
            print(f"warning: skipping checkpoint {exc}; using the previous one",
                  file=sys.stderr)
            marker_path(path).unlink(missing_ok=True)
            path.unlink(missing_ok=True)
    return None


def restore_state_(state: TrainState, payload: dict[str, Any]) -> None:
    """Copy a checkpoint into a freshly built TrainState, in place."""
    restore_shared_(state, payload)
    restore_local_(state, payload)


def restore_shared_(state: TrainState, payload: dict[str, Any]) -> None:
    """The part every rank of a multi-process run holds alike: networks, optimizer,
    controllers, step counter."""
    state.online.load_state_dict(payload["online"])
    state.target.load_state_dict(payload["target"])
    state.optimizer.load_state_dict(payload["optimizer"])  # zeroes its flat buffers' gaps
    state.flat_target.zero_gaps_(state.flat_target.data)
    state.controllers.load_(payload["controllers"])
    state.step_count.copy_(payload["step_count"])


def restore_local_(state: TrainState, payload: dict[str, Any]) -> None:
    """The part each rank owns: replay, simulator, generators, metric sums not yet logged
    (a main checkpoint's, or a rank shard's: lobsurf.training.recovery.rank_shards)."""
    state.replay.load_state_dict(payload["replay"])
    for name, value in payload["sim_state"].items():
        getattr(state.env.state, name).copy_(value)
    for name, value in payload["sim_stats"].items():
        getattr(state.env.stats, name).copy_(value)
    state.env.generator.set_state(payload["env_generator"])
    state.noise_generator.set_state(payload["noise_generator"])
    state.acting_generator.set_state(payload["acting_generator"])
    state.metrics.load_(payload["metric_sums"])
