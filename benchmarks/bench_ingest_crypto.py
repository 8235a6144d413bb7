"""Ingest time of a day of Binance ``depth@100ms`` for one symbol (generated, not recorded).

Usage:
    python benchmarks/bench_ingest_crypto.py --out /tmp/bench_crypto
    python benchmarks/bench_ingest_crypto.py --events 86400 --out /tmp/bench_crypto_small

Writes (once, into ``--out``) a generated recording in the format hftbacktest's collector
writes: gzip, one ``<receive time ns> <JSON>`` line per message, the REST snapshot
(``--snapshot-levels`` a side) first, then ``--events`` combined-stream diff-depth events
(864,000 = a day at 100 ms), each updating a Poisson number of levels (mean
``--levels-per-event``; 36 is what the recorded BTCUSDT spot stream of hftbacktest's examples
averages) at distances from the top drawn from an exponential, 40 % of them removals, sizes
that repeat about as often as recorded ones (``level_sizes``), the mid a random walk. Prices and sizes are written as Binance spot writes them (8 decimals).

Then ingests it in a fresh process (``lobsurf.data.store.ingest.ingest``: parse, rebuild the
book by the diff-depth procedure, one 10-level row per event, validate, write), timed by
the host clock, with its CPU time (user + system, all threads: the gzip thread runs beside
the parser) and peak RSS, and the machine's load average after the run (a shared machine's
other work slows the wall clock). The goal (under a minute on 2 cores for a day) is
reported, not asserted: this is a measurement, not a test. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np

INGEST = r"""
import sys, time, resource, shutil
from lobsurf.data.store.ingest import ingest
path, out = sys.argv[1], sys.argv[2]
shutil.rmtree(out, ignore_errors=True)
t = time.perf_counter()
m = ingest([path], out)
wall = time.perf_counter() - t
use = resource.getrusage(resource.RUSAGE_SELF)
print(m.snapshots, wall, use.ru_maxrss, m.skipped.get("depth_gap", 0), use.ru_utime + use.ru_stime,
      m.cross_checks.get("book_starts", 0))
