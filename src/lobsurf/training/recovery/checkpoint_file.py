"""A checkpoint file's bytes: the payload's tensors packed into one raw buffer per dtype
behind a small ``torch.save`` header, so that taking a checkpoint needs no host sync and
writing it needs no pickling of tensor data.

    MAGIC                     b"lobsurf-checkpoint-2\\n"
    header length             8 bytes, little-endian
    header                    torch.save({"tree": the payload with each tensor replaced by
                              (TENSOR_REF, i), "tensors": [(buffer, start, shape)],
                              "buffers": [(dtype name, numel)]})  (weights_only-loadable)
    buffers                   each one's raw bytes, starting at a multiple of ALIGN bytes

Why (issue 9, H200 at B = 16): ``torch.save`` of the whole payload held the GIL for ~26 ms
and its host copies synchronised the device, so each checkpoint stalled the graphed loop
~50 ms. ``pack`` runs on the loop's thread: device tensors are concatenated per dtype on
the device and copied into pinned host memory without blocking, behind an event, and only
the small tree of names, numbers and shapes is pickled. ``Packed.chunks``, on the writer's
thread, waits for that event and hands out views of the buffers: hashing and file writes
of large buffers release the GIL. The copies run in stream order, so the buffers hold the
state as of ``pack`` even while the loop goes on replaying steps. PyTorch's host allocator
keeps freed pinned blocks for reuse, so a CUDA run holds one payload's worth of pinned host
memory from its first checkpoint on (the peak the earlier pageable copies reached at each
checkpoint; lobsurf.training.faults.resources counts it).

Files written before this layout (one ``torch.save`` zip) still load (``unpack_file``).
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from lobsurf.devices import HostCopy

MAGIC = b"lobsurf-checkpoint-2\n"
#: bytes of the header-length field
_LENGTH_BYTES = 8
#: each buffer starts at a multiple of this many bytes of the file
ALIGN = 64
#: what stands for the tensor numbered i in the header's tree: (TENSOR_REF, i)
TENSOR_REF = "\x00lobsurf.tensor"


def map_leaves(tree: Any, is_leaf: Callable[[Any], bool], fn: Callable[[Any], Any]) -> Any:
    """``tree`` (dicts, lists, tuples) with every node where ``is_leaf`` holds replaced by
    ``fn(node)``, in order."""
    if is_leaf(tree):
        return fn(tree)
    if isinstance(tree, dict):
        return {k: map_leaves(v, is_leaf, fn) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(map_leaves(v, is_leaf, fn) for v in tree)
    return tree


def map_tensors(tree: Any, fn: Callable[[torch.Tensor], Any]) -> Any:
    """``tree`` with every tensor t replaced by ``fn(t)``, in order."""
    return map_leaves(tree, lambda node: isinstance(node, torch.Tensor), fn)


def _is_ref(value: Any) -> bool:
    return (isinstance(value, tuple) and len(value) == 2 and value[0] == TENSOR_REF
            and isinstance(value[1], int))


def _refuse(ref: Any) -> Any:
    # a payload holding the reference's own shape would be misread when unpacked
    raise ValueError(f"a checkpoint payload cannot hold the tuple {ref!r}")


def _padding(offset: int) -> int:
    return -offset % ALIGN


@dataclass
class Packed:
    """A payload ready to write: the pickled header and the host buffers on their way."""

    header: bytes
    buffers: list[HostCopy]

    def chunks(self, size: int) -> Iterator[memoryview]:
        """The file's bytes, at most ``size`` at a time (once the copies have finished)."""
        buffers = [copy.wait() for copy in self.buffers]
        head = MAGIC + len(self.header).to_bytes(_LENGTH_BYTES, "little") + self.header
        yield memoryview(head + bytes(_padding(len(head))))
        for buffer in buffers:
            raw = memoryview(buffer.view(torch.uint8).numpy()) if buffer.numel() else b""
            for start in range(0, len(raw), size):
                yield raw[start:start + size]
            if _padding(len(raw)):
                yield memoryview(bytes(_padding(len(raw))))


def pack(payload: Any) -> Packed:
    """``payload``'s tensors copied into one host buffer per (device, dtype) without a host
    sync (module docstring), and the rest pickled; later changes to the tensors do not
    reach the buffers."""
    map_leaves(payload, _is_ref, _refuse)
    leaves: list[torch.Tensor] = []

    def ref(t: torch.Tensor) -> tuple[str, int]:
        leaves.append(t.detach())
        return (TENSOR_REF, len(leaves) - 1)
    tree = map_tensors(payload, ref)
    groups: dict[tuple[torch.device, torch.dtype], list[int]] = {}
    for i, t in enumerate(leaves):
        groups.setdefault((t.device, t.dtype), []).append(i)
    tensors: list[tuple[int, int, tuple[int, ...]]] = [(0, 0, ())] * len(leaves)
    buffers, described = [], []
    for (_, dtype), members in groups.items():
        start = 0
        for i in members:
            tensors[i] = (len(buffers), start, tuple(leaves[i].shape))
            start += leaves[i].numel()
        # a copy of its own, on its device
        buffers.append(HostCopy(torch.cat([leaves[i].reshape(-1) for i in members])))
        described.append((str(dtype).removeprefix("torch."), start))
    header = io.BytesIO()
    torch.save({"tree": tree, "tensors": tensors, "buffers": described}, header)
    return Packed(header.getvalue(), buffers)


def _dtype(name: str) -> torch.dtype:
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        # the file's content is wrong, not a caller's argument
        raise ValueError(f"unknown tensor dtype {name!r} in a checkpoint")  # noqa: TRY004
    return dtype


def unpack(data: bytearray) -> Any:
    """The payload ``pack`` wrote into ``data`` (a file's bytes); each tensor has its own
    storage."""
    if not data.startswith(MAGIC):
        raise ValueError("not a lobsurf checkpoint file")
    at = len(MAGIC) + _LENGTH_BYTES
    length = int.from_bytes(data[len(MAGIC):at], "little")
    header = torch.load(io.BytesIO(bytes(data[at:at + length])), map_location="cpu",
                        weights_only=True)
    at += length
    at += _padding(at)
    flats = []
    for name, numel in header["buffers"]:
        dtype = _dtype(name)
        nbytes = numel * dtype.itemsize
        if at + nbytes > len(data):
            raise ValueError("checkpoint file shorter than its header says")
        flats.append(torch.frombuffer(data, dtype=dtype, count=numel, offset=at)
                     if numel else torch.empty(0, dtype=dtype))
        at += nbytes + _padding(nbytes)
    leaves = [flats[b][start:start + math.prod(shape)].view(shape).clone()
              for b, start, shape in header["tensors"]]
    return map_leaves(header["tree"], _is_ref, lambda ref: leaves[ref[1]])


def unpack_file(path: Path) -> Any:
    """The payload of a checkpoint file, this layout or the earlier single ``torch.save``."""
    data = bytearray(path.read_bytes())
    if data.startswith(MAGIC):
        return unpack(data)
    return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
