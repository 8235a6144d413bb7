"""Synthetic data generator throughput: generate only, and generate + write a DBN file.

CPU only (numpy and zstd); ``--device`` is accepted for a uniform benchmark command line and
ignored. A burn-in day of ``BURN_IN`` snapshots is generated first; then each stage is one
timed pass by the host clock. Prints a table and writes ``bench_synth.json`` to ``--out``;
asserts that the snapshots are generated and written at the goal's rate (5M in a minute).

    python benchmarks/bench_synth.py --out bench_out            # 5M snapshots
    python benchmarks/bench_synth.py --quick --out /tmp/bench   # 300k, a few seconds
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
from pathlib import Path

from lobsurf.data.synth import SynthConfig, generate_day, write_synth

#: The goal: generate + write this many snapshots ...
GOAL_SNAPSHOTS = 5_000_000
#: ... in at most this many seconds.
GOAL_SECONDS = 60.0
#: snapshots generated before the timed passes (imports, first allocations)
BURN_IN = 10_000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--snapshots", type=int, default=GOAL_SNAPSHOTS)
    ap.add_argument("--quick", action="store_true", help="300k snapshots (CPU smoke run)")
    ap.add_argument("--device", default="cpu", help="ignored: the generator runs on the CPU")
    ap.add_argument("--out", default="bench_out")
    args = ap.parse_args()
    n = 300_000 if args.quick else args.snapshots
    cfg = SynthConfig(snapshots_per_day=n, days=1, seed=1, edge=0.2)
    for _ in generate_day(SynthConfig(snapshots_per_day=BURN_IN, days=1, seed=1, edge=0.2), 0):
        pass

    start = time.perf_counter()
    rows = sum(len(chunk) for chunk in generate_day(cfg, 0))
    generate_s = time.perf_counter() - start
    with tempfile.TemporaryDirectory() as folder:
        start = time.perf_counter()
        (path,) = write_synth(folder, cfg)
        write_s = time.perf_counter() - start
        file_mb = path.stat().st_size / 1e6
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    result = {"snapshots": rows, "generate_s": generate_s, "generate_per_s": rows / generate_s,
              "generate_write_s": write_s, "generate_write_per_s": rows / write_s,
              "file_mb": file_mb, "peak_rss_mb": peak_mb, "chunk_rows": cfg.chunk_rows}

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench_synth.json").write_text(json.dumps(result, indent=1))
    print(f"{'stage':<18}{'seconds':>9}{'snapshots/s':>14}")
    print(f"{'generate':<18}{generate_s:>9.2f}{rows / generate_s:>14,.0f}")
    print(f"{'generate + write':<18}{write_s:>9.2f}{rows / write_s:>14,.0f}")
    print(f"{rows:,} snapshots, {file_mb:.0f} MB .dbn.zst, peak RSS {peak_mb:.0f} MB")
    budget = GOAL_SECONDS * rows / GOAL_SNAPSHOTS
    assert write_s < budget, f"generate + write took {write_s:.1f} s, goal {budget:.1f} s"


if __name__ == "__main__":
    main()
