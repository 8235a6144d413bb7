"""What the kernel micro-benchmarks share (``bench_conv_dt.py``, ``bench_ssd_window.py``,
``bench_scan_gate.py``, ...): one call timed as CUDA graph replays, their command line and
their report. The micro-benchmarks import it by name (benchmarks/ is on ``sys.path`` when
they run as scripts).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch


def graphed_ms(fn, reps: int) -> float:
    """ms per call of ``fn`` captured in one CUDA graph (warm-up on a side stream)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps


def micro_args(doc: str, batch: str = "1024,2048") -> argparse.Namespace:
    """The kernel micro-benchmarks' command line: --batch (comma-separated windows per
    call), --reps (graph replays timed), --out (folder for the JSON rows)."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--batch", default=batch)
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--out", default=None)
    return ap.parse_args()


def run_batches(doc: str, rows_of, title: str, file_name: str) -> None:
    """A kernel micro-benchmark's main: ``rows_of(batch, reps)`` for each --batch, each row
    printed as JSON as it comes, then ``report_rows`` (the folder --out made first)."""
    args = micro_args(doc)
    rows = []
    for batch in (int(b) for b in args.batch.split(",")):
        rows.append(rows_of(batch, args.reps))
        print(json.dumps(rows[-1]), flush=True)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
    report_rows(rows, title, args.out, file_name)


def report_rows(rows: list[dict], title: str, out: str | None, file_name: str) -> None:
    """Print each row's figures on one line under ``title``; write them all as JSON to
    ``out``/``file_name`` when ``out`` is given (the kernel micro-benchmarks' report)."""
    print(title)
    for row in rows:
        print("  ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                        for k, v in row.items()))
    if out:
        Path(out, file_name).write_text(json.dumps(rows, indent=1))

