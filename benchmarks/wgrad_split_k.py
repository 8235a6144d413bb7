"""A candidate kernel ``bench_weight_grads.py`` times, not used by the training step: the
weight gradient of a token-level product, d W = g^T x summed over all B x L rows, as a
split-K Triton kernel, in two forms.

Why it was written: the encoder's weight gradients are tall-skinny products. At B = 256 with
64-row windows each sums 16,384 rows into a small [out, in] matrix (256 x 128, 388 x 128,
128 x 256 at the default widths), and cuBLAS ran the three of one layer in 36.8 us on an
H100, four times their HBM floor. The rows are cut into slabs; each program sums one slab
for one [BM, BN] tile of d W in fp32 registers, then

- the partial form writes its tile to the slab's own slot of a partial buffer, and the slots
  are summed in a fixed order (deterministic; a second kernel);
- the atomic form adds its tile into one zeroed [M, N] buffer (one kernel; the order of the
  additions unfixed).

Why it is not in the step (benchmarks/RESULTS.md, thirty-ninth session): the partial form
ran as fast as cuBLAS, the atomic form 10.5 us a layer faster (26.3 us), but wired into the
encoder's three projections under autograd (a custom op in Inductor's compiled backward)
the B = 256 / 4-layer step ran 4.4 % slower on the same H100.

Every operand's last axis must be contiguous (the wrapper makes it so). It runs where the
project's kernels do: CUDA, or Triton's CPU interpreter (the tests).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from lobsurf.models.kernels.triton_support import product_flags, triton

if triton is not None:
    import triton.language as tl

    from lobsurf.models.kernels.triton_support import tile_dot


@dataclass(frozen=True)
class WgradTiles:
    """One launch shape of the kernel: the tile of d W each program owns (BM x BN), the
    rows it loads per step (BK), how many slabs the rows are cut into (``splits``), and
    Triton's warps and pipeline stages."""

    bm: int = 128
    bn: int = 128
    bk: int = 64
    splits: int = 32
    warps: int = 4
    stages: int = 3


if triton is not None:

    @triton.jit
    def _wgrad_kernel(g_ptr, x_ptr, part_ptr, K, M, N, rows_per_split, s_gk, s_xk, s_ps, s_pm,
                      BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                      BF16: tl.constexpr, PREC: tl.constexpr, ATOMIC: tl.constexpr):
        # part[s, m, n] = sum over the rows k of slab s of g[k, m] x[k, n]; ATOMIC: added
        # into part[0] instead (one [M, N] buffer, the slabs' order unfixed)
        pm, pn, ps = tl.program_id(0), tl.program_id(1), tl.program_id(2)
        rm = pm * BM + tl.arange(0, BM)
        rn = pn * BN + tl.arange(0, BN)
        m_ok, n_ok = rm < M, rn < N
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        start = ps * rows_per_split
        end = tl.minimum(start + rows_per_split, K)
        for k in range(start, end, BK):
            rk = k + tl.arange(0, BK)
            k_ok = rk < end
            g = tl.load(g_ptr + rk[:, None] * s_gk + rm[None, :],
                        mask=k_ok[:, None] & m_ok[None, :], other=0.0)
            x = tl.load(x_ptr + rk[:, None] * s_xk + rn[None, :],
                        mask=k_ok[:, None] & n_ok[None, :], other=0.0)
            acc += tile_dot(tl.trans(g), x, BF16, PREC)
        if ATOMIC:
            tl.atomic_add(part_ptr + rm[:, None] * s_pm + rn[None, :], acc,
                          mask=m_ok[:, None] & n_ok[None, :], sem="relaxed")
        else:
            tl.store(part_ptr + ps * s_ps + rm[:, None] * s_pm + rn[None, :], acc,
                     mask=m_ok[:, None] & n_ok[None, :])


def weight_grad(g: torch.Tensor, x: torch.Tensor, tiles: WgradTiles = WgradTiles(),
                into: torch.Tensor | None = None) -> torch.Tensor:
    """d W = g^T x over all leading axes, fp32 [M, N]: g [..., M] (the product's output
    gradient), x [..., N] (its input), the same leading shape and dtype (fp32 or bf16).
    ``into``: an fp32 [M, N] buffer the slabs' sums are added to atomically (no partial
    buffer, no second kernel; the order of the additions unfixed), returned."""
    if g.shape[:-1] != x.shape[:-1] or g.dtype != x.dtype:
        raise ValueError(f"weight_grad: g {tuple(g.shape)} {g.dtype} and x {tuple(x.shape)} "
                         f"{x.dtype} need the same leading shape and dtype")
    flags = product_flags(g, "weight_grad")
    g2 = g.reshape(-1, g.shape[-1])
    x2 = x.reshape(-1, x.shape[-1])
    g2 = g2 if g2.stride(-1) == 1 else g2.contiguous()
    x2 = x2 if x2.stride(-1) == 1 else x2.contiguous()
    rows, M = g2.shape
    N = x2.shape[1]
    # the slabs: whole BK-row steps each, as many as asked for where the rows allow
    steps = triton.cdiv(rows, tiles.bk)
    per_split = triton.cdiv(steps, max(1, min(tiles.splits, steps))) * tiles.bk
    splits = triton.cdiv(rows, per_split) if rows else 1
    atomic = into is not None
    if atomic:
        if into.shape != (M, N) or into.dtype != torch.float32 or into.stride(-1) != 1:
            raise ValueError(f"weight_grad: into must be fp32 [{M}, {N}] with contiguous rows")
        buf = into
    else:
        # a slot per slab, each written when there are rows; zeros are the sum of none
        buf = (torch.empty if rows else torch.zeros)(splits, M, N, device=g.device,
                                                     dtype=torch.float32)
    if rows:
        grid = (triton.cdiv(M, tiles.bm), triton.cdiv(N, tiles.bn), splits)
        _wgrad_kernel[grid](g2, x2, buf, rows, M, N, per_split, g2.stride(0), x2.stride(0),
                            0 if atomic else buf.stride(0), buf.stride(-2), BM=tiles.bm,
                            BN=tiles.bn, BK=tiles.bk, ATOMIC=atomic, num_warps=tiles.warps,
                            num_stages=tiles.stages, **flags)
    if atomic:
        return into
    return buf[0] if splits == 1 else buf.sum(0)
