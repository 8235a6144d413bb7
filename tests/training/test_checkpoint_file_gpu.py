"""GPU only: packing a checkpoint of device tensors makes no host sync, lands in pinned host
memory, and holds the state as of ``pack`` while the stream goes on changing it (what the
loop does between ``pack`` and the writer's thread writing the bytes)."""

from __future__ import annotations

import pytest
import torch

from lobsurf.training.recovery.checkpoint_file import pack, unpack

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


def test_pack_of_device_tensors_is_asynchronous_pinned_and_a_snapshot():
    big = torch.arange(1 << 22, device="cuda", dtype=torch.float32)
    state = {"big": big, "half": big[:1000].to(torch.bfloat16), "step": torch.tensor(5, device="cuda"),
             "host": torch.ones(3)}
    expected = {k: v.cpu().clone() for k, v in state.items()}
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        packed = pack(state)
        for _ in range(20):  # queued behind the copies, so they must not show
            big.mul_(-1.0).add_(1.0)
        state["step"].add_(1)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert all(b.tensor.is_pinned() for b in packed.buffers if b.tensor.numel() > 3)
    back = unpack(bytearray(b"".join(bytes(c) for c in packed.chunks(1 << 20))))
    for k, v in expected.items():
        assert back[k].dtype == v.dtype and torch.equal(back[k], v), k
