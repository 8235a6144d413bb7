"""Ingest throughput and peak memory against databento-dbn's raw decode of the same file.

Usage:
    python benchmarks/bench_ingest.py --snapshots 5000000 --out bench_out/
    python benchmarks/bench_ingest.py --snapshots 200000 --small 50000 --out /tmp/bingest
        (the script's check: files this small are mostly start-up, so the goals are not
        checked below ``GOAL_MIN_SNAPSHOTS``)

Writes synthetic MBP-10 days with ``lobsurf synth`` (one file per size), then, each in a
fresh subprocess so peak RSS is its own:

* ``raw``    databento-dbn alone: stream-decompress + ``DBNDecoder.decode()`` of every record
             (the official decode, building one record object each; nothing else).
* ``ingest`` ``lobsurf.data.store.ingest.ingest`` of the same file into a store (decode, validate,
             segment, write).

Each measurement is one pass over the file in a fresh process, timed by the host clock
from the first read to the last write (no burn-in: a cold start is what ingest pays).
Reports records/s of the raw decode, snapshots/s of ingest, the ratio of their speeds over
the same file (raw seconds / ingest seconds; goal >= 0.5) and peak RSS for a small and the
large file (goal: ingest peak memory flat in file size). The files hold trade records (action
T) besides the snapshots: the decode counts every record, ingest stores the snapshots and
the trades. Prints a table last and writes JSON; asserts that ingest stored every snapshot
and the decode read at least as many records, and the goals on large files.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

#: the goals are checked on files of at least this many snapshots
GOAL_MIN_SNAPSHOTS = 1_000_000

RAW = r"""
import sys, time, resource, zstandard, databento_dbn
path = sys.argv[1]
t = time.perf_counter(); n = 0
decoder = databento_dbn.DBNDecoder()
with open(path, "rb") as f:
    reader = zstandard.ZstdDecompressor().stream_reader(f)
    while True:
        block = reader.read(1 << 22)
        if not block:
            break
        decoder.write(block)
        n += sum(1 for r in decoder.decode() if not isinstance(r, databento_dbn.Metadata))
print(n, time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""

INGEST = r"""
import sys, time, resource, shutil
from lobsurf.data.store.ingest import ingest
path, out = sys.argv[1], sys.argv[2]
shutil.rmtree(out, ignore_errors=True)
t = time.perf_counter()
m = ingest([path], out)
print(m.snapshots, time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def measure(code: str, *args: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code, *args], check=True, capture_output=True,
                         text=True).stdout.split()
    n, seconds, rss_kb = int(out[0]), float(out[1]), int(out[2])
    # n: records decoded (raw) or snapshots stored (ingest)
    return {"count": n, "seconds": seconds, "per_s": n / seconds, "peak_rss_mb": rss_kb / 1024}


def make_file(folder: Path, snapshots: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    files = sorted(folder.glob("*.mbp-10.dbn.zst"))
    if not files:
        subprocess.run([sys.executable, "-m", "lobsurf.cli", "synth", "--out", str(folder),
                        "--snapshots", str(snapshots), "--days", "1", "--seed", "7"], check=True)
        files = sorted(folder.glob("*.mbp-10.dbn.zst"))
    return files[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--snapshots", type=int, default=5_000_000)
    ap.add_argument("--small", type=int, default=500_000)
    ap.add_argument("--out", default="bench_out")
    args = ap.parse_args()
    out = Path(args.out)
    rows = []
    for size in (args.small, args.snapshots):
        path = make_file(out / f"synth_{size}", size)
        raw = measure(RAW, str(path))
        ing = measure(INGEST, str(path), str(out / f"store_{size}"))
        rows.append({"file_snapshots": size, "file_mb": path.stat().st_size / 2**20,
                     "raw": raw, "ingest": ing, "ratio": raw["seconds"] / ing["seconds"]})
    result = {"machine": platform.platform(), "processor": platform.processor(),
              "python": platform.python_version(), "date": time.strftime("%Y-%m-%d"), "rows": rows}
    (out / "bench_ingest.json").write_text(json.dumps(result, indent=1))
    print(f"{'snapshots':>10} {'file MB':>8} {'raw rec/s':>12} {'ingest snap/s':>14} "
          f"{'ratio':>6} {'raw RSS MB':>10} {'ingest RSS MB':>13}")
    for r in rows:
        print(f"{r['file_snapshots']:>10,} {r['file_mb']:>8.1f} {r['raw']['per_s']:>12,.0f} "
              f"{r['ingest']['per_s']:>14,.0f} {r['ratio']:>6.2f} {r['raw']['peak_rss_mb']:>10.0f} "
              f"{r['ingest']['peak_rss_mb']:>13.0f}")
    for r in rows:
        assert r["ingest"]["count"] == r["file_snapshots"] <= r["raw"]["count"], r
    small, large = rows
    if large["file_snapshots"] < GOAL_MIN_SNAPSHOTS:
        print(f"goals not checked: under {GOAL_MIN_SNAPSHOTS:,} snapshots")
        return
    assert large["ratio"] >= 0.5, "ingest slower than half of raw decode"
    assert large["ingest"]["peak_rss_mb"] < 1.5 * small["ingest"]["peak_rss_mb"] + 64, \
        "ingest peak memory grows with file size"
    print("goals met: ingest >= 0.5 of raw decode, peak memory flat in file size")


if __name__ == "__main__":
    main()
