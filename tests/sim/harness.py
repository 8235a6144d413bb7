"""Run the batched env and B reference envs side by side on the same actions and draws."""

from __future__ import annotations

from dataclasses import fields

import torch

from lobsurf.data.dataset import BookTensors
from lobsurf.sim import BatchedLobEnv, SimConfig
from lobsurf.sim.reference import ReferenceEnv
from lobsurf.sim.reference_passive import PassiveReferenceEnv

STATE_FIELDS = ("cursor", "stop", "episode_steps", "position", "trade_cash_ticks", "trade_fees",
                "time_in_trade", "unrealized_pnl")
RESULT_FIELDS = ("reward", "trade_closed", "episode_end", "filled_lots", "cash_flow_ticks", "fees")


def resting_orders(ref: ReferenceEnv) -> dict[str, list]:
    """A passive reference env's resting orders as the batched ``PassiveState`` holds them."""
    return {
        "remaining": [o.lots for o in ref.orders],
        "price_ticks": [o.price if o.lots else 0 for o in ref.orders],
        "queue_ahead": [o.queue if o.lots else 0.0 for o in ref.orders],
        "queue_fraction": list(ref.queue_fraction),
        "age": [o.age if o.lots else 0 for o in ref.orders],
        "filled": list(ref.filled_last),
    }


def compare_passive(env: BatchedLobEnv, refs: list[ReferenceEnv], t: int) -> None:
    """The resting orders and their stats of the batched env equal the references'."""
    want = [resting_orders(r) for r in refs]
    for f in fields(env.passive_state):
        got = getattr(env.passive_state, f.name).tolist()
        assert got == [w[f.name] for w in want], f"step {t} passive.{f.name}: {got} != " \
            f"{[w[f.name] for w in want]}"
    for f in fields(env.passive_stats):
        got = getattr(env.passive_stats, f.name).tolist()
        expected = [getattr(r.passive_stats, f.name) for r in refs]
        assert got == expected, f"step {t} passive_stats.{f.name}: {got} != {expected}"


def compare_runs(book: BookTensors, cfg: SimConfig, num_envs: int, actions: torch.Tensor
                 ) -> int:
    """Step both simulators through actions [T, B]; assert exact equality after every step
    (with passive orders, of the resting orders and their stats too).

    Returns the number of trades closed (so callers can check the run exercised trading).
    """
    return int(compared_env(book, cfg, num_envs, actions).stats.trades.sum())


def compared_env(book: BookTensors, cfg: SimConfig, num_envs: int, actions: torch.Tensor,
                 walk_kernel: bool = False) -> BatchedLobEnv:
    """``compare_runs``, returning the batched env after the run (its stats say what the
    run exercised). ``walk_kernel``: the resting orders' rows walked by the Triton kernel
    (lobsurf.sim.passive_triton; on CPU in Triton's interpreter)."""
    env = BatchedLobEnv(book, num_envs, cfg)
    if walk_kernel:
        env.tables = env.tables._replace(passive=env.tables.passive._replace(walk_kernel=True))
    draws = torch.Generator(device=book.device)
    draws.manual_seed(cfg.seed)  # the env's generator stream, replayed for the references

    def draw() -> list[int]:
        return torch.randint(env.total_cursors, (num_envs,), generator=draws,
                             device=book.device).tolist()

    env.reset()
    kind = PassiveReferenceEnv if cfg.passive_orders else ReferenceEnv
    refs = [kind.from_book(book, cfg) for _ in range(num_envs)]
    for ref, u in zip(refs, draw()):
        ref.reset(u)
    for t in range(actions.shape[0]):
        result = env.step(actions[t])
        us = draw()
        expected = [ref.step(int(a), u) for ref, a, u in zip(refs, actions[t].tolist(), us)]
        for name in RESULT_FIELDS:
            got = getattr(result, name).tolist()
            want = [getattr(e, name) for e in expected]
            assert got == want, f"step {t} {name}: {got} != {want}"
        for name in STATE_FIELDS:
            got = getattr(env.state, name).tolist()
            want = [getattr(r, name) for r in refs]
            assert got == want, f"step {t} state.{name}: {got} != {want}"
        if cfg.passive_orders:
            compare_passive(env, refs, t)
    for f in fields(env.stats):
        got = getattr(env.stats, f.name).tolist()
        want = [getattr(r.stats, f.name) for r in refs]
        assert got == want, f"stats.{f.name}: {got} != {want}"
    if cfg.passive_orders:
        compare_passive(env, refs, actions.shape[0])
    return env
