"""Prioritized experience replay on the device (Schaul et al. 2016, proportional variant).

Storage holds what is needed to rebuild a transition, never observation windows: the
dataset row of the state and of the next state, the agent's own state at both (position,
time in trade, unrealized PnL), the action, the reward (after the reward pipeline), done
(episode end) and trade_closed. The learner re-gathers the K-windows by row, so memory does
not grow with K.

Sampling draws i with probability P(i) = w_i / sum_j w_j, w = priority ** alpha, through a
float64 cumulative sum and ``searchsorted`` (measured far faster than ``torch.multinomial``
on the H200, and exact where a float32 sum would lose small priorities;
PERFORMANCE.md 3.7). Importance weights (N P(i)) ** -beta are divided by their batch max.
Priority write-back is deterministic with duplicate indices in one batch: a duplicated
entry keeps the largest of its new priorities (``scatter_reduce`` amax is order-free).

Every buffer is preallocated and updated in place; the ring pointer and the fill count are
0-d device tensors: no host sync, capture-ready.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch

from lobsurf.agent.config import ReplayConfig


@dataclass
class Transitions:
    """A batch of transitions, every field [B]."""

    row: torch.Tensor  # int64 dataset row of the state's newest snapshot
    position: torch.Tensor  # int64 lots
    time_in_trade: torch.Tensor  # int64 steps
    unrealized_pnl: torch.Tensor  # float64 currency
    action: torch.Tensor  # int64
    reward: torch.Tensor  # float32 reward units (scaled, clamped)
    done: torch.Tensor  # bool: the episode ended (terminal: no bootstrap)
    trade_closed: torch.Tensor  # bool: a trade closed (V's done-gate, outcome labels)
    next_row: torch.Tensor
    next_position: torch.Tensor
    next_time_in_trade: torch.Tensor
    next_unrealized_pnl: torch.Tensor
    outcome_valid: torch.Tensor  # bool: the trade this action opened has closed since
    outcome_win: torch.Tensor  # bool: ... with net PnL > 0


_DTYPES = {"unrealized_pnl": torch.float64, "next_unrealized_pnl": torch.float64,
           "reward": torch.float32, "done": torch.bool, "trade_closed": torch.bool,
           "outcome_valid": torch.bool,
           "outcome_win": torch.bool}


@dataclass
class NStepTarget:
    """ret [S] n-step return; discount [S] gamma ** m of the bootstrap (0 after an episode
    end); bootstrap_index [S] storage index whose next state is bootstrapped from."""

    ret: torch.Tensor
    discount: torch.Tensor
    bootstrap_index: torch.Tensor


@dataclass
class Sample:
    """A sampled batch: transitions, their storage indices [B] and importance weights [B]."""

    transitions: Transitions
    index: torch.Tensor
    weight: torch.Tensor


class PrioritizedReplay:
    """Ring storage of ``capacity`` transitions with proportional prioritized sampling."""

    def __init__(self, cfg: ReplayConfig, device: torch.device | str, seed: int) -> None:
        self.cfg, self.capacity = cfg, cfg.capacity
        c = cfg.capacity
        self.storage = Transitions(**{
            f.name: torch.zeros(c, dtype=_DTYPES.get(f.name, torch.int64), device=device)
            for f in fields(Transitions)})
        self.weight = torch.zeros(c, dtype=torch.float64, device=device)  # priority ** alpha
        self.pointer = torch.zeros((), dtype=torch.int64, device=device)
        self.size = torch.zeros((), dtype=torch.int64, device=device)
        self.max_priority = torch.ones((), dtype=torch.float64, device=device)
        self.generator = torch.Generator(device=device)
        self.generator.manual_seed(seed)
        self._arange_cache: dict[int, torch.Tensor] = {}

    def _arange(self, n: int) -> torch.Tensor:
        if n not in self._arange_cache:
            self._arange_cache[n] = torch.arange(n, device=self.weight.device)
        return self._arange_cache[n]

    def add(self, batch: Transitions) -> None:
        """Write B transitions at the ring pointer (new ones get the max priority seen)."""
        n = batch.row.shape[0]
        if n > self.capacity:
            raise ValueError(f"batch of {n} transitions exceeds replay capacity {self.capacity}")
        slots = (self.pointer + self._arange(n)) % self.capacity
        for f in fields(Transitions):
            getattr(self.storage, f.name).index_copy_(0, slots, getattr(batch, f.name))
        self.weight.index_fill_(0, slots, 0.0)
        self.weight.index_add_(0, slots, (self.max_priority ** self.cfg.alpha).expand(n))
        self.pointer.copy_((self.pointer + n) % self.capacity)
        self.size.copy_((self.size + n).clamp(max=self.capacity))

    def record_outcomes(self, pointer_before: torch.Tensor, time_in_trade: torch.Tensor,
                        closed: torch.Tensor, win: torch.Tensor) -> None:
        """Label the transitions that opened the trades closing this step.

        Each step writes B consecutive slots in env order, so env e's transition of
        ``time_in_trade`` steps ago sits at (pointer_before - time_in_trade * B + e) mod C,
        if not yet overwritten. Envs with nothing to label rewrite their own newest slot
        with its unchanged (False) labels, so no two envs write one slot.

        Args:
            pointer_before: 0-d ring pointer before this step's ``add``.
            time_in_trade: [B] int64 steps since the closing trade opened (at the state).
            closed: [B] bool trade closed this step. win: [B] bool with net PnL > 0.
        """
        b = closed.shape[0]
        env = self._arange(b)
        reachable = (time_in_trade >= 1) & (time_in_trade * b <= self.capacity - b)
        valid = closed & reachable
        opened = (pointer_before - time_in_trade * b + env) % self.capacity
        slots = torch.where(valid, opened, (pointer_before + env) % self.capacity)
        self.storage.outcome_valid.index_copy_(0, slots, valid)
        self.storage.outcome_win.index_copy_(0, slots, valid & win)

    def sample(self, n: int, beta: torch.Tensor) -> Sample:
        """Draw n indices with P(i) proportional to priority ** alpha (with replacement).

        Args:
            n: batch size.
            beta: 0-d importance-weight exponent (the per_beta controller).
        """
        cumulative = self.weight.cumsum(0)  # float64 [C]
        total = cumulative[-1]
        u = torch.rand(n, dtype=torch.float64, generator=self.generator,
                       device=self.weight.device) * total
        index = torch.searchsorted(cumulative, u, right=True).clamp_(max=self.capacity - 1)
        prob = self.weight[index] / total
        iw = (self.size.to(torch.float64) * prob).clamp(min=1e-300) ** -beta
        iw = iw / iw.max()
        batch = Transitions(**{f.name: getattr(self.storage, f.name)[index]
                               for f in fields(Transitions)})
        return Sample(transitions=batch, index=index, weight=iw.to(torch.float32))

    def update_priorities(self, index: torch.Tensor, loss: torch.Tensor) -> None:
        """Priority = |loss| + eps for the sampled entries (duplicates keep the max).

        Args:
            index: [B] int64 storage indices from ``sample``. loss: [B] per-sample loss.
        """
        priority = loss.detach().abs().to(torch.float64) + self.cfg.priority_eps
        self.weight.index_fill_(0, index, 0.0)
        self.weight.scatter_reduce_(0, index, priority ** self.cfg.alpha, reduce="amax")
        torch.maximum(self.max_priority, priority.max(), out=self.max_priority)

    def n_step_targets(self, index: torch.Tensor, n: int, gamma: float, writes_per_step: int
                       ) -> NStepTarget:
        """n-step return and bootstrap of the sampled transitions.

        Each step writes ``writes_per_step`` (B) consecutive slots in env order, so the same
        env's transition j steps later sits at (index + j B) mod C. The return stops after
        the first episode end (no bootstrap then) and at the newest step written (fewer
        steps, bootstrapped sooner).

        Args:
            index: [S] int64 storage indices from ``sample``.
            n: steps of the return. gamma: per-step discount.
            writes_per_step: B, transitions written per step.

        Returns:
            NStepTarget: return [S] float32, bootstrap discount [S] float32 (gamma ** m, 0
            after an episode end), and the storage index [S] whose next state bootstraps.
        """
        c = self.capacity
        newest = (self.pointer - 1) % c
        # whole steps written after each sampled one (the ring distance in steps)
        ahead = ((newest - index) % c) // writes_per_step  # [S]
        ret = torch.zeros(index.shape, dtype=torch.float32, device=index.device)
        alive = torch.ones(index.shape, dtype=torch.float32, device=index.device)
        last = index.clone()
        for j in range(n):  # n is static config: a fixed unrolled gather, no host branch
            slot = (index + j * writes_per_step) % c
            use = (ahead >= j).to(torch.float32) * alive
            ret = ret + use * (gamma ** j) * self.storage.reward[slot]
            last = torch.where(use > 0, slot, last)
            alive = alive * (1.0 - use * self.storage.done[slot].to(torch.float32))
        steps = torch.minimum(ahead + 1, torch.full_like(ahead, n))  # m
        discount = alive * torch.pow(torch.full_like(ret, gamma), steps.to(torch.float32))
        return NStepTarget(ret=ret, discount=discount, bootstrap_index=last)

    def state_dict(self) -> dict[str, torch.Tensor]:
        state = {f"storage.{f.name}": getattr(self.storage, f.name) for f in fields(Transitions)}
        state.update(weight=self.weight, pointer=self.pointer, size=self.size,
                     max_priority=self.max_priority, generator=self.generator.get_state())
        return state

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        for f in fields(Transitions):
            getattr(self.storage, f.name).copy_(state[f"storage.{f.name}"])
        for name in ("weight", "pointer", "size", "max_priority"):
            getattr(self, name).copy_(state[name])
        self.generator.set_state(state["generator"])
