"""The memory a run will need, stated before it loads anything, and a refusal up front when
that cannot fit.

Every per-item size is measured from the real tensors, not hand-copied dtypes: the book's
bytes per snapshot from a one-snapshot book built by ``load_book_tensors`` itself, the
labels' from ``compute_labels`` on it, the replay's bytes per transition from a two-slot
``PrioritizedReplay``, the networks from an ``AgentNetwork`` on the meta device (shapes,
no memory).

    device = rows x (book + labels) + replay capacity x transition
             + 2 x network state (online, target) + 3 x parameters (gradients, Adam m, v)
    host   = the device total when the device is the CPU
             + max(book staging while loading, the checkpoint's host copy of the state)

Activations of a step, the allocator's cache and the simulator's per-env state (B-sized)
are not itemised: a run is refused when its estimate exceeds ``USABLE_FRACTION`` of the
free memory, leaving the rest for them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields, replace
from pathlib import Path

import numpy as np
import torch

from lobsurf.agent.network import AgentNetwork
from lobsurf.agent.replay import PrioritizedReplay
from lobsurf.data.dataset import BookTensors, load_book_tensors
from lobsurf.data.labels import compute_labels
from lobsurf.data.schema import FIXED_PRICE_SCALE, STORE_COLUMNS
from lobsurf.data.store import Instrument, Store
from lobsurf.data.store.store import Manifest, Segment
from lobsurf.errors import UserError
from lobsurf.models.feature_table import with_feature_table
from lobsurf.training.config import RunConfig

GIB = 1 << 30
#: share of free memory a run may plan to fill (the rest: activations, caches; see doc)
USABLE_FRACTION = 0.9
MEMINFO = Path("/proc/meminfo")
_KIB = 1024


def _tensor_bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


#: snapshots of the probe book: more than its one segment, so per-row tensors are told
#: apart from per-segment ones by their length
_PROBE_ROWS = 2


def _probe_book() -> BookTensors:
    """A tiny book made by the real loader (so its dtypes and widths are the run's)."""
    columns = {name: np.zeros((_PROBE_ROWS, *shape), dtype) for name, (dtype, shape) in
               STORE_COLUMNS.items()}
    manifest = Manifest(snapshots=_PROBE_ROWS,
                        instruments=[Instrument(1, "PROBE", FIXED_PRICE_SCALE)],
                        segments=[Segment(0, _PROBE_ROWS, 1, 0, 0, "probe")])
    return load_book_tensors(Store(Path("probe"), manifest, columns), "cpu")


def _per_row(tensors) -> int:
    """Bytes per snapshot of the probe's per-row tensors."""
    return sum(t.numel() * t.element_size() for t in tensors
               if t.shape[:1] == (_PROBE_ROWS,)) // _PROBE_ROWS


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes a run needs on its device and on the host (see module doc)."""

    rows: int
    book_bytes_per_row: int
    feature_bytes_per_row: int
    label_bytes_per_row: int
    replay_capacity: int
    replay_bytes_per_transition: int
    network_state_bytes: int
    parameter_bytes: int
    device_is_host: bool

    @property
    def snapshot_bytes(self) -> int:
        """Device bytes per snapshot: book, feature table and labels."""
        return self.book_bytes_per_row + self.feature_bytes_per_row + self.label_bytes_per_row

    @property
    def book_bytes(self) -> int:
        return self.rows * self.snapshot_bytes

    @property
    def replay_bytes(self) -> int:
        return self.replay_capacity * self.replay_bytes_per_transition

    @property
    def network_bytes(self) -> int:
        return 2 * self.network_state_bytes + 3 * self.parameter_bytes

    @property
    def device_bytes(self) -> int:
        return self.book_bytes + self.replay_bytes + self.network_bytes

    @property
    def checkpoint_bytes(self) -> int:
        return self.replay_bytes + 2 * self.network_state_bytes + 2 * self.parameter_bytes

    @property
    def host_bytes(self) -> int:
        staging = max(self.rows * self.book_bytes_per_row, self.checkpoint_bytes)
        return (self.device_bytes if self.device_is_host else 0) + staging

    def summary(self) -> str:
        def gib(n: int) -> str:
            return f"{n / GIB:.2f} GiB"

        return (f"device {gib(self.device_bytes)} (book {self.rows:,} snapshots x "
                f"{self.snapshot_bytes} B, replay "
                f"{self.replay_capacity:,} x {self.replay_bytes_per_transition} B, networks "
                f"{gib(self.network_bytes)}), host {gib(self.host_bytes)}")


def memory_estimate(cfg: RunConfig, rows: int, device: torch.device | str = "cpu"
                    ) -> MemoryEstimate:
    """The memory ceiling of ``cfg`` on a store of ``rows`` snapshots (see module doc)."""
    probe = _probe_book()
    book = [getattr(probe, f.name) for f in fields(probe)
            if isinstance(getattr(probe, f.name), torch.Tensor)]
    labels = compute_labels(probe, cfg.labels)
    label_tensors = [getattr(labels, f.name) for f in fields(labels)]
    replay = PrioritizedReplay(replace(cfg.replay, capacity=2), "cpu", 0)
    slots = [getattr(replay.storage, f.name) for f in fields(replay.storage)] + [replay.weight]
    with torch.device("meta"):
        net = AgentNetwork(cfg.features, cfg.encoder, cfg.network, cfg.labels,
                           cfg.sim.num_actions)
    params = [p for p in net.parameters() if p.requires_grad]
    return MemoryEstimate(
        rows=rows, book_bytes_per_row=_per_row(book),
        # the training book's feature table, computed on the device (never staged)
        feature_bytes_per_row=_per_row([with_feature_table(probe, cfg.features).features]),
        label_bytes_per_row=_per_row(label_tensors),
        replay_capacity=cfg.replay.capacity,
        replay_bytes_per_transition=_tensor_bytes(slots) // 2,
        network_state_bytes=_tensor_bytes(net.state_dict().values()),
        parameter_bytes=_tensor_bytes(params),
        device_is_host=torch.device(device).type == "cpu")


def host_available_bytes() -> int | None:
    """MemAvailable from /proc/meminfo (Linux), else free physical pages; None if unknown."""
    try:
        for line in MEMINFO.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * _KIB
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def device_available_bytes(device: torch.device | str) -> int | None:
    """Free memory of a CUDA device (None for the CPU: its memory is the host's)."""
    device = torch.device(device)
    if device.type != "cuda":
        return None
    free, _total = torch.cuda.mem_get_info(device)
    return free


def check_fits(estimate: MemoryEstimate, device: torch.device | str,
               host_free: int | None = None, device_free: int | None = None) -> None:
    """Raise a one-line UserError when the estimate exceeds the usable free memory."""
    host_free = host_available_bytes() if host_free is None else host_free
    device_free = device_available_bytes(device) if device_free is None else device_free
    for where, need, free in (("device", estimate.device_bytes, device_free),
                              ("host", estimate.host_bytes, host_free)):
        if free is not None and need > USABLE_FRACTION * free:
            raise UserError(
                f"this run needs {need / GIB:.2f} GiB of {where} memory but "
                f"{free / GIB:.2f} GiB is free ({estimate.summary()}); lower "
                "replay.capacity or train on a smaller store")


def store_rows(store_path: Path, instrument_id: int) -> int:
    """Snapshots of the instrument a run will load (from the manifest: nothing is read)."""
    manifest = Store.open(store_path).manifest
    ids = {s.instrument_id for s in manifest.segments}
    wanted = instrument_id or (next(iter(ids)) if len(ids) == 1 else None)
    return sum(s.stop - s.start for s in manifest.segments
               if wanted is None or s.instrument_id == wanted)
