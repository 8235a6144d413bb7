"""``lobsurf train`` with passive orders (``--set sim.passive_orders=true``): the store
without trades refused in one line, the action set and the agent's state that follow the
simulator, pi_ref, the rewards of resting fills, and the resting orders carried through
checkpoints: an exact resume, a rank's shard, a rollback."""

from __future__ import annotations

import math

import pytest
import torch

from lobsurf.cli import main
from lobsurf.training.data import load_training_data
from lobsurf.training.recovery.checkpoint import (checkpoint_path, checkpoint_payload,
                                                  list_checkpoints, load_payload,
                                                  restore_state_)
from lobsurf.training.recovery.rank_shards import restore_rank_, save_shard
from lobsurf.training.run.state import build_state, step_config
from lobsurf.agent.step import train_step
from tests.agent.conftest import tiny_config
from tests.training.test_train_command import _tensors, train

PASSIVE = ("--set", "sim.passive_orders=true")


def test_a_store_without_trades_is_refused_in_one_line(tiny_store, tiny_toml, tmp_path,
                                                       capsys):
    run = tmp_path / "run"
    assert train("--store", tiny_store.path, "--config", tiny_toml, "--out", run,
                 *PASSIVE) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "re-ingest" in err[0] and "passive orders" in err[0], err


def _passive_state(store, steps: int = 0, **sections):
    cfg = tiny_config(store, **{"sim": {"passive_orders": True}, **sections})
    data = load_training_data(cfg, "cpu", store)
    state, scfg = build_state(cfg, data, "cpu"), step_config(cfg)
    for step in range(steps):
        train_step(state, data.train_book, scfg, step >= cfg.learner.learning_starts)
    return cfg, data, state, scfg


def test_the_network_pi_ref_and_gates_follow_the_simulator(passive_store):
    cfg, _, state, _ = _passive_state(passive_store)
    assert cfg.sim.num_actions == 23 and state.online.num_actions == 23
    assert state.online.pi.in_features == cfg.encoder.d_model + 9  # 3 + 3 a side
    # pi_ref: Hold keeps its share, the 22 others split the rest
    p = state.tables.log_pi_ref.exp()
    hold = cfg.policy.reference_hold_prob
    assert math.isclose(float(p[0]), hold, rel_tol=1e-6)
    torch.testing.assert_close(p[1:], torch.full((22,), (1 - hold) / 22))
    # the gates' sides: buys and posted bids +1, sells and posted asks -1, Hold and cancels 0
    names = cfg.sim.action_names
    want = [1 if n.startswith(("buy", "post bid")) else -1 if n.startswith(("sell", "post ask"))
            else 0 for n in names]
    assert state.tables.action_side.tolist() == want


def test_resting_fills_reach_the_rewards_as_market_fills_do(passive_store):
    """The reward pipeline reads the simulator's realized PnL: the collect's net PnL sum is
    the envs' (resting fills included, their maker fees paid)."""
    _, _, state, _ = _passive_state(passive_store, steps=30, gates={"enabled": False})
    stats = state.env.passive_stats
    assert int(stats.maker_lots.sum()) > 0
    assert float(state.metrics.trades) == float(state.env.stats.trades.sum()) > 0
    torch.testing.assert_close(state.metrics.net_pnl.double(),
                               state.env.stats.net_pnl.sum(), rtol=1e-9, atol=1e-6)


def test_resume_with_passive_orders_is_bit_exact(passive_store, tiny_toml, tmp_path):
    straight, split = tmp_path / "straight", tmp_path / "split"
    common = ("--store", passive_store, "--config", tiny_toml, *PASSIVE)
    assert train(*common, "--out", straight) == 0
    assert train(*common, "--out", split, "--steps", 10) == 0
    assert train("--resume", split, "--steps", 20) == 0
    middle = load_payload(list_checkpoints(split)[0])
    assert middle["step"] == 10 and bool((middle["passive_state"]["remaining"] > 0).any()), \
        "no order rests at the checkpoint: the resume is untested"
    a = load_payload(list_checkpoints(straight)[-1])
    b = load_payload(list_checkpoints(split)[-1])
    ta, tb = dict(_tensors(a)), dict(_tensors(b))
    assert ta.keys() == tb.keys()
    assert {".passive_state.queue_ahead", ".passive_stats.maker_lots",
            ".replay.storage.next_bid_queue"} <= ta.keys()
    for key in ta:
        if not key.startswith((".config", ".meta")):
            assert torch.equal(ta[key], tb[key]), key


