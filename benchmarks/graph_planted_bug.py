"""Planted bug for the eager-vs-graph equivalence test (GPU, run in its own process).

Leaves the simulator's reset generator out of the graph's registered generators and runs
the equivalence test (tests/train/test_cuda_graph_gpu.py). The test must fail: either the
capture refuses the unregistered generator, or the replays draw other reset cursors than
the eager run. Prints PLANTED BUG CAUGHT (and exits 0) when it fails, NOT CAUGHT otherwise.
A failed capture can leave the process's CUDA RNG unusable, hence a process of its own.

    PYTHONPATH=src:. python benchmarks/graph_planted_bug.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

from lobsurf.train import loop
from tests.conftest import random_walk_books, write_store
from tests.train import test_cuda_graph_gpu as equivalence


def main() -> int:
    full = loop.step_generators
    loop.step_generators = lambda state: [g for g in full(state) if g is not state.env.generator]
    with tempfile.TemporaryDirectory() as tmp:
        store = write_store(Path(tmp) / "store", [
            random_walk_books(2000, 1), random_walk_books(1500, 2, start_ns=1_700_100_000 * 10**9)])
        try:
            equivalence.test_graphed_steps_equal_eager_steps(SimpleNamespace(path=store.path))
        except Exception as exc:  # noqa: BLE001  (any failure is the test catching the bug)
            print(f"PLANTED BUG CAUGHT: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}")
            return 0
    print("PLANTED BUG NOT CAUGHT: the equivalence test passed without the env generator")
    return 1


if __name__ == "__main__":
    sys.exit(main())
