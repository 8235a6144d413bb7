"""torch.compile of the encoders (``train.compile``): the Mamba2 layers are most of the step.

``compile_encoders_(state)`` compiles the online and the target network's encoder in place
(``nn.Module.compile``: parameter names and checkpoints are unchanged), with static shapes.
Each encoder compiles once per (batch shape, grad mode) it meets: the online one for acting
(B, no grad) and learning (B, grad), the target one for s and s' (2B, no grad). The first
calls compile (tens of seconds on a GPU); the graphed step's eager warm-up makes them, so
the capture records Inductor's kernels. PERFORMANCE.md 3.2 measured 1.6x on the whole step.
"""

from __future__ import annotations

from typing import Any


def compile_encoders_(state: Any) -> None:
    """Compile ``state.online.encoder`` and ``state.target.encoder`` in place."""
    for net in (state.online, state.target):
        net.encoder.compile(dynamic=False)
