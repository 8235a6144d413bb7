"""benchmarks/graph_timeline.py's reading of a profiler trace: which device events it keeps
and how it splits their time into busy, alone and per-stream figures. The reference counts
busy streams microsecond by microsecond on integer event times (no sweep, no sorting)."""

from __future__ import annotations

import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import graph_timeline  # noqa: E402


def _reference(events):
    # (union, exactly-one, per-stream alone) by counting each microsecond [t, t + 1)
    end = max(e[2] for e in events)
    union = single = 0
    alone: dict[int, int] = {}
    for t in range(int(end)):
        busy = {s for s, a, b, _ in events if a <= t < b}
        union += bool(busy)
        if len(busy) == 1:
            single += 1
            (s,) = busy
            alone[s] = alone.get(s, 0) + 1
    return union, single, alone


def test_coverage_of_a_hand_made_timeline():
    # stream 1 busy 0-10 and 25-30, stream 2 busy 5-20: busy 25 us, alone 1: 10, 2: 10
    events = [(1, 0.0, 10.0, "a"), (2, 5.0, 20.0, "b"), (1, 25.0, 30.0, "c")]
    assert graph_timeline.coverage(events) == (25.0, 20.0, {1: 10.0, 2: 10.0})


def _random_events(rng: random.Random, most: int, latest: int, longest: int):
    # 1..most events on streams 1-3, integer times, each named by its position
    events = []
    for k in range(rng.randint(1, most)):
        start = rng.randint(0, latest)
        events.append((rng.randint(1, 3), float(start), float(start + rng.randint(1, longest)),
                       f"k{k}"))
    return events


def test_coverage_matches_counting_microsecond_by_microsecond():
    rng = random.Random(0)
    for _ in range(20):
        events = _random_events(rng, 12, 60, 15)
        union, single, alone = graph_timeline.coverage(events)
        want_union, want_single, want_alone = _reference(events)
        assert (union, single) == (want_union, want_single)
        assert {s: v for s, v in alone.items() if v} == want_alone


def test_device_events_keep_kernels_copies_and_sets_with_their_streams():
    trace = {"traceEvents": [
        {"ph": "X", "cat": "kernel", "name": "k", "ts": 1.0, "dur": 2.0, "args": {"stream": 7}},
        {"ph": "X", "cat": "gpu_memset", "name": "m", "ts": 4.0, "dur": 1.0, "tid": 9},
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "ts": 0.0, "dur": 5.0},
        {"ph": "i", "cat": "kernel", "name": "instant", "ts": 3.0}]}
    assert graph_timeline.device_events(trace) == [(7, 1.0, 3.0, "k"), (9, 4.0, 5.0, "m")]


def test_one_replay_and_stream_spans():
    # two back-to-back replays of three events each: replay 0 is the first three by start,
    # replay 1 the next three, times from each one's first event; each stream's first start
    # and last end
    events = [(1, 40.0, 41.0, "c"), (2, 11.0, 15.0, "b"), (1, 10.0, 12.0, "a"),
              (1, 30.0, 31.0, "a"), (2, 31.0, 35.0, "b"), (1, 20.0, 21.0, "c")]
    first = graph_timeline.one_replay(events, 2)
    assert first == [(1, 0.0, 2.0, "a"), (2, 1.0, 5.0, "b"), (1, 10.0, 11.0, "c")]
    assert graph_timeline.stream_spans(first) == {1: (0.0, 11.0), 2: (1.0, 5.0)}
    second = graph_timeline.one_replay(events, 2, 1)
    assert second == [(1, 0.0, 1.0, "a"), (2, 1.0, 5.0, "b"), (1, 10.0, 11.0, "c")]


def test_thin_stretches_of_a_hand_made_timeline():
    # a fill alone 0-3, a gap 3-5, then two streams side by side 5-20, one alone 20-24,
    # then side by side again 24-30, and a tail alone 30-40
    events = [(7, 0.0, 3.0, "fill"), (1, 5.0, 24.0, "fwd"), (2, 5.0, 20.0, "tgt"),
              (2, 24.0, 30.0, "bwd"), (1, 24.0, 30.0, "draw"), (1, 30.0, 40.0, "adam")]
    assert graph_timeline.thin_stretches(events, 2.0) == [
        (0.0, 5.0, ["fill"]), (20.0, 24.0, ["fwd"]), (30.0, 40.0, ["adam"])]
    assert graph_timeline.thin_stretches(events, 4.5) == [(0.0, 5.0, ["fill"]),
                                                          (30.0, 40.0, ["adam"])]


def test_thin_stretches_match_counting_microsecond_by_microsecond():
    rng = random.Random(1)
    for _ in range(30):
        events = _random_events(rng, 10, 50, 12)
        first, end = int(min(e[1] for e in events)), int(max(e[2] for e in events))
        thin_us = {t for t in range(first, end)
                   if sum(a <= t < b for _, a, b, _ in events) <= 1}
        got = graph_timeline.thin_stretches(events, 0.5)
        covered = {t for a, b, _ in got for t in range(int(a), int(b))}
        assert covered == thin_us
        for a, b, names in got:  # each stretch ends where two events run (or at the end)
            assert b == end or sum(a2 <= b < b2 for _, a2, b2, _ in events) >= 2
            assert set(names) == {n for _, a2, b2, n in events if a2 < b and b2 > a}
