"""The training step: no host sync, batch-size-invariant gradients, training rows only,
the tensor Adam against torch.optim.Adam, and the fused Adam's clip."""

from __future__ import annotations

import contextlib
import threading
from dataclasses import fields, replace

import pytest
import torch

from lobsurf.agent.learn import draw_sample, losses, splits_target, target_logits
from lobsurf.agent.optim import TensorAdam
from lobsurf.agent.replay import Sample, Transitions
from lobsurf.agent.step import train_step
from lobsurf.train.data import load_training_data
from lobsurf.train.loop import build_state, step_config
from tests.agent.conftest import TINY, assert_same_learning, tiny_config


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
        for p, q, gi in zip(a, b, g):
            p.grad, q.grad = gi.clone(), gi.clone()
        ours.step()
        ref.step()
    for p, q in zip(a, b):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("path", ["fused", "flat"])
def test_adam_paths_clip_and_polyak_as_the_multi_tensor_step(tiny_store, path):
    # the fused Adam divides by the clip's divisor inside its kernel instead of the clip
    # scaling the gradients first; the flat path (train.flat_parameters, the default) takes
    # the norm of one buffer and runs clip division, Adam and Polyak in one pass: the same
    # clipped gradients, parameters and target network as the per-tensor multi-tensor step
    cfg = tiny_config(tiny_store.path, learner={"grad_clip_norm": 0.05},
                      train={"flat_parameters": False})
    data = load_training_data(cfg, "cpu", tiny_store.path)
    other = cfg if path == "fused" else tiny_config(tiny_store.path,
                                                    learner={"grad_clip_norm": 0.05})
    states = [build_state(cfg, data, "cpu"), build_state(other, data, "cpu")]
    assert states[0].optimizer.flat is None and states[0].flat_target is None
    if path == "fused":
        states[1].optimizer.fused = True
    else:
        assert states[1].optimizer.flat is not None and states[1].flat_target is not None
    scfg = step_config(cfg)
    for state in states:
        for step in range(5):
            train_step(state, data.train_book, scfg, learning=step == 4)
    assert float(states[0].metrics.grad_norm) > 10 * cfg.learner.grad_clip_norm  # it clips
    for a, b in zip(states[0].online.parameters(), states[1].online.parameters()):
        torch.testing.assert_close(b.grad, a.grad, rtol=1e-5, atol=1e-9)
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-7)
    for a, b in zip(states[0].target.parameters(), states[1].target.parameters()):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-7)
    moved = [float((a - b).abs().max()) for a, b in
             zip(states[1].target.parameters(), build_state(other, data, "cpu").target.parameters())]
    assert max(moved) > 0  # Polyak moved the target


def test_the_feature_table_step_equals_the_per_window_step(tiny_store):
    # train.feature_table (the default) gathers each window's features from a table built
    # once per book; the step must act, learn and write exactly what it does computing them
    # per window (learning steps included: n-step bootstraps, clamped windows at the book's
    # edges are pinned in tests/models/test_feature_table.py)
    cfg = tiny_config(tiny_store.path, train={"feature_table": False})
    table_cfg = tiny_config(tiny_store.path)
    assert table_cfg.train.feature_table
    plain = load_training_data(cfg, "cpu", tiny_store.path)
    tabled = load_training_data(table_cfg, "cpu", tiny_store.path)
    assert plain.train_book.features is None and tabled.train_book.features is not None
    states = [build_state(cfg, plain, "cpu"), build_state(table_cfg, tabled, "cpu")]
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


def _plain_and_changed_runs(tiny_store, plain: dict, changed: dict):
    # two tiny runs of 8 steps (4 learning) from one seed, their encoders with the
    # ``plain`` and the ``changed`` settings; returns (the plain run's config and data,
    # both states)
    plain_cfg = tiny_config(tiny_store.path, encoder={**TINY["encoder"], **plain})
    changed_cfg = tiny_config(tiny_store.path, encoder={**TINY["encoder"], **changed})
    assert plain_cfg.encoder != changed_cfg.encoder
    data = load_training_data(plain_cfg, "cpu", tiny_store.path)
    states = [build_state(plain_cfg, data, "cpu"), build_state(changed_cfg, data, "cpu")]
    for state in states:
        for step in range(8):
            train_step(state, data.train_book, step_config(plain_cfg), learning=step >= 4)
    assert float(states[1].metrics.learn_steps) == 4
    return plain_cfg, data, states


