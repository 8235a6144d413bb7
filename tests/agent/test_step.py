"""The training step: no host sync, batch-size-invariant gradients, training rows only, the
tensor Adam against torch.optim.Adam, the feature table, the draw made ahead, and the
learner beside the collect on two streams."""

from __future__ import annotations

import contextlib
import threading
from dataclasses import fields, replace

import pytest
import torch

from lobsurf.agent.learn import losses
from lobsurf.agent.optim import TensorAdam
from lobsurf.agent.replay import Sample
from lobsurf.agent.step import train_step
from lobsurf.agent.transitions import Transitions
from lobsurf.training.data import load_training_data
from lobsurf.training.run.state import build_state, step_config
from tests.agent.conftest import tiny_config


@contextlib.contextmanager
def no_host_sync():
    """Make every host read of a tensor raise: .item, .tolist, .cpu, .numpy, bool()."""
    names = ("item", "tolist", "cpu", "numpy", "__bool__")
    saved = {n: getattr(torch.Tensor, n) for n in names}

    def refuse(name):
        def raiser(self, *args, **kwargs):
            raise AssertionError(f"host sync inside the training step: Tensor.{name}")
        return raiser

    try:
        for n in names:
            setattr(torch.Tensor, n, refuse(n))
        yield
    finally:
        for n, f in saved.items():
            setattr(torch.Tensor, n, f)


def test_guard_catches_a_planted_sync():
    with pytest.raises(AssertionError, match="host sync"):
        with no_host_sync():
            if torch.tensor(1.0) > 0:  # a Python branch on a device value
                pass


def test_steps_make_no_host_sync(tiny_setup):
    cfg, data, state, scfg = tiny_setup
    with no_host_sync():
        for step in range(10):  # collect-only steps, then learning steps
            train_step(state, data.train_book, scfg, learning=step >= 4)
    assert float(state.metrics.learn_steps) == 6


def test_same_batch_twice_gives_the_same_gradients(tiny_setup):
    cfg, data, state, scfg = tiny_setup
    for step in range(8):
        train_step(state, data.train_book, scfg, learning=False)
    sample = state.replay.sample(16, state.controllers.per_beta)

    def grads(s: Sample):
        state.online.zero_grad(set_to_none=True)
        losses(state, data.train_book, s, scfg).total.backward()  # every head's loss
        return [p.grad.clone() for p in state.online.parameters() if p.grad is not None]

    doubled = Sample(
        transitions=Transitions(**{f.name: getattr(sample.transitions, f.name).repeat(2)
                                   for f in fields(Transitions)}),
        index=sample.index.repeat(2), weight=sample.weight.repeat(2))
    for a, b in zip(grads(sample), grads(doubled)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)


def test_simulator_and_replay_see_training_rows_only(tiny_setup):
    cfg, data, state, scfg = tiny_setup
    assert data.train_stop == data.split.cut_row - cfg.labels.max_horizon
    assert len(data.train_book) == data.train_stop < len(data.book)
    for step in range(40):
        train_step(state, data.train_book, scfg, learning=step >= 4)
    filled = int(state.replay.size)
    rows = torch.cat([state.replay.storage.row[:filled], state.replay.storage.next_row[:filled]])
    # every fill row (cursor + latency) lies before the purge gap ahead of the held-out cut
    assert int(rows.max()) + cfg.sim.latency_rows < data.train_stop


def test_tensor_adam_matches_torch_adam():
    torch.manual_seed(0)
    a = [torch.nn.Parameter(torch.randn(5, 3)), torch.nn.Parameter(torch.randn(3))]
    b = [torch.nn.Parameter(p.detach().clone()) for p in a]
    ours = TensorAdam(a, lr=1e-2, eps=1e-6)
    ref = torch.optim.Adam(b, lr=1e-2, eps=1e-6)
    for _ in range(25):
        g = [torch.randn_like(p) for p in a]
        ours.flat.write_gradients_([gi.clone() for gi in g])
        for q, gi in zip(b, g):
            q.grad = gi.clone()
        ours.step()
        ref.step()
    for p, q in zip(a, b):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)


def test_the_feature_table_step_equals_the_per_window_step(tiny_store):
    # the training book carries a table of its snapshots' features, built once, from which
    # each window's features are gathered; the step must act, learn and write exactly what
    # it does computing them per window (learning steps included: n-step bootstraps,
    # clamped windows at the book's edges are pinned in tests/models/test_feature_table.py)
    cfg = tiny_config(tiny_store.path)
    tabled = load_training_data(cfg, "cpu", tiny_store.path)
    plain = replace(tabled, train_book=replace(tabled.train_book, features=None))
    assert plain.train_book.features is None and tabled.train_book.features is not None
    states = [build_state(cfg, plain, "cpu"), build_state(cfg, tabled, "cpu")]
    scfg = step_config(cfg)
    for state, data in zip(states, (plain, tabled)):
        for step in range(8):
            train_step(state, data.train_book, scfg, learning=step >= 4)
    assert float(states[1].metrics.learn_steps) == 4
    for a, b in zip(states[0].online.parameters(), states[1].online.parameters()):
        assert torch.equal(a, b)
    for f in fields(states[0].replay.storage):
        assert torch.equal(getattr(states[0].replay.storage, f.name),
                           getattr(states[1].replay.storage, f.name)), f.name


