"""``lobsurf ingest``: build a snapshot store from DBN (MBP-10/MBO), LOBSTER, Binance
recordings or Tardis CSV files (``lobsurf.api.ingest``, which this module's flags map
onto), then print its summary."""

from __future__ import annotations

import argparse
import json

from lobsurf.progress import add_progress_flag


def add_arguments(p: argparse.ArgumentParser) -> None:
    from lobsurf.data.store.ingest import IngestConfig
    from lobsurf.data.store.inputs import FORMATS

    cfg = IngestConfig()  # the defaults live in the config only
    p.add_argument("paths", nargs="+", help="input files, ingested in the order given")
    p.add_argument("--out", required=True, help="store folder to create")
    p.add_argument("--format", default="auto", choices=list(FORMATS),
                   help="input format (default: from the file name and contents); binance: "
                        "recorded spot / USD-M streams, '<receive ns> <JSON>' lines; tardis: "
                        "Tardis.dev CSV (incremental_book_L2, book_snapshot_N, trades)")
    p.add_argument("--gap-seconds", type=float, default=cfg.gap_threshold_s,
                   help="a capture-time gap longer than this starts a new segment "
                        f"(default {cfg.gap_threshold_s:g})")
    p.add_argument("--tick-size", type=float, default=None,
                   help="instrument tick in currency units (default: inferred from the prices)")
    p.add_argument("--multiplier", type=float, default=None,
                   help="contract multiplier, currency per price unit per lot, e.g. 50 for ES "
                        "(default: from --definitions, else 1 marked unknown, with a warning); "
                        "binance/tardis: per one unit of the source's quantity (1 for spot and "
                        "linear futures, known for Binance)")
    p.add_argument("--size-unit", default=None, metavar="AMOUNT",
                   help="binance/tardis: the quantity step in base-asset amount, e.g. 0.00001 "
                        "for BTCUSDT spot; store sizes are whole numbers of it (default: the "
                        "gcd of the sizes, printed)")
    p.add_argument("--currency", default=None,
                   help="price currency (default: from --definitions, else unknown)")
    p.add_argument("--definitions", default=None, metavar="FILE",
                   help="Databento instrument-definition DBN file: multiplier, currency, tick")
    p.add_argument("--instrument-id", type=int, default=None,
                   help="keep only this instrument id (default: the first seen in each file)")
    p.add_argument("--fee-per-lot", type=float, default=None,
                   help="fee per lot filled, currency, recorded for training and evaluation "
                        "(default: none recorded; they then charge lobsurf's default fee in "
                        "bps of notional unless given one: docs/sim_assumptions.md)")
    p.add_argument("--fee-bps", type=float, default=None,
                   help="fee in basis points of filled notional, recorded likewise (with one "
                        "of the two fee flags given, the other is 0); these two are the taker "
                        "fee, paid by market orders")
    p.add_argument("--maker-fee-per-lot", type=float, default=None,
                   help="maker fee per lot a resting (passive) order fills, currency; "
                        "negative: a rebate (default: none recorded; resting orders then pay "
                        "the taker fee)")
    p.add_argument("--maker-fee-bps", type=float, default=None,
                   help="maker fee in basis points of filled notional, negative for a rebate, "
                        "recorded likewise (with one maker flag given, the other is 0)")
    p.add_argument("--chunk-records", type=int, default=cfg.chunk_records,
                   help=f"records processed at a time; bounds memory (default {cfg.chunk_records})")
    p.add_argument("--overwrite", action="store_true", help="replace an existing store at --out")
    p.add_argument("--json", action="store_true", help="print the store summary as JSON")
    add_progress_flag(p)


def run(args: argparse.Namespace) -> int:
    import time

    from lobsurf.api import ingest
    from lobsurf.commands.info import print_summary
    from lobsurf.data.store.summary import summarize

    began = time.perf_counter()
    store = ingest(args.paths, args.out, format=args.format, multiplier=args.multiplier,
                   currency=args.currency, fee_per_lot=args.fee_per_lot, fee_bps=args.fee_bps,
                   maker_fee_per_lot=args.maker_fee_per_lot, maker_fee_bps=args.maker_fee_bps,
                   tick_size=args.tick_size, definitions=args.definitions,
                   instrument_id=args.instrument_id, gap_seconds=args.gap_seconds,
                   chunk_records=args.chunk_records, size_unit=args.size_unit,
                   overwrite=args.overwrite,
                   progress=args.progress)
    summary = summarize(store.manifest)
    if args.json:
        print(json.dumps(summary))
    else:
        seconds = time.perf_counter() - began
        print(f"wrote {args.out}: {store.manifest.snapshots:,} snapshots in {seconds:.1f} s")
        print_summary(summary)
    return 0
