"""run_beside (lobsurf.streams): the fork/join of two independent pieces of a step."""

from __future__ import annotations

import pytest
import torch

from lobsurf.streams import run_beside, side_stream


def test_without_a_stream_side_runs_first_then_main() -> None:
    order: list[str] = []
    got = run_beside(None, lambda: order.append("side") or 1, lambda: order.append("main") or 2)
    assert got == (1, 2) and order == ["side", "main"]


def test_no_side_stream_on_cpu_or_when_switched_off() -> None:
    assert side_stream(True, "cpu") is None
    assert side_stream(True, "cpu", high_priority=True) is None
    assert side_stream(False, "cpu") is None
    if torch.cuda.is_available():
        assert side_stream(False, "cuda") is None


def test_cpu_train_state_has_no_branch(tiny_store) -> None:
    from lobsurf.training.data import load_training_data
    from lobsurf.training.run.state import build_state
    from tests.agent.conftest import tiny_config

    cfg = tiny_config(tiny_store.path)
    state = build_state(cfg, load_training_data(cfg, "cpu", tiny_store.path), "cpu")
    assert state.branch is None


class _FakeStream:
    """Stands in for torch.cuda.Stream on a machine without CUDA: records its arguments."""

    def __init__(self, device, priority=0):
        self.device, self.priority = device, priority

    @staticmethod
    def priority_range():
        return 0, -5


def test_side_stream_takes_the_highest_priority_when_asked(monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "Stream", _FakeStream)
    assert side_stream(True, "cuda", high_priority=True).priority == -5
    assert side_stream(True, "cuda").priority == 0
    assert side_stream(False, "cuda", high_priority=True) is None


@pytest.mark.gpu
def test_learner_streams_priority(tiny_store) -> None:
    """On CUDA both side streams (the learner's, the target net's) run at the device's
    highest priority, above the step's own stream where the collect runs."""
    from lobsurf.training.data import load_training_data
    from lobsurf.training.run.state import build_state
    from tests.agent.conftest import tiny_config

    cfg = tiny_config(tiny_store.path)
    state = build_state(cfg, load_training_data(cfg, "cuda", tiny_store.path), "cuda")
    lowest, highest = torch.cuda.Stream.priority_range()
    assert highest < lowest == torch.cuda.current_stream().priority
    assert state.branch.priority == highest and state.learner_branch.priority == highest


@pytest.mark.gpu
def test_side_piece_runs_on_the_side_stream_and_is_joined() -> None:
    stream = side_stream(True, "cuda")
    main_stream = torch.cuda.current_stream()
    x = torch.randn(256, 256, device="cuda")

    def side():
        assert torch.cuda.current_stream() == stream
        # a chain of kernels still queued on the side stream when main() is enqueued
        y = x
        for _ in range(50):
            y = torch.tanh(y @ x)
        return y

    def main():
        assert torch.cuda.current_stream() == main_stream
        return x * 2

    got, doubled = run_beside(stream, side, main)
    expected = x
    for _ in range(50):
        expected = torch.tanh(expected @ x)
    # read on the main stream right after the join: ordered after the side's kernels
    assert torch.equal(got.clone(), expected) and torch.equal(doubled, x * 2)
