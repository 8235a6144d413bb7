"""A trained agent as a ``lobsurf.backtest.policy.Policy``: ``act(env)`` reads the K-window at
each env's cursor (from the book's feature table when it has one) and the env's agent
state, runs the network, and picks actions.

Modes (``--policy``):
* ``greedy``: argmax over actions of E[Q] (the default for evaluation; deterministic);
* ``thompson``: one Thompson sample of Q per action, then the confidence and FRD gates with
  the run's final threshold (frozen: evaluation adapts nothing), every env gateable;
* ``pi``: a sample of the distilled policy pi.

Sampling modes draw from a generator seeded by the evaluation, so two evaluations of one
run agree exactly. Noisy layers evaluate at their mean weights (noise buffers zeroed).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

import torch

from lobsurf.agent.acting import greedy_actions, pi_actions, thompson_actions
from lobsurf.agent.collect import gate
from lobsurf.agent.config import GateConfig
from lobsurf.agent.controllers import ControllerState
from lobsurf.agent.distributional import support
from lobsurf.agent.network import AgentNetwork, agent_state_features
from lobsurf.agent.noisy import NoisyLinear
from lobsurf.agent.state import StepTables
from lobsurf.models.feature_table import book_window
from lobsurf.sim.env import BatchedLobEnv

PolicyMode = Literal["greedy", "thompson", "pi"]
POLICY_MODES = ("greedy", "thompson", "pi")


def mean_weights_(network: AgentNetwork) -> AgentNetwork:
    """Zero every noisy layer's noise: the network then acts with its mean weights."""
    for m in network.modules():
        if isinstance(m, NoisyLinear):
            m.eps_in.zero_()
            m.eps_out.zero_()
    return network.eval()


class AgentPolicy:
    """act(env) -> [B] int64 actions of a trained network (see module doc)."""

    def __init__(self, network: AgentNetwork, controllers: ControllerState, tables: StepTables,
                 gates: GateConfig, window: int, position_unit: int, mode: PolicyMode,
                 seed: int) -> None:
        if mode not in POLICY_MODES:
            raise ValueError(f"unknown policy {mode!r}; choose one of {', '.join(POLICY_MODES)}")
        self.network = mean_weights_(network)
        self.controllers, self.tables, self.mode = controllers, tables, mode
        # evaluation gates every env (no exploration slots) and is past any warm-up
        self.gates = replace(gates, max_hold_fraction=1.0)
        self.window, self.position_unit = window, position_unit
        device = controllers.v_min.device
        self.generator = torch.Generator(device=device)
        self.generator.manual_seed(seed)
        self._active = torch.ones((), dtype=torch.bool, device=device)

    @torch.no_grad()
    def act(self, env: BatchedLobEnv) -> torch.Tensor:
        s, ctl = env.state, self.controllers
        state = agent_state_features(s.position, s.time_in_trade, s.unrealized_pnl,
                                     ctl.pnl_magnitude, self.position_unit, self.network.cfg)
        # the book's feature table where it has one (validation: the same values, half
        # the time), else the gathered book fields
        out = self.network(book_window(env.book, s.cursor, self.window), state)
        probs = torch.softmax(out.q_logits, dim=-1)
        z = support(ctl.v_min, ctl.v_max, self.network.cfg.num_atoms)
        if self.mode == "greedy":
            return greedy_actions(probs, z)
        if self.mode == "pi":
            return pi_actions(out.pi_logits, self.generator)
        proposed = thompson_actions(probs, z, self.generator)
        return gate(out, probs, z, proposed, env.book, s.cursor, self.tables,
                    ctl.gate_threshold, self._active, 0, self.gates).actions
