"""benchmarks/wgrad_split_k.py, the candidate weight-gradient kernel the weight-gradient
micro-benchmark times: both forms against a float64 numpy sum over rows (in Triton's CPU
interpreter), on shapes whose rows, outputs and inputs are not multiples of the tiles."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from lobsurf.models.kernels.triton_support import available_for

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from wgrad_split_k import WgradTiles, weight_grad  # noqa: E402

pytestmark = pytest.mark.skipif(not available_for(torch.device("cpu")),
                                reason="needs Triton's CPU interpreter (TRITON_INTERPRET=1)")

TILES = (WgradTiles(bm=16, bn=16, bk=16, splits=3), WgradTiles(bm=32, bn=16, bk=32, splits=1),
         WgradTiles(bm=16, bn=32, bk=16, splits=64))


def _reference(g: np.ndarray, x: np.ndarray) -> np.ndarray:
    # d W[m, n] = sum over every row r of g[r, m] x[r, n], row by row in float64
    g2 = g.reshape(-1, g.shape[-1]).astype(np.float64)
    x2 = x.reshape(-1, x.shape[-1]).astype(np.float64)
    out = np.zeros((g2.shape[1], x2.shape[1]))
    for r in range(g2.shape[0]):
        out += np.outer(g2[r], x2[r])
    return out


@pytest.mark.parametrize("tiles", TILES, ids=lambda t: f"{t.bm}x{t.bn}x{t.bk}/{t.splits}")
@pytest.mark.parametrize("atomic", [False, True], ids=["partial", "atomic"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_both_forms_equal_a_float64_sum_over_rows(tiles, atomic, dtype):
    gen = torch.Generator().manual_seed(7)
    # [3, 67] leading rows (201, not a multiple of any BK), 37 outputs, 21 inputs
    g = torch.randn(3, 67, 37, generator=gen).to(dtype)
    x = torch.randn(3, 67, 21, generator=gen).to(dtype)
    into = torch.zeros(37, 21) if atomic else None
    got = weight_grad(g, x, tiles, into)
    want = _reference(g.float().numpy(), x.float().numpy())
    assert got.dtype == torch.float32 and got.shape == (37, 21)
    if atomic:
        assert got is into
    # the operands are exact in fp32 (bf16 ones are rounded before the reference sees
    # them); only the fp32 sums' rounding is left
    np.testing.assert_allclose(got.double().numpy(), want, rtol=0, atol=1e-4 * np.abs(want).max())


def test_a_strided_gradient_and_no_rows():
    gen = torch.Generator().manual_seed(3)
    wide = torch.randn(80, 40, generator=gen)
    g = wide[:, :33]  # a column slice: rows 40 apart, as a padded product's gradient is
    x = torch.randn(80, 24, generator=gen)
    got = weight_grad(g, x, WgradTiles(bm=16, bn=16, bk=16, splits=4))
    np.testing.assert_allclose(got.double().numpy(), _reference(g.numpy(), x.numpy()),
                               rtol=0, atol=1e-4)
    empty = weight_grad(torch.zeros(0, 5), torch.zeros(0, 7))
    assert empty.shape == (5, 7) and not empty.any()


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="same leading shape"):
        weight_grad(torch.zeros(4, 3), torch.zeros(5, 2))
    with pytest.raises(ValueError, match="into must be fp32"):
        weight_grad(torch.zeros(4, 3), torch.zeros(4, 2), into=torch.zeros(2, 3))
