"""Where the graphed, compiled step's time goes, stream by stream (CUDA only).

``count_step_kernels.py`` times each phase between synchronizes, so it cannot show what the
CUDA graph overlaps. This script builds the step as ``lobsurf bench --compile`` does
(count_step_kernels.build, then train.compile's networks and kernels), captures it with
lobsurf.train.cuda_graph.GraphedStep, profiles ``--steps`` replays, and reads the kernels'
streams from the profiler's trace. Per step it prints: the wall time; each stream's busy
time; the time at least one stream is busy (the union) and the time exactly one is (the
serial stretches, where nothing overlaps); the stretches of one replay in which at most one
event runs (``--thin``: the step's serial edges, gaps included); and each stream's costliest
kernels. A step bound by one stream shows that stream's busy time near the wall time.

    python3 benchmarks/graph_timeline.py --batch 1024 --layers 2 --top 25
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
from count_step_kernels import COUNT, build  # noqa: E402

from lobsurf.agent.step import train_step  # noqa: E402
from lobsurf.train.compile import compile_config, compile_networks_  # noqa: E402
from lobsurf.train.config import TrainConfig  # noqa: E402
from lobsurf.train.cuda_graph import GraphedStep, step_generators  # noqa: E402

#: trace event categories that occupy a stream
DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


def device_events(trace: dict) -> list[tuple[int, float, float, str]]:
    """(stream, start us, end us, name) of every device event of a Chrome trace."""
    out = []
    for ev in trace.get("traceEvents", []):
        if ev.get("ph") == "X" and ev.get("cat") in DEVICE_CATS:
            stream = ev.get("args", {}).get("stream", ev.get("tid"))
            out.append((int(stream), float(ev["ts"]), float(ev["ts"]) + float(ev["dur"]),
                        ev["name"]))
    return out


def coverage(events: list[tuple[int, float, float, str]]) -> tuple[float, float, dict]:
    """(us with >= 1 stream busy, us with exactly 1 busy, {stream: us it alone is busy})."""
    edges = []
    for stream, start, end, _ in events:
        edges.append((start, 1, stream))
        edges.append((end, -1, stream))
    edges.sort(key=lambda e: (e[0], e[1]))
    active: Counter = Counter()
    union = single = 0.0
    alone: Counter = Counter()
    last = None
    for t, delta, stream in edges:
        if last is not None:
            busy = [s for s, n in active.items() if n > 0]
            if busy:
                union += t - last
            if len(busy) == 1:
                single += t - last
                alone[busy[0]] += t - last
        active[stream] += delta
        last = t
    return union, single, dict(alone)


def one_replay(events: list[tuple[int, float, float, str]], replays: int, index: int = 0
               ) -> list[tuple[int, float, float, str]]:
    """Replay ``index`` of ``replays`` back-to-back replays' events, in start order, times in
    us from its first event (each replay has the same number of events). The first one
    profiled starts late on the profiler's own set-up, so a later one shows the steady
    state's start of a step."""
    per = len(events) // replays
    ordered = sorted(events, key=lambda e: e[1])[index * per:(index + 1) * per]
    t0 = ordered[0][1]
    return [(s, round(a - t0, 2), round(b - t0, 2), name[:90]) for s, a, b, name in ordered]


def thin_stretches(events: list[tuple[int, float, float, str]], min_us: float
                   ) -> list[tuple[float, float, list[str]]]:
    """(start, end, the kernels that run in it) of each stretch of at least ``min_us`` in
    which at most one event runs (gaps included): where the device does one small thing at
    a time, the step's serial edges. Events of one replay, from ``one_replay``."""
    edges = sorted([(a, 1, i) for i, (_, a, _, _) in enumerate(events)]
                   + [(b, -1, i) for i, (_, _, b, _) in enumerate(events)],
                   key=lambda e: (e[0], e[1]))
    active: set[int] = set()
    out: list[tuple[float, float, list[str]]] = []
    open_at: float | None = None
    names: list[str] = []
    last = None
    for t, delta, i in edges:
        if last is not None and t > last:
            if len(active) <= 1:
                if open_at is None:
                    open_at, names = last, []
                names += [events[j][3] for j in active if events[j][3] not in names]
            elif open_at is not None:
                if last - open_at >= min_us:
                    out.append((open_at, last, names))
                open_at = None
        if delta > 0:
            active.add(i)
        else:
            active.discard(i)
        last = t
    if open_at is not None and last - open_at >= min_us:
        out.append((open_at, last, names))
    return out


