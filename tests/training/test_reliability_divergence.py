"""Divergence: a NaN/Inf planted in a parameter, a loss, a gradient or a controller is
found on the device (no host sync in the step), reported with its step and quantity, and the
run rolls back to the last good checkpoint with a lowered learning rate, a bounded number
of times."""

from __future__ import annotations

import copy
import math

import pytest
import torch

import lobsurf.agent.learn as agent_learn
from lobsurf.agent.optim import TensorAdam
from lobsurf.agent.step import train_step
from lobsurf.training.faults.guard import DivergenceGuard
from lobsurf.training.recovery.checkpoint import list_checkpoints, load_payload
from lobsurf.training.recovery.run_folder import read_metrics
from lobsurf.training.run import step as run_step
from tests.agent.conftest import tiny_setup  # noqa: F401 (fixture)
from tests.agent.test_step import no_host_sync
from tests.training.test_train_command import train

NAN = float("nan")
#: spoiled steps in the rollback-budget test: more than the run's budget allows
FOREVER = 40


def _spoil_parameter(state):
    with torch.no_grad():
        next(state.online.parameters()).view(-1)[0] = NAN


def _spoil_target(state):
    with torch.no_grad():
        next(state.target.parameters()).view(-1)[0] = NAN


def _spoil_controller(state):
    state.controllers.reward_scale.fill_(math.inf)


def inject_after_step(monkeypatch, at_call: int, spoil, times: int = 1):
    """Spoil the state after the ``at_call``-th step of this process and the ``times - 1``
    steps after it (bounded, so a run without a rollback budget still ends)."""
    calls = {"n": 0}
    real = run_step.train_step

    def step(state, *args, **kwargs):
        real(state, *args, **kwargs)
        calls["n"] += 1
        if at_call <= calls["n"] < at_call + times:
            spoil(state)
    monkeypatch.setattr(run_step, "train_step", step)


def inject_nan_loss(monkeypatch, at_call: int):
    calls = {"n": 0}
    real = agent_learn.losses

    def losses(*args, **kwargs):
        ls = real(*args, **kwargs)
        calls["n"] += 1
        if calls["n"] == at_call:
            ls.total, ls.q = ls.total * NAN, ls.q * NAN
        return ls
    monkeypatch.setattr(agent_learn, "losses", losses)


