"""run_beside (lobsurf.streams): the fork/join of two independent pieces of a step."""

from __future__ import annotations

import pytest
import torch

from lobsurf.streams import run_beside, side_event, side_stream


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
    from lobsurf.train.data import load_training_data
    from lobsurf.train.loop import build_state
    from tests.agent.conftest import tiny_config

    cfg = tiny_config(tiny_store.path)
    assert cfg.train.overlap_target  # on by default; inert on CPU
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


@pytest.mark.parametrize("prioritize", [True, False])
@pytest.mark.parametrize("split", [True, False])
def test_build_state_asks_for_the_configured_priority(tiny_store, monkeypatch,
                                                      prioritize, split) -> None:
    # every side stream (the learner's, the target net's and, with train.split_target,
    # the target's s' half) at the configured priority; the half's only when asked
    from lobsurf.train import loop
    from lobsurf.train.data import load_training_data
    from tests.agent.conftest import tiny_config

    monkeypatch.setattr(loop, "side_stream", lambda wanted, device, high_priority=False:
                        _FakeStream(device, -5 if high_priority else 0) if wanted else None)
    cfg = tiny_config(tiny_store.path, train={"prioritize_learner": prioritize,
                                              "split_target": split})
    state = loop.build_state(cfg, load_training_data(cfg, "cpu", tiny_store.path), "cpu")
    want = -5 if prioritize else 0
    assert state.learner_branch.priority == want and state.branch.priority == want
    assert (state.target_halves is not None) == split
    assert not split or state.target_halves.priority == want
    # with train.overlap_target off, one stream: the halves in turn
    cfg = tiny_config(tiny_store.path, train={"split_target": split, "overlap_target": False})
    state = loop.build_state(cfg, load_training_data(cfg, "cpu", tiny_store.path), "cpu")
    assert state.branch is None and state.target_halves is None


class _FakeEvent:
    pass


def test_side_event_only_with_a_side_stream_and_when_asked(monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "Event", _FakeEvent)
    stream = _FakeStream("cuda")
    assert isinstance(side_event(True, stream), _FakeEvent)
    assert side_event(False, stream) is None
    assert side_event(True, None) is None


@pytest.mark.parametrize("late", [True, False])
def test_build_state_gives_the_learner_stream_an_event_when_asked(tiny_store, monkeypatch,
                                                                  late) -> None:
    # train.collect_beside_backward: an event for ordering the collect after the learner's
    # forwards, made only beside the learner's own stream
    from lobsurf.train import loop
    from lobsurf.train.data import load_training_data
    from tests.agent.conftest import tiny_config

    monkeypatch.setattr(torch.cuda, "Event", _FakeEvent)
    monkeypatch.setattr(loop, "side_stream", lambda wanted, device, high_priority=False:
                        _FakeStream(device) if wanted else None)
    cfg = tiny_config(tiny_store.path, train={"collect_beside_backward": late})
    state = loop.build_state(cfg, load_training_data(cfg, "cpu", tiny_store.path), "cpu")
    assert isinstance(state.learner_branch, _FakeStream)
    assert isinstance(state.forwards_done, _FakeEvent) == late
    cfg = tiny_config(tiny_store.path, train={"collect_beside_backward": True,
                                              "overlap_collect": False})
    state = loop.build_state(cfg, load_training_data(cfg, "cpu", tiny_store.path), "cpu")
    assert state.learner_branch is None and state.forwards_done is None


@pytest.mark.gpu
@pytest.mark.parametrize("prioritize", [True, False])
def test_learner_streams_priority(tiny_store, prioritize) -> None:
    """train.prioritize_learner: both side streams (the learner's, the target net's) at the
    device's highest priority, above the step's own stream where the collect runs."""
    from lobsurf.train.data import load_training_data
    from lobsurf.train.loop import build_state
    from tests.agent.conftest import tiny_config

    cfg = tiny_config(tiny_store.path, train={"prioritize_learner": prioritize})
    state = build_state(cfg, load_training_data(cfg, "cuda", tiny_store.path), "cuda")
    lowest, highest = torch.cuda.Stream.priority_range()
    assert highest < lowest == torch.cuda.current_stream().priority
    want = highest if prioritize else lowest
    assert state.branch.priority == want and state.learner_branch.priority == want


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
