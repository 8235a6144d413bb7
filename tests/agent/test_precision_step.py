"""train.precision in the real step: bf16 autocast reaches every network forward (acting,
target, online) and nothing past the heads; losses stay fp32 and close to the fp32 step's."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import lobsurf.agent.collect as collect_module
import lobsurf.agent.learn as learn_module
from lobsurf.agent.collect import collect
from lobsurf.agent.learn import losses
from lobsurf.agent.step import train_step


def _record_dtypes(state) -> list[tuple[str, torch.dtype]]:
    """(network, dtype of its first Mamba2 block's mixer output, the out-projection's) for
    every forward (the projections are F.linear calls on their weights, padded or with the
    norms' weights folded in: models/align.py, models/mamba2.py, not module calls)."""
    seen: list[tuple[str, torch.dtype]] = []
    for name in ("online", "target"):
        net = getattr(state, name)
        net.encoder.blocks[0].mixer.register_forward_hook(
            lambda mod, args, out, name=name: seen.append((name, out.dtype)))
    return seen


@pytest.mark.parametrize("precision,dtype", [("fp32", torch.float32), ("bf16", torch.bfloat16)])
def test_every_forward_runs_in_the_chosen_precision(tiny_setup, monkeypatch, precision,
                                                    dtype):
    _cfg, data, state, scfg = tiny_setup
    past_heads: list[tuple[str, torch.dtype]] = []  # what acting and the losses receive

    def spy(module, name, pick):
        fn = getattr(module, name)

        def wrapped(*args, **kwargs):
            past_heads.append((name, pick(*args).dtype))
            return fn(*args, **kwargs)
        monkeypatch.setattr(module, name, wrapped)

    # acting takes the heads' outputs to fp32 inside its kernel: its sampler's
    # probabilities and uniforms and the gates' FRD logits must be fp32
    # the sampler's probabilities and uniforms: whichever is not fp32, if one is not
    spy(collect_module, "thompson_from_uniforms",
        lambda p, z, u: p if p.dtype != torch.float32 else u)
    spy(collect_module, "gate", lambda out, *rest: out.frd_logits)
    spy(learn_module, "categorical_cross_entropy", lambda logits, target: logits)
    spy(learn_module, "project_categorical", lambda p, *rest: p)
    spy(learn_module, "pi_loss", lambda logits, *rest: logits)
    spy(learn_module, "frd_loss", lambda logits, *rest: logits)
    scfg = dataclasses.replace(scfg, precision=precision)
    for _ in range(6):
        train_step(state, data.train_book, scfg, learning=False)
    past_heads.clear()
    seen = _record_dtypes(state)
    batch = collect(state, data.train_book, scfg)
    assert seen == [("online", dtype)]  # acting
    seen.clear()
    sample = state.replay.sample(scfg.batch_size, state.controllers.per_beta)
    ls = losses(state, data.train_book, sample, scfg)
    assert sorted(seen) == [("online", dtype), ("target", dtype)]
    assert batch.reward.dtype == torch.float32
    assert sorted(n for n, _ in past_heads) == sorted(
        ["thompson_from_uniforms", "gate", "categorical_cross_entropy", "project_categorical",
         "pi_loss", "frd_loss"])
    assert all(d == torch.float32 for _, d in past_heads), past_heads
    for name in ("total", "q", "q_per_sample", "pi", "value", "frd", "aux"):
        assert getattr(ls, name).dtype == torch.float32, name
        assert torch.isfinite(getattr(ls, name)).all(), name


def test_bf16_losses_and_gradients_are_close_to_fp32(tiny_setup):
    _cfg, data, state, scfg = tiny_setup
    for _ in range(8):
        train_step(state, data.train_book, scfg, learning=False)
    sample = state.replay.sample(scfg.batch_size, state.controllers.per_beta)

    def run(precision: str):
        state.online.zero_grad(set_to_none=True)
        ls = losses(state, data.train_book, sample, dataclasses.replace(scfg,
                                                                        precision=precision))
        ls.total.backward()
        grads = [p.grad.clone() for p in state.online.parameters() if p.grad is not None]
        return ls, grads

    full, g_full = run("fp32")
    half, g_half = run("bf16")
    assert all(g.dtype == torch.float32 for g in g_half)  # fp32 master weights and grads
    assert not torch.equal(full.q_per_sample, half.q_per_sample)  # bf16 really ran
    for name in ("q", "pi", "value", "frd", "aux"):
        a, b = getattr(full, name), getattr(half, name)
        assert abs(float(a) - float(b)) <= 0.03 * abs(float(a)) + 1e-3, name
    flat_full, flat_half = torch.cat([g.flatten() for g in g_full]), torch.cat(
        [g.flatten() for g in g_half])
    cos = torch.nn.functional.cosine_similarity(flat_full, flat_half, dim=0)
    assert float(cos) > 0.99
