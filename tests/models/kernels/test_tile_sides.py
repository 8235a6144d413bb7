"""The tl.dot tile-side rule the scan kernels take shapes by (``triton_support.is_tile_side``:
a power of two of at least 16), through each module's ``supports``: a shape the kernels
cannot tile must fall back to the PyTorch path, not reach a kernel."""

from __future__ import annotations

import pytest

pytest.importorskip("triton", reason="the kernels need Triton (dev extra on Linux)")

from lobsurf.models.kernels import ssd_window_triton  # noqa: E402
from lobsurf.models.kernels.triton_support import is_tile_side  # noqa: E402


@pytest.mark.parametrize("side,ok", [(16, True), (32, True), (64, True), (128, True),
                                     (8, False), (12, False), (24, False), (48, False),
                                     (96, False), (0, False)])
def test_tile_sides_are_powers_of_two_of_at_least_16(side: int, ok: bool) -> None:
    assert is_tile_side(side) is ok
    # headdim and d_state of the window kernels; their z product by d_model
    assert ssd_window_triton.supports(side, 64, 64, 64) is ok
    assert ssd_window_triton.supports(64, side, 64, 64) is ok
    assert ssd_window_triton.z_projection_supported(side) is ok
