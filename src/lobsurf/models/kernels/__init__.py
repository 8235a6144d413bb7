"""The encoder's Triton kernels: the fast paths of ``lobsurf.models``' PyTorch modules on
CUDA (the one-chunk SSD scan and its last-row form, the causal conv and its backward, the
multi-chunk scan), and what they share (``triton_support``). Each module's PyTorch
counterpart stays the CPU path and the reference its tests compare against; on CPU the
kernels run only under Triton's interpreter (the tests).

Kernels written, measured slower than this path in the training step and removed are
listed with their figures in ``lobsurf.models.config.RETIRED_FIELDS`` and in
benchmarks/RESULTS.md (the twenty-sixth session's table, the thirty-eighth's entry): the
conv + SiLU and dt softplus inside the gated scan (written twice), the whole block as one
kernel, the in-projection with the conv, the output side under autograd. Read why before
writing one of them again."""
