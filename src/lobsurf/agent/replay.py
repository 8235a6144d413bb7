"""Prioritized experience replay on the device (Schaul et al. 2016, proportional variant).

Storage holds what is needed to rebuild a transition, never observation windows: the
dataset row of the state and of the next state, the agent's own state at both (position,
time in trade, unrealized PnL), the action, the reward (after the reward pipeline), done
(episode end) and trade_closed. The learner re-gathers the K-windows by row, so memory does
not grow with K. The fields are packed by dtype (``lobsurf.agent.transitions.PACKING``: four
[C, k] tensors, a field a column; ``storage`` holds the columns as views), so a step's write
and a sample's gather are a kernel per dtype rather than per field.

Sampling draws i with probability P(i) = w_i / sum_j w_j, w = priority ** alpha, through a
float64 cumulative sum and ``searchsorted`` (measured far faster than ``torch.multinomial``
on the H200, and exact where a float32 sum would lose small priorities;
PERFORMANCE.md 3.7). Importance weights (N P(i)) ** -beta are divided by their batch max.
Priority write-back is deterministic with duplicate indices in one batch: a duplicated
entry keeps the largest of its new priorities (``scatter_reduce`` amax is order-free).

Every buffer is preallocated and updated in place; the ring pointer and the fill count are
0-d device tensors: no host sync, capture-ready. The arithmetic around the writes and the
sampling (ring slots, outcome slots, the cumulative sum, importance weights, the gathers,
n-step returns) is in pure functions (``write_plan``, ``sample_values``, ``priority_values``,
``n_step_values``) that the training step compiles (lobsurf.agent.step.StepKernels); the
methods run them eagerly and do the in-place writes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import NamedTuple

import torch

from lobsurf.agent.config import ReplayConfig
from lobsurf.agent.transitions import PACKING, Transitions, pack, unpack
from lobsurf.writeback import copy_values_


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


class WritePlan(NamedTuple):
    """What one step writes into replay and where (``write_plan``): rows, the transitions
    packed (``pack``); slots [B] their ring slots (env order); weight 0-d their sampling
    weight; outcome_slots [B] and outcome_labels [B, 2] (valid, win) the outcome labels;
    pointer and size 0-d the ring's new pointer and fill count."""

    rows: tuple[torch.Tensor, ...]
    slots: torch.Tensor
    weight: torch.Tensor
    outcome_slots: torch.Tensor
    outcome_labels: torch.Tensor
    pointer: torch.Tensor
    size: torch.Tensor


def ring_slots(pointer: torch.Tensor, env: torch.Tensor, capacity: int) -> torch.Tensor:
    """[B] the next B ring slots from ``pointer``; env: [B] arange(B)."""
    return (pointer + env) % capacity