class _Turns:
    """A deterministic stand-in for run_beside's two CUDA streams: the two pieces in two
    threads, one running at a time, so that one can run as far ahead of the other as the
    events allow. The running piece hands the turn over where it waits for an event not yet
    recorded, where it records one the other waits for, and where it ends.

    What CUDA allows is modelled too: run_beside issues the side piece (the learner's half)
    first on the host, and a stream waiting for an event that no work issued before has
    recorded does not wait at all. So the side piece may only wait for its own events;
    one waiting for the main piece's fails here."""

    def __init__(self, first: str, stream: object):
        self.first, self.stream = first, stream
        self.cond = threading.Condition()
        self.running: str | None = None
        self.done: set[str] = set()
        self.waiting: dict[str, _TurnEvent] = {}
        self.errors: list[BaseException] = []
        self.piece = threading.local()  # which piece this thread runs

    def hand_over(self, me: str) -> None:
        """Give the turn to the other piece unless it has ended (hold self.cond)."""
        other = "side" if me == "main" else "main"
        self.running = me if other in self.done else other
        self.cond.notify_all()

    def event(self) -> _TurnEvent:
        return _TurnEvent(self)

    def run_beside(self, stream, side, main):
        if stream is not self.stream:  # another fork (none on CPU): in turn, as run_beside
            return side(), main()
        results: dict[str, object] = {}

        def body(name, fn):
            self.piece.name = name
            with self.cond:
                self.cond.wait_for(lambda: self.running == name)
            try:
                results[name] = fn()
            except BaseException as exc:  # re-raised in the test's thread
                self.errors.append(exc)
            with self.cond:
                self.done.add(name)
                self.hand_over(name)

        self.done.clear()
        self.running = self.first
        threads = [threading.Thread(target=body, args=(name, fn))
                   for name, fn in (("side", side), ("main", main))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if self.errors:
            raise self.errors[0]
        return results["side"], results["main"]


class _TurnEvent:
    """A CUDA event under ``_Turns``."""

    def __init__(self, turns: _Turns):
        self.turns, self.recorded_by = turns, None

    def record(self):
        turns = self.turns
        with turns.cond:
            me = self.recorded_by = turns.piece.name
            other = "side" if me == "main" else "main"
            if turns.waiting.get(other) is self:  # the waiter runs on at once
                turns.hand_over(me)
                turns.cond.wait_for(lambda: turns.running == me)

    def wait(self):
        turns = self.turns
        with turns.cond:
            me = turns.piece.name
            if me == "side" and self.recorded_by != "side":
                raise AssertionError("the learner's half waits for an event of the collect's: "
                                     "on CUDA that wait is issued first and orders nothing")
            if self.recorded_by is not None:
                return
            turns.waiting[me] = self
            turns.hand_over(me)
            turns.cond.wait_for(lambda: turns.running == me and (
                self.recorded_by is not None or "side" in turns.done))
            del turns.waiting[me]
            if self.recorded_by is None:
                raise AssertionError("the collect waits for an event nothing records")


def test_a_collect_without_a_learner_discards_the_draw_made_ahead(tiny_store):
    # the draw made ahead is stale once a step collects without learning (the replay moved
    # on): the next learning step draws first again, from where the writes left the replay
    from tests.training.test_compile_kernels import _setup

    data, state, scfg = _setup(tiny_store)
    for step in range(6):
        train_step(state, data.train_book, scfg, learning=step >= 4)
    assert state.replay.drawn_ahead
    train_step(state, data.train_book, scfg, learning=False)
    assert not state.replay.drawn_ahead
    with pytest.raises(RuntimeError, match="no draw made ahead"):
        state.replay.sample_drawn(state.controllers.per_beta)
    primed = []
    real = state.replay.draw_ahead_
    state.replay.draw_ahead_ = lambda *a, **k: primed.append(int(state.replay.pointer)) or real(
        *a, **k)
    train_step(state, data.train_book, scfg, learning=True)
    pointer = int(state.replay.pointer)
    # one draw before this step's write (the priming), one after it (the next step's)
    assert primed == [(pointer - scfg.num_envs) % state.replay.capacity, pointer]
    assert state.replay.drawn_ahead


@pytest.mark.parametrize("n_step", [1, 3])
def test_learner_half_and_collect_keep_their_order_on_two_streams(tiny_store, monkeypatch,
                                                                  n_step):
    # learn_beside_collect on CUDA: the learner's half (noise, draw, forwards, priorities,
    # backward) beside the collect (acting, simulator, replay write, the next step's draw). Sound only if neither writes what the other reads before the
    # events allow it: the collect's acting after the noise, its replay write after the
    # draw (which reads those slots and their labels), the next draw after the priorities.
    # Each half run as far ahead of the other as the events allow (two threads taking
    # turns) must give what the one-stream order gives, bit for bit.
    import lobsurf.agent.step as step_module
    from tests.training.test_compile_kernels import _setup, _state_tensors

    def run(first: str | None) -> dict[str, torch.Tensor]:
        data, state, scfg = _setup(tiny_store, n_step)
        if first is not None:
            state.learner_branch = object()  # stands in for the learner's CUDA stream
            turns = _Turns(first, state.learner_branch)
            monkeypatch.setattr(step_module.torch.cuda, "Event", turns.event)
            monkeypatch.setattr(step_module, "run_beside", turns.run_beside)
        for step in range(14):
            train_step(state, data.train_book, scfg, learning=step >= 4)
        monkeypatch.undo()
        assert float(state.metrics.learn_steps) == 10
        return _state_tensors(state)

    in_turn = run(None)
    for first in ("main", "side"):  # the collect, then the learner, as far ahead as can be
        finals = run(first)
        assert finals.keys() == in_turn.keys()
        for name, a in in_turn.items():
            assert torch.equal(a, finals[name]), f"{first} ahead: {name}"
