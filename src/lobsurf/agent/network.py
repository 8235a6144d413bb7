"""The agent's network: book window + agent state -> every head the learner trains.

    window [B, K, 10] --features--> [B, K, F] --normaliser (training rows)--> encoder --> h [B, D]
    agent state (position, time in trade, unrealized PnL) --> s [B, 3]
        (with passive orders also each side's resting lots, queue fraction and age: [B, 9])
    [h, s] --noisy Linear--> ReLU --noisy Linear--> Q logits [B, A, N]   (C51, acting)
    [h, s] --Linear--> pi logits [B, A]   (distilled from target Q)
    [h, s] --Linear--> V [B]              (closed-trade returns)
    h --> FRD logits [B, H, C], direction logits [B, H], outcome logits [B, 2]   (auxiliary)

``heads`` computes every first layer in one matrix product (``_first_layers``: the
auxiliary heads' weights get zero columns for s); the modules keep their own parameters,
so checkpoints and pretrained weights are unchanged.

The feature normaliser and encoder are the same classes pretraining uses, so a
``lobsurf pretrain`` checkpoint can seed them (``load_pretrained_``), and so are the FRD and
direction heads.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from lobsurf.agent.config import NetworkConfig
from lobsurf.agent.noisy import NoisyLinear, resample_noise_
from lobsurf.agent.orders import NUM_ORDER_FEATURES, RestingOrders, order_features
from lobsurf.data.dataset import Window
from lobsurf.data.labels import LabelConfig
from lobsurf.models.align import device_multiple, linear_aligned
from lobsurf.models.config import EncoderConfig
from lobsurf.models.encoder import Encoder
from lobsurf.models.feature_table import FeatureRows, window_features
from lobsurf.models.features import FeatureConfig, FeatureNormalizer
from lobsurf.models.heads import DirectionHead, FRDHead, HeadConfig, OutcomeHead

#: agent-state inputs next to the embedding: position, time in trade, unrealized PnL
NUM_STATE_FEATURES = 3


def state_feature_count(passive_orders: bool) -> int:
    """Agent-state inputs of a network: 3, plus the resting orders' 6 with passive orders."""
    return NUM_STATE_FEATURES + (NUM_ORDER_FEATURES if passive_orders else 0)


class AgentOutput(NamedTuple):
    """Every head's output for B states (shapes in the module docstring)."""

    q_logits: torch.Tensor
    pi_logits: torch.Tensor
    value: torch.Tensor
    frd_logits: torch.Tensor
    direction_logits: torch.Tensor
    outcome_logits: torch.Tensor


def agent_state_features(position: torch.Tensor, time_in_trade: torch.Tensor,
                         unrealized_pnl: torch.Tensor, pnl_magnitude: torch.Tensor,
                         position_unit_lots: int, cfg: NetworkConfig,
                         orders: RestingOrders | None = None) -> torch.Tensor:
    """The agent's own state as network inputs, each of order 1.

    They must stand out next to the standardised book features: with the position at a
    tenth of the limit per lot and the PnL in reward units (~0.02), the network could not
    tell long from flat, and Q credited the loss realised by closing a losing position to
    the closing action while holding it looked free (Q learned the signal backwards).

    Args:
        position: [B] int64 lots. time_in_trade: [B] int64 steps. unrealized_pnl: [B]
            float64 currency. pnl_magnitude: 0-d controller, the running mean |net PnL|
            of a closed trade (currency; 0 before the first close).
        position_unit_lots: lots that count as 1 (the largest order size).
        orders: the resting orders (passive orders; None: none).

    Returns:
        [B, 3] float32: position / unit, log1p(time) / log1p(time scale), unrealized PnL
        in typical trade PnLs clipped to +-state_pnl_clip (0 before the first close); with
        ``orders`` [B, 9]: then lobsurf.agent.orders.order_features.
    """
    pos = position.to(torch.float32) / position_unit_lots
    tit = torch.log1p(time_in_trade.to(torch.float32)) / math.log1p(cfg.state_time_scale_steps)
    pnl = torch.where(pnl_magnitude > 0, unrealized_pnl / pnl_magnitude.clamp(min=1e-12), 0.0)
    pnl = pnl.clamp(-cfg.state_pnl_clip, cfg.state_pnl_clip)
    own = torch.stack((pos, tit, pnl.to(torch.float32)), dim=-1)
    if orders is None:
        return own
    return torch.cat((own, order_features(orders, position_unit_lots, cfg)), dim=-1)


