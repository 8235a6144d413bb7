"""The production step (``lobsurf.agent.step``) equals the readable reference step
(``lobsurf.agent.reference``) from one seed, on CPU in fp32.

Checked after every step: the actions, rows and agent states written to replay exactly; the
stored rewards, the replay's sampling weights, every controller and every metric sum (the
losses among them) to float32 rounding; the online and target parameters within
``PARAM_ATOL`` after the last step (the two sum the same terms in other orders, so they
differ by rounding: about 1e-6 after 30 steps). The run is set up so that everything
fires: the gates (a short warm-up), closed trades and their outcome labels, learning steps
with importance weights that are not all one. The last tests plant a bug in one side and
check that the comparison catches it.
"""

from __future__ import annotations


import pytest
import torch

from lobsurf.agent.reference import reference_step
from lobsurf.agent.step import train_step
from lobsurf.training.data import load_training_data
from lobsurf.training.run.state import build_state, step_config
from tests.agent.conftest import tiny_config

#: steps each side runs (TINY's learning starts after 4)
STEPS = 30
#: online and target parameters may differ by this much after STEPS steps (rounding only)
PARAM_ATOL = 1e-5
#: stored rewards, sampling weights, controllers: relative tolerance (float32 rounding)
VALUE_RTOL = 1e-5
#: metric sums (losses summed over steps): relative tolerance
METRIC_RTOL = 1e-4


def _pair(store, **sections):
    cfg = tiny_config(store.path, **{"gates": {"warmup_steps": 2}, **sections})
    data = load_training_data(cfg, "cpu", store.path)
    return (data, build_state(cfg, data, "cpu"), build_state(cfg, data, "cpu"),
            step_config(cfg), cfg)


def _compare(fast, ref, step: int) -> None:
    for name, a in fast.replay.storage.stored().items():
        b = getattr(ref.replay.storage, name)
        if a.dtype.is_floating_point:
            torch.testing.assert_close(b, a, rtol=VALUE_RTOL, atol=1e-7,
                                       msg=f"step {step}: replay {name}")
        else:
            assert torch.equal(a, b), f"step {step}: replay {name} differs"
    torch.testing.assert_close(ref.replay.weight, fast.replay.weight, rtol=VALUE_RTOL, atol=0,
                               msg=f"step {step}: sampling weights")
    for name, a in fast.controllers.as_dict().items():
        torch.testing.assert_close(getattr(ref.controllers, name), a, rtol=VALUE_RTOL,
                                   atol=1e-9, msg=f"step {step}: controller {name}")
    for name, a in fast.metrics.as_dict().items():
        torch.testing.assert_close(getattr(ref.metrics, name), a, rtol=METRIC_RTOL, atol=1e-6,
                                   msg=f"step {step}: metric sum {name}")


def _run_both(store, steps: int = STEPS, **sections):
    data, fast, ref, scfg, cfg = _pair(store, **sections)
    weights_below_one = False
    for step in range(steps):
        learning = step >= cfg.learner.learning_starts
        train_step(fast, data.train_book, scfg, learning)
        done = reference_step(ref, data.train_book, scfg, learning)
        assert torch.equal(done["action"], fast.replay.storage.action[
            (fast.replay.pointer - scfg.num_envs + torch.arange(scfg.num_envs))
            % fast.replay.capacity]), f"step {step}: actions differ"
        _compare(fast, ref, step)
        weights_below_one |= bool(learning and fast.replay.weight.unique().numel() > 2)
    for name, net in (("online", "online"), ("target", "target")):
        for (pname, a), b in zip(getattr(fast, net).named_parameters(),
                                 getattr(ref, net).parameters()):
            torch.testing.assert_close(b, a, rtol=0, atol=PARAM_ATOL, msg=f"{name} {pname}")
    return fast, weights_below_one


def test_reference_equals_the_production_step(tiny_store):
    fast, varied = _run_both(tiny_store)
    sums = fast.metrics
    assert float(sums.gated) > 0, "no gate fired: the gates are untested"
    assert float(sums.trades) > 0, "no trade closed: rewards and outcomes are untested"
    assert bool(fast.replay.storage.outcome_valid.any()), "no outcome label written"
    assert float(sums.learn_steps) == STEPS - 4
    assert varied, "every sampling weight equal: the importance weights are untested"


def test_reference_equals_the_production_step_with_n_step_returns(tiny_store):
    _run_both(tiny_store, steps=16, learner={"n_step": 3, "learning_starts": 4})


def test_a_production_loss_without_importance_weights_is_caught(tiny_store, monkeypatch):
    """The planted bug: the production C51 loss drops the importance weights."""
    from lobsurf.agent import step as step_module

    eager = step_module.eager_kernels

    def planted():
        kernels = eager()
        right = kernels.loss_terms

        def unweighted(out, target, target_mean_s, z, t, weight, *rest):
            return right(out, target, target_mean_s, z, t, torch.ones_like(weight), *rest)

        kernels.loss_terms = unweighted
        return kernels

    monkeypatch.setattr("lobsurf.training.run.state.eager_kernels", planted)
    with pytest.raises(AssertionError, match="loss_q|weights|parameter|online"):
        _run_both(tiny_store, steps=12)


