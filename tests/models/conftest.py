"""Fixtures of the model tests."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture
def tf32_products():
    """TF32 matrix products for the test (as in training), restored afterwards."""
    saved = torch.backends.cuda.matmul.fp32_precision
    torch.backends.cuda.matmul.fp32_precision = "tf32"
    yield
    torch.backends.cuda.matmul.fp32_precision = saved
