"""The learner's C51 target side as one Triton kernel (on CUDA with ``train.kernels``).

``lobsurf.agent.learn.c51_target`` maps the target net's logits on s and s' [2B, A, N] to
E[Q_target(s, .)] [B, A] and the projected Bellman target [B, N]: two softmaxes, three
expectations, an argmax, a gather and the dense projection. Compiled, that is eight
kernels of a few microseconds each (a cuBLAS matrix-vector product among them), and they
lie on the step's critical path: the losses wait for them (benchmarks/RESULTS.md, Defaults decided by measurement). Here one
program per sample does all of it in registers: both
[A, N] logit tiles, the softmaxes and expectations, the greedy action at s' (the first of
equal maxima, as ``torch.argmax``; NaN counts as the largest), and the projection
clip(1 - |Tz_j - z_i| / dz, 0, 1) as an [N, N] tile. fp32 throughout, as the reference.

The reference is ``lobsurf.agent.learn.c51_target`` (PyTorch, the CPU path) and, sharing
no code with either, the float64 numpy loop in tests/agent/test_c51_triton.py.
"""

from __future__ import annotations

import torch

from lobsurf.errors import UserError
from lobsurf.models.kernels.triton_support import KERNEL_MODES, available_for

try:
    import triton
    import triton.language as tl
except ImportError:  # installs without Triton: the PyTorch c51_target runs instead
    triton = None

#: warps per program: a program's tiles are [A, N] and [N, N], a few hundred values
C51_WARPS = 1


if triton is not None:

    @triton.jit
    def _softmax_rows(q_ptr, row, s_row, s_a, s_n, A, N, BLOCK_A: tl.constexpr,
                      BLOCK_N: tl.constexpr):
        # softmax over the atoms of each action of one sample's logits: [BLOCK_A, BLOCK_N],
        # zero outside [A, N]
        a = tl.arange(0, BLOCK_A)
        n = tl.arange(0, BLOCK_N)
        valid = (a[:, None] < A) & (n[None, :] < N)
        q = tl.load(q_ptr + row * s_row + a[:, None] * s_a + n[None, :] * s_n, mask=valid,
                    other=0.0).to(tl.float32)
        peak = tl.max(tl.where(valid, q, float("-inf")), 1)
        peak = tl.where(a < A, peak, 0.0)
        e = tl.where(valid, tl.exp(q - peak[:, None]), 0.0)
        total = tl.sum(e, 1)
        total = tl.where(a < A, total, 1.0)
        return e / total[:, None]

    @triton.jit
    def _c51_target_kernel(q_ptr, reward_ptr, done_ptr, gamma_ptr, z_ptr, mean_ptr, out_ptr,
                           B, A, N, s_row, s_a, s_n, s_reward, s_done, s_gamma, gamma_value,
                           GAMMA_PER_ROW: tl.constexpr, BLOCK_A: tl.constexpr,
                           BLOCK_N: tl.constexpr):
        b = tl.program_id(0)
        a = tl.arange(0, BLOCK_A)
        n = tl.arange(0, BLOCK_N)
        z = tl.load(z_ptr + n, mask=n < N, other=0.0)
        # E[Q_target(s, .)]
        probs = _softmax_rows(q_ptr, b, s_row, s_a, s_n, A, N, BLOCK_A, BLOCK_N)
        tl.store(mean_ptr + b * A + a, tl.sum(probs * z[None, :], 1), mask=a < A)
        # the greedy action at s' and its distribution
        probs = _softmax_rows(q_ptr, B + b, s_row, s_a, s_n, A, N, BLOCK_A, BLOCK_N)
        means = tl.sum(probs * z[None, :], 1)
        means = tl.where(means != means, float("inf"), means)
        means = tl.where(a < A, means, float("-inf"))
        best = tl.argmax(means, 0, tie_break_left=True)
        chosen = tl.sum(tl.where(a[:, None] == best, probs, 0.0), 0)
        # Tz_j = r + gamma (1 - done) z_j, clipped to the support (project_categorical)
        reward = tl.load(reward_ptr + b * s_reward).to(tl.float32)
        not_done = 1.0 - tl.load(done_ptr + b * s_done).to(tl.float32)
        if GAMMA_PER_ROW:
            not_done = not_done * tl.load(gamma_ptr + b * s_gamma).to(tl.float32)
            coef = 1.0
        else:
            coef = gamma_value
        v_min = tl.load(z_ptr)
        v_max = tl.load(z_ptr + N - 1)
        dz = tl.load(z_ptr + 1) - v_min
        tz = reward + coef * not_done * z
        tz = tl.minimum(tl.maximum(tz, v_min), v_max)
        # (Phi T Z)_i = sum_j clip(1 - |Tz_j - z_i| / dz, 0, 1) p_j
        weight = 1.0 - tl.abs(tz[None, :] - z[:, None]) / dz
        weight = tl.minimum(tl.maximum(weight, 0.0), 1.0)
        weight = tl.where(n[None, :] < N, weight, 0.0)
        tl.store(out_ptr + b * N + n, tl.sum(weight * chosen[None, :], 1), mask=n < N)