def test_production_acting_by_the_argmax_of_the_mean_is_caught(tiny_store, monkeypatch):
    """The planted bug: Thompson sampling replaced by the argmax of E[Q]."""
    from lobsurf.agent import collect

    def argmax_of_mean(probs, z, u):
        return (probs * z).sum(-1).argmax(-1)

    monkeypatch.setattr(collect, "thompson_from_uniforms", argmax_of_mean)
    with pytest.raises(AssertionError, match="actions differ"):
        _run_both(tiny_store, steps=8)


def test_a_reference_projection_bug_is_caught(tiny_store, monkeypatch):
    """The planted bug, on the reference's side: the C51 target shifted by one atom."""
    from lobsurf.agent import reference

    right = reference._project
    monkeypatch.setattr(reference, "_project",
                        lambda p, r, d, z: right(p, r, d, z).roll(1, dims=-1))
    with pytest.raises(AssertionError, match="loss_q|weights|parameter|online"):
        _run_both(tiny_store, steps=8)


# ---- passive orders: posts, fills, cancels, the gates on posts --------------------------

#: the passive case: resting orders on; a short warm-up and a stricter FRD gate than the
#: market-only case's (on this market's one-tick spread it would seldom fire in 30 steps),
#: so the gates fire on posts too
PASSIVE = {"sim": {"passive_orders": True}, "gates": {"warmup_steps": 2, "frd_min_prob": 0.2}}


def test_reference_equals_the_production_step_with_passive_orders(passive_store):
    """Posts join queues and fill, cancels remove them, the gates block posts, and the
    resting orders enter the agent's state at s and s' (stored in replay): both steps
    still agree."""
    from types import SimpleNamespace

    store = SimpleNamespace(path=passive_store)
    data, fast, ref, scfg, cfg = _pair(store, **PASSIVE)
    names = cfg.sim.action_names
    posts = [i for i, n in enumerate(names) if n.startswith("post")]
    cancels = [i for i, n in enumerate(names) if n.startswith("cancel")]
    sent, gated_posts = torch.zeros(len(names), dtype=torch.int64), 0
    for step in range(STEPS):
        learning = step >= cfg.learner.learning_starts
        train_step(fast, data.train_book, scfg, learning)
        done = reference_step(ref, data.train_book, scfg, learning)
        assert torch.equal(done["action"], fast.replay.storage.action[
            (fast.replay.pointer - scfg.num_envs + torch.arange(scfg.num_envs))
            % fast.replay.capacity]), f"step {step}: actions differ"
        _compare(fast, ref, step)
        sent += torch.bincount(done["action"], minlength=len(names))
        gated_posts += int(torch.isin(done["proposed"][done["gated"]],
                                      torch.tensor(posts)).sum())
    for (pname, a), b in zip(fast.online.named_parameters(), ref.online.parameters()):
        torch.testing.assert_close(b, a, rtol=0, atol=PARAM_ATOL, msg=f"online {pname}")
    stats, storage = fast.env.passive_stats, fast.replay.storage
    assert int(sent[posts].sum()) > 0 and int(sent[cancels].sum()) > 0, "no post or cancel sent"
    assert int(stats.maker_lots.sum()) > 0, "no resting order filled"
    assert gated_posts > 0, "no gate fired on a post"
    assert bool((storage.bid_lots > 0).any() & (storage.next_ask_queue > 0).any()), \
        "no resting order in the agent's stored state"
    assert float(fast.metrics.trades) > 0


def test_a_production_s_prime_without_the_queue_fraction_is_caught(passive_store, monkeypatch):
    """The planted bug, on the production side: the learner's s' inputs lose the resting
    orders' queue fraction (zeros)."""
    from types import SimpleNamespace

    from lobsurf.agent import learn

    right = learn.stored_orders

    def forgetful(t, prefix="", index=None):
        orders = right(t, prefix, index)
        if prefix == "next_" and orders is not None:
            orders = orders._replace(queue_fraction=torch.zeros_like(orders.queue_fraction))
        return orders

    monkeypatch.setattr(learn, "stored_orders", forgetful)
    with pytest.raises(AssertionError, match="loss_q|weights|parameter|online|controller"):
        _run_both(SimpleNamespace(path=passive_store), steps=12, **PASSIVE)


def test_a_reference_that_gates_cancels_is_caught(passive_store, monkeypatch):
    """The planted bug, on the reference's side: a cancel is gated as a buy."""
    from types import SimpleNamespace

    from lobsurf.agent import reference

    right = reference._sides

    def cancels_buy(sim):
        return [1 if name.startswith("cancel") else side
                for name, side in zip(sim.action_names, right(sim))]

    monkeypatch.setattr(reference, "_sides", cancels_buy)
    with pytest.raises(AssertionError, match="actions differ"):
        _run_both(SimpleNamespace(path=passive_store), steps=STEPS, **PASSIVE)


def test_reference_equals_the_production_step_with_passive_orders_and_n_step_returns(
        passive_store):
    """The bootstrap's resting orders read from the replay storage at the m-th step on."""
    from types import SimpleNamespace

    _run_both(SimpleNamespace(path=passive_store), steps=16,
              learner={"n_step": 3, "learning_starts": 4}, **PASSIVE)
