"""lobsurf.models.precision: the autocast context per precision and fp32 head outputs."""

from __future__ import annotations

from typing import NamedTuple

import pytest
import torch

from lobsurf.models.config import EncoderConfig
from lobsurf.models.encoder import Encoder
from lobsurf.models.precision import check_precision, float_outputs, forward_precision


class _Out(NamedTuple):
    a: torch.Tensor
    b: torch.Tensor


def test_fp32_is_a_no_op_and_bf16_autocasts_matmuls():
    x, w = torch.randn(4, 8), torch.randn(8, 8)
    with forward_precision("fp32", "cpu"):
        assert (x @ w).dtype == torch.float32
    with forward_precision("bf16", "cpu"):
        assert (x @ w).dtype == torch.bfloat16
    assert (x @ w).dtype == torch.float32  # nothing leaks out of the context


def test_unknown_precision_is_refused():
    with pytest.raises(ValueError, match="fp32, bf16"):
        check_precision("fp16")
    with pytest.raises(ValueError):
        forward_precision("tf32", "cpu")


def test_float_outputs_casts_floats_only():
    out = float_outputs(_Out(torch.ones(2, dtype=torch.bfloat16), torch.ones(2, dtype=torch.int64)))
    assert out.a.dtype == torch.float32 and out.b.dtype == torch.int64
    assert float_outputs(_Out(torch.ones(1, dtype=torch.float64), torch.ones(1))).a.dtype == \
        torch.float64


def test_encoder_under_bf16_is_close_to_fp32():
    torch.manual_seed(0)
    enc = Encoder(EncoderConfig(d_model=32, n_layers=2, d_state=16, headdim=16,
                                chunk_size=16), in_features=6)
    x, log_dt = torch.randn(3, 24, 6), torch.zeros(3, 24)
    with torch.no_grad():
        full = enc(x, log_dt, return_sequence=False).last
    with torch.no_grad(), forward_precision("bf16", "cpu"):
        half = enc(x, log_dt, return_sequence=False).last
    assert half.dtype == torch.bfloat16
    err = (half.float() - full).abs().max() / full.abs().max()
    assert 0 < float(err) < 0.05