"""
#: 2024-08-08 00:00 UTC in ns, the generated day's start
START_NS = 1_723_075_200 * 10**9
TICK = 1  # cents: prices are integers of 0.01


#: share of level updates that remove the level (0.48 in the recorded BTCUSDT spot stream,
#: 0.22 USD-M); the rest set a size that is a sum of a few orders, most of round sizes
REMOVED = 0.4
ROUND_ORDERS = np.array([1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10_000, 100_000])


def level_sizes(rng: np.random.Generator, n: int) -> np.ndarray:
    """Sizes in units of 0.00001: each the sum of 1 + Poisson(1) orders, 65 % of them
    round sizes (0.00001 .. 1 BTC), the rest lognormal; about 1 in 6 size texts is new, as
    in the recorded stream."""
    orders = 1 + rng.poisson(1.0, n)
    total = np.zeros(n, np.int64)
    for k in range(int(orders.max())):
        live = orders > k
        round_size = ROUND_ORDERS[rng.integers(0, len(ROUND_ORDERS), n)]
        odd = np.maximum(1, rng.lognormal(6.0, 2.0, n)).astype(np.int64)
        total += np.where(live, np.where(rng.random(n) < 0.65, round_size, odd), 0)
    return total


def _px(cents: int) -> str:
    return f"{cents // 100}.{cents % 100:02d}000000"


def _sz(units: int) -> str:  # units of 0.00001
    return f"{units // 100_000}.{units % 100_000:05d}000"


def write_recording(path: Path, events: int, levels_per_event: float, snapshot_levels: int,
                    seed: int) -> None:
    """The generated recording (module doc)."""
    rng = np.random.default_rng(seed)
    mid = 6_000_000  # 60,000.00 in cents
    update_id = 50_000_000_000
    books = {"b": {}, "a": {}}
    for side, sign in (("b", -1), ("a", 1)):
        for k in range(snapshot_levels):
            books[side][mid + sign * (1 + k)] = int(rng.integers(1, 500_000))
    with gzip.open(path, "wt", compresslevel=1) as out:
        snapshot = {"lastUpdateId": update_id,
                    "bids": [[_px(p), _sz(s)] for p, s in sorted(books["b"].items(), reverse=True)],
                    "asks": [[_px(p), _sz(s)] for p, s in sorted(books["a"].items())]}
        out.write(f"{START_NS} {json.dumps(snapshot, separators=(',', ':'))}\n")
        counts = rng.poisson(levels_per_event, events).clip(1)
        steps = rng.integers(-1, 2, events)
        for i in range(events):
            mid += int(steps[i])
            changes = {"b": [], "a": []}
            # the level the mid stepped onto is removed: the book never crosses (bids stay
            # below the mid, asks above; the mid moves one tick at most)
            for key in ("b", "a"):
                if books[key].pop(mid, None) is not None:
                    changes[key].append([_px(mid), "0.00000000"])
            n = int(counts[i])
            sides = rng.integers(0, 2, n)
            depth = rng.exponential(20.0, n).astype(np.int64)
            remove = rng.random(n) < REMOVED
            sizes = level_sizes(rng, n)
            for side, d, gone, size in zip(sides, depth, remove, sizes):
                key = "b" if side == 0 else "a"
                price = mid - 1 - int(d) if key == "b" else mid + 1 + int(d)
                if gone:
                    books[key].pop(price, None)
                else:
                    books[key][price] = int(size)
                changes[key].append([_px(price), "0.00000000" if gone else _sz(int(size))])
            n = len(changes["b"]) + len(changes["a"])
            first = update_id + 1
            update_id += n
            event_ns = START_NS + (i + 1) * 100_000_000
            data = {"e": "depthUpdate", "E": event_ns // 1_000_000, "s": "BTCUSDT", "U": first,
                    "u": update_id, "b": changes["b"], "a": changes["a"]}
            message = {"stream": "btcusdt@depth@100ms", "data": data}
            out.write(f"{event_ns + 5_000_000} {json.dumps(message, separators=(',', ':'))}\n")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, type=Path, help="folder for the file and the store")
    p.add_argument("--events", type=int, default=864_000, help="depth events (864,000 = a day)")
    p.add_argument("--levels-per-event", type=float, default=36.0)
    p.add_argument("--snapshot-levels", type=int, default=1000)
    p.add_argument("--seed", type=int, default=7)
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"btcusdt_depth100ms_{args.events}_{args.levels_per_event:g}.gz"
    if not path.is_file():
        tmp = path.with_suffix(".tmp")
        write_recording(tmp, args.events, args.levels_per_event, args.snapshot_levels, args.seed)
        os.replace(tmp, path)
    out = subprocess.run([sys.executable, "-c", INGEST, str(path), str(args.out / "store")],
                         check=True, capture_output=True, text=True).stdout.split()
    rows, seconds, rss_kb, gaps = int(out[0]), float(out[1]), int(out[2]), int(out[3])
    cpu = float(out[4])
    with open("/proc/loadavg") as f:
        load = float(f.read().split()[0])
    result = {"events": args.events, "levels_per_event": args.levels_per_event,
              "file_mb": round(path.stat().st_size / 2**20, 1), "rows": rows,
              "seconds": round(seconds, 1), "cpu_seconds": round(cpu, 1),
              "events_per_s": round(args.events / seconds),
              "peak_rss_mb": round(rss_kb / 1024), "gaps": gaps, "load_average": load,
              "day_under_a_minute": seconds * 864_000 / args.events < 60,
              "machine": f"{platform.processor() or platform.machine()}, "
                         f"{os.cpu_count()} cores", "python": platform.python_version()}
    print(json.dumps(result))
    if rows != args.events or gaps:
        print(f"expected {args.events} rows and no gap", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
