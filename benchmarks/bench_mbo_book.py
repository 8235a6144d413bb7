"""MBO replay and LOBSTER parsing throughput (CPU; the ingest side of the data layer).

Measures ``MboBookBuilder.feed`` in records/s on the real CME ES file when it is present
(``../shared/data/dbn/nautilus_trader``) and on a synthetic order stream of any length
(adds, partial cancels, modifies and full cancels around a drifting mid), and
``iter_lobster`` in rows/s on a generated LOBSTER pair. Burn-in one pass, then the best of
``--repeats`` timed passes. ``--device`` is accepted for the common benchmark interface;
everything here runs on the CPU.

    python benchmarks/bench_mbo_book.py --out OUT
    python benchmarks/bench_mbo_book.py --quick --out /tmp/bmbo   # small sizes, seconds
"""

from __future__ import annotations

import argparse
import json
import struct
import tempfile
import time
from pathlib import Path

import numpy as np

from lobsurf.data.readers.lobster import iter_lobster
from lobsurf.data.readers.mbo_book import MboBookBuilder
from lobsurf.data.schema import F_LAST, MBO_DTYPE

ES_FILE = (Path(__file__).resolve().parents[2] / "shared" / "data" / "dbn" / "nautilus_trader"
           / "esh4-glbx-mdp3-20231225.mbo.dbn.zst")
TICK_FIXED = 250_000_000  # 0.25, like ES
FEED_CHUNK = 65_536  # records per feed() call, as the ingest reader hands them over


def synthetic_mbo(n: int, seed: int = 0) -> np.ndarray:
    """[~n] MBO records: each order is added, maybe modified, then cancelled in full."""
    rng = np.random.default_rng(seed)
    orders = n // 3
    add_t = np.arange(orders) * 3.0
    life = rng.exponential(200.0, orders) + 1.0
    mid_ticks = 20_000 + np.cumsum(rng.integers(-1, 2, orders))
    is_bid = rng.random(orders) < 0.5
    offset = rng.geometric(0.3, orders)
    price = (mid_ticks + np.where(is_bid, -offset, offset)) * TICK_FIXED
    size = rng.integers(1, 50, orders)
    times = np.concatenate([add_t, add_t + life / 2, add_t + life])
    rec = np.zeros(3 * orders, MBO_DTYPE)
    rec["action"] = np.repeat(np.array([b"A", b"M", b"C"]), orders)
    rec["order_id"] = np.tile(np.arange(orders) + 1, 3)
    rec["price"] = np.tile(price, 3)
    rec["size"] = np.concatenate([size, np.maximum(size // 2, 1), np.maximum(size // 2, 1)])
    rec["side"] = np.tile(np.where(is_bid, b"B", b"A"), 3)
    rec = rec[np.argsort(times, kind="stable")]
    rec["flags"] = np.where(rng.random(len(rec)) < 0.7, F_LAST, 0)
    rec["ts_recv"] = 1_700_000_000 * 10**9 + np.arange(len(rec)) * 1_000
    rec["ts_event"] = rec["ts_recv"] - 500
    rec["instrument_id"], rec["rtype"], rec["length"] = 1, 0xA0, 14
    return rec


def read_es() -> np.ndarray | None:
    if not ES_FILE.is_file():
        return None
    import zstandard

    with ES_FILE.open("rb") as fh:
        raw = zstandard.ZstdDecompressor().stream_reader(fh).read()
    (metadata_length,) = struct.unpack("<I", raw[4:8])
    return np.frombuffer(raw[8 + metadata_length:], MBO_DTYPE)


def time_mbo(records: np.ndarray, repeats: int) -> dict:
    best, snapshots = float("inf"), 0
    for _ in range(repeats + 1):  # first pass is burn-in
        builder = MboBookBuilder()
        start = time.perf_counter()
        snapshots = sum(len(builder.feed(records[a:a + FEED_CHUNK]))
                        for a in range(0, len(records), FEED_CHUNK))
        best = min(best, time.perf_counter() - start) if _ else best
    return {"records": len(records), "snapshots": snapshots, "seconds": best,
            "records_per_s": len(records) / best, "snapshots_per_s": snapshots / best}


def time_lobster(rows: int, repeats: int) -> dict:
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        stem = Path(tmp) / "BENCH_2012-06-21_34200000_57600000"
        lv = np.arange(10) * 100
        ask = 5_000_000 + rng.integers(0, 500, rows)[:, None] * 100 + lv
        book = np.stack([ask, rng.integers(1, 999, (rows, 10)), ask - 100 - 2 * lv,
                         rng.integers(1, 999, (rows, 10))], axis=2).reshape(rows, 40)
        np.savetxt(f"{stem}_orderbook_10.csv", book, fmt="%d", delimiter=",")
        seconds = 34_200 + np.sort(rng.random(rows)) * 23_400
        with open(f"{stem}_message_10.csv", "w") as fh:
            fh.writelines(f"{s:.9f},1,{i},100,{a},1\n"
                          for i, (s, a) in enumerate(zip(seconds, ask[:, 0])))
        best = float("inf")
        for k in range(repeats + 1):
            start = time.perf_counter()
            n = sum(len(c) for c in iter_lobster(f"{stem}_orderbook_10.csv"))
            best = min(best, time.perf_counter() - start) if k else best
    assert n == rows
    return {"rows": rows, "seconds": best, "rows_per_s": rows / best}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="accepted for uniformity; CPU only")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--quick", action="store_true", help="small sizes (CI-speed check)")
    args = parser.parse_args()
    repeats = 1 if args.quick else 3
    mbo_records = 60_000 if args.quick else 3_000_000
    results = {"synthetic_mbo": time_mbo(synthetic_mbo(mbo_records), repeats),
               "lobster": time_lobster(20_000 if args.quick else 500_000, repeats)}
    es = read_es()
    if es is not None:
        results["es_mbo_file"] = time_mbo(es, repeats)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "bench_mbo_book.json").write_text(json.dumps(results, indent=2))
    print(f"{'case':<16}{'items':>12}{'seconds':>10}{'items/s':>14}")
    for name, r in results.items():
        items = r.get("records", r.get("rows"))
        rate = r.get("records_per_s", r.get("rows_per_s"))
        print(f"{name:<16}{items:>12,}{r['seconds']:>10.3f}{rate:>14,.0f}")
    for name in ("synthetic_mbo", "es_mbo_file"):
        if name in results:
            assert results[name]["snapshots"] > 0, f"{name}: replay emitted nothing"


if __name__ == "__main__":
    main()
