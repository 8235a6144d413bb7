"""Torch device choice for the commands: the default, and one clear error for a bad one.

Kept apart from the commands so each one checks ``--device`` the same way before it loads
data (a misspelt device or ``cuda`` on a CPU-only build must not end in a traceback).
"""

from __future__ import annotations

from lobsurf.errors import UserError


def resolve_device(name: str | None) -> str:
    """``name`` (None: ``cuda`` when available, else ``cpu``) after checking it works.

    Raises:
        UserError: the string is not a torch device, or that device cannot be used here.
    """
    import torch

    device = name or ("cuda" if torch.cuda.is_available() else "cpu")
    try:
        torch.empty(0, device=device)
    except (RuntimeError, AssertionError) as exc:
        # torch says why on the last line (e.g. "Torch not compiled with CUDA enabled").
        why = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        raise UserError(f"device {device!r} is not usable: {why}") from exc
    return device
