"""The encoder's Triton kernels: the fast paths of ``lobsurf.models``' PyTorch modules on
CUDA (the one-chunk SSD scan and its last-row form, the causal conv's forward, the conv +
dt softplus with its backward), and what they share (``triton_support``). Each module's
PyTorch counterpart stays the CPU path and the reference its tests compare against; on CPU
the kernels run only under Triton's interpreter (the tests). Each module keeps its launch
constants (warps, block sizes) beside its kernels.

Kernels written, measured slower than this path in the training step and removed are
named in ``lobsurf.models.config.RETIRED_FIELDS``, with their figures in
benchmarks/RESULTS.md, Defaults decided by measurement: the multi-chunk scan, the conv's
own backward kernels, the conv + SiLU and dt softplus inside the gated scan, the whole
block as one kernel, the in-projection with the conv, the output side under autograd.
Read why before writing one of them again."""
