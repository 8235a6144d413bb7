"""Torch device choice for the commands: the default, and one clear error for a bad one;
TF32 for CUDA runs; device values copied to the host without a host sync (``HostCopy``);
the device's name as a run or a benchmark records it.

Kept apart from the commands so each one checks ``--device`` the same way before it loads
data (a misspelt device or ``cuda`` on a CPU-only build must not end in a traceback).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lobsurf.errors import UserError

if TYPE_CHECKING:
    import torch


def resolve_device(name: str | None) -> str:
    """``name`` (None or ``"auto"``: ``cuda`` when available, else ``cpu``) after checking
    it works.

    Raises:
        UserError: the string is not a torch device, or that device cannot be used here.
    """
    import torch

    auto = name in (None, "", "auto")
    device = ("cuda" if torch.cuda.is_available() else "cpu") if auto else name
    try:
        torch.empty(0, device=device)
    except (RuntimeError, AssertionError) as exc:
        # torch says why on the last line (e.g. "Torch not compiled with CUDA enabled").
        why = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        raise UserError(f"device {device!r} is not usable: {why}") from exc
    return device


def enable_tf32() -> None:
    """TF32 matrix products for a CUDA run.

    Set through ``torch.set_float32_matmul_precision("high")``, which keeps the legacy and
    the per-backend settings consistent (``torch.backends.cuda.matmul.fp32_precision`` reads
    "tf32" after it): Inductor's GEMM autotuning still reads the legacy getter, and that
    getter raises once only the per-backend API has set a precision (pytorch/pytorch#196728).
    """
    import torch

    torch.set_float32_matmul_precision("high")


def device_name(device: torch.device | str) -> str:
    """The device as a run records it: the GPU's name, or the CPU's with its threads."""
    import platform

    import torch

    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"cpu ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"


class HostCopy:
    """A device tensor's values on their way to the host without a host sync: on CUDA a
    pinned buffer filled by a non-blocking copy behind an event on the current stream (so
    it holds the values as of the call, in stream order, while later work goes on); a host
    tensor is taken as it is. ``wait`` returns the buffer once it is filled. Callers pass a
    tensor of their own (a fresh ``cat`` or ``stack``), so nothing else changes it."""

    def __init__(self, fresh: torch.Tensor) -> None:
        import torch

        self._ready = None
        if fresh.is_cuda:
            self.tensor = torch.empty(fresh.shape, dtype=fresh.dtype, pin_memory=True)
            self.tensor.copy_(fresh, non_blocking=True)
            self._ready = torch.cuda.Event()
            self._ready.record(torch.cuda.current_stream(fresh.device))
        else:
            self.tensor = fresh

    def wait(self) -> torch.Tensor:
        """The host tensor, once the device's copy into it has finished."""
        if self._ready is not None:
            self._ready.synchronize()
        return self.tensor
