"""The step's bytes and where it sits against the device's two rooflines (lobsurf bench).

* **Bytes**: ``step_traffic`` runs one step under a dispatch mode that adds, for every
  aten op that moves data, the bytes of its distinct input tensors (read) and of its
  output tensors (written). Views, allocations and metadata ops move nothing and are left
  out; a gather reads only what it selects, and an in-place indexed write (the replay's
  ``index_copy_``) touches only the rows it writes. This is the traffic of the per-op
  (eager and graphed) step, each op a round trip through memory; a compiled step fuses
  ops and moves less, so against its time the figure is an upper bound, not a measurement.
  fp32 rows are held against the TF32 peak: the bench turns TF32 on on CUDA.
* **Peaks**: ``DEVICE_PEAKS`` holds the dense tensor-core and HBM peaks of the GPUs we
  measure on, from their vendors' data sheets; ``peaks_for`` finds a device's entry by its
  name. A device that is not listed gets no fractions (``lobsurf bench --peak-tflops``
  and ``--peak-tbs`` name them).
* **Fractions**: achieved FLOP/s (matrix products, torch.utils.flop_counter) over the
  tensor-core peak of the run's precision, achieved bytes/s over the HBM peak.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


@dataclass(frozen=True)
class DevicePeaks:
    """Dense peaks of one GPU model (no sparsity)."""

    name_contains: str
    """Matched case-insensitively against torch.cuda.get_device_name()."""
    hbm_tb_s: float
    """Memory bandwidth, TB/s (1e12 bytes per second)."""
    tf32_tflops: float
    """TF32 tensor-core peak (fp32 matrix products with TF32 on), TFLOP/s."""
    bf16_tflops: float
    """bf16 tensor-core peak, TFLOP/s."""

    def tflops(self, precision: str) -> float:
        return self.bf16_tflops if precision == "bf16" else self.tf32_tflops


#: NVIDIA data sheets (SXM parts, dense): H200 4.8 TB/s HBM3e, 989 bf16 / 494 TF32
#: TFLOP/s; H100 SXM 3.35 TB/s, 989 / 494; A100 SXM 80 GB 2.04 TB/s, 312 / 156
DEVICE_PEAKS = (
    DevicePeaks("H200", hbm_tb_s=4.8, tf32_tflops=494.0, bf16_tflops=989.0),
    DevicePeaks("H100", hbm_tb_s=3.35, tf32_tflops=494.0, bf16_tflops=989.0),
    DevicePeaks("A100", hbm_tb_s=2.04, tf32_tflops=156.0, bf16_tflops=312.0),
)

#: gathers: they read only the elements they select (their output) and their indices
_GATHERS = frozenset(("index", "index_select", "gather", "take", "embedding",
                      "take_along_dim"))
#: in-place indexed writes: they read their source values and indices and write as many
#: elements into the destination; the rest of the destination is not touched
_INDEXED_WRITES = frozenset(("index_copy_", "index_put_", "_index_put_impl_", "index_add_",
                             "scatter_", "scatter_add_", "scatter_reduce_", "index_fill_",
                             "masked_scatter_", "put_", "index_reduce_"))
#: aten ops that move no data although their schema does not mark them as views
_NO_TRAFFIC = frozenset((
    "empty", "empty_strided", "empty_like", "new_empty", "new_empty_strided", "_unsafe_view",
    "set_", "resize_", "lift_fresh", "detach", "alias", "_reshape_alias", "as_strided",
    "record_stream"))


def peaks_for(device_name: str, table: tuple[DevicePeaks, ...] = DEVICE_PEAKS
              ) -> DevicePeaks | None:
    """The first entry whose ``name_contains`` is in ``device_name`` (case-insensitive)."""
    lowered = device_name.lower()
    return next((p for p in table if p.name_contains.lower() in lowered), None)


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


@dataclass
class Traffic:
    """Bytes one step read and wrote, op by op, and the share of each op name."""

    read: int = 0
    written: int = 0
    by_op: Counter = field(default_factory=Counter)

    @property
    def total(self) -> int:
        return self.read + self.written


class _ByteCounter(TorchDispatchMode):
    def __init__(self, traffic: Traffic) -> None:
        super().__init__()
        self.traffic = traffic

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.is_view or func.overloadpacket.__name__ in _NO_TRAFFIC:
            return out
        name = func.overloadpacket.__name__
        tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        outputs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        if name in _INDEXED_WRITES:  # the destination (first argument) only where written
            read, written = _indexed_write(name, args)
        else:
            if name in _GATHERS:  # the source only where selected: as many bytes as out
                tensors = tensors[1:] + outputs
            inputs: dict[tuple[int, int, torch.dtype], int] = {}
            for t in tensors:  # an op reads a tensor passed twice once
                inputs[(t.data_ptr(), t.numel(), t.dtype)] = _nbytes(t)
            read = sum(inputs.values())
            written = sum(_nbytes(t) for t in outputs)
        self.traffic.read += read
        self.traffic.written += written
        self.traffic.by_op[name] += read + written
        return out


def _indexed_write(name: str, args: tuple) -> tuple[int, int]:
    """(bytes read, bytes written) of an in-place indexed write: its indices and values
    read, as many destination elements written (and read first where it accumulates)."""
    dest = args[0]
    if name in ("index_put_", "_index_put_impl_"):
        indices = [i for i in args[1] if i is not None]
        count, used = 1, 0
        for i in indices:  # a bool mask selects its true elements over mask.dim() dims
            count *= int(i.sum()) if i.dtype == torch.bool else i.numel()
            used += i.dim() if i.dtype == torch.bool else 1
        elements = count * math.prod(dest.shape[used:])
        accumulate = len(args) > 3 and bool(args[3])
    elif name in ("index_copy_", "index_add_", "index_reduce_"):
        elements, accumulate = args[3].numel(), name != "index_copy_"
    elif name == "index_fill_":
        dim = args[1] % max(dest.dim(), 1)
        elements = args[2].numel() * math.prod(dest.shape[:dim] + dest.shape[dim + 1:])
        accumulate = False
    elif name == "masked_scatter_":
        elements, accumulate = int(args[1].sum()), False
    elif name == "put_":
        elements, accumulate = args[1].numel(), len(args) > 3 and bool(args[3])
    else:  # scatter_, scatter_add_, scatter_reduce_: one element per index
        elements, accumulate = args[2].numel(), name != "scatter_"
    written = elements * dest.element_size()
    given = [t for t in tree_flatten(args[1:])[0] if isinstance(t, torch.Tensor)]
    return sum(_nbytes(t) for t in given) + (written if accumulate else 0), written


def step_traffic(step: Callable[[], None]) -> Traffic:
    """Bytes one call of ``step`` reads and writes, op by op (module docstring)."""
    traffic = Traffic()
    with _ByteCounter(traffic):
        step()
    return traffic


def roofline(flops: float, traffic_bytes: float, ms: float, peaks: DevicePeaks | None,
             precision: str) -> dict[str, float | None]:
    """Achieved TFLOP/s and TB/s at ``ms`` per step, and their fractions of ``peaks``."""
    seconds = ms / 1e3
    tflops, tb_s = flops / seconds / 1e12, traffic_bytes / seconds / 1e12
    return {"achieved_tflops": tflops, "achieved_tb_s": tb_s,
            "tensor_core_fraction": None if peaks is None else tflops / peaks.tflops(precision),
            "hbm_fraction": None if peaks is None else tb_s / peaks.hbm_tb_s}
