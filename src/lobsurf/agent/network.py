"""The agent's network: book window + agent state -> C51 return distributions per action.

    window [B, K, 10] --features--> [B, K, F] --normaliser (training rows)--> encoder --> h [B, D]
    agent state (position, time in trade, unrealized PnL) --> s [B, 3]
    [h, s] --noisy Linear--> ReLU --noisy Linear--> Q logits [B, A, N]

The feature normaliser and encoder are the same classes pretraining uses, so a
``lobsurf pretrain`` checkpoint can seed them (``load_pretrained_``).
"""

from __future__ import annotations

import torch
from torch import nn

from lobsurf.agent.config import NetworkConfig
from lobsurf.agent.noisy import NoisyLinear, resample_noise_
from lobsurf.data.dataset import Window
from lobsurf.models.config import EncoderConfig
from lobsurf.models.encoder import Encoder
from lobsurf.models.features import FeatureConfig, FeatureNormalizer, snapshot_features

#: agent-state inputs next to the embedding: position, time in trade, unrealized PnL
NUM_STATE_FEATURES = 3


def agent_state_features(position: torch.Tensor, time_in_trade: torch.Tensor,
                         unrealized_pnl: torch.Tensor, reward_scale: torch.Tensor,
                         position_limit: int, cfg: NetworkConfig) -> torch.Tensor:
    """The agent's own state as network inputs.

    Args:
        position: [B] int64 lots. time_in_trade: [B] int64 steps. unrealized_pnl: [B]
            float64 currency. reward_scale: 0-d controller (reward units per currency unit).

    Returns:
        [B, 3] float32: position / limit, log1p(time / time scale), unrealized PnL in
        reward units clipped to +-state_pnl_clip.
    """
    pos = position.to(torch.float32) / position_limit
    tit = torch.log1p(time_in_trade.to(torch.float32) / cfg.state_time_scale_steps)
    pnl = (unrealized_pnl * reward_scale).clamp(-cfg.state_pnl_clip, cfg.state_pnl_clip)
    return torch.stack((pos, tit, pnl.to(torch.float32)), dim=-1)


class AgentNetwork(nn.Module):
    """Perception (features, normaliser, encoder) and the noisy C51 head."""

    def __init__(self, features: FeatureConfig, encoder: EncoderConfig, cfg: NetworkConfig,
                 num_actions: int) -> None:
        super().__init__()
        self.feature_cfg, self.cfg, self.num_actions = features, cfg, num_actions
        num_features = features.num_features
        self.normalizer = FeatureNormalizer(num_features, features)
        self.encoder = Encoder(encoder, in_features=num_features)
        d_in = encoder.d_model + NUM_STATE_FEATURES
        self.q_hidden = NoisyLinear(d_in, cfg.q_hidden, cfg.noisy_sigma0)
        self.q_out = NoisyLinear(cfg.q_hidden, num_actions * cfg.num_atoms, cfg.noisy_sigma0)

    def embed(self, window: Window) -> torch.Tensor:
        """[B, K, 10] window -> [B, D] embedding of its last snapshot."""
        feats = snapshot_features(window, self.feature_cfg)
        return self.encoder(self.normalizer(feats.x), feats.log_dt, return_sequence=False).last

    def q_logits(self, h: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        """[B, D] embedding + [B, 3] agent state -> [B, A, N] C51 logits."""
        x = torch.relu(self.q_hidden(torch.cat((h, state), dim=-1)))
        return self.q_out(x).unflatten(-1, (self.num_actions, self.cfg.num_atoms))

    def forward(self, window: Window, state: torch.Tensor) -> torch.Tensor:
        return self.q_logits(self.embed(window), state)

    def resample_noise_(self, generator: torch.Generator) -> None:
        resample_noise_(self, generator)

    @torch.no_grad()
    def load_pretrained_(self, state_dict: dict[str, torch.Tensor]) -> list[str]:
        """Copy a PretrainModel's normaliser and encoder weights; returns the keys copied."""
        wanted = {k: v for k, v in state_dict.items()
                  if k.startswith("normalizer.") or k.startswith("encoder.")}
        own = self.state_dict()
        for key, value in wanted.items():
            if key not in own or own[key].shape != value.shape:
                raise ValueError(f"pretrained tensor {key} {tuple(value.shape)} does not fit "
                                 "this network (different encoder or feature settings)")
            own[key].copy_(value)
        return sorted(wanted)
