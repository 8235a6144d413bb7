"""GEMM widths padded at use (models/align.py): the same products, outputs and gradients,
as the unpadded ones; and the CUDA-only padding of the encoder leaves it unchanged."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from lobsurf.models import align, encoder, mamba2
from lobsurf.models.config import EncoderConfig
from lobsurf.models.encoder import Encoder


def _grads(loss: torch.Tensor, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    return list(torch.autograd.grad(loss, tensors))


@pytest.mark.parametrize("rows", [644, 648, 5])
def test_padded_out_is_the_product_with_zero_columns_after_it(rows):
    torch.manual_seed(0)
    x = torch.randn(3, 7, 16, dtype=torch.float64, requires_grad=True)
    w = torch.randn(rows, 16, dtype=torch.float64, requires_grad=True)
    out = align.linear_padded_out(x, w, 8)
    assert out.shape[-1] % 8 == 0 and out.shape[-1] - rows < 8
    ref = F.linear(x, w)
    assert torch.allclose(out[..., :rows], ref, rtol=1e-12, atol=1e-12)
    assert torch.count_nonzero(out[..., rows:]) == 0
    up = torch.randn_like(ref)
    got = _grads((out[..., :rows] * up).sum() + out[..., rows:].sum(), [x, w])
    want = _grads((ref * up).sum(), [x, w])
    for g, r in zip(got, want):
        assert g.shape == r.shape and torch.allclose(g, r, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("cols", [66, 64, 3])
def test_padded_in_is_the_same_product(cols):
    torch.manual_seed(1)
    x = torch.randn(4, 5, cols, dtype=torch.float64, requires_grad=True)
    w = torch.randn(12, cols, dtype=torch.float64, requires_grad=True)
    b = torch.randn(12, dtype=torch.float64, requires_grad=True)
    out = align.linear_padded_in(x, w, b, 8)
    ref = F.linear(x, w, b)
    assert out.shape == ref.shape and torch.allclose(out, ref, rtol=1e-12, atol=1e-12)
    up = torch.randn_like(ref)
    for g, r in zip(_grads((out * up).sum(), [x, w, b]), _grads((ref * up).sum(), [x, w, b])):
        assert g.shape == r.shape and torch.allclose(g, r, rtol=1e-12, atol=1e-12)


def test_no_padding_off_cuda():
    assert align.device_multiple(torch.zeros(1)) == 1


def test_the_multiple_counts_bytes_of_the_compute_dtype():
    assert align.GEMM_ALIGN_BYTES == 16
    assert align.elements_per_alignment(torch.bfloat16) == 8
    assert align.elements_per_alignment(torch.float32) == 4
    assert align.elements_per_alignment(torch.float64, 4) == 1


@pytest.mark.parametrize("last_only", [True, False])
def test_encoder_padded_as_on_cuda_equals_unpadded(monkeypatch, last_only):
    """The encoder with its CUDA padding forced on (CPU, float64) gives the unpadded
    encoder's outputs and parameter gradients: 66 features and a 2E+2N+H = 84-column
    in-projection, neither a multiple of 8."""
    torch.manual_seed(2)
    cfg = EncoderConfig(d_model=16, headdim=8, d_state=8, n_layers=2, chunk_size=16)
    enc = Encoder(cfg, in_features=66).double()
    assert enc.blocks[0].mixer.proj_width % 8 != 0
    x = torch.randn(3, 12, 66, dtype=torch.float64)
    log_dt = torch.zeros(3, 12, dtype=torch.float64)
    params = list(enc.parameters())

    def run():
        out = enc(x, log_dt, return_sequence=not last_only)
        y = out.last if last_only else out.sequence
        return y, _grads((y * torch.linspace(-1, 1, y.numel(), dtype=y.dtype).view_as(y)).sum(),
                         params)

    ref, ref_grads = run()
    calls = []

    def on_cuda(t):  # as on CUDA under bf16 autocast
        calls.append(t.shape[-1])
        return align.elements_per_alignment(torch.bfloat16)

    for module in (encoder, mamba2):
        monkeypatch.setattr(module, "device_multiple", on_cuda)
    got, got_grads = run()
    assert set(calls) == {66, 16}  # the input projection's features, each block's input
    assert torch.allclose(got, ref, rtol=1e-10, atol=1e-12)
    for g, r in zip(got_grads, ref_grads):
        assert torch.allclose(g, r, rtol=1e-9, atol=1e-12)
