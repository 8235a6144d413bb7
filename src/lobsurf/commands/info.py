"""``lobsurf info``: what a snapshot store holds (counts, instruments, times, prices, skips)."""

from __future__ import annotations

import argparse
import json


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("store", help="store folder (made by lobsurf ingest or synth)")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def fee_text(instrument: dict) -> str:
    """The fees recorded for an instrument of ``summarize``, or what applies without them."""
    per_lot, bps = instrument.get("fee_per_lot"), instrument.get("fee_bps")
    if per_lot is None and bps is None:
        return ("none recorded (training and evaluation charge lobsurf's default in bps of "
                "notional unless given a fee; docs/sim_assumptions.md)")
    return f"{per_lot or 0:g} per lot + {bps or 0:g} bps of notional (recorded at ingest)"


def print_summary(s: dict) -> None:
    print(f"snapshots    {s['snapshots']:,}")
    print(f"segments     {s['segments']}")
    for i in s["instruments"]:
        given = "" if i.get("multiplier_known", True) else " (not given)"
        print(f"instrument   {i['symbol']} (id {i['instrument_id']}), tick {i['tick_size']:g} "
              f"{i['currency']}, multiplier {i['multiplier']:g}{given}")
        print(f"fees         {fee_text(i)}")
    print(f"time range   {s['start']} .. {s['end']}")
    print(f"price range  {s['price_min']} .. {s['price_max']}")
    skipped = ", ".join(f"{k} {v:,}" for k, v in s["skipped"].items() if v) or "none"
    print(f"skipped      {s['skipped_total']:,} ({skipped})")
    for seg in s["segment_details"][:20]:
        print(f"  segment {seg['index']:>3}: {seg['snapshots']:>10,} snapshots  "
              f"{seg['start']} .. {seg['end']}  [{seg['source']}]")
    if len(s["segment_details"]) > 20:
        print(f"  ... {len(s['segment_details']) - 20} more segments (--json lists all)")


def run(args: argparse.Namespace) -> int:
    from lobsurf.data.store.summary import summarize
    from lobsurf.data.store import Store

    summary = summarize(Store.open(args.store).manifest)
    if args.json:
        print(json.dumps(summary))
    else:
        print_summary(summary)
    return 0
