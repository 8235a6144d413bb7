"""Device kernels one training step launches, by phase, eager and with train.compile's pieces.

At small B the graphed step is bound by its number of kernels (PERFORMANCE.md 2.1: about
1-2 us per graph node), so the count is the figure to cut. The script builds the default
step as ``lobsurf bench`` does (lobsurf.bench.measure: a synthetic store, build_state, a
few collect-only steps), then profiles ``--steps`` learning steps with the phase wrappers of
lobsurf.bench.phases labelling each sub-phase as a profiler range, and gives every kernel
to the innermost phase whose range holds its start:

* CUDA: the profiler's device events (kernels, memcpy, memset): what a CUDA graph of the
  step holds as nodes, give or take the graph's own copies;
* CPU: a proxy: leaf aten ops that would launch a kernel on a GPU (views, allocations and
  host-side scalar ops excluded; a ``_foreach_`` op counts once, as its one multi-tensor
  launch does on CUDA; Inductor's C++ kernels count once each, through its kernel profile).

Modes: ``eager``, then ``compiled`` (``compile_networks_`` with ``compile_config``: the
networks' methods and the step kernels, what train.compile does, combo kernels on CUDA
unless ``--no-combo``; ``--kernels-only`` leaves the networks eager). On CUDA ``--top N``
adds each phase's device ms per step (kernel durations; the phases run between
synchronizes) and the N kernels with the most device time.

    python3 benchmarks/count_step_kernels.py --device cuda --batch 16
    python3 benchmarks/count_step_kernels.py --device cuda --batch 1024 --precision bf16 --top 30
    OMP_NUM_THREADS=1 python benchmarks/count_step_kernels.py --device cpu --kernels-only
"""

from __future__ import annotations

import argparse
import ast
import bisect
import dataclasses
import functools
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from lobsurf.agent.step import train_step
from lobsurf.bench.measure import BenchConfig, make_store, run_config
from lobsurf.bench.phases import PHASE_MARK, timed_phases
from lobsurf.models.config import CONV_BACKENDS
from lobsurf.train.compile import compile_config, compile_networks_
from lobsurf.train.config import TrainConfig
from lobsurf.train.data import load_training_data
from lobsurf.train.loop import build_state, step_config

#: the outermost range: everything of a step outside a named sub-phase is "step/(rest)"
STEP_PHASE = "step"
#: aten ops that launch no device kernel (views, allocation, metadata, host-side scalars)
NO_KERNEL = frozenset(f"aten::{name}" for name in (
    "empty", "empty_strided", "empty_like", "view", "_reshape_alias", "as_strided", "expand",
    "slice", "select", "unsqueeze", "squeeze", "t", "transpose", "permute", "alias", "detach",
    "detach_", "unbind", "split", "split_with_sizes", "chunk", "narrow", "resize_", "set_",
    "_unsafe_view", "lift_fresh", "result_type", "promote_types", "scalar_tensor", "to",
    "_to_copy", "contiguous", "reshape", "expand_as", "view_as", "unflatten", "flatten",
    "movedim", "diagonal", "_has_compatible_shallow_copy_type", "is_nonzero", "requires_grad_",
    "resolve_conj", "resolve_neg", "conj", "_conj", "_neg_view", "real", "numpy_T",
    "item", "_local_scalar_dense"))
#: Inductor's C++ kernels appear in the CPU profile as "graph_<i>_cpp_fused_<ops>_<j>"
CPP_KERNEL_MARK = "_cpp_"


#: the step counted by default: B = 16 envs, 2 Mamba2 layers (the launch-bound case)
DEFAULT_BATCH, DEFAULT_LAYERS = 16, 2
#: lobsurf bench's settings, shortened: 3 warm-up and 3 profiled learning steps per mode
#: (counts are per step), a smaller synthetic store (the step's kernels do not depend on it)
COUNT = BenchConfig(warmup_steps=3, profile_steps=3, snapshots_per_day=20_000)


def build(device: str, batch: int, layers: int, cfg: BenchConfig, root: Path,
          precision: str = "fp32"):
    """(state, book, step config) of the default run at B = ``batch`` on ``device``, the
    replay filled by ``cfg.prefill_steps`` collect-only steps."""
    store = make_store(root, cfg)
    run_cfg = run_config(store, batch, layers, device, cfg, precision=precision)
    data = load_training_data(run_cfg, device, store)
    state = build_state(run_cfg, data, device)
    scfg = step_config(run_cfg)
    for _ in range(cfg.prefill_steps):
        train_step(state, data.train_book, scfg, learning=False)
    return state, data.train_book, scfg


def _cpu_kernels(event, out: list[tuple[float, str]]) -> int:
    """Append (start us, name) of each proxy kernel under ``event``; returns how many."""
    name = event.name
    if name.startswith("aten::_foreach_") or CPP_KERNEL_MARK in name:
        out.append((event.time_range.start, name))
        return 1
    below = sum(_cpu_kernels(child, out) for child in event.cpu_children)
    if below == 0 and name.startswith("aten::") and name not in NO_KERNEL:
        out.append((event.time_range.start, name))
        return 1
    return below