class AgentNetwork(nn.Module):
    """Perception (features, normaliser, encoder) and the heads; ``passive_orders``: the
    agent's state includes its resting orders (9 inputs rather than 3)."""

    def __init__(self, features: FeatureConfig, encoder: EncoderConfig, cfg: NetworkConfig,
                 labels: LabelConfig, num_actions: int, passive_orders: bool = False) -> None:
        super().__init__()
        self.feature_cfg, self.cfg, self.num_actions = features, cfg, num_actions
        self.passive_orders = passive_orders
        self.state_features = state_feature_count(passive_orders)
        num_features = features.num_features
        d = encoder.d_model
        self.normalizer = FeatureNormalizer(num_features, features)
        self.encoder = Encoder(encoder, in_features=num_features)
        d_in = d + self.state_features
        self.q_hidden = NoisyLinear(d_in, cfg.q_hidden, cfg.noisy_sigma0)
        self.q_out = NoisyLinear(cfg.q_hidden, num_actions * cfg.num_atoms, cfg.noisy_sigma0)
        self.pi = nn.Linear(d_in, num_actions)
        self.value = nn.Linear(d_in, 1)
        heads = HeadConfig()
        self.frd = FRDHead(d, labels.num_horizons, labels.num_buckets, heads)
        self.direction = DirectionHead(d, labels.num_horizons, heads)
        self.outcome = OutcomeHead(d, heads)

    def embed(self, window: Window | FeatureRows) -> torch.Tensor:
        """[B, K, 10] window (or its rows in a feature table) -> [B, D] embedding of its last
        snapshot."""
        feats = window_features(window, self.feature_cfg)
        return self.encoder(self.normalizer(feats.x), feats.log_dt, return_sequence=False).last

    def q_logits(self, h: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        """[B, D] embedding + [B, 3] (or [B, 9]) agent state -> [B, A, N] C51 logits."""
        hs = torch.cat((h, state), dim=-1)
        return self._q_from_hidden(linear_aligned(hs, *self.q_hidden.noisy_parameters(),
                                                  self._gemm_multiple(hs)))

    def _q_from_hidden(self, pre: torch.Tensor) -> torch.Tensor:
        # Q's output layer on its hidden layer's pre-activation
        x = torch.relu(pre)
        q = linear_aligned(x, *self.q_out.noisy_parameters(), self._gemm_multiple(x))
        return q.unflatten(-1, (self.num_actions, self.cfg.num_atoms))

    def _gemm_multiple(self, x: torch.Tensor) -> int:
        # the encoder's GEMM alignment (models/align.py) for the heads' products too
        return device_multiple(x)

    def _first_layers(self) -> tuple[torch.Tensor, torch.Tensor, tuple[int, ...]]:
        """The weight [sum of widths, D + state inputs] and bias of every layer that reads [h, s],
        stacked: Q's hidden layer (with its noise), pi, V, and the first layers of the FRD,
        direction and outcome heads (which read h only: zero columns for s); and the
        widths, in that order."""
        q_weight, q_bias = self.q_hidden.noisy_parameters()
        weights, biases = [q_weight, self.pi.weight, self.value.weight], [q_bias, self.pi.bias,
                                                                            self.value.bias]
        for head in self._aux_heads():
            weights.append(F.pad(head.first.weight, (0, self.state_features)))
            biases.append(head.first.bias)
        return torch.cat(weights), torch.cat(biases), tuple(w.shape[0] for w in weights)

    def _aux_heads(self) -> tuple[nn.Module, ...]:
        return (self.frd, self.direction, self.outcome)

    def heads(self, h: torch.Tensor, state: torch.Tensor) -> AgentOutput:
        """Every head from [B, D] embeddings and [B, 3] (or [B, 9]) agent states. The seven layers
        that read [h, s] or h run as one matrix product (PERFORMANCE.md 3.8: each small
        product of B rows costs a launch and ~10 us on the GPU), padded to aligned
        widths on CUDA; then Q's output layer and each auxiliary head's rest."""
        hs = torch.cat((h, state), dim=-1)
        weight, bias, widths = self._first_layers()
        joint = linear_aligned(hs, weight, bias, self._gemm_multiple(hs))
        q_pre, pi, value, *aux = torch.split(joint, widths, dim=-1)
        frd, direction, outcome = (head.finish(x) for head, x in zip(self._aux_heads(), aux))
        return AgentOutput(q_logits=self._q_from_hidden(q_pre), pi_logits=pi,
                           value=value[:, 0], frd_logits=frd, direction_logits=direction,
                           outcome_logits=outcome)

    def forward(self, window: Window | FeatureRows, state: torch.Tensor) -> AgentOutput:
        return self.heads(self.embed(window), state)

    def resample_noise_(self, generator: torch.Generator) -> None:
        resample_noise_(self, generator)

    @torch.no_grad()
    def load_pretrained_(self, state_dict: dict[str, torch.Tensor]) -> list[str]:
        """Copy a PretrainModel's normaliser, encoder, FRD and direction weights (the keys
        share names); returns the keys copied."""
        prefixes = ("normalizer.", "encoder.", "frd.", "direction.")
        wanted = {k: v for k, v in state_dict.items() if k.startswith(prefixes)}
        own = self.state_dict()
        for key, value in wanted.items():
            if key not in own or own[key].shape != value.shape:
                raise ValueError(f"pretrained tensor {key} {tuple(value.shape)} does not fit "
                                 "this network (different encoder, feature or label settings)")
            own[key].copy_(value)
        return sorted(wanted)
