"""The weight-gradient products of one default Mamba2 layer's backward, as cuBLAS runs them
now, as Inductor's autotuned Triton templates and a candidate split-K kernel would, against
their HBM floor, on CUDA.

Why: the thirty-third session's H200 timeline put the B = 256 / 4-layer backward at about
131 us a full layer, 48 of them in six cuBLAS products, three of them split-K with their
reductions: the weight gradients, whose sum runs over all B x 64 rows into a small
[out, in] matrix. The thirty-eighth session left B = 256 / 4 layers 1.037x short of its goal
(about 50 us a step). Before a kernel is wired into the step, this says in a minute or two
whether there is time to win (the thirty-eighth session's lesson: a fused kernel written
untimed lost to cuBLAS and Inductor). The thirty-ninth session's figures, and what the
atomic form's micro-benchmark gain became in the step, are in RESULTS.md.

The products, per layer, with the default encoder's widths read from ``Mamba2Mixer`` (bf16
operands as autocast gives them, each a [rows, width] activation or gradient):

- ``z``: d W_z = d z^T u ([E, rows] x [rows, d_model]);
- ``xbc_dt``: d W_xbc_dt = d (xBC, dt)^T u (the in-projection's other rows, unpadded: on
  CUDA the step pads this product's output to an aligned width);
- ``out``: d W_out = d out^T n ([d_model, rows] x [rows, E]).

For each, ms per call (CUDA graph replay):

- ``cublas``: ``g.t() @ x``, the product autograd runs; ``cublas_fp32``: the same, then the
  cast to fp32 that an fp32 parameter's gradient takes under autocast;
- ``autotuned``: the product under ``torch.compile(mode="max-autotune-no-cudagraphs")``
  (Inductor's Triton templates, split-K among them, against cuBLAS, the fastest kept);
- ``split_k`` and ``atomic``: the candidate kernel of ``wgrad_split_k.py`` (fp32 out), its
  partial form (the slabs' sums reduced in a fixed order, a second kernel) and its atomic
  form (one kernel adding into a zeroed buffer; the zeroing not timed), each at the fastest
  of a sweep of tiles, slabs, warps and stages (``*_tiles``: BM/BN/BK/slabs/warps/stages);
- ``floor``: the operands' and the output's HBM bytes at 4.8 TB/s, the H200's peak.

``*_err``: the largest difference from float64, relative to float64's largest value.
``layer_*``: the three products summed.

    python benchmarks/bench_weight_grads.py --batch 256,1024 --out OUT

Without CUDA (a dry run of the script's code, no timing worth reading) it runs on the CPU
with wall-clock timing and Inductor's default mode.
"""

from __future__ import annotations

import itertools
import time

import torch

from lobsurf.models.config import EncoderConfig
from lobsurf.models.mamba2 import Mamba2Mixer

# benchmarks/ is on sys.path
from micro import graphed_ms, run_batches  # noqa: E402
from wgrad_split_k import WgradTiles, weight_grad  # noqa: E402

WINDOW = 64
HBM_TB_S = 4.8
"""The H200's HBM peak (the floor's bandwidth)."""
CUDA = torch.cuda.is_available()
DEVICE = "cuda" if CUDA else "cpu"


def widths() -> dict[str, tuple[int, int]]:
    """Each product's (gradient width, activation width) for the default layer."""
    cfg = EncoderConfig()
    mixer = Mamba2Mixer(cfg)
    in_rows = mixer.in_proj.weight.shape[0]
    E = cfg.d_inner
    return {"z": (E, cfg.d_model), "xbc_dt": (in_rows - E, cfg.d_model),
            "out": (cfg.d_model, E)}


def _product(g: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return g.t() @ x


def _ms(fn, reps: int) -> float:
    if CUDA:
        return graphed_ms(fn, reps)
    fn()
    start = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - start) * 1e3 / reps


