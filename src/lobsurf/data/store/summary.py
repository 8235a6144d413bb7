"""What a store holds, for people: ``summarize`` (the ``lobsurf info --json`` object,
printed by ``lobsurf ingest`` and ``lobsurf info``) and the warnings about money figures
nobody stated (``money_warnings``)."""

from __future__ import annotations

from dataclasses import asdict

import numpy as np

from lobsurf.data.schema import FIXED_PRICE_SCALE
from lobsurf.data.store.instrument import AROUND_THE_CLOCK
from lobsurf.data.store.store import Manifest


def money_warnings(manifest: Manifest) -> list[str]:
    """One line per instrument whose money figures would be wrong without being told so."""
    lines = []
    for i in manifest.instruments:
        if not i.multiplier_known and i.market_hours == AROUND_THE_CLOCK:
            lines.append(
                f"{i.symbol} (id {i.instrument_id}): this exchange's amounts may be contracts, "
                "not base-asset amounts: 1 (currency per price unit per amount) assumed; pass "
                "--multiplier for linear contracts of another size (an inverse contract's PnL "
                "is not linear in the price: no multiplier makes it right)")
        elif not i.multiplier_known:
            lines.append(
                f"{i.symbol} (id {i.instrument_id}): no --multiplier and no --definitions: "
                "multiplier 1 assumed, so PnL and fees are in price units x lots, not currency "
                "(E-mini S&P 500 is 50); re-ingest with --multiplier or --definitions")
    return lines


def summarize(manifest: Manifest) -> dict:
    """The ``lobsurf info --json`` object: counts, instruments, times, prices in currency,
    the trade table's counts (``trades``: None when the store holds no trades) and the
    cross checks of rebuilt books (crypto)."""
    import datetime as dt

    def iso(ns: int) -> str:
        return dt.datetime.fromtimestamp(ns / 1e9, tz=dt.timezone.utc).isoformat()

    segs = manifest.segments
    instruments = [
        {"instrument_id": i.instrument_id, "symbol": i.symbol, "tick_size": i.tick_size,
         "multiplier": i.multiplier, "multiplier_known": i.multiplier_known,
         "currency": i.currency, "fee_per_lot": i.fee_per_lot, "fee_bps": i.fee_bps,
         "maker_fee_per_lot": i.maker_fee_per_lot, "maker_fee_bps": i.maker_fee_bps,
         "size_unit": i.size_unit, "market_hours": i.market_hours}
        for i in manifest.instruments
    ]
    ticks = sorted({i.tick_size for i in manifest.instruments})
    return {
        "snapshots": manifest.snapshots,
        "segments": len(segs),
        "instruments": instruments,
        "start": iso(min(s.ts_start_ns for s in segs)) if segs else None,
        "end": iso(max(s.ts_end_ns for s in segs)) if segs else None,
        "tick_size": ticks[0] if len(ticks) == 1 else ticks,
        "price_min": min(s.price_min_fixed for s in segs) / FIXED_PRICE_SCALE if segs else None,
        "price_max": max(s.price_max_fixed for s in segs) / FIXED_PRICE_SCALE if segs else None,
        "skipped": dict(manifest.skipped),
        "skipped_total": int(np.sum(list(manifest.skipped.values()), dtype=np.int64)),
        "sources": manifest.sources,
        "trades": None if manifest.trades is None else asdict(manifest.trades),
        "synth": manifest.synth,
        "cross_checks": dict(manifest.cross_checks),
        "segment_details": [
            {"index": k, "rows": [s.start, s.stop], "snapshots": len(s),
             "instrument_id": s.instrument_id, "start": iso(s.ts_start_ns), "end": iso(s.ts_end_ns),
             "source": s.source}
            for k, s in enumerate(segs)
        ],
    }
