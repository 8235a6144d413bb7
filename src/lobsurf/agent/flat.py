"""A network's parameters as views of one contiguous buffer, and their gradients of another.

The learner's tail (the gradient clip's norm, Adam, the Polyak update of the target net)
runs over every parameter tensor of the online network: 39 tensors, 0.44 M values at the
default shape. Per tensor, each pass is a multi-tensor launch whose blocks each walk a
64 K-value chunk, on the stretch of the step where nothing else runs (benchmarks/RESULTS.md, Defaults decided by measurement).
Over one flat buffer each pass is one ordinary element-wise or
reduction kernel over all the values, which torch.compile fuses (lobsurf.agent.optim's
``flat_adam_``: clip division, Adam and Polyak in one kernel).

``flatten_parameters_`` moves each parameter's values into its segment of a new buffer and
points the parameter at that segment (``p.data = view``): the modules keep their own
``nn.Parameter`` objects, names, state dicts and checkpoints, and every read of a parameter
reads the buffer. Segments start on ``SEGMENT_ALIGN_BYTES`` boundaries, because
torch.compile copies an input whose address is not 16-byte aligned before every call, and
cuBLAS's Hopper kernels need 16-byte rows; the gaps hold zeros (a zero gradient, zero Adam
moments: Adam leaves them zero).

The gradients' buffer gets the same layout and each ``p.grad`` is its segment. Autograd's
gradients are written into it by ``write_gradients_`` (one multi-tensor copy, the gaps'
zeros among its sources), so a caller must not assign ``p.grad`` itself: ``check`` says
when one did.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch

#: segment alignment: torch.compile's (16 B) and cuBLAS's row alignment, rounded up to the
#: 64-byte granule of a GPU memory transaction so no segment shares one with the next
SEGMENT_ALIGN_BYTES = 64
#: the longest piece of ``write_gradients_``'s multi-tensor copy: its CUDA launch gives each
#: piece's 64 K-value chunks a block of 512 threads that walks the chunk 2,048 values a round,
#: so an in-projection's whole 82 K-value gradient kept one block for 32 dependent rounds
#: (the copy's first launch took 15.7 us on an H100 at B = 256 / 4 layers, on the step's
#: tail, where nothing else runs); in pieces of this many values a block has 4 rounds, over
#: more blocks (at 4 layers about 150 pieces in three launches instead of 78 in two)
GRAD_COPY_PIECE = 8192


@dataclass
class FlatParameters:
    """Parameters laid out in one buffer: ``data`` [numel with gaps]; ``grad`` the same
    layout for their gradients (None for a network without gradients, the target);
    ``offsets`` where each parameter's segment starts; ``zeros`` a zero vector as long as
    the longest segment or gap, the source of ``write_gradients_``'s zeros (made once: a
    captured step must not allocate)."""

    params: list[torch.nn.Parameter]
    data: torch.Tensor
    grad: torch.Tensor | None
    offsets: tuple[int, ...]
    zeros: torch.Tensor

    def __deepcopy__(self, memo: dict) -> FlatParameters:
        # nn.Parameter's deepcopy clones its values (and drops .grad): the copies of the
        # parameters are pointed back into copies of the buffers, so a deep-copied network
        # and optimizer (a test's twin of a training state) stay flat
        params = copy.deepcopy(self.params, memo)
        new = FlatParameters(params=params, data=copy.deepcopy(self.data, memo),
                             grad=copy.deepcopy(self.grad, memo), offsets=self.offsets,
                             zeros=copy.deepcopy(self.zeros, memo))
        new._point_parameters()
        memo[id(self)] = new
        return new

    def _point_parameters(self) -> None:
        # each parameter (and its gradient) made a view of its segment of the buffers
        for p, view in zip(self.params, self.views(self.data)):
            p.data = view
        if self.grad is not None:
            for p, view in zip(self.params, self.views(self.grad)):
                p.grad = view

    def views(self, buffer: torch.Tensor) -> list[torch.Tensor]:
        """Views of ``buffer`` (this layout) shaped as the parameters, in their order."""
        return [buffer[o:o + p.numel()].view(p.shape) for p, o in zip(self.params, self.offsets)]

    def same_layout(self, other: FlatParameters) -> bool:
        """Whether ``other`` lays out parameters of the same shapes at the same offsets
        (a target network and its online network: Polyak pairs them element by element)."""
        return self.offsets == other.offsets and self.data.shape == other.data.shape and \
            [p.shape for p in self.params] == [p.shape for p in other.params]

    def check(self) -> None:
        """Raise if a parameter or gradient no longer points into the buffers (a ``p.data``
        or ``p.grad`` assigned after flattening would leave the buffer stale)."""
        grads = self.views(self.grad) if self.grad is not None else [None] * len(self.params)
        for p, view, grad in zip(self.params, self.views(self.data), grads):
            if p.data_ptr() != view.data_ptr() or (
                    grad is not None and (p.grad is None or p.grad.data_ptr() != grad.data_ptr())):
                raise RuntimeError("a flattened parameter or its gradient was reassigned; "
                                   "write gradients with FlatParameters.write_gradients_ and "
                                   "values with copy_")

    def gaps(self) -> list[tuple[int, int]]:
        """(start, end) of each stretch between segments and after the last."""
        return gaps([p.numel() for p in self.params], self.offsets, self.data.numel())

    @torch.no_grad()
    def zero_gaps_(self, buffer: torch.Tensor) -> None:
        """Zero ``buffer``'s gaps (this layout). A step whose gradient norm is NaN spreads
        NaN into the gaps too (0 / NaN); restoring a checkpoint writes the segments only,
        so it calls this to make the gaps zero again."""
        stretches = [buffer[a:b] for a, b in self.gaps()]
        if stretches:
            torch._foreach_zero_(stretches)

    @torch.no_grad()
    def write_gradients_(self, grads: Sequence[torch.Tensor | None]) -> None:
        """Write one gradient per parameter (None: zero) into ``grad``, gaps zero (a
        diverged step's division leaves NaN there), as one multi-tensor copy of 1-d
        pieces of at most ``GRAD_COPY_PIECE`` values. On CUDA that is a few launches over
        every piece, where a concatenation into the buffer was slower on the step's
        critical path (benchmarks/RESULTS.md, Defaults decided by measurement)."""
        if self.grad is None:
            raise ValueError("these parameters were flattened without gradients")
        into: list[torch.Tensor] = []
        pieces: list[torch.Tensor] = []
        at, zeros = 0, self.zeros
        for p, o, g in zip(self.params, self.offsets, grads, strict=True):
            if o > at:
                into.append(self.grad[at:o])
                pieces.append(zeros[:o - at])
            into.append(self.grad[o:o + p.numel()])
            pieces.append(zeros[:p.numel()] if g is None else g.reshape(-1))
            at = o + p.numel()
        if at < self.grad.numel():
            into.append(self.grad[at:])
            pieces.append(zeros[:self.grad.numel() - at])
        torch._foreach_copy_([part for t in into for part in t.split(GRAD_COPY_PIECE)],
                             [part for t in pieces for part in t.split(GRAD_COPY_PIECE)])


def gaps(numels: Sequence[int], offsets: Sequence[int], total: int) -> list[tuple[int, int]]:
    """(start, end) of the stretches that segments of ``numels`` at ``offsets`` leave
    uncovered in a buffer of ``total`` values."""
    ends = [o + n for n, o in zip(numels, offsets)]
    return [(e, s) for e, s in zip(ends, [*offsets[1:], total]) if s > e]


def segment_offsets(numels: Iterable[int], element_bytes: int) -> tuple[tuple[int, ...], int]:
    """(start of each segment, total length) with every start a multiple of
    ``SEGMENT_ALIGN_BYTES``; the total is rounded up the same way."""
    step = max(1, SEGMENT_ALIGN_BYTES // element_bytes)
    offsets, at = [], 0
    for n in numels:
        offsets.append(at)
        at = -(-(at + n) // step) * step
    return tuple(offsets), at


@torch.no_grad()
def flatten_parameters_(params: Iterable[torch.nn.Parameter], with_grads: bool
                        ) -> FlatParameters:
    """Move ``params`` (one dtype and device) into one buffer, in place (module docstring);
    with ``with_grads`` each ``p.grad`` becomes a zeroed segment of a second buffer."""
    params = list(params)
    if not params:
        raise ValueError("no parameters to flatten")
    kinds = {(p.dtype, p.device) for p in params}
    if len(kinds) > 1:
        raise ValueError(f"parameters of several dtypes or devices cannot share a buffer: "
                         f"{sorted(str(k) for k in kinds)}")
    first = params[0]
    numels = [p.numel() for p in params]
    offsets, total = segment_offsets(numels, first.element_size())
    data = torch.zeros(total, dtype=first.dtype, device=first.device)
    grad = torch.zeros_like(data) if with_grads else None
    longest = max(numels + [b - a for a, b in gaps(numels, offsets, total)]) if with_grads else 0
    flat = FlatParameters(params=params, data=data, grad=grad, offsets=offsets,
                          zeros=data.new_zeros(longest))
    for p, view in zip(params, flat.views(data)):
        view.copy_(p)
    flat._point_parameters()
    return flat
