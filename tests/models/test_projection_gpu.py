"""GPU only: ``encoder.weight_grads_beside`` forks the projections' weight gradients onto a
side stream, joins it when the backward ends, and does so inside a CUDA graph capture too
(models/projection.py). The values are checked on CPU in ``test_projection.py``."""

from __future__ import annotations

import pytest
import torch

from lobsurf.models import projection
from tests.models.test_mamba2 import perturbed_block
from tests.models.test_projection import _beside

pytestmark = pytest.mark.gpu

BATCH, LENGTH = 64, 64  # enough rows that the side stream's products take a while


def _grads(block, h, probe):
    loss = (block(h) * probe).sum() + (block(h, last_only=True) * probe[:, -1]).sum()
    return torch.autograd.grad(loss, list(block.parameters()))


def test_weight_grads_run_on_the_side_stream_and_are_joined(monkeypatch) -> None:
    plain = perturbed_block(64, torch.float32, seed=7).cuda()
    beside = _beside(plain)
    h = torch.randn(BATCH, LENGTH, 16, device="cuda")
    probe = torch.randn(BATCH, LENGTH, 16, device="cuda")
    streams, joins = [], []
    real, real_join = projection._weight_grads_into, projection._join

    def spy(*args):
        streams.append(torch.cuda.current_stream())
        return real(*args)

    def join_spy(main, side):
        joins.append((main, side))
        real_join(main, side)

    monkeypatch.setattr(projection, "_weight_grads_into", spy)
    monkeypatch.setattr(projection, "_join", join_spy)
    main = torch.cuda.current_stream()
    got = _grads(beside, h, probe)
    # read on the main stream at once: ordered after the side's products only by the join
    got = [g.clone() for g in got]
    assert len(streams) == 4 and all(s != main for s in streams)
    assert all(s == projection._side_stream(h.device) for s in streams)
    # each fork joined into the backward's stream when the backward ended
    assert joins == [(main, streams[0])] * 4
    want = _grads(plain, h, probe)
    for (name, _), g, w in zip(plain.named_parameters(), got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5, msg=lambda m, n=name: f"{n}: {m}")


def test_captured_backward_with_the_fork_replays_the_eager_gradients() -> None:
    plain = perturbed_block(64, torch.float32, seed=8).cuda()
    beside = _beside(plain)
    h = torch.randn(BATCH, LENGTH, 16, device="cuda")
    probe = torch.randn(BATCH, LENGTH, 16, device="cuda")
    warm = torch.cuda.Stream()
    warm.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(warm):  # torch's warm-up before a capture, on a side stream
        for _ in range(2):
            _grads(beside, h, probe)
    torch.cuda.current_stream().wait_stream(warm)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = _grads(beside, h, probe)
    for seed in (1, 2):
        torch.manual_seed(seed)
        h.copy_(torch.randn_like(h))
        graph.replay()
        want = _grads(plain, h, probe)
        for (name, _), g, w in zip(plain.named_parameters(), captured, want):
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5, msg=lambda m, n=name: f"{n}: {m}")
