"""``lobsurf ingest``: build a snapshot store from DBN (MBP-10/MBO) or LOBSTER files."""

from __future__ import annotations

import argparse
import json

from lobsurf.progress import add_progress_flag


def add_arguments(p: argparse.ArgumentParser) -> None:
    from lobsurf.data.store.ingest import IngestConfig

    cfg = IngestConfig()  # the defaults live in the config only
    p.add_argument("paths", nargs="+", help="input files, ingested in the order given")
    p.add_argument("--out", required=True, help="store folder to create")
    p.add_argument("--format", default="auto", choices=["auto", "dbn", "lobster"],
                   help="input format (default: from the file name and signature)")
    p.add_argument("--gap-seconds", type=float, default=cfg.gap_threshold_s,
                   help="a capture-time gap longer than this starts a new segment "
                        f"(default {cfg.gap_threshold_s:g})")
    p.add_argument("--tick-size", type=float, default=None,
                   help="instrument tick in currency units (default: inferred from the prices)")
    p.add_argument("--multiplier", type=float, default=None,
                   help="contract multiplier, currency per price unit per lot, e.g. 50 for ES "
                        "(default: from --definitions, else 1 marked unknown, with a warning)")
    p.add_argument("--currency", default=None,
                   help="price currency (default: from --definitions, else unknown)")
    p.add_argument("--definitions", default=None, metavar="FILE",
                   help="Databento instrument-definition DBN file: multiplier, currency, tick")
    p.add_argument("--instrument-id", type=int, default=None,
                   help="keep only this instrument id (default: the first seen in each file)")
    p.add_argument("--chunk-records", type=int, default=cfg.chunk_records,
                   help=f"records processed at a time; bounds memory (default {cfg.chunk_records})")
    p.add_argument("--overwrite", action="store_true", help="replace an existing store at --out")
    p.add_argument("--json", action="store_true", help="print the store summary as JSON")
    add_progress_flag(p)


def run(args: argparse.Namespace) -> int:
    import sys
    import time

    from lobsurf.data.store.ingest import IngestConfig, ingest, money_warnings, summarize
    from lobsurf.commands.info import print_summary
    from lobsurf.progress import byte_progress

    cfg = IngestConfig(chunk_records=args.chunk_records, gap_threshold_s=args.gap_seconds,
                       tick_size=args.tick_size, multiplier=args.multiplier,
                       currency=args.currency, definitions=args.definitions,
                       instrument_id=args.instrument_id)
    began = time.perf_counter()
    with byte_progress(args.progress) as update:
        manifest = ingest(args.paths, args.out, cfg, fmt=args.format, overwrite=args.overwrite,
                          progress=update)
    for line in money_warnings(manifest):
        print(f"lobsurf ingest: warning: {line}", file=sys.stderr)
    summary = summarize(manifest)
    if args.json:
        print(json.dumps(summary))
    else:
        seconds = time.perf_counter() - began
        print(f"wrote {args.out}: {manifest.snapshots:,} snapshots in {seconds:.1f} s")
        print_summary(summary)
    return 0