def kernels(events, device: str) -> list[tuple[float, str, float]]:
    """(start us, name, device us) of the step's device kernels, or (device us 0) of their
    CPU proxies."""
    if device.startswith("cuda"):
        return [(e.time_range.start, e.name, e.time_range.end - e.time_range.start)
                for e in events if e.device_type == torch.autograd.DeviceType.CUDA
                and not e.name.startswith(PHASE_MARK)]
    cpu: list[tuple[float, str]] = []
    for event in events:
        if event.cpu_parent is None:
            _cpu_kernels(event, cpu)
    return [(t, name, 0.0) for t, name in cpu]


def phase_ranges(events) -> list[tuple[float, float, str]]:
    """(start, end, path) of every labelled phase range on the host."""
    return [(e.time_range.start, e.time_range.end, e.name[len(PHASE_MARK):]) for e in events
            if e.name.startswith(PHASE_MARK) and e.device_type == torch.autograd.DeviceType.CPU]


def by_phase(found: list[tuple[float, str, float]], ranges: list[tuple[float, float, str]]
             ) -> tuple[Counter, Counter, Counter, Counter]:
    """Kernels per phase path, each given to the innermost (latest-opened) range holding its
    start, kernels per (phase path, kernel name), and the device us of both."""
    ranges = sorted(ranges)
    opens = [r[0] for r in ranges]
    counts: Counter = Counter()
    names: Counter = Counter()
    us: Counter = Counter()
    name_us: Counter = Counter()
    for t, name, dur in found:
        holder = "(outside the step)"
        for start, end, path in reversed(ranges[:bisect.bisect_right(opens, t)]):
            if start <= t <= end:
                holder = path
                break
        counts[holder] += 1
        names[holder, name] += 1
        us[holder] += dur
        name_us[holder, name] += dur
    return counts, names, us, name_us


def count_steps(state, book, scfg, device: str, cfg: BenchConfig
                ) -> tuple[Counter, Counter, Counter, Counter]:
    """Kernels per learning step by phase and by (phase, name), and their device us, over
    ``cfg.profile_steps`` steps, after ``cfg.warmup_steps`` (the compiles of the compiled
    mode happen there)."""
    step = functools.partial(train_step, state, book, scfg, True)
    for _ in range(cfg.warmup_steps):
        step()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA]
                                           if device.startswith("cuda") else [])
    with timed_phases(state, device, label=True) as timer:
        whole = timer.wrap(step, STEP_PHASE)
        with profile(activities=activities) as prof:
            for _ in range(cfg.profile_steps):
                whole()
    events = prof.events()
    return tuple(Counter({k: v / cfg.profile_steps for k, v in c.items()})
                 for c in by_phase(kernels(events, device), phase_ranges(events)))


def phase_tree(counts: Counter) -> dict[str, float]:
    """Inclusive count of every phase path (a parent includes its children)."""
    total: dict[str, float] = {}
    for path, n in counts.items():
        parts = path.split("/")
        for i in range(1, len(parts) + 1):
            key = "/".join(parts[:i])
            total[key] = total.get(key, 0.0) + n
    return total


def with_rest(counts: Counter) -> dict[str, float]:
    """Inclusive counts plus ``<parent>/(rest)``: a parent's own kernels, outside its children."""
    tree = phase_tree(counts)
    parents = {path.rsplit("/", 1)[0] for path in tree if "/" in path}
    tree.update({f"{path}/(rest)": counts[path] for path in parents if counts.get(path)})
    return tree


def report(columns: dict[str, Counter]) -> str:
    """A table: one row per phase path (inclusive counts), one column per mode."""
    trees = {mode: with_rest(c) for mode, c in columns.items()}
    paths = sorted(set().union(*trees.values()))
    width = max(len(p) for p in paths) + 2
    lines = [f"{'phase (inclusive, per step)':<{width}}" + "".join(f"{m:>12}" for m in trees)]
    for path in paths:
        indent = "  " * path.count("/")
        label = indent + path.rsplit("/", 1)[-1]
        lines.append(f"{label:<{width}}" + "".join(
            f"{t.get(path, 0.0):>12.{3 if mode.endswith(' ms') else 1}f}"
            for mode, t in trees.items()))
    return "\n".join(lines)


def report_top(mode: str, name_us: Counter, names: Counter, top: int) -> str:
    """The ``top`` kernel names by device ms per step, summed over phases."""
    ms: Counter = Counter()
    launches: Counter = Counter()
    for (_, name), us in name_us.items():
        ms[name] += us / 1e3
    for (_, name), n in names.items():
        launches[name] += n
    total = sum(ms.values())
    lines = [f"{mode}: top {top} kernels by device ms per step (of {total:.3f} ms)"]
    for name, t in ms.most_common(top):
        lines.append(f"  {t:8.3f} ms {100 * t / total:5.1f} % {launches[name]:6.1f}x  {name[:100]}")
    return "\n".join(lines)


