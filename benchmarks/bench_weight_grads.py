"""The weight-gradient products of one default Mamba2 layer's backward, as cuBLAS runs them
now and as Inductor's autotuned Triton templates would, against their HBM floor, on CUDA.

Why: the thirty-third session's H200 timeline put the B = 256 / 4-layer backward at about
131 us a full layer, 48 of them in six cuBLAS products, three of them split-K with their
reductions: the weight gradients, whose sum runs over all B x 64 rows into a small
[out, in] matrix. The thirty-eighth session left B = 256 / 4 layers 1.037x short of its goal
(about 50 us a step). Before a kernel is written for them, this says in a minute whether
there is time to win (the thirty-eighth session's lesson: a fused kernel written untimed
lost to cuBLAS and Inductor).

The products, per layer, with the default encoder's widths read from ``Mamba2Mixer`` (bf16
operands as autocast gives them, each a [rows, width] activation or gradient):

- ``z``: d W_z = d z^T u ([E, rows] x [rows, d_model]);
- ``xbc_dt``: d W_xbc_dt = d (xBC, dt)^T u (the in-projection's other rows, unpadded: on
  CUDA the step pads this product's output to an aligned width);
- ``out``: d W_out = d out^T n ([d_model, rows] x [rows, E]).

For each, ms per call (CUDA graph replay): ``cublas`` (``g.t() @ x``, what autograd runs),
``autotuned`` (the same under ``torch.compile(mode="max-autotune-no-cudagraphs")``:
Inductor's Triton templates, split-K among them, against cuBLAS, the fastest kept), and
``floor`` (the operands' and the output's HBM bytes at 4.8 TB/s, the H200's peak);
``autotuned_err``: its largest difference from float64, relative to float64's largest
value (cuBLAS's is ``cublas_err``). ``layer_*``: the three summed.

    python benchmarks/bench_weight_grads.py --batch 256,1024 --out OUT

Without CUDA (a dry run of the script's code, no timing worth reading) it runs on the CPU
with wall-clock timing and Inductor's default mode.
"""

from __future__ import annotations

import time

import torch

from lobsurf.models.config import EncoderConfig
from lobsurf.models.mamba2 import Mamba2Mixer

# benchmarks/ is on sys.path
from micro import graphed_ms, run_batches  # noqa: E402

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
        row[f"{name}_floor_ms"] = 2 * (rows * (out_w + in_w) + out_w * in_w) / (HBM_TB_S * 1e9)
    for kind in ("cublas", "autotuned", "floor"):
        row[f"layer_{kind}_ms"] = sum(row[f"{n}_{kind}_ms"] for n in widths())
    return row


def main() -> None:
    run_batches(__doc__, rows_of, "\nms per call (CUDA graph replay), bf16 operands; err: the "
                "largest difference from float64 over float64's largest value",
                "weight_grads.json")


if __name__ == "__main__":
    main()
