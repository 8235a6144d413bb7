"""The simulator's queue models against the exact FIFO queue of an MBO file.

Usage:
    python benchmarks/queue_check.py MBO_FILE [--horizon 500] [--stride 10]
        [--latency-rows 1] [--lots 1] [--powers 1,2,3,5,10]

MBO_FILE is a Databento MBO DBN file (plain or zstd). It is ingested to a temporary store
as ``lobsurf ingest`` does; at every ``--stride``-th row an order of ``--lots`` is posted on
each side at the best price, arriving ``--latency-rows`` later and resting ``--horizon``
rows unless filled. Each order is followed exactly from the file's order ids and, in the
simulator (``BatchedLobEnv`` with passive orders), under ``risk_averse`` and
``probabilistic`` at each of ``--powers``. Prints a Markdown table: orders filled, fill rate
and fills against the exact replay's, the orders filled by one side only, rows to the fill
and its error order by order, and the error of the model's queue ahead (lots, share of the
level, bias). The figures on CME ES: benchmarks/RESULTS.md, "Queue models against the exact
MBO queue"; the choice they make: docs/sim_assumptions.md; the code: lobsurf.sim.queue_check.
"""

from __future__ import annotations

import argparse
import sys
import time

from lobsurf.errors import UserError
from lobsurf.sim.queue_check import DEFAULT_MODELS, CheckSetup, format_table, run_check


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mbo_file", help="a Databento MBO DBN file (.dbn or .dbn.zst)")
    defaults = CheckSetup()
    parser.add_argument("--horizon", type=int, default=defaults.horizon,
                        help="rows an order rests after it arrives, unless filled")
    parser.add_argument("--stride", type=int, default=defaults.stride,
                        help="rows between the rows an order is decided at (sim.stride)")
    parser.add_argument("--latency-rows", type=int, default=defaults.latency_rows,
                        help="rows from the decision to the order's arrival (sim.latency_rows)")
    parser.add_argument("--lots", type=int, default=defaults.lots, help="lots of each order")
    powers = ",".join(str(n) for model, n in DEFAULT_MODELS if model == "probabilistic")
    parser.add_argument("--powers", default=powers,
                        help="queue powers n of the probabilistic model, comma-separated")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    try:
        powers = [int(p) for p in args.powers.split(",") if p.strip()]
        if not powers or min(powers) < 1:
            raise ValueError
    except ValueError:
        print(f"queue_check: error: --powers must be integers >= 1, got {args.powers!r}",
              file=sys.stderr)
        return 2
    models = (("risk_averse", 1),) + tuple(("probabilistic", n) for n in powers)
    try:
        result = run_check(args.mbo_file, CheckSetup(args.horizon, args.stride,
                                                     args.latency_rows, args.lots), models,
                           progress=lambda text: print(
                               f"[{time.perf_counter() - start:6.1f} s] {text}",
                               file=sys.stderr, flush=True))
    except UserError as exc:
        print(f"queue_check: error: {exc}", file=sys.stderr)
        return 2
    print(format_table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