def stream_spans(events: list[tuple[int, float, float, str]]
                 ) -> dict[int, tuple[float, float]]:
    """{stream: (its first event's start, its last event's end)}."""
    spans: dict[int, tuple[float, float]] = {}
    for stream, start, end, _ in events:
        lo, hi = spans.get(stream, (start, end))
        spans[stream] = (min(lo, start), max(hi, end))
    return spans


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--steps", type=int, default=10, help="profiled graph replays")
    p.add_argument("--top", type=int, default=20, help="kernels listed per stream")
    p.add_argument("--precision", default="bf16", choices=("fp32", "bf16"))
    p.add_argument("--prioritize-learner", action=argparse.BooleanOptionalAction,
                   default=COUNT.prioritize_learner,
                   help="the learner's streams at the highest priority (train.prioritize_learner)")
    p.add_argument("--collect-beside-backward", action=argparse.BooleanOptionalAction,
                   default=COUNT.collect_beside_backward,
                   help="the collect after the learner's forwards (train.collect_beside_backward)")
    p.add_argument("--split-target", action=argparse.BooleanOptionalAction,
                   default=COUNT.split_target, help="the learner's target-net forward as two "
                   "calls side by side (train.split_target)")
    p.add_argument("--draw-ahead", action=argparse.BooleanOptionalAction,
                   default=COUNT.draw_ahead, help="the next step's replay draw beside the "
                   "backward (train.draw_ahead)")
    p.add_argument("--shared-generator", action=argparse.BooleanOptionalAction,
                   default=COUNT.shared_generator, help="the step's draws from one generator "
                   "(train.shared_generator)")
    p.add_argument("--thin", type=float, default=2.0, help="list the --replay replay's "
                   "stretches of at least this many us in which at most one event runs")
    p.add_argument("--replay", type=int, default=1, help="which profiled replay's events the "
                   "per-stream spans and the JSON list (0: the first, which opens with about "
                   "250 us of the profiler's own set-up, so its streams seem to wait; later "
                   "ones show a step's start)")
    p.add_argument("--json", type=Path, default=None, help="write the figures here, with the "
                   "--replay profiled replay's device events in order (stream, start and end in "
                   "us from the replay's first event, name)")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("graph_timeline.py needs CUDA", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as root:
        cfg = dataclasses.replace(COUNT, prioritize_learner=args.prioritize_learner,
                                  collect_beside_backward=args.collect_beside_backward,
                                  split_target=args.split_target,
                                  draw_ahead=args.draw_ahead,
                                  shared_generator=args.shared_generator)
        state, book, scfg = build("cuda", args.batch, args.layers, cfg, Path(root),
                                  args.precision)
        compile_networks_(state, compile_config(TrainConfig(), "cuda"))
        graphed = GraphedStep(lambda: train_step(state, book, scfg, True), state,
                              step_generators(state), "cuda")
        for _ in range(graphed.cfg.warmup_steps + 3):
            graphed()
        torch.cuda.synchronize()
        print(f"[{time.perf_counter() - t0:6.1f} s] captured", file=sys.stderr, flush=True)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(args.steps):
            graphed()
        end.record()
        torch.cuda.synchronize()
        wall_ms = start.elapsed_time(end) / args.steps
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(args.steps):
                graphed()
            torch.cuda.synchronize()
        trace_path = Path(root) / "trace.json"
        prof.export_chrome_trace(str(trace_path))
        trace = json.loads(trace_path.read_text())
    events = device_events(trace)
    if not events:
        print("the profiler recorded no device events of the graph replays", file=sys.stderr)
        return 1
    n = args.steps
    span_ms = (max(e[2] for e in events) - min(e[1] for e in events)) / 1e3 / n
    union, single, alone = coverage(events)
    busy: Counter = Counter()
    kernels: dict[int, Counter] = defaultdict(Counter)
    launches: dict[int, Counter] = defaultdict(Counter)
    for stream, s, e, name in events:
        busy[stream] += e - s
        kernels[stream][name] += e - s
        launches[stream][name] += 1
    print(f"B = {args.batch}, {args.layers} layers, {args.precision}, compiled, graphed"
          f"{'' if args.prioritize_learner else ', learner streams not prioritized'}"
          f"{', collect beside the backward' if args.collect_beside_backward else ''}"
          f"{', target net in two halves' if args.split_target else ''}"
          f"{', the next draw ahead' if args.draw_ahead else ''}"
          f"{', one generator' if args.shared_generator else ''}: "
          f"{wall_ms:.3f} ms per step timed ({1e3 / wall_ms:.1f} steps/s), "
          f"{span_ms:.3f} ms per step profiled")
    print(f"device busy (union of streams) {union / 1e3 / n:.3f} ms, one stream alone "
          f"{single / 1e3 / n:.3f} ms, events {len(events) / n:.0f} per step")
    first = one_replay(events, n, min(max(args.replay, 0), n - 1))
    spans = stream_spans(first)
    print(f"stream   busy ms   alone ms   events   replay {args.replay}: from .. to ms")
    for stream, us in busy.most_common():
        lo, hi = spans.get(stream, (float("nan"), float("nan")))
        print(f"{stream:6d} {us / 1e3 / n:9.3f} {alone.get(stream, 0.0) / 1e3 / n:10.3f} "
              f"{sum(launches[stream].values()) / n:8.0f}   {lo / 1e3:6.3f} .. {hi / 1e3:6.3f}")
    thin = thin_stretches(first, args.thin)
    print(f"replay {args.replay}: {len(thin)} stretches of >= {args.thin:g} us with at most one "
          f"event running, {sum(b - a for a, b, _ in thin):.1f} us in all (from .. to us)")
    for a, b, names in thin:
        print(f"  {a:8.1f} .. {b:8.1f} {b - a:6.1f}  {'; '.join(n[:40] for n in names) or '-'}")
    for stream, _ in busy.most_common():
        print(f"stream {stream}: top {args.top} kernels (ms per step, launches per step)")
        for name, us in kernels[stream].most_common(args.top):
            print(f"  {us / 1e3 / n:7.3f} {launches[stream][name] / n:5.1f}x  {name[:110]}")
    if args.json:
        args.json.write_text(json.dumps({
            "batch": args.batch, "layers": args.layers, "wall_ms": wall_ms,
            "union_ms": union / 1e3 / n, "single_ms": single / 1e3 / n,
            "streams": {str(s): {"busy_ms": us / 1e3 / n,
                                 "alone_ms": alone.get(s, 0.0) / 1e3 / n,
                                 "kernels": {k: v / 1e3 / n
                                             for k, v in kernels[s].most_common()}}
                        for s, us in busy.items()},
            "first_replay": first,
            "thin_stretches": [[a, b, names] for a, b, names in thin]}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
