"""A bounds check for Triton kernels run in Triton's CPU interpreter (test helper).

On a GPU an unmasked load or store past a tensor's end is an illegal memory access only
when it leaves mapped memory, so it can pass one run and fault the next. The interpreter
reads host memory without any check at all. ``bounds_checked()`` patches the interpreter
for the duration of a ``with``: each launch records the byte range of every tensor argument,
and every load and store, at each lane its mask enables, must address an element inside one
of those ranges; otherwise the launch raises ``OutOfBounds`` naming the access.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np
import torch


class OutOfBounds(AssertionError):
    """A kernel load or store left every tensor argument of its launch."""


def _byte_range(t: torch.Tensor) -> tuple[int, int]:
    """[first byte, one past the last byte] that the view ``t`` can address."""
    if t.numel() == 0:
        return t.data_ptr(), t.data_ptr()
    last = sum((size - 1) * stride for size, stride in zip(t.shape, t.stride()))
    return t.data_ptr(), t.data_ptr() + (last + 1) * t.element_size()


def _tensors(arg) -> list[torch.Tensor]:
    if isinstance(arg, torch.Tensor):
        return [arg]
    if isinstance(arg, (tuple, list)):
        return [t for a in arg for t in _tensors(a)]
    return []


@contextlib.contextmanager
def bounds_checked() -> Iterator[list[str]]:
    """Check every interpreted launch inside the block; yields the list of launches checked
    (kernel names), so a test can assert that the kernel it meant to check ran."""
    from triton.runtime import interpreter

    ranges: list[tuple[int, int]] = []
    launches: list[str] = []
    builder = interpreter.InterpreterBuilder
    executor = interpreter.GridExecutor
    saved = (executor._init_args_hst, builder.create_masked_load, builder.create_masked_store)

    def init_args(self, args_dev, kwargs):
        args_hst, kwargs_hst = saved[0](self, args_dev, kwargs)
        ranges.clear()
        for arg in list(args_hst) + list(kwargs_hst.values()):
            ranges.extend(_byte_range(t) for t in _tensors(arg))
        launches.append(self.fn.__name__)
        return args_hst, kwargs_hst

    def check(kind: str, ptrs, mask, itemsize: int) -> None:
        addr = np.asarray(ptrs.data, dtype=np.uint64)
        on = np.broadcast_to(np.asarray(mask.data, dtype=bool), addr.shape)
        active = addr[on].astype(np.int64)
        inside = np.zeros(active.shape, dtype=bool)
        for start, end in ranges:
            inside |= (active >= start) & (active + itemsize <= end)
        if not inside.all():
            bad = active[~inside]
            raise OutOfBounds(f"{launches[-1]}: {bad.size} of {active.size} {kind} lanes "
                              f"outside every tensor argument (first address {bad[0]:#x}; "
                              f"arguments {[(hex(s), e - s) for s, e in ranges]})")

    # The trailing cache/eviction/volatile arguments differ between Triton releases (3.5 passes an
    # eviction policy, 3.9 does not): only the leading pointer, value and mask are read here, the
    # rest pass through untouched.
    def load(self, ptrs, mask, *rest, **options):
        dtype = interpreter._get_np_dtype(ptrs.get_element_ty())
        check("load", ptrs, mask, np.dtype(dtype).itemsize)
        return saved[1](self, ptrs, mask, *rest, **options)

    def store(self, ptrs, value, mask, *rest, **options):
        dtype = interpreter._get_np_dtype(ptrs.get_element_ty())
        check("store", ptrs, mask, np.dtype(dtype).itemsize)
        return saved[2](self, ptrs, value, mask, *rest, **options)

    executor._init_args_hst = init_args
    builder.create_masked_load, builder.create_masked_store = load, store
    try:
        yield launches
    finally:
        executor._init_args_hst = saved[0]
        builder.create_masked_load, builder.create_masked_store = saved[1], saved[2]