def _sweep() -> list[WgradTiles]:
    """The split-K kernel's launch shapes timed (a short list on the CPU dry run)."""
    if not CUDA:
        return [WgradTiles(bm=32, bn=32, bk=32, splits=4)]
    return [WgradTiles(*c) for c in itertools.product(
        (64, 128), (64, 128), (32, 64, 128), (16, 32, 64, 128), (4, 8), (3, 4))]


def _best_split_k(g: torch.Tensor, x: torch.Tensor, reps: int, into: torch.Tensor | None = None
                  ) -> tuple[float, WgradTiles]:
    """The fastest launch shape of ``weight_grad`` on (g, x) and its ms per call (``into``:
    the atomic form into that buffer, its zeroing not timed)."""
    best = (float("inf"), WgradTiles())
    for tiles in _sweep():
        try:
            ms = _ms(lambda: weight_grad(g, x, tiles, into), reps)
        except Exception as err:  # a shape past the GPU's shared memory: skipped, said
            print(f"  {tiles}: {type(err).__name__}", flush=True)
            continue
        best = min(best, (ms, tiles), key=lambda b: b[0])
    return best


def _label(tiles: WgradTiles) -> str:
    # the launch shape as the row's *_tiles column gives it: BM/BN/BK/slabs/warps/stages
    return "/".join(str(v) for v in vars(tiles).values())


def _err(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got.double() - want).abs().max() / want.abs().max()).item()


def rows_of(batch: int, reps: int) -> dict:
    rows = batch * WINDOW
    gen = torch.Generator(DEVICE).manual_seed(batch)
    row: dict = {"batch": batch}
    for name, (out_w, in_w) in widths().items():
        g = torch.randn(rows, out_w, device=DEVICE, generator=gen).to(torch.bfloat16)
        x = torch.randn(rows, in_w, device=DEVICE, generator=gen).to(torch.bfloat16)
        want = _product(g.double(), x.double())
        # a fresh compile per shape (dynamo's recompile limit counts per function); its
        # autotuning runs at the first call, before any graph capture
        torch._dynamo.reset()
        tuned = torch.compile(_product, dynamic=False,
                              mode="max-autotune-no-cudagraphs" if CUDA else None)
        row[f"{name}_cublas_err"] = _err(_product(g, x), want)
        row[f"{name}_autotuned_err"] = _err(tuned(g, x), want)
        row[f"{name}_cublas_ms"] = _ms(lambda: _product(g, x), reps)
        row[f"{name}_autotuned_ms"] = _ms(lambda: tuned(g, x), reps)
        # what autograd runs for an fp32 parameter under autocast: the product, then a cast
        row[f"{name}_cublas_fp32_ms"] = _ms(lambda: _product(g, x).float(), reps)
        ms, tiles = _best_split_k(g, x, reps)
        row[f"{name}_split_k_err"] = _err(weight_grad(g, x, tiles), want)
        row[f"{name}_split_k_ms"] = ms
        row[f"{name}_split_k_tiles"] = _label(tiles)
        # the atomic form: one kernel adding into a zeroed buffer (the zeroing, a memset that
        # a step could issue off the backward's chain, is not in the time)
        into = torch.zeros(out_w, in_w, device=DEVICE)
        ms, tiles = _best_split_k(g, x, reps, into)
        row[f"{name}_atomic_err"] = _err(weight_grad(g, x, tiles, into.zero_()), want)
        row[f"{name}_atomic_ms"] = ms
        row[f"{name}_atomic_tiles"] = _label(tiles)
        row[f"{name}_floor_ms"] = 2 * (rows * (out_w + in_w) + out_w * in_w) / (HBM_TB_S * 1e9)
    for kind in ("cublas", "autotuned", "cublas_fp32", "split_k", "atomic", "floor"):
        row[f"layer_{kind}_ms"] = sum(row[f"{n}_{kind}_ms"] for n in widths())
    return row


def main() -> None:
    run_batches(__doc__, rows_of, "\nms per call (CUDA graph replay), bf16 operands; err: the "
                "largest difference from float64 over float64's largest value",
                "weight_grads.json")


if __name__ == "__main__":
    main()
