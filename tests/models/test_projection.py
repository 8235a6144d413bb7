"""``project`` (models/projection.py, ``encoder.weight_grads_beside``): the products and
every gradient against a numpy float64 reference; the Mamba2 block with it against the
plain block; and the compiled backward that keeps the forked op's inputs alive.

The fork itself (a CUDA side stream, joined when the backward ends) needs a GPU:
``test_projection_gpu.py``.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest
import torch

from lobsurf.models.mamba2 import Mamba2Block
from lobsurf.models.projection import INDUCTOR_OPTIONS, Piece, project
from tests.models.test_mamba2 import perturbed_block

# a weight of 13 rows: a piece of the last row only (z of the last layer), a piece padded to
# a multiple of 4 columns, and a last row no piece covers (in_proj_pad_multiple's padding)
ROWS, IN = 13, 6
PIECES = (Piece(0, 5, last_row=True), Piece(5, 12, multiple=4))


def _reference(x, w, s, pieces, grads):
    # float64 numpy: each piece's output, then dx, d W and d s from the given output grads
    x, w = x.astype(np.float64), w.astype(np.float64)
    scale = np.ones(w.shape[1]) if s is None else s.astype(np.float64)
    w_eff = w * scale
    outs, dx, d_eff = [], np.zeros_like(x), np.zeros_like(w)
    for p, g in zip(pieces, grads):
        rows = x[:, -1] if p.last_row else x
        n = p.end - p.start
        y = rows @ w_eff[p.start:p.end].T
        width = -(-n // p.multiple) * p.multiple
        outs.append(np.concatenate([y, np.zeros(y.shape[:-1] + (width - n,))], axis=-1))
        g = g.astype(np.float64)[..., :n]
        if p.last_row:
            dx[:, -1] += g @ w_eff[p.start:p.end]
        else:
            dx += g @ w_eff[p.start:p.end]
        d_eff[p.start:p.end] += g.reshape(-1, n).T @ rows.reshape(-1, w.shape[1])
    return outs, dx, d_eff * scale, (d_eff * w).sum(0)


@pytest.mark.parametrize("scaled", [True, False])
def test_project_matches_numpy_reference(scaled: bool) -> None:
    g = torch.Generator().manual_seed(4)
    x = torch.randn(3, 7, IN, generator=g, requires_grad=True)
    w = torch.randn(ROWS, IN, generator=g, requires_grad=True)
    s = (torch.rand(IN, generator=g) + 0.5).requires_grad_() if scaled else None
    outs = project(x, w, s, PIECES)
    probes = [torch.randn(o.shape, generator=g) for o in outs]
    inputs = [x, w] + ([s] if scaled else [])
    grads = torch.autograd.grad(sum((o * p).sum() for o, p in zip(outs, probes)), inputs)
    ref_outs, dx, dw, ds = _reference(x.detach().numpy(), w.detach().numpy(),
                                      None if s is None else s.detach().numpy(), PIECES,
                                      [p.numpy() for p in probes])
    assert [o.shape[-1] for o in outs] == [5, 8]
    for got, want in zip(outs, ref_outs):
        np.testing.assert_allclose(got.detach().numpy(), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(grads[0].numpy(), dx, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(grads[1].numpy(), dw, rtol=1e-5, atol=1e-5)
    assert not grads[1][12].any()  # the row no piece covers
    if scaled:
        np.testing.assert_allclose(grads[2].numpy(), ds, rtol=1e-5, atol=1e-5)


def _beside(block: Mamba2Block) -> Mamba2Block:
    # the same block (parameters included) with its weight gradients from project's op
    other = Mamba2Block(dataclasses.replace(block.mixer.cfg, weight_grads_beside=True))
    first = next(block.parameters())
    other.to(device=first.device, dtype=first.dtype).load_state_dict(block.state_dict())
    return other


def _grads(block: Mamba2Block, h: torch.Tensor, probe: torch.Tensor) -> list[torch.Tensor]:
    # every parameter's gradient of the full-window and the last-row calls (both paths of
    # the in-projection: one piece, and z of the last row beside the other columns)
    loss = (block(h) * probe).sum() + (block(h, last_only=True) * probe[:, -1]).sum()
    return list(torch.autograd.grad(loss, list(block.parameters())))


@pytest.mark.parametrize("fold", [True, False])
def test_block_with_weight_grads_beside_gives_the_same_gradients(fold: bool) -> None:
    plain = perturbed_block(16, torch.float64, seed=3)
    plain.mixer.cfg = dataclasses.replace(plain.mixer.cfg, fold_norm_weights=fold)
    beside = _beside(plain)
    h = torch.randn(2, 33, 16, dtype=torch.float64)
    probe = torch.randn(2, 33, 16, dtype=torch.float64)
    for (name, _), p, q in zip(plain.named_parameters(), _grads(plain, h, probe),
                               _grads(beside, h, probe)):
        torch.testing.assert_close(q, p, rtol=1e-10, atol=1e-12, msg=name)


def test_block_with_weight_grads_beside_under_bf16_autocast() -> None:
    # the products in autocast's dtype, as the plain block's, the gradients in the
    # parameters' dtype: the same up to bf16 rounding of the summation order
    plain = perturbed_block(16, torch.float32, seed=5)
    beside = _beside(plain)
    h, probe = torch.randn(2, 33, 16), torch.randn(2, 33, 16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want, got = _grads(plain, h, probe), _grads(beside, h, probe)
    for (name, _), p, q in zip(plain.named_parameters(), want, got):
        assert q.dtype == torch.float32, name
        torch.testing.assert_close(q, p, rtol=2e-2, atol=2e-2, msg=name)


def test_flop_counter_counts_the_weight_gradients_as_the_plain_products() -> None:
    # lobsurf bench's FLOP count (FlopCounterMode) sees the plain block's d W products as
    # aten.mm; the op computes them out of its sight, so it carries its own formula
    from torch.utils.flop_counter import FlopCounterMode

    plain = perturbed_block(16, torch.float32, seed=6)
    h, probe = torch.randn(2, 33, 16), torch.randn(2, 33, 16)
    counts = []
    for block in (plain, _beside(plain)):
        with FlopCounterMode(display=False) as counter:
            _grads(block, h, probe)
        counts.append(counter.get_total_flops())
    assert counts[1] == counts[0] > 0


_CALL = re.compile(r"torch\.ops\.lobsurf\.projection_weight_grads\.default\((.*)\)")
_REUSE = re.compile(r"(\w+) = (?:reinterpret_tensor\()?(\w+)[,;].*# reuse")


def reused_op_inputs(code: str) -> list[str]:
    """Buffers Inductor's generated code passes to the forked op and later reuses (its
    storage given to a new buffer, or written in place): 'name at line n' each."""
    inputs: set[str] = set()
    found = []
    for number, line in enumerate(code.splitlines(), 1):
        call = _CALL.search(line)
        if call:
            inputs.update(re.findall(r"\b(buf\d+|[a-z_]+\d*)\b", call.group(1)))
        reuse = _REUSE.search(line)
        if reuse and reuse.group(2) in inputs:
            found.append(f"{reuse.group(2)} at line {number}")
    return found


def _compiled_backward(options: dict) -> tuple[list[torch.Tensor], list[torch.Tensor], str]:
    from torch._inductor.utils import run_and_get_code

    base = perturbed_block(16, torch.float32, seed=3)
    blocks = [_beside(base), _beside(base)]
    params = [p for b in blocks for p in b.parameters()]
    h = torch.randn(2, 33, 16)

    def two_blocks(x):
        for b in blocks:
            x = b(x)
        return x

    compiled = torch.compile(two_blocks, fullgraph=True, options=options)
    got, codes = run_and_get_code(
        lambda: torch.autograd.grad(compiled(h).square().sum(), params))
    want = torch.autograd.grad(two_blocks(h).square().sum(), params)
    backward = [c for c in codes if "projection_weight_grads" in c]
    assert len(backward) == 1
    return list(got), list(want), backward[0]


@pytest.mark.parametrize("safe", [True, False])
def test_compiled_backward_keeps_the_forked_ops_inputs(safe: bool) -> None:
    # Inductor (on CPU here; its buffer planning is the same on CUDA) would hand a buffer
    # the op has read to a later kernel of the backward, while the op's side stream may
    # still be reading it; with INDUCTOR_OPTIONS it allocates anew. Without them, the
    # hazard is there to find (so the check can fail).
    got, want, code = _compiled_backward(dict(INDUCTOR_OPTIONS) if safe else {})
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)
    assert code.count("projection_weight_grads.default(") == 4  # in and out, two blocks
    reused = reused_op_inputs(code)
    if safe:
        assert reused == []
    else:
        assert reused, "Inductor reused none of the op's inputs: the check cannot fail"
