"""torch.compile of the networks' forward pieces (``train.compile``).

``compile_networks_(state)`` replaces, on the online and the target network, the three
methods the step calls (``embed``: features, normaliser and encoder; ``heads``; ``q_logits``)
with ``torch.compile`` versions bound to the same module, as instance attributes: parameter
names, ``state_dict`` and checkpoints are unchanged, and the module's own class methods stay
the eager reference. Compiling ``embed`` rather than the encoder alone puts the per-snapshot
features (element-wise chains over [B, K, F]) into the encoder's Inductor graph, and
``heads`` fuses the heads' small element-wise ops. Static shapes; ``fullgraph`` by default,
so a graph break is an error at the first call instead of a silent eager island inside the
CUDA graph. Each piece compiles once per (batch shape, grad mode, autocast state) it meets;
the graphed step's eager warm-up makes them, so the capture records Inductor's kernels.
PERFORMANCE.md 3.2 measured 1.6x on the whole step for the encoder alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

#: the AgentNetwork methods the training step calls, compiled in place
COMPILED_METHODS = ("embed", "heads", "q_logits")


@dataclass(frozen=True)
class CompileConfig:
    """How the networks are compiled."""

    backend: str = "inductor"
    """torch.compile backend ("eager" traces with Dynamo only: what CPU tests use)."""
    fullgraph: bool = True
    """Refuse graph breaks (an error at the first call names the op)."""
    dynamic: bool = False
    """Static shapes: the step's shapes never change."""


def compile_networks_(state: Any, cfg: CompileConfig = CompileConfig()) -> None:
    """Compile ``COMPILED_METHODS`` of ``state.online`` and ``state.target`` in place."""
    for net in (state.online, state.target):
        for name in COMPILED_METHODS:
            if name in vars(net):  # already compiled (or patched): leave it
                continue
            setattr(net, name, torch.compile(getattr(net, name), backend=cfg.backend,
                                             fullgraph=cfg.fullgraph, dynamic=cfg.dynamic))


def compiled(net: torch.nn.Module) -> bool:
    """Whether ``compile_networks_`` compiled ``net``."""
    return all(name in vars(net) for name in COMPILED_METHODS)
