"""lobsurf.writeback: new values copied into state tensors in place, batched by dtype."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from lobsurf.writeback import copy_values_, named_pairs


@dataclass
class _State:
    count: torch.Tensor
    total: torch.Tensor
    rows: torch.Tensor


def test_values_land_in_place_at_the_same_addresses_with_their_own_dtype():
    state = _State(count=torch.zeros((), dtype=torch.int64),
                   total=torch.zeros((), dtype=torch.float64), rows=torch.zeros(3))
    addresses = [t.data_ptr() for t in (state.count, state.total, state.rows)]
    new = {"count": torch.tensor(7), "total": torch.tensor(0.1, dtype=torch.float32),
           "rows": torch.tensor([1.0, 2.0, 3.0])}
    copy_values_(named_pairs(state, new))
    assert [t.data_ptr() for t in (state.count, state.total, state.rows)] == addresses
    assert int(state.count) == 7 and state.rows.tolist() == [1.0, 2.0, 3.0]
    # a float32 value into a float64 sum: the same conversion as an in-place add into zero
    assert state.total.dtype == torch.float64
    assert float(state.total) == float(torch.zeros((), dtype=torch.float64) + new["total"])


def test_a_value_with_a_gradient_is_written_as_plain_data():
    total = torch.zeros((), dtype=torch.float64)
    x = torch.tensor(2.0, requires_grad=True)
    copy_values_([(total, x * 3)])
    assert float(total) == 6.0 and not total.requires_grad and total.grad_fn is None