def report_names(mode: str, names: Counter, prefix: str, name_us: Counter | None = None
                 ) -> str:
    """Kernel names per step of the phases whose path starts with ``prefix``, with their
    device us per step where measured (CUDA), the costliest first within a phase."""
    name_us = name_us or Counter()
    rows = sorted(((path, name, n, name_us[path, name]) for (path, name), n in names.items()
                   if path.startswith(prefix)), key=lambda r: (r[0], -r[3], -r[2]))
    return "\n".join([f"{mode}: kernels of {prefix}* (launches, device us per step)"]
                     + [f"  {n:6.1f} {us:9.1f}  {path}  {name[:90]}"
                        for path, name, n, us in rows])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--batch", type=int, default=DEFAULT_BATCH)
    p.add_argument("--layers", type=int, default=DEFAULT_LAYERS)
    p.add_argument("--steps", type=int, default=COUNT.profile_steps,
                   help="profiled learning steps per mode")
    p.add_argument("--kernels-only", action="store_true",
                   help="compiled mode compiles the step kernels only, not the networks")
    p.add_argument("--no-compiled", action="store_true", help="count the eager step only")
    p.add_argument("--names", metavar="PREFIX", default=None,
                   help="also list kernel names of the phases whose path starts with PREFIX")
    p.add_argument("--precision", default="fp32", choices=("fp32", "bf16"))
    p.add_argument("--no-combo", action="store_true",
                   help="compile without Inductor's combo kernels (train.compile_combo_kernels)")
    p.add_argument("--top", type=int, default=0,
                   help="CUDA: also list the N kernels with the most device time per step, "
                        "and a column of device ms per phase")
    p.add_argument("--inductor", metavar="KEY=VALUE", action="append", default=[],
                   help="set torch._inductor.config.KEY (a Python literal) before compiling, "
                        "e.g. combo_kernels=True")
    p.add_argument("--conv-backend", choices=CONV_BACKENDS, default=COUNT.conv_backend,
                   help="encoder.conv_backend of the counted step")
    p.add_argument("--scan-gate", choices=["auto", "torch", "triton"],
                   default=COUNT.scan_gate, help="encoder.scan_gate of the counted step")
    p.add_argument("--scan-last-row", choices=["tile", "vector"], default=COUNT.scan_last_row,
                   help="encoder.scan_last_row of the counted step")
    args = p.parse_args(argv)
    for item in args.inductor:
        key, _, value = item.partition("=")
        setattr(torch._inductor.config, key, ast.literal_eval(value))
    cfg = dataclasses.replace(COUNT, profile_steps=args.steps, conv_backend=args.conv_backend,
                              scan_gate=args.scan_gate, scan_last_row=args.scan_last_row)
    device = args.device
    if not device.startswith("cuda"):
        # Inductor's C++ kernels show in the CPU profile only with its kernel profile on
        torch._inductor.config.cpp.enable_kernel_profile = True
    t0 = time.perf_counter()

    def progress(what: str) -> None:
        print(f"[{time.perf_counter() - t0:6.1f} s] {what}", file=sys.stderr, flush=True)

    with tempfile.TemporaryDirectory() as root:
        state, book, scfg = build(device, args.batch, args.layers, cfg, Path(root),
                                  args.precision)
        progress("built the state and filled the replay")
        results = {"eager": count_steps(state, book, scfg, device, cfg)}
        progress("counted the eager step")
        if not args.no_compiled:
            train = dataclasses.replace(TrainConfig(), compile_combo_kernels=not args.no_combo)
            base = compile_config(train, device)
            compile_networks_(state, dataclasses.replace(base, methods=()) if args.kernels_only
                              else base)
            results["compiled"] = count_steps(state, book, scfg, device, cfg)
            progress("compiled and counted the compiled step")
    kind = "device kernels" if device.startswith("cuda") else "CPU proxy of device kernels"
    print(f"{kind} per learning step, B={args.batch}, {args.layers} layers, {args.precision}, "
          f"{device}, torch {torch.__version__}, inductor {args.inductor or 'defaults'} "
          f"({time.perf_counter() - t0:.0f} s)")
    columns = {mode: r[0] for mode, r in results.items()}
    if args.top and device.startswith("cuda"):
        columns.update({f"{mode} ms": Counter({k: v / 1e3 for k, v in r[2].items()})
                        for mode, r in results.items()})
    print(report(columns))
    for mode, (_, names, _, name_us) in results.items():
        if args.top and device.startswith("cuda"):
            print(report_top(mode, name_us, names, args.top))
        if args.names is not None:
            print(report_names(mode, names, args.names, name_us))
    return 0


if __name__ == "__main__":
    sys.exit(main())
