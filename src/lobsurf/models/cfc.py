"""Closed-form continuous-time (CfC) recurrent block, the alternative encoder for irregular time.

Hasani et al. 2022, "Closed-form continuous-time neural networks" (Nature Machine
Intelligence 4, 992-1003), Eq. 10, in the form of the authors' ``ncps`` CfCCell
(mode "default"). With the elapsed time t since the previous snapshot:

    b        = backbone([u_t, h_{t-1}])           Linear + LeCun-tanh, cfc_backbone_layers times
    g1, g2   = tanh(W_1 b), tanh(W_2 b)           the two "ODE solution" branches
    sigma    = sigmoid(W_a b * t + W_b b)         time gate: how far the state has moved
    h_t      = g1 * (1 - sigma) + sigma * g2

so a long gap pushes the state towards g2 and a short one keeps it near g1 (no ODE solver).
The four heads are one fused Linear, Order: [g1 (D), g2 (D), t_a (D), t_b (D)].

Sequential over K by nature. The fast path computes the input half of the first backbone
layer for all K steps in one GEMM and loops only over the hidden half; ``cfc_reference``
is the literal per-step formula with concatenation, used by the tests.
Block: h + CfC(RMSNorm(h)) (pre-norm residual, like the Mamba2 block).
"""

from __future__ import annotations

import torch
from torch import nn

from lobsurf.models.config import EncoderConfig

LECUN_TANH_SCALE = 1.7159  # LeCun 1998 scaled tanh: 1.7159 * tanh(2/3 x), as in ncps
LECUN_TANH_SLOPE = 0.666


def lecun_tanh(x: torch.Tensor) -> torch.Tensor:
    """1.7159 * tanh(0.666 x), the ncps backbone activation."""
    return LECUN_TANH_SCALE * torch.tanh(LECUN_TANH_SLOPE * x)


def elapsed_time(log_dt: torch.Tensor, cfg: EncoderConfig,
                 time_scale: torch.Tensor | float) -> torch.Tensor:
    """Scaled, clamped gap t = min(time_scale * exp(log_dt), cfc_max_time). [B, K] -> [B, K].

    ``time_scale``: the encoder's fitted gap scale (``typical_gap_scale``, a 0-d buffer).
    """
    return (torch.exp(log_dt) * time_scale).clamp(max=cfg.cfc_max_time)


def typical_gap_scale(log_dt: torch.Tensor) -> torch.Tensor:
    """0-d scale that maps the median gap of ``log_dt`` samples ([...]) to t = 1.

    Tick data has gaps of micro- to milliseconds: with a fixed scale of 1 per second the
    CfC time gate would see t ~ 0.001 and ignore time altogether.
    """
    return torch.exp(-log_dt.detach().float().flatten().median())


class CfCCell(nn.Module):
    """One CfC layer with hidden size D = d_model reading inputs of size D."""

    def __init__(self, cfg: EncoderConfig) -> None:
        super().__init__()
        D, U = cfg.d_model, cfg.cfc_backbone_units
        # First backbone layer reads [u (D), h (D)]; split into an input part (all K at once)
        # and a hidden part (per step) so only a [B, D] x [D, U] GEMM sits in the loop.
        self.backbone_in = nn.Linear(D, U)
        self.backbone_hidden = nn.Linear(D, U, bias=False)
        self.backbone_rest = nn.ModuleList(nn.Linear(U, U) for _ in range(cfg.cfc_backbone_layers - 1))
        self.heads = nn.Linear(U, 4 * D)  # Order: [g1, g2, t_a, t_b], each D
        self.d_model = D

    def _update(self, pre: torch.Tensor, h: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        # pre: [B, U] input part of the first layer; h: [B, D]; t: [B] elapsed time.
        b = lecun_tanh(pre + self.backbone_hidden(h))
        for layer in self.backbone_rest:
            b = lecun_tanh(layer(b))
        g1, g2, t_a, t_b = torch.split(self.heads(b), self.d_model, dim=-1)
        gate = torch.sigmoid(t_a * t.unsqueeze(-1) + t_b)
        return torch.tanh(g1) * (1.0 - gate) + gate * torch.tanh(g2)

    def forward(self, u: torch.Tensor, t: torch.Tensor,
                h0: torch.Tensor | None = None) -> torch.Tensor:
        """u: [B, K, D] inputs; t: [B, K] elapsed times; h0: optional [B, D]. Returns [B, K, D]."""
        pre = self.backbone_in(u)  # [B, K, U], one GEMM for all steps
        h = u.new_zeros(u.shape[0], self.d_model) if h0 is None else h0
        outs = []
        for k in range(u.shape[1]):  # sequential in time (K steps), vectorised over B
            h = self._update(pre[:, k], h, t[:, k])
            outs.append(h)
        return torch.stack(outs, dim=1)

    def step(self, u: torch.Tensor, t: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """One step: u [B, D], t [B], h [B, D] -> new h [B, D] (also written into h in place)."""
        new = self._update(self.backbone_in(u), h, t)
        h.copy_(new)
        return new


def cfc_reference(cell: CfCCell, u: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """Literal per-step CfC (concatenate [u, h], full backbone, four heads); [B,K,D] -> [B,K,D].

    Rebuilds the first-layer weight as one [U, 2D] matrix and slices the fused heads, so it
    checks the split/fused bookkeeping of ``CfCCell.forward``.
    """
    D = cell.d_model
    w_first = torch.cat([cell.backbone_in.weight, cell.backbone_hidden.weight], dim=1)  # [U, 2D]
    w_g1, w_g2, w_a, w_b = cell.heads.weight.split(D, dim=0)
    b_g1, b_g2, b_a, b_b = cell.heads.bias.split(D, dim=0)
    h = u.new_zeros(u.shape[0], D)
    outs = []
    for k in range(u.shape[1]):
        b = lecun_tanh(torch.cat([u[:, k], h], dim=-1) @ w_first.T + cell.backbone_in.bias)
        for layer in cell.backbone_rest:
            b = lecun_tanh(b @ layer.weight.T + layer.bias)
        ff1 = torch.tanh(b @ w_g1.T + b_g1)
        ff2 = torch.tanh(b @ w_g2.T + b_g2)
        t_interp = torch.sigmoid((b @ w_a.T + b_a) * t[:, k, None] + (b @ w_b.T + b_b))
        h = ff1 * (1.0 - t_interp) + t_interp * ff2
        outs.append(h)
    return torch.stack(outs, dim=1)


class CfCBlock(nn.Module):
    """Pre-norm residual block: h + CfCCell(RMSNorm(h), t)."""

    def __init__(self, cfg: EncoderConfig) -> None:
        super().__init__()
        self.norm = nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps)
        self.cell = CfCCell(cfg)

    def forward(self, h: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """h: [B, K, D]; t: [B, K] scaled elapsed time (``elapsed_time``). Returns [B, K, D]."""
        return h + self.cell(self.norm(h), t)

