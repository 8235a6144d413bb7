"""Token-level products whose weight gradients run beside the data gradients
(``EncoderConfig.weight_grads_beside``).

In the training step's backward the learner's layers run one after another on one CUDA
stream, and at B = 256 none of their kernels fills the GPU (benchmarks/RESULTS.md,
twenty-eighth session: the backward ran 0.54 ms alone, a chain of 117 small kernels). A
projection's backward is two products: the data gradient d x = dy W, which the layer below
waits for, and the weight gradient d W = dy^T x, a sum over every token's row (cuBLAS splits
it, and adds a reduction kernel), which only the optimizer reads. On that one stream each
layer's d W sits on the chain. Here d W (and, with folded norm weights, the scale's
gradient) is computed on a second stream forked at that point, so it runs beside the data
gradients of the layers below; the fork is joined into the backward's stream when the
backward ends (an autograd engine callback), before anything reads a gradient.

``project(x, weight, scale, pieces)`` is F.linear of row ranges ("pieces") of
``weight * scale`` (the scale a per-input-column factor: the folded RMSNorm weight, or
None), each piece's output padded with zero columns to a multiple (``models/align.py``) and
each reading either every row of x or the last row only. Its forward is traced by
torch.compile as written (the same products as the plain code); its backward computes the
data gradient as written and the weight gradients in one opaque op
(``lobsurf::projection_weight_grads``), which forks on CUDA and computes in turn elsewhere.

Two hazards of a fork inside a compiled backward, both handled:
* the caching allocator could hand a block the side stream still reads (x, dy) to a later
  allocation of the backward's stream: the op records the side stream on its inputs
  (``record_stream``); the outputs are allocated on the backward's stream before the fork;
* Inductor's generated backward reuses a dead buffer's storage directly (``bufN = x; del x
  # reuse``) or writes into it in place, which no allocator sees: compiled with this option,
  the pieces are compiled with Inductor's buffer reuse and in-place buffers off
  (``INDUCTOR_OPTIONS``, applied by ``lobsurf.train.compile.compile_config``).
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import register_flop_formula

from lobsurf.models.align import linear_padded_out

#: Inductor settings a compiled backward with the forked op needs (module docstring)
INDUCTOR_OPTIONS = (("allow_buffer_reuse", False), ("inplace_buffers", False))


class Piece(NamedTuple):
    """Rows [start, end) of the weight as one product, its output padded with zero columns
    to a multiple of ``multiple``; ``last_row``: the product reads x[:, -1] only."""

    start: int
    end: int
    multiple: int = 1
    last_row: bool = False


def project(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor | None,
            pieces: tuple[Piece, ...]) -> tuple[torch.Tensor, ...]:
    """For each piece, ``F.linear(x or x[:, -1], (weight * scale)[start:end])`` with its
    output padded to the piece's multiple; the backward computes d weight and d scale on a
    side stream on CUDA (module docstring). ``scale`` [in features] or None."""
    return _Projection.apply(x, weight, scale, pieces)


def _effective(weight: torch.Tensor, scale: torch.Tensor | None) -> torch.Tensor:
    return weight if scale is None else weight * scale


def _piece_input(x: torch.Tensor, piece: Piece) -> torch.Tensor:
    return x[:, -1] if piece.last_row else x


def _padded_rows(w: torch.Tensor, multiple: int) -> torch.Tensor:
    pad = -w.shape[0] % multiple
    return F.pad(w, (0, 0, 0, pad)) if pad else w


class _Projection(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, scale, pieces):
        w = _effective(weight, scale)
        outs = tuple(linear_padded_out(_piece_input(x, p), w[p.start:p.end], p.multiple)
                     for p in pieces)
        # under autocast the products ran in its dtype: the backward's products do too, and
        # x is saved as the products read it (autocast's own cast, which torch.compile
        # merges with this one; no copy where x has that dtype already)
        dtype = outs[0].dtype
        ctx.pieces, ctx.input_dtype = pieces, x.dtype
        ctx.save_for_backward(x.to(dtype), weight, scale)
        return outs

    @staticmethod
    def backward(ctx, *grads):
        x, weight, scale = ctx.saved_tensors
        pieces, dtype = ctx.pieces, x.dtype
        grads = [g.to(dtype) for g in grads]
        dx = _data_grad(x, _effective(weight, scale).to(dtype), pieces, grads
                        ).to(ctx.input_dtype) if ctx.needs_input_grad[0] else None
        weight_grads = torch.ops.lobsurf.projection_weight_grads(
            grads, x, weight, scale, [p.start for p in pieces],
            [p.end for p in pieces], [p.last_row for p in pieces])
        d_scale = None if scale is None else weight_grads[1]
        return dx, weight_grads[0], d_scale, None


def _data_grad(x: torch.Tensor, w: torch.Tensor, pieces: tuple[Piece, ...],
               grads: list[torch.Tensor]) -> torch.Tensor:
    # d x = sum over pieces of dy (W_eff's rows, padded as the output was), the last-row
    # pieces' into x's last row; in the products' dtype
    dx = last = None
    for p, g in zip(pieces, grads):
        part = g @ _padded_rows(w[p.start:p.end], p.multiple)
        if p.last_row:
            last = part if last is None else last + part
        else:
            dx = part if dx is None else dx + part
    if dx is None:
        dx = torch.zeros(x.shape, dtype=w.dtype, device=x.device)
    if last is not None:
        dx = torch.cat((dx[:, :-1], (dx[:, -1] + last).unsqueeze(1)), dim=1)
    return dx


@torch.library.custom_op("lobsurf::projection_weight_grads", mutates_args=())
def projection_weight_grads(grads: list[torch.Tensor], x: torch.Tensor, weight: torch.Tensor,
                            scale: torch.Tensor | None, starts: list[int], ends: list[int],
                            last_rows: list[bool]) -> list[torch.Tensor]:
    """[d weight] or [d weight, d scale] of ``project`` from its pieces' output gradients
    and its input x (both in the products' dtype), on a side stream on CUDA, joined when the
    running backward ends (module docstring); in turn elsewhere."""
    outs = [torch.empty_like(weight)] + ([] if scale is None else [torch.empty_like(scale)])
    if not x.is_cuda:
        _weight_grads_into(outs, grads, x, weight, scale, starts, ends, last_rows)
        return outs
    main = torch.cuda.current_stream(x.device)
    side = _side_stream(x.device)
    side.wait_stream(main)
    with torch.cuda.stream(side):
        _weight_grads_into(outs, grads, x, weight, scale, starts, ends, last_rows)
    for t in (*grads, x, weight) + (() if scale is None else (scale,)):
        t.record_stream(side)
    _join_when_backward_ends(main, side)
    return outs


@projection_weight_grads.register_fake
def _(grads, x, weight, scale, starts, ends, last_rows):
    return [torch.empty_like(weight)] + ([] if scale is None else [torch.empty_like(scale)])


@register_flop_formula(torch.ops.lobsurf.projection_weight_grads)
def _weight_grads_flops(grads, x, weight, scale, starts, ends, last_rows, **_) -> int:
    # the products' FLOPs (what FlopCounterMode counts for the plain path's d W products;
    # lobsurf bench's roofline), shapes in place of tensors: 2 rows (end - start) in
    rows_all, rows_last = math.prod(x[:-1]), x[0]
    return sum(2 * (rows_last if last else rows_all) * (end - start) * x[-1]
               for start, end, last in zip(starts, ends, last_rows))


def _weight_grads_into(outs: list[torch.Tensor], grads: list[torch.Tensor], x: torch.Tensor,
                       weight: torch.Tensor, scale: torch.Tensor | None, starts: list[int],
                       ends: list[int], last_rows: list[bool]) -> None:
    # d W_eff = dy^T x per piece in the products' dtype (the rows no piece covers: zeros),
    # then in the weight's: d W = d W_eff diag(scale), d scale = sum over rows of d W_eff o W
    d_eff = torch.zeros(weight.shape, dtype=x.dtype, device=x.device)
    width = x.shape[-1]
    for g, start, end, last in zip(grads, starts, ends, last_rows):
        rows = (x[:, -1] if last else x).reshape(-1, width)
        torch.mm(g.reshape(-1, g.shape[-1])[:, :end - start].t(), rows, out=d_eff[start:end])
    d_eff = d_eff.to(weight.dtype)
    if scale is None:
        outs[0].copy_(d_eff)
        return
    torch.mul(d_eff, scale, out=outs[0])
    torch.sum(d_eff * weight, dim=0, out=outs[1])


_SIDE_STREAMS: dict[torch.device, torch.cuda.Stream] = {}


def _side_stream(device: torch.device) -> torch.cuda.Stream:
    # one side stream per device, made at the first fork (kept for the process: a CUDA
    # graph that captured a fork replays on the stream it was captured on)
    device = torch.device("cuda", torch.cuda.current_device() if device.index is None
                          else device.index)
    if device not in _SIDE_STREAMS:
        _SIDE_STREAMS[device] = torch.cuda.Stream(device)
    return _SIDE_STREAMS[device]


def _join_when_backward_ends(main: torch.cuda.Stream, side: torch.cuda.Stream) -> None:
    # queued on the autograd engine: it runs when the backward's graph is done, before
    # backward() / autograd.grad return to the caller. One per fork (not one per backward:
    # a backward that fails before its callbacks run would leave a shared flag set, and
    # the next backward unjoined); in a CUDA graph each is a dependency edge, no kernel.
    torch.autograd.Variable._execution_engine.queue_callback(functools.partial(_join, main, side))


def _join(main: torch.cuda.Stream, side: torch.cuda.Stream) -> None:
    main.wait_stream(side)
