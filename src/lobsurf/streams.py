"""Two independent pieces of a step on two CUDA streams: a fork and a join.

At small batches the training step's kernels each fill a few of the GPU's SMs, so two
pieces of work that do not depend on each other (the target net's forward and the online
net's) finish sooner side by side than one after the other. ``run_beside`` runs one piece
on a second stream, forked from the current stream and joined back into it before it
returns; inside a CUDA graph capture the fork and the join become parallel branches of the
graph. The kernels and their inputs are the same either way, so the numbers are too.

Memory: the side piece's inputs are allocated on the current stream and must stay referenced
until the join (the caller holds them); its outputs are allocated on the side stream, which
allocates again only after the next fork, which waits for everything the current stream had
queued, so a block freed by the current stream cannot be reused under a running reader.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import torch

S = TypeVar("S")
M = TypeVar("M")


def side_stream(wanted: bool, device: torch.device | str, high_priority: bool = False
                ) -> torch.cuda.Stream | None:
    """A second stream on ``device`` where ``wanted`` and the device is CUDA, else None;
    at the device's highest priority where ``high_priority`` (else the default, the lowest).

    Where streams of both priorities have blocks waiting, the GPU's scheduler dispatches
    the higher one's first, so work on a step's critical path is not stretched by work
    that only has to be done before the join. A CUDA graph keeps the priority: stream
    capture copies it into each kernel node, and torch instantiates graphs with
    ``cudaGraphInstantiateFlagUseNodePriority``.
    """
    device = torch.device(device)
    if not wanted or device.type != "cuda":
        return None
    priority = torch.cuda.Stream.priority_range()[1] if high_priority else 0
    return torch.cuda.Stream(device, priority=priority)


def run_beside(stream: torch.cuda.Stream | None, side: Callable[[], S], main: Callable[[], M]
               ) -> tuple[S, M]:
    """``(side(), main())``: ``side`` on ``stream`` beside ``main`` on the current stream,
    joined before returning; without a stream, ``side()`` then ``main()`` in that order."""
    if stream is None:
        side_result = side()
        return side_result, main()
    current = torch.cuda.current_stream(stream.device)
    stream.wait_stream(current)
    with torch.cuda.stream(stream):
        side_result = side()
    main_result = main()
    current.wait_stream(stream)
    return side_result, main_result
