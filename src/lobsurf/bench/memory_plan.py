"""Does a large run fit on one device? The issue-9 memory goal, stated from real tensors.

The goal: a ``snapshots``-row dataset (50M) and a ``transitions``-slot replay (4M) on one
GPU together, with the state bytes per snapshot and per transition. The sizes come from
``lobsurf.training.faults.resources.memory_estimate`` (the estimate ``lobsurf train`` prints and
checks before it loads anything: bytes measured from a probe book, its labels and a
two-slot replay built by the real code), applied to the training defaults at the planned
sizes. Activations of a step are not in it (``peak GiB`` of the bench rows measures them
at each B); the plan says how much of the device's total memory the state leaves for them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

import torch

from lobsurf.training.config import RunConfig
from lobsurf.training.faults.resources import GIB, host_available_bytes, memory_estimate


@dataclass(frozen=True)
class PlanConfig:
    """The planned sizes (issue 9's memory goal)."""

    snapshots: int = 50_000_000
    """dataset rows on the device."""
    transitions: int = 4_000_000
    """replay capacity (transitions)."""

    def __post_init__(self) -> None:
        if self.snapshots < 1 or self.transitions < 1:
            raise ValueError("planned snapshots and transitions must be >= 1")


def device_total_bytes(device: str) -> int | None:
    """Total memory of a CUDA device, or the host's available memory for the CPU."""
    if device.startswith("cuda"):
        return torch.cuda.mem_get_info(torch.device(device))[1]
    return host_available_bytes()


def memory_plan(device: str, plan: PlanConfig = PlanConfig(),
                cfg: RunConfig | None = None) -> dict:
    """Bytes per snapshot and per transition, the planned state in total, and whether it
    fits the device (None when its memory is unknown)."""
    cfg = cfg or RunConfig()
    est = memory_estimate(replace(cfg, replay=replace(cfg.replay, capacity=plan.transitions)),
                          plan.snapshots, device)
    total = device_total_bytes(device)
    return {
        **asdict(plan),
        "bytes_per_snapshot": est.snapshot_bytes,
        "bytes_per_transition": est.replay_bytes_per_transition,
        "dataset_gib": est.book_bytes / GIB,
        "replay_gib": est.replay_bytes / GIB,
        "networks_gib": est.network_bytes / GIB,
        "state_gib": est.device_bytes / GIB,
        "device_total_gib": None if total is None else total / GIB,
        "fits": None if total is None else est.device_bytes < total,
        "left_for_activations_gib": None if total is None else (total - est.device_bytes) / GIB,
    }


def plan_line(p: dict) -> str:
    where = ("device memory unknown" if p["fits"] is None else
             f"{'fits' if p['fits'] else 'does NOT fit'} in {p['device_total_gib']:.1f} GiB "
             f"({p['left_for_activations_gib']:.1f} GiB left for activations)")
    return (f"memory plan: {p['snapshots']:,} snapshots x {p['bytes_per_snapshot']} B = "
            f"{p['dataset_gib']:.2f} GiB + replay {p['transitions']:,} x "
            f"{p['bytes_per_transition']} B = {p['replay_gib']:.2f} GiB + networks "
            f"{p['networks_gib']:.2f} GiB = {p['state_gib']:.2f} GiB: {where}")
