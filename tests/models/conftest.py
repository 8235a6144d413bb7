"""Fixtures of the model tests."""

from __future__ import annotations

import pytest
import torch

from lobsurf.models.config import EncoderConfig
from lobsurf.models.mamba2 import Mamba2Block


def perturbed_block(cfg: EncoderConfig, seed: int) -> Mamba2Block:
    """A Mamba2 block of ``cfg`` (seeded) with every parameter moved off its init, so that a
    kernel which drops a term (the D skip, a dt bias) shows in its output: the fused
    kernels' tests."""
    torch.manual_seed(seed)
    block = Mamba2Block(cfg)
    with torch.no_grad():
        for p in block.parameters():
            p.add_(0.1 * torch.randn_like(p))
        block.mixer.dt_bias.uniform_(-1.0, 1.0)
        block.mixer.D.normal_()
    return block


def count_calls(monkeypatch, module, name: str) -> list:
    """Wrap ``module.name`` (for the test's duration) so that each call appends to the
    returned list: which kernels a block's forward or backward reached."""
    real = getattr(module, name)
    calls: list = []

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


@pytest.fixture
def tf32_products():
    """TF32 matrix products for the test (as in training), restored afterwards."""
    saved = torch.backends.cuda.matmul.fp32_precision
    torch.backends.cuda.matmul.fp32_precision = "tf32"
    yield
    torch.backends.cuda.matmul.fp32_precision = saved