def test_the_step_with_folded_norm_weights_learns_as_the_plain_step(tiny_store):
    # encoder.fold_norm_weights puts the blocks' RMSNorm weights into the products after
    # them: the same function and gradients (to rounding), so the same acting, the same
    # learning, the norm weights included (tests/models/test_mamba2_reference.py pins the
    # block against float64)
    plain_cfg, data, states = _plain_and_changed_runs(tiny_store, {"fold_norm_weights": False},
                                                      {"fold_norm_weights": True})
    moved = 0.0
    for (name, a), b, init in zip(states[0].online.named_parameters(),
                                  states[1].online.parameters(),
                                  build_state(plain_cfg, data, "cpu").online.parameters()):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-6, msg=name)
        if name.endswith("norm.weight") or name.endswith("norm_weight"):
            moved = max(moved, float((b - init).abs().max()))
    assert moved > 0  # the folded norm weights learned


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


@pytest.mark.parametrize("n_step", [1, 3])
def test_drawing_ahead_learns_as_drawing_first(tiny_store, n_step):
    # train.draw_ahead: each learning step draws the next one's indices at its end (after
    # its collect's write and its priorities), the next starts from that draw; nothing
    # between writes what the draw reads, so every step learns from the same sample, from
    # the same uniforms, bit for bit
    from tests.train.test_compile_kernels import _setup, _state_tensors

    def run(draw_ahead: bool) -> dict[str, torch.Tensor]:
        data, state, scfg = _setup(tiny_store, n_step, draw_ahead=draw_ahead)
        assert scfg.learner.sample_before_collect and scfg.draw_ahead == draw_ahead
        draws = []
        name = "sample_drawn" if draw_ahead else "sample"
        real = getattr(state.replay, name)

        def logged(*args, **kwargs):
            sample = real(*args, **kwargs)
            draws.append(sample.index.clone())
            return sample

        setattr(state.replay, name, logged)
        for step in range(14):
            train_step(state, data.train_book, scfg, learning=step >= 4)
        assert state.replay.drawn_ahead == draw_ahead  # the last step drew the next ahead
        assert float(state.metrics.learn_steps) == 10 == len(draws)
        out = _state_tensors(state)
        out["draws"] = torch.stack(draws)
        return {k: v for k, v in out.items() if not k.startswith("replay.ahead.")}

    first, ahead = run(False), run(True)
    assert first.keys() == ahead.keys()
    assert len(set(map(tuple, first["draws"].tolist()))) == 10  # a fresh sample each step
    for name, a in first.items():
        assert torch.equal(a, ahead[name]), name


def test_a_collect_without_a_learner_discards_the_draw_made_ahead(tiny_store):
    # the draw made ahead is stale once a step collects without learning (the replay moved
    # on): the next learning step draws first again, from where the writes left the replay
    from tests.train.test_compile_kernels import _setup

    data, state, scfg = _setup(tiny_store, draw_ahead=True)
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


@pytest.mark.parametrize("n_step,draw_ahead", [(1, False), (3, False), (3, True)])
def test_learner_half_and_collect_keep_their_order_on_two_streams(tiny_store, monkeypatch,
                                                                  n_step, draw_ahead):
    # learn_beside_collect on CUDA: the learner's half (noise, draw, forwards, priorities,
    # backward) beside the collect (acting, simulator, replay write; with train.draw_ahead
    # the next step's draw). Sound only if neither writes what the other reads before the
    # events allow it: the collect's acting after the noise, its replay write after the
    # draw (which reads those slots and their labels), the next draw after the priorities.
    # Each half run as far ahead of the other as the events allow (two threads taking
    # turns) must give what the one-stream order gives, bit for bit.
    import lobsurf.agent.step as step_module
    from tests.train.test_compile_kernels import _setup, _state_tensors

    def run(first: str | None) -> dict[str, torch.Tensor]:
        data, state, scfg = _setup(tiny_store, n_step, draw_ahead=draw_ahead)
        assert scfg.learner.sample_before_collect
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


def test_the_target_splits_only_where_its_half_has_a_stream(tiny_store):
    # train.split_target splits only beside a stream: on CPU, and on one stream, the
    # target net is called once
    cfg = tiny_config(tiny_store.path, train={"split_target": True})
    data = load_training_data(cfg, "cpu", tiny_store.path)
    state, scfg = build_state(cfg, data, "cpu"), step_config(cfg)
    assert cfg.train.split_target and scfg.split_target and state.target_halves is None
    assert not splits_target(state, scfg)
    state.target_halves = object()  # stands in for the CUDA stream
    assert splits_target(state, scfg)
    assert not splits_target(state, replace(scfg, split_target=False))