def outcome_targets(pointer_before: torch.Tensor, env: torch.Tensor,
                    time_in_trade: torch.Tensor, closed: torch.Tensor, win: torch.Tensor,
                    capacity: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(slots, valid, win) [B] of the outcome labels a step writes (``record_outcomes``;
    env: [B] arange(B))."""
    b = closed.shape[0]
    reachable = (time_in_trade >= 1) & (time_in_trade * b <= capacity - b)
    valid = closed & reachable
    opened = (pointer_before - time_in_trade * b + env) % capacity
    slots = torch.where(valid, opened, (pointer_before + env) % capacity)
    return slots, valid, valid & win


def write_plan(pointer: torch.Tensor, size: torch.Tensor, max_priority: torch.Tensor,
               batch: Transitions, win: torch.Tensor, capacity: int, alpha: float
               ) -> WritePlan:
    """The plan of ``PrioritizedReplay.add(batch)`` then ``record_outcomes`` of the trades
    that closed in it (pure).

    Args:
        pointer, size, max_priority: the ring's 0-d pointer, fill count and max priority.
        batch: the step's B transitions. win: [B] bool, the closed trade's net PnL > 0.
    """
    n = win.shape[0]
    env = torch.arange(n, device=win.device)
    outcome_slots, valid, won = outcome_targets(pointer, env, batch.time_in_trade,
                                                batch.trade_closed, win, capacity)
    return WritePlan(rows=pack(batch), slots=ring_slots(pointer, env, capacity),
                     weight=max_priority ** alpha, outcome_slots=outcome_slots,
                     outcome_labels=torch.stack((valid, won), 1),
                     pointer=(pointer + n) % capacity, size=(size + n).clamp(max=capacity))


def sample_values(weight: torch.Tensor, size: torch.Tensor, packs: tuple[torch.Tensor, ...],
                  u: torch.Tensor, beta: torch.Tensor, pointer: torch.Tensor | None = None,
                  reserved: int = 0) -> Sample:
    """A prioritized sample from uniforms (pure; ``PrioritizedReplay.sample``): ``draw_values``
    then ``sample_at``.

    Args:
        weight: [C] float64 priority ** alpha. size: 0-d fill count.
        packs: the [C, k] packed storage (``PACKING``). u: [n] float64 uniforms in [0, 1).
        beta: 0-d importance-weight exponent.
        pointer, reserved: the ``reserved`` ring slots from ``pointer`` on (the next write's)
            are never drawn: a sample taken before a write must not hold a slot that the
            write replaces (its priority update would land on the new transition).
    """
    index, prob = draw_values(weight, u, pointer, reserved)
    return sample_at(index, prob, size, packs, beta)


def draw_values(weight: torch.Tensor, u: torch.Tensor, pointer: torch.Tensor | None = None,
                reserved: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """The draw of ``sample_values`` (pure): [n] int64 storage indices and [n] float64 their
    probabilities P(i), from [n] float64 uniforms ``u``."""
    capacity = weight.shape[0]
    if reserved:
        ahead = (torch.arange(capacity, device=weight.device) - pointer) % capacity
        weight = torch.where(ahead < reserved, 0.0, weight)
    cumulative = weight.cumsum(0)  # float64 [C]
    total = cumulative[-1]
    index = torch.searchsorted(cumulative, u * total, right=True).clamp_(max=capacity - 1)
    return index, weight[index] / total


def sample_at(index: torch.Tensor, prob: torch.Tensor, size: torch.Tensor,
              packs: tuple[torch.Tensor, ...], beta: torch.Tensor) -> Sample:
    """The sample of drawn indices (pure): their transitions, and importance weights
    (size P(i)) ** -beta over their batch max."""
    iw = (size.to(torch.float64) * prob).clamp(min=1e-300) ** -beta
    iw = iw / iw.max()
    batch = unpack(tuple(packed[index] for packed in packs))
    return Sample(transitions=batch, index=index, weight=iw.to(torch.float32))


def priority_values(loss: torch.Tensor, max_priority: torch.Tensor, cfg: ReplayConfig
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """([B] float64 sampling weights (|loss| + eps) ** alpha, the new 0-d max priority)."""
    priority = _priority(loss, cfg)
    return priority ** cfg.alpha, torch.maximum(max_priority, priority.max())


def priority_weight(loss: torch.Tensor, cfg: ReplayConfig) -> torch.Tensor:
    """The first of ``priority_values`` alone: [B] float64 (|loss| + eps) ** alpha."""
    return _priority(loss, cfg) ** cfg.alpha


def _priority(loss: torch.Tensor, cfg: ReplayConfig) -> torch.Tensor:
    return loss.detach().abs().to(torch.float64) + cfg.priority_eps


def n_step_values(reward: torch.Tensor, done: torch.Tensor, pointer: torch.Tensor,
                  index: torch.Tensor, n: int, gamma: float, writes_per_step: int
                  ) -> NStepTarget:
    """``PrioritizedReplay.n_step_targets`` over the storage's [C] reward and done (pure)."""
    c = reward.shape[0]
    newest = (pointer - 1) % c
    # whole steps written after each sampled one (the ring distance in steps)
    ahead = ((newest - index) % c) // writes_per_step  # [S]
    ret = torch.zeros(index.shape, dtype=torch.float32, device=index.device)
    alive = torch.ones(index.shape, dtype=torch.float32, device=index.device)
    last = index.clone()
    for j in range(n):  # n is static config: a fixed unrolled gather, no host branch
        slot = (index + j * writes_per_step) % c
        use = (ahead >= j).to(torch.float32) * alive
        ret = ret + use * (gamma ** j) * reward[slot]
        last = torch.where(use > 0, slot, last)
        alive = alive * (1.0 - use * done[slot].to(torch.float32))
    steps = torch.minimum(ahead + 1, torch.full_like(ahead, n))  # m
    discount = alive * torch.pow(torch.full_like(ret, gamma), steps.to(torch.float32))
    return NStepTarget(ret=ret, discount=discount, bootstrap_index=last)


#: ``sample_values`` or a compiled copy of it
SampleFunction = Callable[..., Sample]


@dataclass
class DrawnAhead:
    """A draw made for the next learning step (``PrioritizedReplay.draw_ahead_``): [n] int64
    storage indices and [n] float64 their probabilities, written in place; ``ready`` (host)
    while they are the draw the next sample must use."""

    index: torch.Tensor
    prob: torch.Tensor
    ready: bool = False


class PrioritizedReplay:
    """Ring storage of ``capacity`` transitions with proportional prioritized sampling."""

    def __init__(self, cfg: ReplayConfig, device: torch.device | str, seed: int) -> None:
        self.cfg, self.capacity = cfg, cfg.capacity
        c = cfg.capacity
        self.packs = tuple(torch.zeros(c, len(names), dtype=dtype, device=device)
                           for dtype, names in PACKING)
        self.storage = unpack(self.packs)  # [C] views of the packs, a field each
        self.weight = torch.zeros(c, dtype=torch.float64, device=device)  # priority ** alpha
        self.pointer = torch.zeros((), dtype=torch.int64, device=device)
        self.size = torch.zeros((), dtype=torch.int64, device=device)
        self.max_priority = torch.ones((), dtype=torch.float64, device=device)
        self.generator = torch.Generator(device=device)
        self.generator.manual_seed(seed)
        self._arange_cache: dict[int, torch.Tensor] = {}
        self.ahead: DrawnAhead | None = None
        """The draw of the next sample, made ahead (``draw_ahead_``); None until the first."""

    def _arange(self, n: int) -> torch.Tensor:
        if n not in self._arange_cache:
            self._arange_cache[n] = torch.arange(n, device=self.weight.device)
        return self._arange_cache[n]

    def _check_batch(self, n: int) -> None:
        if n > self.capacity:
            raise ValueError(f"batch of {n} transitions exceeds replay capacity {self.capacity}")

    def _store_(self, rows: tuple[torch.Tensor, ...], slots: torch.Tensor,
                weight: torch.Tensor) -> None:
        """Packed transitions (``pack``) into their slots, each with sampling weight
        ``weight`` (0-d)."""
        for packed, new in zip(self.packs, rows):
            packed.index_copy_(0, slots, new)
        # slots are distinct: a copy (the weight > 0, so it equals a fill with 0 then an add)
        self.weight.index_copy_(0, slots, weight.expand(slots.shape[0]))

    def _label_(self, slots: torch.Tensor, labels: torch.Tensor) -> None:
        """[B, 2] (valid, win) outcome labels into their slots (``transitions.OUTCOME_FIELDS``)."""
        outcomes = self.packs[[d for d, _ in PACKING].index(torch.bool)][:, -2:]
        outcomes.index_copy_(0, slots, labels)

    def add(self, batch: Transitions) -> None:
        """Write B transitions at the ring pointer (new ones get the max priority seen)."""
        n = batch.row.shape[0]
        self._check_batch(n)
        self._store_(pack(batch), ring_slots(self.pointer, self._arange(n), self.capacity),
                     self.max_priority ** self.cfg.alpha)
        copy_values_([(self.pointer, (self.pointer + n) % self.capacity),
                      (self.size, (self.size + n).clamp(max=self.capacity))])

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
        slots, valid, won = outcome_targets(pointer_before, self._arange(closed.shape[0]),
                                            time_in_trade, closed, win, self.capacity)
        self._label_(slots, torch.stack((valid, won), 1))

    def plan(self, batch: Transitions, win: torch.Tensor) -> WritePlan:
        """``write_plan`` of this ring for one step (``batch``; ``win`` [B] the closed
        trades' net PnL > 0)."""
        return write_plan(self.pointer, self.size, self.max_priority, batch, win,
                          self.capacity, self.cfg.alpha)

    def write_(self, plan: WritePlan) -> None:
        """``add`` then ``record_outcomes`` by a ``write_plan`` (``plan`` or compiled)."""
        self._check_batch(plan.slots.shape[0])
        self._store_(plan.rows, plan.slots, plan.weight)
        self._label_(plan.outcome_slots, plan.outcome_labels)
        copy_values_([(self.pointer, plan.pointer), (self.size, plan.size)])

    def sample(self, n: int, beta: torch.Tensor, kernel: SampleFunction = sample_values,
               reserved: int = 0) -> Sample:
        """Draw n indices with P(i) proportional to priority ** alpha (with replacement).

        Args:
            n: batch size.
            beta: 0-d importance-weight exponent (the per_beta controller).
            kernel: ``sample_values`` or a compiled copy of it.
            reserved: leave out the next ``reserved`` ring slots (those the next write of
                that many transitions fills); 0 = draw from every slot.
        """
        return kernel(self.weight, self.size, self.packs, self._uniforms(n), beta,
                      self.pointer, reserved)

    def _uniforms(self, n: int) -> torch.Tensor:
        """[n] float64 uniforms in [0, 1) from the replay's generator: a draw's, made now or
        ahead (so both take the same numbers)."""
        return torch.rand(n, dtype=torch.float64, generator=self.generator,
                          device=self.weight.device)

    def _hold_ahead(self, like_index: torch.Tensor, like_prob: torch.Tensor) -> DrawnAhead:
        """``ahead``, made (on this replay's device) where it is missing or of another n."""
        if self.ahead is None or self.ahead.index.shape != like_index.shape:
            device = self.weight.device
            self.ahead = DrawnAhead(torch.empty_like(like_index, device=device),
                                    torch.empty_like(like_prob, device=device))
        return self.ahead

    def draw_ahead_(self, n: int, reserved: int = 0,
                    kernel: Callable[..., tuple[torch.Tensor, torch.Tensor]] = draw_values
                    ) -> None:
        """Draw the next sample's n indices now, as ``sample`` would draw them (the same
        uniforms from the same generator), into ``ahead``; ``sample_drawn`` completes it.
        Sound only while nothing writes the weights, the ring pointer or the fill count
        between the two (lobsurf.agent.step draws each learning step's sample ahead)."""
        index, prob = kernel(self.weight, self._uniforms(n), self.pointer, reserved)
        ahead = self._hold_ahead(index, prob)
        copy_values_([(ahead.index, index), (ahead.prob, prob)])
        ahead.ready = True

    def sample_drawn(self, beta: torch.Tensor,
                     kernel: Callable[..., Sample] = sample_at) -> Sample:
        """The sample of the draw made ahead (``draw_ahead_``), its importance weights with
        ``beta`` as it is now; the draw stays ``ready`` until ``discard_ahead``, so the
        caller draws the next one or discards it."""
        if self.ahead is None or not self.ahead.ready:
            raise RuntimeError("no draw made ahead to sample from (draw_ahead_ first)")
        return kernel(self.ahead.index, self.ahead.prob, self.size, self.packs, beta)

    @property
    def drawn_ahead(self) -> bool:
        """Whether a draw made ahead waits for the next sample."""
        return self.ahead is not None and self.ahead.ready

    def discard_ahead(self) -> None:
        """Forget the draw made ahead (a write without a draw after it makes it stale)."""
        if self.ahead is not None:
            self.ahead.ready = False

    def write_priorities_(self, index: torch.Tensor, weight: torch.Tensor,
                          max_priority: torch.Tensor | None = None) -> None:
        """Sampling weights [B] (``priority_values``) into the sampled entries: a duplicated
        entry keeps the largest (an amax over its writes alone, as every weight is > 0);
        ``max_priority`` (0-d) too when given."""
        self.weight.scatter_reduce_(0, index, weight, reduce="amax", include_self=False)
        if max_priority is not None:
            copy_values_([(self.max_priority, max_priority)])

    def update_priorities(self, index: torch.Tensor, loss: torch.Tensor) -> None:
        """Priority = |loss| + eps for the sampled entries (duplicates keep the max).

        Args:
            index: [B] int64 storage indices from ``sample``. loss: [B] per-sample loss.
        """
        self.write_priorities_(index, *priority_values(loss, self.max_priority, self.cfg))

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
        return n_step_values(self.storage.reward, self.storage.done, self.pointer, index, n,
                             gamma, writes_per_step)

    def state_dict(self) -> dict[str, torch.Tensor]:
        state = {f"storage.{f.name}": getattr(self.storage, f.name) for f in fields(Transitions)}
        state.update(weight=self.weight, pointer=self.pointer, size=self.size,
                     max_priority=self.max_priority, generator=self.generator.get_state())
        if self.drawn_ahead:  # the generator has moved past it: a resume must reuse it
            state.update({"ahead.index": self.ahead.index, "ahead.prob": self.ahead.prob})
        return state

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        for f in fields(Transitions):
            getattr(self.storage, f.name).copy_(state[f"storage.{f.name}"])
        for name in ("weight", "pointer", "size", "max_priority"):
            getattr(self, name).copy_(state[name])
        self.generator.set_state(state["generator"])
        if "ahead.index" in state:
            ahead = self._hold_ahead(state["ahead.index"], state["ahead.prob"])
            ahead.index.copy_(state["ahead.index"])
            ahead.prob.copy_(state["ahead.prob"])
            ahead.ready = True
        else:
            self.discard_ahead()
