"""The checkpoint file's layout (lobsurf.training.recovery.checkpoint_file): every tensor comes back
exactly, with its dtype, shape and own storage; the packed bytes are the state at ``pack``;
files of the earlier single-torch.save layout still load; bad files are refused."""

from __future__ import annotations

import io

import pytest
import torch

from lobsurf.training.recovery.checkpoint_file import (ALIGN, MAGIC, TENSOR_REF, pack, unpack,
                                                      unpack_file)

WRITE = 1000  # a chunk size that splits buffers mid-way


def _payload() -> dict:
    g = torch.Generator().manual_seed(3)
    return {
        "format": "x", "step": 7, "lr": 3e-4, "none": None, "flags": (True, False),
        "names": ["a", "b"], "ints": {0: 1, 2: 3},
        "weights": {"w": torch.randn(5, 3, generator=g), "b": torch.randn(3, generator=g)},
        "half": torch.randn(4, 7, generator=g).to(torch.bfloat16),
        "mask": torch.rand(9, generator=g) > 0.5,
        "count": torch.tensor(12, dtype=torch.int64),
        "empty": torch.empty(0, 4),
        "strided": torch.arange(24.0).view(4, 6)[:, ::2],  # not contiguous
        "rng": g.get_state(),
        "nested": [{"t": torch.ones(2, 2, dtype=torch.float64)}, (torch.zeros(3),)],
    }


def _bytes(payload) -> bytearray:
    return bytearray(b"".join(bytes(c) for c in pack(payload).chunks(WRITE)))


def _same(a, b) -> None:
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape
        assert torch.equal(a, b)
    elif isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            _same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y)
    else:
        assert a == b and type(a) is type(b)


def test_a_payload_comes_back_exactly_each_tensor_with_its_own_storage():
    payload = _payload()
    data = _bytes(payload)
    assert data.startswith(MAGIC)
    back = unpack(data)
    _same(payload, back)
    ptrs = [t.untyped_storage().data_ptr() for t in
            (back["weights"]["w"], back["weights"]["b"], back["nested"][1][0])]
    assert len(set(ptrs)) == 3  # packed together in the file, apart once loaded
    back["weights"]["w"].add_(1.0)
    assert torch.equal(back["weights"]["b"], payload["weights"]["b"])


def test_buffers_start_aligned_and_the_header_holds_no_tensor_data():
    payload = {"a": torch.randn(1000), "b": torch.randint(0, 9, (333,))}
    packed = pack(payload)
    assert len(packed.buffers) == 2  # one per dtype
    header = torch.load(io.BytesIO(packed.header), weights_only=True)
    assert header["tree"] == {"a": (TENSOR_REF, 0), "b": (TENSOR_REF, 1)}
    assert len(packed.header) < 2000
    chunks = [bytes(c) for c in packed.chunks(WRITE)]
    assert len(chunks[0]) % ALIGN == 0
    data = bytearray(b"".join(chunks))
    first = len(chunks[0])
    assert data[first:first + 4000] == bytes(payload["a"].numpy().tobytes())


def test_the_packed_bytes_are_the_state_when_packed():
    # the loop goes on changing the state while the writer writes (module docstring)
    state = {"w": torch.zeros(100), "n": torch.zeros((), dtype=torch.int64)}
    packed = pack(state)
    state["w"].fill_(5.0)
    state["n"].fill_(9)
    back = unpack(bytearray(b"".join(bytes(c) for c in packed.chunks(WRITE))))
    assert torch.equal(back["w"], torch.zeros(100)) and int(back["n"]) == 0


def test_a_file_of_the_earlier_layout_still_loads(tmp_path):
    payload = _payload()
    path = tmp_path / "old.pt"
    torch.save(payload, path)
    _same(payload, unpack_file(path))


def test_bad_payloads_and_files_are_refused(tmp_path):
    with pytest.raises(ValueError, match="cannot hold"):
        pack({"looks_like_a_ref": (TENSOR_REF, 0)})
    data = _bytes(_payload())
    with pytest.raises(ValueError, match="shorter"):
        unpack(data[:-200])
    with pytest.raises(ValueError, match="not a lobsurf checkpoint"):
        unpack(bytearray(b"junk" + bytes(100)))