def inject_inf_gradient(monkeypatch, at_call: int):
    # an Inf gradient at the optimizer's ``at_call``-th step
    calls = {"n": 0}
    real = TensorAdam.step

    def step(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == at_call:
            self.params[0].grad.view(-1)[0] = math.inf
        real(self, *args, **kwargs)
    monkeypatch.setattr(TensorAdam, "step", step)


def rollbacks(run):
    return [r for r in read_metrics(run / "metrics.jsonl") if r["event"] == "rollback"]


# TINY: learning starts at step 4 (learn call k happens in step k + 4), log every 5,
# checkpoint every 10, lr 3e-4 by default
@pytest.mark.parametrize("quantity,plant,bad_step", [
    ("parameter", lambda mp: inject_after_step(mp, 13, _spoil_parameter), 13),
    # a spoiled target network (checked where the guard is read, guard docstring) spoils the
    # next step's C51 target first
    ("loss", lambda mp: inject_after_step(mp, 13, _spoil_target), 14),
    ("controller", lambda mp: inject_after_step(mp, 12, _spoil_controller), 12),
    ("loss", lambda mp: inject_nan_loss(mp, 8), 12),
    ("gradient", lambda mp: inject_inf_gradient(mp, 9), 13),
])
def test_a_planted_nan_rolls_back_with_a_lower_lr_and_the_run_finishes(
        quantity, plant, bad_step, tiny_store, tiny_toml, tmp_path, monkeypatch, capsys):
    run = tmp_path / "run"
    plant(monkeypatch)
    assert train("--store", tiny_store.path, "--config", tiny_toml, "--out", run) == 0
    [rb] = rollbacks(run)
    base_lr = read_metrics(run / "metrics.jsonl")[0]["config"]["learner"]["lr"]
    assert (rb["step"], rb["quantity"], rb["to_step"]) == (bad_step, quantity, 10)
    assert rb["lr"] == pytest.approx(base_lr * 0.5)
    assert f"{quantity} not finite at step {bad_step}" in capsys.readouterr().err
    records = read_metrics(run / "metrics.jsonl")
    assert [r["step"] for r in records if r["event"] == "metrics"] == [5, 10, 15, 20]
    assert records[-1]["event"] == "run_end"
    final = load_payload(list_checkpoints(run)[-1])
    assert final["step"] == 20 and final["rollbacks"] == 1
    assert float(final["optimizer"]["lr"]) == pytest.approx(base_lr * 0.5)
    assert all(torch.isfinite(t).all() for t in final["online"].values())


def test_a_nan_before_the_first_checkpoint_restarts_from_step_zero(tiny_store, tiny_toml,
                                                                   tmp_path, monkeypatch):
    run = tmp_path / "run"
    inject_after_step(monkeypatch, 6, _spoil_parameter)
    assert train("--store", tiny_store.path, "--config", tiny_toml, "--out", run) == 0
    [rb] = rollbacks(run)
    assert (rb["step"], rb["quantity"], rb["to_step"]) == (6, "parameter", 0)
    records = read_metrics(run / "metrics.jsonl")
    assert records[0]["event"] == "run_start"
    assert [r["step"] for r in records if r["event"] == "metrics"] == [5, 10, 15, 20]


def test_deferred_log_readouts_write_the_records_and_rollbacks_of_immediate_ones(
        tiny_store, tiny_toml, tmp_path, monkeypatch):
    # a log step's readout is finished after the next step (readout.py); at log_every = 1 a
    # readout is pending at every step, the one taken beside a rollback too: every step's
    # record is written once, the rolled-back ones again after the rollback
    run = tmp_path / "run"
    with monkeypatch.context() as mp:
        inject_after_step(mp, 13, _spoil_parameter)
        assert train("--store", tiny_store.path, "--config", tiny_toml, "--out", run,
                     "--set", "train.log_every=1") == 0
    [rb] = rollbacks(run)
    assert (rb["step"], rb["quantity"], rb["to_step"]) == (13, "parameter", 10)
    steps = [r["step"] for r in read_metrics(run / "metrics.jsonl") if r["event"] == "metrics"]
    assert steps == list(range(1, 21))


def test_a_log_steps_readout_is_finished_after_the_next_step(tiny_store, tiny_toml, tmp_path,
                                                              monkeypatch):
    from lobsurf.training.run.readout import Readout

    calls, finished = {"n": 0}, {}
    real_step, real_finish = run_step.train_step, Readout.finish

    def step(*args, **kwargs):
        real_step(*args, **kwargs)
        calls["n"] += 1

    def finish(self):
        finished.setdefault(self.step, calls["n"])
        return real_finish(self)
    monkeypatch.setattr(run_step, "train_step", step)
    monkeypatch.setattr(Readout, "finish", finish)
    assert train("--store", tiny_store.path, "--config", tiny_toml, "--out", tmp_path / "r") == 0
    # log every 5, checkpoint every 10 (finished at once: a checkpoint needs the guard)
    assert finished == {5: 6, 10: 10, 15: 16, 20: 20}


def test_past_max_rollbacks_the_run_stops_with_a_clear_message(tiny_store, tiny_toml, tmp_path,
                                                               monkeypatch, capsys):
    run = tmp_path / "run"
    inject_after_step(monkeypatch, 12, _spoil_parameter, times=FOREVER)
    assert train("--store", tiny_store.path, "--config", tiny_toml, "--out", run,
                 "--set", "train.max_rollbacks=2") == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "training diverged: parameter not finite" in err and "after 2 rollbacks" in err
    events = [r["event"] for r in read_metrics(run / "metrics.jsonl")]
    assert events.count("rollback") == 2 and events[-1] == "diverged"
    lrs = [r["lr"] for r in rollbacks(run)]
    assert lrs[1] == pytest.approx(lrs[0] * 0.5)  # each rollback lowers the lr again
    assert load_payload(list_checkpoints(run)[-1])["step"] == 10  # the good one is kept


def test_the_guard_makes_no_host_sync_and_names_the_first_bad_step(tiny_setup):
    cfg, data, state, scfg = tiny_setup
    guard = DivergenceGuard("cpu")
    with no_host_sync():
        for step in range(10):
            train_step(state, data.train_book, scfg, learning=step >= 4)
            if step == 6:
                _spoil_parameter(state)
            guard.check_(state)
    assert guard.read() == (7, "parameter")
    guard.reset_()
    assert guard.read() is None


def test_the_target_network_is_checked_where_the_guard_is_read(tiny_setup):
    cfg, data, state, scfg = tiny_setup
    guard = DivergenceGuard("cpu")
    for step in range(6):
        train_step(state, data.train_book, scfg, learning=step >= 4)
        guard.check_(state)
    _spoil_target(state)
    guard.check_(state)  # per step: the online network only (guard docstring)
    assert guard.read() is None
    assert guard.read(state) == (6, "parameter")


@pytest.mark.parametrize("compiled", [False, True])
def test_the_guard_names_the_earliest_quantity_compiled_or_not(tiny_setup, compiled):
    # lobsurf train compiles the guard's arithmetic (compile_guard_) with the step: either
    # way a spoiled controller, parameter, gradient or loss is named, and when several go
    # bad in one step the earliest in causal order (loss, gradient, parameter, controller)
    from lobsurf.training.speed.compile import CompileConfig, compile_guard_

    cfg, data, state, scfg = tiny_setup
    for step in range(6):
        train_step(state, data.train_book, scfg, learning=step >= 4)
    nan = float("nan")
    spoils = [("controller", lambda st: st.controllers.sac_alpha.fill_(nan)),
              ("parameter", _spoil_parameter),
              ("gradient", lambda st: next(p.grad for p in st.online.parameters()
                                           if p.grad is not None).view(-1)[0].fill_(nan)),
              ("loss", lambda st: st.metrics.loss_q.fill_(nan))]
    for count in range(1, len(spoils) + 1):
        guard = DivergenceGuard("cpu")
        if compiled:
            compile_guard_(guard, CompileConfig(options=()))
        twin = copy.deepcopy(state)
        if twin.optimizer.flat is None:  # a flat twin keeps its gradient buffer's views
            for mine, theirs in zip(twin.online.parameters(), state.online.parameters()):
                mine.grad = None if theirs.grad is None else theirs.grad.clone()  # dropped
        guard.check_(twin)
        assert guard.read() is None
        for _name, spoil in spoils[:count]:
            spoil(twin)
        twin.step_count.fill_(9)
        guard.check_(twin)
        assert guard.read() == (9, spoils[count - 1][0])