def kernel_applies(mode: str, device: torch.device | str) -> bool:
    """Whether the kernel runs on ``device`` under ``mode`` (lobsurf.models.kernels.
    triton_support.KERNEL_MODES: "auto" on CUDA, "off" never, "on" always; a UserError where
    "on" cannot run: it needs Triton and a CUDA device, or Triton's CPU interpreter)."""
    if mode not in KERNEL_MODES:
        raise ValueError(f"kernel mode must be one of {', '.join(KERNEL_MODES)}, got {mode!r}")
    device = torch.device(device)
    if mode == "off":
        return False
    if mode == "auto":
        return device.type == "cuda" and available_for(device)
    if not available_for(device):
        raise UserError("the C51 kernel needs Triton with a CUDA device (or Triton's CPU "
                        f"interpreter, TRITON_INTERPRET=1); got {device.type}")
    return True


def c51_target_triton(target_q: torch.Tensor, reward: torch.Tensor, done: torch.Tensor,
                      gamma: float | torch.Tensor, z: torch.Tensor
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """``lobsurf.agent.learn.c51_target`` as one kernel: the same arguments, the same
    (E[Q_target(s, .)] [B, A], projected target [B, N]) in fp32."""
    two_b, num_actions, num_atoms = target_q.shape
    if two_b % 2 or num_atoms < 2:
        raise ValueError(f"c51_target_triton needs [2B, A, N >= 2] logits, got "
                         f"{tuple(target_q.shape)}")
    b = two_b // 2
    per_row = isinstance(gamma, torch.Tensor)
    # one value per sample is read by index: a shorter tensor would be read past its end
    for name, values in (("reward", reward), ("done", done)) + (
            (("gamma", gamma),) if per_row else ()):
        if tuple(values.shape) != (b,):
            raise ValueError(f"c51_target_triton: {name} must be [B] = [{b}] for {two_b} "
                             f"logit rows, got {tuple(values.shape)}")
    mean = torch.empty(b, num_actions, dtype=torch.float32, device=target_q.device)
    out = torch.empty(b, num_atoms, dtype=torch.float32, device=target_q.device)
    # the per-sample values are read at their strides: in the step they are columns of
    # the replay's packed rows (lobsurf.agent.transitions.unpack), and a copy to unit stride
    # would be a kernel on the critical path; the support is read at unit stride
    z = z.contiguous()
    gamma_rows = gamma if per_row else reward  # unread with a float gamma
    _c51_target_kernel[(b,)](
        target_q, reward, done, gamma_rows, z, mean, out,
        b, num_actions, num_atoms, *target_q.stride(), reward.stride(0), done.stride(0),
        gamma_rows.stride(0), 0.0 if per_row else float(gamma),
        GAMMA_PER_ROW=per_row, BLOCK_A=triton.next_power_of_2(num_actions),
        BLOCK_N=triton.next_power_of_2(num_atoms), num_warps=C51_WARPS)
    return mean, out