def _same_env(a, b) -> None:
    for part in ("state", "stats", "passive_state", "passive_stats"):
        for name, x in vars(getattr(a.env, part)).items():
            assert torch.equal(x, getattr(getattr(b.env, part), name)), f"{part}.{name}"
    for name, x in a.replay.storage.stored().items():
        assert torch.equal(x, getattr(b.replay.storage, name)), name


def test_a_rank_shard_and_a_rollback_carry_the_resting_orders(passive_store, tmp_path):
    cfg, data, state, _ = _passive_state(passive_store, steps=12)
    assert bool((state.env.passive_state.remaining > 0).any())
    payload = checkpoint_payload(state, 12, {}, 0, {})
    # rank 1's shard, read back into a fresh state of rank 1
    save_shard(tmp_path, state, 12, rank=1)
    fresh = build_state(cfg, data, "cpu", rank=1)
    assert restore_rank_(fresh, checkpoint_path(tmp_path, 12), payload, 1) == "shard"
    _same_env(state, fresh)
    # a rollback copies the whole checkpoint into the diverged state
    diverged = build_state(cfg, data, "cpu")
    restore_state_(diverged, payload)
    _same_env(state, diverged)


@pytest.mark.parametrize("part", ["passive_state", "passive_stats"])
def test_a_checkpoint_without_the_resting_orders_fails_its_restore(passive_store, part):
    """A checkpoint of a passive run that lacks the resting orders fails the restore loudly
    rather than resuming with no order resting."""
    cfg, data, state, _ = _passive_state(passive_store, steps=6)
    payload = checkpoint_payload(state, 6, {}, 0, {})
    del payload[part]
    with pytest.raises(KeyError):
        restore_state_(build_state(cfg, data, "cpu"), payload)


def test_validation_sweeps_the_agent_with_the_run_s_resting_orders(passive_store, monkeypatch):
    """The model choice's sweeps run in the run's simulator: the agent may post there (its
    Q made to favour posting a one-lot bid: the greedy agent posts, then holds its order)."""
    from lobsurf.training.selection import validate

    cfg, data, state, _ = _passive_state(passive_store, steps=6,
                                         data={"normalizer_rows": 500,
                                               "validation_fraction": 0.2})
    assert data.validation is not None
    post_bid = cfg.sim.action_names.index("post bid 1")
    with torch.no_grad():  # the top atom of "post bid 1" far above every other logit
        state.online.q_out.bias_mu.view(cfg.sim.num_actions, -1)[post_bid, -1] += 50.0
    swept = []
    right = validate.sweep

    def spy(book, rows, policies, sim, *rest):
        records, tiling = right(book, rows, policies, sim, *rest)
        swept.append((sim, records["agent"].step_action))
        return records, tiling

    monkeypatch.setattr(validate, "sweep", spy)
    validate.Validator(cfg, data, "cpu")(state)
    assert [sim.passive_orders for sim, _ in swept] == [True, True]
    for _, actions in swept:
        assert (actions == post_bid).mean() > 0.5


def test_the_queue_model_and_the_maker_fee_reach_the_run_s_simulator(passive_store):
    cfg, _, state, _ = _passive_state(
        passive_store, sim={"passive_orders": True, "queue_model": "probabilistic",
                            "queue_power": 2, "maker_fee_per_lot": -0.25})
    env = state.env
    assert (env.cfg.queue_model, env.cfg.queue_power) == ("probabilistic", 2)
    assert env.fees.maker == (-0.25, 0.0) and env.fees.maker_source != "default"
