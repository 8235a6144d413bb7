"""Mamba2 block in plain PyTorch (Dao & Gu 2024, arXiv 2405.21060, Section 7 / Figure 6).

Mixer, per token u_t in R^D:

    [z, xBC, dt] = in_proj(u)                    fused projection, "Order:" below
    xBC          = SiLU(causal depthwise conv_W(xBC))
    [x, B, C]    = xBC                           x: E = H*P channels; B, C: N (one group)
    dt           = softplus(dt + dt_bias)        [H]
    A            = -exp(A_log)                   [H]
    y            = SSD(x, dt, A, B, C) + D * x   chunked scan, ``ssd.py``
    out          = out_proj(RMSNorm(y * SiLU(z)))   gated norm, norm after gate (Mamba2 default)

Block: h + mixer(RMSNorm(h)) (pre-norm residual).

Two paths share the parameters: ``forward`` over a whole window (chunked SSD, the fast path)
and ``step`` for one token with a preallocated ``Mamba2State`` updated in place (the
recurrent acting path and the step-by-step reference that tests compare against).
The causal convolution is written as W shifted multiply-adds on the channel-last layout,
so no [B, L, C] <-> [B, C, L] transposes are needed and torch.compile fuses it.

The window call applies the two RMSNorm weights inside the products after them (W_in
diag(w), W_out diag(w)): the same function, whose backward takes the weights' gradients
from the products' weight gradients instead of a sum over every row. On CUDA
(``Mamba2Mixer.kernels``) the stateless window call runs Triton kernels
(``lobsurf.models.kernels``): the one-chunk scan; under autograd z projected apart and the
conv + dt softplus with one backward kernel that writes their in-projection gradient;
without autograd the conv's forward kernel, and the scan kernel also applies the gated
norm's gate and weight (its 1 / rms after the out-projection, ``_gated_scan_out``) and, on
every row, computes z = u W_z^T itself; the last layer's last row alone as vectors over
the rows. The PyTorch code here stays the CPU path and the reference (``kernels = "off"``).
Figures: benchmarks/RESULTS.md, Defaults decided by measurement.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from lobsurf.models.align import device_multiple, linear_padded_out
from lobsurf.models.config import EncoderConfig
from lobsurf.models.kernels import conv_dt_triton, conv_triton, ssd_window_triton
from lobsurf.models.kernels.triton_support import KernelMode, kernel_runs
from lobsurf.models.ssd import ssd_chunked, ssd_final_state, ssd_step

#: floor of the sampled initial dt before its softplus is inverted for dt_bias (Mamba2's init)
DT_INIT_FLOOR = 1e-4


@dataclass
class Mamba2State:
    """Recurrent state of one Mamba2 mixer (preallocated, updated in place).

    Attributes:
        conv_state: [B, W-1, E+2N] the last W-1 pre-convolution xBC inputs, oldest first.
        ssm_state: [B, H, P, N] the SSD state.
    """

    conv_state: torch.Tensor
    ssm_state: torch.Tensor


def gated_rms_norm(y: torch.Tensor, z: torch.Tensor, weight: torch.Tensor | None,
                   eps: float) -> torch.Tensor:
    """RMSNorm(y * SiLU(z)) * weight over the last axis, statistics in >= fp32. y, z: [..., E].
    Without a weight (None) the normalised rows alone."""
    gated = y * F.silu(z)
    g = gated.to(torch.promote_types(gated.dtype, torch.float32))
    normed = g * torch.rsqrt(g.square().mean(-1, keepdim=True) + eps)
    return normed.to(gated.dtype) if weight is None else normed.to(gated.dtype) * weight


def rms_norm(norm: nn.RMSNorm, h: torch.Tensor, weighted: bool = True) -> torch.Tensor:
    """``norm(h)`` with the weight cast to h's dtype, so bf16 inputs (autocast) keep the fused
    kernel instead of the mixed-dtype fallback; identical for fp32/fp64 inputs. With
    ``weighted`` False the normalised rows alone (the weight then goes into the next
    product: ``Mamba2Block.forward``)."""
    weight = norm.weight.to(h.dtype) if weighted else None
    return F.rms_norm(h, norm.normalized_shape, weight, norm.eps)


def _split_padded(proj: torch.Tensor, sizes: tuple[int, ...]) -> tuple[torch.Tensor, ...]:
    """``proj``'s leading columns split into pieces of ``sizes``; columns past them (an
    aligned product's padding, models/align.py) are split off as a last piece and dropped,
    not sliced off first, so the backward's zero columns can be written where the pieces'
    gradients are assembled: in Inductor's compiled backward the slice's was a pass of its
    own over the [B, L, width] gradient."""
    pad = proj.shape[-1] - sum(sizes)
    return torch.split(proj, sizes + ((pad,) if pad else ()), dim=-1)[:len(sizes)]


class Mamba2Mixer(nn.Module):
    """The Mamba2 mixer (without the residual and pre-norm); see the module docstring.

    Attributes:
        kernels: which path the stateless window call takes: "auto" (the default) the
            Triton kernels on CUDA, "off" the PyTorch path, "on" the kernels wherever
            Triton runs (``lobsurf.models.kernels.triton_support``). A runtime choice, not
            saved with the parameters; ``Encoder.use_kernels_`` sets it for a network.
    """

    def __init__(self, cfg: EncoderConfig) -> None:
        super().__init__()
        D, E, N, H, W = cfg.d_model, cfg.d_inner, cfg.d_state, cfg.n_heads, cfg.d_conv
        self.cfg = cfg
        self.kernels: KernelMode = "auto"
        self.conv_channels = E + 2 * N
        # Order: [z (E), x (E), B (N), C (N), dt (H)]; x, B, C are contiguous (= xBC, the
        # conv input). On CUDA the product's output is padded at use (models/align.py).
        self.split_sizes = (E, self.conv_channels, H)
        self.proj_width = 2 * E + 2 * N + H
        self.in_proj = nn.Linear(D, self.proj_width, bias=False)
        # Depthwise causal conv: tap k multiplies the input at t - (W-1) + k (like nn.Conv1d
        # with padding W-1, groups=channels, weight [C, 1, W] stored here as [W, C]).
        bound = 1.0 / math.sqrt(W)  # nn.Conv1d default init, fan_in = W
        self.conv_weight = nn.Parameter(torch.empty(W, self.conv_channels).uniform_(-bound, bound))
        self.conv_bias = nn.Parameter(torch.empty(self.conv_channels).uniform_(-bound, bound))
        # dt bias: inverse softplus of dt ~ log-uniform[dt_min, dt_max] (Mamba2 init).
        log_dt = torch.rand(H) * (math.log(cfg.dt_max) - math.log(cfg.dt_min)) + math.log(cfg.dt_min)
        dt = torch.exp(log_dt).clamp(min=DT_INIT_FLOOR)
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))
        self.A_log = nn.Parameter(torch.log(torch.empty(H).uniform_(cfg.a_init_min, cfg.a_init_max)))
        self.D = nn.Parameter(torch.ones(H))
        self.norm_weight = nn.Parameter(torch.ones(E))
        self.out_proj = nn.Linear(E, D, bias=False)

    def allocate_state(self, batch: int, device: torch.device | None = None,
                       dtype: torch.dtype = torch.float32) -> Mamba2State:
        """Zero state for ``batch`` sequences (before the first token)."""
        cfg = self.cfg
        return Mamba2State(
            conv_state=torch.zeros(batch, cfg.d_conv - 1, self.conv_channels, device=device,
                                   dtype=dtype),
            ssm_state=torch.zeros(batch, cfg.n_heads, cfg.headdim, cfg.d_state, device=device,
                                  dtype=dtype),
        )

    def _conv(self, xbc: torch.Tensor, context: torch.Tensor | None) -> tuple[torch.Tensor, ...]:
        # xbc: [B, L, C]; context: [B, W-1, C] inputs before t=0 (zeros when None).
        W, L = self.cfg.d_conv, xbc.shape[1]
        # Weights in the activation dtype: under bf16 autocast the conv output (and so the
        # SSD input) stays bf16 instead of being promoted to fp32 by the fp32 parameters.
        weight, bias = self.conv_weight.to(xbc.dtype), self.conv_bias.to(xbc.dtype)
        if context is None and self._runs(xbc, not torch.is_grad_enabled(),
                                          conv_triton.supports(W)):
            # the forward kernel, forwards without autograd (with it: conv_dt); no context
            # is asked for when no state is carried
            return conv_triton.conv_silu(xbc, weight, bias), None
        if context is None:
            padded = F.pad(xbc, (0, 0, W - 1, 0))
        else:
            padded = torch.cat([context.to(xbc.dtype), xbc], dim=1)  # [B, W-1+L, C]
        # activations [B, L, C]; new context [B, W-1, C]
        return conv_triton.torch_conv_silu(padded, weight, bias, L), padded[:, L:]

    def _runs(self, x: torch.Tensor, wanted: bool, shape_ok: bool) -> bool:
        # whether a kernel runs on x in this mixer's ``kernels`` mode (triton_support)
        return kernel_runs(self.kernels, x, wanted, shape_ok)

    def _conv_dt(self, u: torch.Tensor) -> bool:
        # a stateless forward with autograd takes the conv and dt softplus through conv_dt
        return self._runs(u, torch.is_grad_enabled(), conv_dt_triton.supports(self.cfg.d_conv))

    def _split_proj(self, proj: torch.Tensor):
        # [..., padded width] -> z [..., E], xBC [..., E+2N], dt [..., H] (padding dropped).
        return _split_padded(proj, self.split_sizes)

    def _window_kernel(self, x: torch.Tensor, state: Mamba2State | None) -> bool:
        # the one-chunk scan kernels: the stateless window call of at most chunk_size rows
        cfg = self.cfg
        return self._runs(x, state is None, ssd_window_triton.supports(
            cfg.headdim, cfg.d_state, x.shape[1], cfg.chunk_size))

    def _split_xbc(self, xbc: torch.Tensor):
        E, N = self.cfg.d_inner, self.cfg.d_state
        return torch.split(xbc, (E, N, N), dim=-1)

    def forward(self, u: torch.Tensor, state: Mamba2State | None = None,
                last_only: bool = False, in_scale: torch.Tensor | None = None) -> torch.Tensor:
        """Mixer over a window.

        Args:
            u: [B, L, D] normalised inputs.
            state: optional state to start from; when given it is overwritten in place with
                the state after the last token (so ``step`` can continue from it).
            last_only: compute the output of the last position only (z gate, norm and
                out_proj on one row; on the PyTorch scan the SSD goes through its final
                state, no Q x Q scores; the kernels compute the last row alone).
            in_scale: [D], the pre-norm's weight when u is the normalised rows without it
                (``Mamba2Block.forward``): the in-projection then takes W diag(in_scale),
                the same product; None when u carries it.

        Returns:
            [B, L, D], or [B, D] when ``last_only``.
        """
        cfg = self.cfg
        E = cfg.d_inner
        align = device_multiple(u)  # aligned GEMM widths (align.py)
        w_in = self.in_proj.weight if in_scale is None else self.in_proj.weight * in_scale
        conv_dt = state is None and self._conv_dt(u)
        z_in_scan = state is None and not (last_only or conv_dt) and self._scan_z_proj(u)
        z, xbc, dt, new_context = self._project(u, w_in, align, state, last_only, conv_dt,
                                                z_in_scan)
        if z_in_scan:
            return self._gated_scan_out(xbc, dt, None, False, u, w_in[:E])
        if state is None and self._scan_gate(xbc):
            return self._gated_scan_out(xbc, dt, z, last_only)
        y, final = self._scan(xbc, dt, state, last_only)
        if state is not None:
            state.conv_state.copy_(new_context)
            state.ssm_state.copy_(final)
        # the norm's weight in the out-projection's columns: the same product, and its
        # gradient comes from the product's weight gradient, not from a column sum
        return F.linear(gated_rms_norm(y, z, None, cfg.norm_eps),
                        self.out_proj.weight * self.norm_weight)

    def _project(self, u: torch.Tensor, w_in: torch.Tensor, align: int,
                 state: Mamba2State | None, last_only: bool, conv_dt: bool,
                 z_in_scan: bool) -> tuple[torch.Tensor | None, ...]:
        # (z, the conv's output xBC, dt after its softplus, the conv's new context or None)
        cfg = self.cfg
        E = cfg.d_inner
        if last_only or conv_dt or z_in_scan:
            # z by a product of its own: for one row only when that is all that is needed;
            # on the conv_dt path, so that its gradient and the one conv_dt writes for the
            # other columns never meet in one [rows, 648] tensor (conv_dt_triton.py); not at
            # all when the scan kernel computes it (only without autograd)
            z = None if z_in_scan else F.linear(u[:, -1] if last_only else u, w_in[:E])
            xbc_dt = linear_padded_out(u, w_in[E:], align)
        if conv_dt:
            xbc, dt = conv_dt_triton.conv_dt(
                xbc_dt, self.conv_weight.to(xbc_dt.dtype), self.conv_bias.to(xbc_dt.dtype),
                self.dt_bias, self.conv_channels, cfg.n_heads)
            return z, xbc, dt, None
        if last_only or z_in_scan:
            xbc, dt = _split_padded(xbc_dt, self.split_sizes[1:])
        else:
            z, xbc, dt = self._split_proj(linear_padded_out(u, w_in, align))
        xbc, new_context = self._conv(xbc, None if state is None else state.conv_state)
        return z, xbc, F.softplus(dt + self.dt_bias), new_context  # dt [B, L, H]

    def _scan_gate(self, x: torch.Tensor) -> bool:
        # a stateless forward without autograd where the one-chunk scan kernel runs takes
        # the gated norm's gate in that kernel (``_gated_scan_out``)
        return not torch.is_grad_enabled() and self._window_kernel(x, None)

    def _scan_z_proj(self, u: torch.Tensor) -> bool:
        # where the gate runs in the scan kernel on every row, z is computed there too
        return self._scan_gate(u) and ssd_window_triton.z_projection_supported(self.cfg.d_model)

    def _gated_scan_out(self, xbc: torch.Tensor, dt: torch.Tensor, z: torch.Tensor | None,
                        last_only: bool, u: torch.Tensor | None = None,
                        w_z: torch.Tensor | None = None) -> torch.Tensor:
        # out_proj(RMSNorm(y SiLU(z)) w) as rstd * out_proj(g w): the scan kernel writes g w
        # and each row's per-head sum of g^2; the per-row 1 / rms commutes with the product.
        # With u and w_z and no z, the kernel computes z = u w_z^T itself.
        cfg = self.cfg
        A = -torch.exp(self.A_log.float())
        if z is None:
            g, ss = ssd_window_triton.ssd_window_gated_projected(
                xbc, dt, A, self.D, u, w_z.to(u.dtype), self.norm_weight, cfg.headdim,
                cfg.d_state)
        else:
            g, ss = ssd_window_triton.ssd_window_gated(
                xbc, dt, A, self.D, z, self.norm_weight, cfg.headdim, cfg.d_state, last_only)
        out = self.out_proj(g)
        rstd = torch.rsqrt(ss.sum(-1, keepdim=True) / cfg.d_inner + cfg.norm_eps)
        return (out.float() * rstd).to(out.dtype)

    def _scan(self, xbc: torch.Tensor, dt: torch.Tensor, state: Mamba2State | None,
              last_only: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        # y [B, L, E] (or [B, E]) = SSD + D x from the conv output xbc and dt (after its
        # softplus), and the final SSD state when ``state`` is given (None otherwise)
        cfg = self.cfg
        batch, length, _ = xbc.shape
        H, P, E = cfg.n_heads, cfg.headdim, cfg.d_inner
        x, B, C = self._split_xbc(xbc)
        final = None
        A = -torch.exp(self.A_log.float())  # [H]
        xh = x.reshape(batch, length, H, P)
        init = None if state is None else state.ssm_state
        if self._window_kernel(xbc, state):
            # [x | B | C] read in place; the kernel adds D x itself
            y = ssd_window_triton.ssd_window(xbc, dt, A, self.D, P, cfg.d_state, last_only)
        elif last_only:
            final = ssd_final_state(xh, dt, A, B, cfg.chunk_size, init)  # [B, H, P, N]
            y = (final.to(C.dtype) @ C[:, -1, None, :, None]).squeeze(-1)  # [B, H, P]
            y = (y + xh[:, -1] * self.D[:, None]).reshape(batch, E)
        else:
            need_final = state is not None
            scan = ssd_chunked(xh, dt, A, B, C, cfg.chunk_size, init, need_final)
            y, final = scan if need_final else (scan, None)
            y = (y + xh * self.D[:, None]).reshape(batch, length, E)
        return y, final

    def step(self, u: torch.Tensor, state: Mamba2State) -> torch.Tensor:
        """One token: u [B, D] -> [B, D]; ``state`` is updated in place."""
        cfg = self.cfg
        H, P = cfg.n_heads, cfg.headdim
        z, xbc, dt = self._split_proj(self.in_proj(u))
        window = torch.cat([state.conv_state, xbc.unsqueeze(1).to(state.conv_state.dtype)], 1)
        state.conv_state.copy_(window[:, 1:])
        xbc = F.silu((window * self.conv_weight).sum(1) + self.conv_bias)  # [B, C]
        x, B, C = self._split_xbc(xbc)
        dt = F.softplus(dt + self.dt_bias)  # [B, H]
        A = -torch.exp(self.A_log.float())
        xh = x.reshape(-1, H, P)
        y = ssd_step(xh, dt, A, B, C, state.ssm_state).to(x.dtype)  # [B, H, P]
        y = (y + xh * self.D[:, None]).reshape(-1, cfg.d_inner)
        return self.out_proj(gated_rms_norm(y, z, self.norm_weight, cfg.norm_eps))


class Mamba2Block(nn.Module):
    """Pre-norm residual block: h + Mamba2Mixer(RMSNorm(h))."""

    def __init__(self, cfg: EncoderConfig) -> None:
        super().__init__()
        self.norm = nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps)
        self.mixer = Mamba2Mixer(cfg)

    def allocate_state(self, batch: int, device: torch.device | None = None,
                       dtype: torch.dtype = torch.float32) -> Mamba2State:
        """Zero recurrent state for ``batch`` sequences."""
        return self.mixer.allocate_state(batch, device, dtype)

    def forward(self, h: torch.Tensor, state: Mamba2State | None = None,
                last_only: bool = False) -> torch.Tensor:
        """h: [B, L, D] -> [B, L, D] (or [B, D] when ``last_only``); see Mamba2Mixer.forward."""
        # the pre-norm's weight goes into the in-projection (Mamba2Mixer.forward); by
        # keyword, as module hooks (the FLOP counter's) that watch a call's positional
        # tensors cannot take a leaf parameter under autograd.grad
        mixed = self.mixer(rms_norm(self.norm, h, weighted=False), state, last_only,
                           in_scale=self.norm.weight)
        return (h[:, -1] if last_only else h) + mixed

    def step(self, h: torch.Tensor, state: Mamba2State) -> torch.Tensor:
        """One token h [B, D] -> [B, D]; ``state`` updated in place."""
        return h + self.mixer.step(rms_norm(self.norm, h), state)
