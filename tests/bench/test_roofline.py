"""The bench's byte count and rooflines (lobsurf.bench.roofline), on ops whose traffic is
known by hand."""

from __future__ import annotations

import pytest
import torch

from lobsurf.bench.roofline import DEVICE_PEAKS, DevicePeaks, peaks_for, roofline, step_traffic


def test_bytes_of_known_ops() -> None:
    x = torch.ones(1000)  # 4,000 bytes

    def step() -> None:
        y = x * 2  # reads x, writes y
        x.view(10, 100)  # a view: nothing
        torch.empty(100)  # an allocation: nothing
        _ = y + y  # reads y once, writes the sum
        x.add_(1)  # reads and writes x

    t = step_traffic(step)
    assert (t.read, t.written) == (12_000, 12_000)
    assert t.total == 24_000
    assert dict(t.by_op) == {"mul": 8_000, "add": 8_000, "add_": 8_000}


def test_mixed_dtypes_count_their_own_element_sizes() -> None:
    a = torch.ones(10, 10, dtype=torch.bfloat16)
    b = torch.ones(10, 10)
    t = step_traffic(lambda: a.float() @ b)
    # _to_copy reads 200 B (bf16) and writes 400 B; mm reads 400 + 400 B and writes 400 B
    assert (t.read, t.written) == (1_000, 800)


def test_peaks_by_device_name() -> None:
    assert peaks_for("NVIDIA H200").name_contains == "H200"
    assert peaks_for("NVIDIA H100 80GB HBM3").name_contains == "H100"
    assert peaks_for("cpu (AMD EPYC)") is None
    assert all(p.hbm_tb_s > 0 and p.bf16_tflops >= p.tf32_tflops for p in DEVICE_PEAKS)


def test_roofline_fractions() -> None:
    peaks = DevicePeaks("X", hbm_tb_s=2.0, tf32_tflops=100.0, bf16_tflops=200.0)
    r = roofline(flops=1e12, traffic_bytes=1e12, ms=1000.0, peaks=peaks, precision="bf16")
    assert r == pytest.approx({"achieved_tflops": 1.0, "achieved_tb_s": 1.0,
                               "tensor_core_fraction": 0.005, "hbm_fraction": 0.5})
    assert roofline(1e12, 1e12, 1000.0, peaks, "fp32")["tensor_core_fraction"] == 0.01
    assert roofline(1e12, 1e12, 1000.0, None, "fp32")["hbm_fraction"] is None


def test_gathers_and_indexed_writes_count_only_the_rows_they_touch() -> None:
    table = torch.zeros(1000, 8)  # 32,000 bytes, of which the ops below touch 4 rows
    rows = torch.tensor([3, 7, 9, 11])  # 32 bytes
    values = torch.ones(4, 8)  # 128 bytes

    t = step_traffic(lambda: table[rows])  # index: reads the 4 rows and the indices
    assert (t.read, t.written) == (128 + 32, 128)
    t = step_traffic(lambda: table.index_copy_(0, rows, values))
    assert (t.read, t.written) == (32 + 128, 128)
    two = torch.tensor(2.0)
    t = step_traffic(lambda: table.index_put_((rows,), two))  # one value into 4 rows
    assert (t.read, t.written) == (32 + 4, 128)
    t = step_traffic(lambda: table.index_fill_(0, rows, 1.0))
    assert (t.read, t.written) == (32, 128)
    t = step_traffic(lambda: table.index_put_((rows,), values, accumulate=True))
    assert (t.read, t.written) == (32 + 128 + 128, 128)  # read-modify-write of the rows
    flat, ones = torch.zeros(100), torch.ones(4)
    t = step_traffic(lambda: flat.scatter_add_(0, rows, ones))
    assert (t.read, t.written) == (32 + 16 + 16, 16)
