"""Write-back of state: the step's pure tensor functions return new values, and the step
copies them into its state tensors here, in place, so a captured CUDA graph keeps reading
and writing stable addresses.

Why the split: a compiled piece must not write its inputs in place (torch 2.13's CPU Inductor
silently drops an in-place write to a 0-d CPU input: lobsurf.training.speed.compile), and a write per
field is a kernel per field. Here the copies are batched: one ``torch._foreach_copy_`` per
(destination dtype, source dtype) group, a single multi-tensor launch on CUDA for, say,
every controller and metric sum a phase moved. The copy is exact, so an eager step computes
the same numbers as one that updated each field in place.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import torch

#: a state tensor and its new value
Pair = tuple[torch.Tensor, torch.Tensor]


def named_pairs(owner: object, values: Mapping[str, torch.Tensor]) -> list[Pair]:
    """(owner.<name>, value) for every name in ``values`` (a dataclass of state tensors)."""
    return [(getattr(owner, name), value) for name, value in values.items()]


@torch.no_grad()
def copy_values_(pairs: Iterable[Pair]) -> None:
    """Copy every new value into its state tensor, one multi-tensor copy per dtype group.

    No gradient is recorded (a loss's value written into a metric sum stays a plain sum).
    """
    groups: dict[tuple, tuple[list[torch.Tensor], list[torch.Tensor]]] = {}
    for dst, src in pairs:
        dsts, srcs = groups.setdefault((dst.dtype, dst.device, src.dtype, src.device),
                                       ([], []))
        dsts.append(dst)
        srcs.append(src)
    for dsts, srcs in groups.values():
        torch._foreach_copy_(dsts, srcs)
