"""``lobsurf info``: what a snapshot store holds (counts, instruments, times, prices, skips,
trades)."""

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


def size_text(instrument: dict) -> str:
    """The size unit line of an instrument: whole lots, or the base amount of one unit."""
    from decimal import Decimal

    unit = instrument.get("size_unit", 1.0)
    hours = instrument.get("market_hours", "sessions")
    if unit == 1.0 and hours == "sessions":
        return ""
    amount = format(Decimal(repr(unit)).normalize(), "f")
    return f"sizes in units of {amount} base asset (lots = size units); trades {hours}"


def checks_text(checks: dict) -> str:
    """The bookTicker check of the rebuilt book, or "" when the store has none."""
    aligned = checks.get("book_ticker_aligned")
    if aligned is None:
        return ""
    agree = checks.get("book_ticker_agree", 0)
    share = f"{100 * agree / aligned:.2f} %" if aligned else "none to compare"
    return (f"bookTicker {agree:,} of {aligned:,} id-aligned messages agree with the rebuilt "
            f"best bid and ask ({share}; {checks.get('book_ticker_messages', 0):,} tickers)")


def trade_text(trades: dict | None) -> str:
    """The trade table of ``summarize`` in a line, or why passive orders cannot use the store."""
    if trades is None:
        return ("none recorded (a store written before trades were recorded, or from a source "
                "without them: passive orders need them; re-ingest the source files)")
    records = trades.get("left_out_records", {})
    left_out = ", ".join(f"{k} {v:,} lots ({records.get(k, 0):,} records)"
                         for k, v in trades["left_out"].items())
    return (f"{trades['volume']:,} lots at {trades['rows']:,} rows ({trades['entries']:,} "
            f"entries; buyer {trades['buy_volume']:,}, seller {trades['sell_volume']:,}, "
            f"side unknown {trades['unknown_volume']:,}); left out {left_out or 'none'}")


def maker_fee_text(instrument: dict) -> str:
    """The maker fee (resting orders' fills) recorded for an instrument of ``summarize``, or
    what applies without one."""
    per_lot, bps = instrument.get("maker_fee_per_lot"), instrument.get("maker_fee_bps")
    if per_lot is None and bps is None:
        return "none recorded (resting orders pay the taker fee above)"
    rebate = " (a rebate)" if (per_lot or 0) < 0 or (bps or 0) < 0 else ""
    return (f"{per_lot or 0:g} per lot + {bps or 0:g} bps of notional{rebate} (recorded at "
            "ingest)")


def print_summary(s: dict) -> None:
    print(f"snapshots    {s['snapshots']:,}")
    print(f"segments     {s['segments']}")
    for i in s["instruments"]:
        given = "" if i.get("multiplier_known", True) else " (not given)"
        print(f"instrument   {i['symbol']} (id {i['instrument_id']}), tick {i['tick_size']:g} "
              f"{i['currency']}, multiplier {i['multiplier']:g}{given}")
        if size_text(i):
            print(f"size unit    {size_text(i)}")
        print(f"fees         {fee_text(i)}")
        print(f"maker fees   {maker_fee_text(i)}")
    checks = s.get("cross_checks", {})
    if checks_text(checks):
        print(f"book check   {checks_text(checks)}")
    gaps = s["skipped"].get("depth_gap", 0) + s["skipped"].get("book_restart", 0)
    if "book_ticker_aligned" in checks or gaps:
        print(f"depth gaps   {gaps:,} (each ends a segment; the book restarts at a snapshot)")
    if s.get("synth"):
        law = s["synth"]
        print(f"generator    lobsurf synth, seed {law.get('seed')}, edge {law.get('edge')}, "
              f"move_prob {law.get('move_prob')} (the law baseline:bayes plans on)")
    print(f"time range   {s['start']} .. {s['end']}")
    print(f"price range  {s['price_min']} .. {s['price_max']}")
    skipped = ", ".join(f"{k} {v:,}" for k, v in s["skipped"].items() if v) or "none"
    print(f"skipped      {s['skipped_total']:,} ({skipped})")
    print(f"trades       {trade_text(s.get('trades'))}")
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