@pytest.mark.parametrize("feature_table", [True, False])
def test_target_logits_in_two_halves_equal_one_call(tiny_store, feature_table):
    # train.split_target: the target net on s and on s' as two calls gives the batched
    # call's logits, s first (each window's logits depend on that window alone)
    cfg = tiny_config(tiny_store.path, train={"feature_table": feature_table})
    data = load_training_data(cfg, "cpu", tiny_store.path)
    state, scfg = build_state(cfg, data, "cpu"), step_config(cfg)
    for _ in range(4):
        train_step(state, data.train_book, scfg, learning=False)
    _, li = draw_sample(state, data.train_book, scfg)
    with torch.no_grad():
        whole = target_logits(state, li, split=False)
        halves = target_logits(state, li, split=True)
    b = li.online_inputs.shape[0]
    assert whole.shape[0] == 2 * b
    assert (whole[:b] - whole[b:]).abs().max() > 1e-3  # s and s' differ: a swap would show
    torch.testing.assert_close(halves, whole, rtol=1e-5, atol=1e-6)


def test_the_step_with_the_target_in_two_halves_learns_as_the_plain_step(tiny_store,
                                                                         monkeypatch):
    # train.split_target changes how the target net's forward is called, not what it
    # computes: the same replay, every parameter within rounding. On CPU there is no
    # stream for the s' half, so the split is forced here (the halves in turn)
    import lobsurf.agent.learn as learn_module

    calls: list[bool] = []
    real = learn_module.target_logits
    monkeypatch.setattr(learn_module, "target_logits",
                        lambda state, li, split: calls.append(split) or real(state, li, split))
    monkeypatch.setattr(learn_module, "splits_target", lambda state, cfg: cfg.split_target)
    cfgs = [tiny_config(tiny_store.path, train={"split_target": split})
            for split in (False, True)]
    data = load_training_data(cfgs[0], "cpu", tiny_store.path)
    states = [build_state(cfg, data, "cpu") for cfg in cfgs]
    for cfg, state in zip(cfgs, states):
        for step in range(8):
            train_step(state, data.train_book, step_config(cfg), learning=step >= 4)
    assert calls == [False] * 4 + [True] * 4  # each run's learning steps took its path
    assert_same_learning(*states, learn_steps=4)


class _OrderEvent:
    """Stands in for the CUDA event of train.collect_beside_backward: logs its calls."""

    def __init__(self, log: list[str]):
        self.log = log

    def record(self):
        self.log.append("record")

    def wait(self):
        self.log.append("wait")


@pytest.mark.parametrize("flat", [True, False])
def test_collect_waits_for_the_learners_forwards(tiny_store, monkeypatch, flat):
    # train.collect_beside_backward: the learner's stream records the event between its
    # losses (both forwards joined in) and its backward, and the collect waits for it
    # before its first kernel. On CPU the pieces run in turn, so the log is their order.
    import lobsurf.agent.learn as learn_module
    import lobsurf.agent.step as step_module

    cfg = tiny_config(tiny_store.path, train={"flat_parameters": flat})
    data = load_training_data(cfg, "cpu", tiny_store.path)
    state, scfg = build_state(cfg, data, "cpu"), step_config(cfg)
    assert state.forwards_done is None  # no side stream on CPU: nothing to order
    log: list[str] = []

    def logged(module, name):
        real = getattr(module, name)

        def wrapper(*args, **kwargs):
            log.append(name)
            return real(*args, **kwargs)
        monkeypatch.setattr(module, name, wrapper)

    logged(learn_module, "losses")
    logged(learn_module, "flat_gradients_" if flat else "accumulate_gradients_")
    logged(step_module, "collect_deferred")
    for step in range(5):
        train_step(state, data.train_book, scfg, learning=step >= 4)
    backward = "flat_gradients_" if flat else "accumulate_gradients_"
    assert log[-3:] == ["losses", backward, "collect_deferred"]  # no event: none asked for
    log.clear()
    state.forwards_done = _OrderEvent(log)
    train_step(state, data.train_book, scfg, learning=True)
    assert log == ["losses", "record", backward, "wait", "collect_deferred"]
