"""The encoder's Triton kernels: the fast paths of ``lobsurf.models``' PyTorch modules on
CUDA (the one-chunk SSD scan and its last-row form, the causal conv and its backward, the
multi-chunk scan), and what they share (``triton_support``). Each module's PyTorch
counterpart stays the CPU path and the reference its tests compare against; on CPU the
kernels run only under Triton's interpreter (the tests)."""
