"""``lobsurf bench``'s measurements of the real training step, eager and graphed, side by side.

For one (B, layers) it builds the state exactly as ``lobsurf train`` does
(lobsurf.training.run.state.build_state on a synthetic store made by ``lobsurf synth``'s machinery),
fills the replay with a few collect-only steps, and then, in one process, on that one state:

1. eager: ``repeats`` blocks of ``steps`` calls of ``train_step(..., learning=True)``,
   a synchronize around each block; the median block gives ms per step;
2. graphed (CUDA): the same step through lobsurf.training.speed.cuda_graph.GraphedStep (warm-up,
   capture, replays), timed the same way; the graph's node and kernel-node counts;
3. a profiled eager pass: ms per named sub-phase (lobsurf.bench.phases), device ops per
   step and their summed device time (torch.profiler, CUDA only), FLOPs of one step
   (torch.utils.flop_counter: matrix products and convolutions), its per-op bytes read and
   written, and both against the device's peaks (lobsurf.bench.roofline);
4. graphed phases (CUDA): noise + collect and learn captured as two separate graphs and
   replayed between CUDA events, so the graph-mode split of the step is measured too;
5. with ``compile_`` (``lobsurf bench --compile``): the networks compiled
   (lobsurf.training.speed.compile, what ``train.compile`` does) and the graphed step timed again.

Peak memory is read after 1-2 (the phase graphs of 4 hold their own pools).
"""

from __future__ import annotations

import dataclasses
import functools
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from lobsurf.agent.collect import collect
from lobsurf.agent.learn import learn
from lobsurf.agent.step import fresh_noise_, train_step
from lobsurf.bench.phases import timed_phases
from lobsurf.bench.roofline import DevicePeaks, roofline, step_traffic
from lobsurf.data.synth import SynthConfig, write_synth_store
from lobsurf.models.kernels.triton_support import KERNEL_MODES, use_kernels_
from lobsurf.training.config import RunConfig, run_config_from_dict
from lobsurf.training.data import load_training_data
from lobsurf.training.run.state import build_state, step_config
from lobsurf.training.speed.compile import CompileConfig, compile_config, compile_networks_
from lobsurf.training.speed.cuda_graph import (GraphConfig, GraphedStep, graph_unsupported,
                                               step_generators)


@dataclass(frozen=True)
class BenchConfig:
    """What one bench run measures, and how long."""

    steps: int = 30
    """Timed steps per block (eager and graphed alike)."""
    repeats: int = 3
    """Timed blocks per mode; the median block is reported, the spread beside it."""
    warmup_steps: int = 5
    """Eager learning steps before timing (kernels, caches, allocator warm)."""
    prefill_steps: int = 8
    """Collect-only steps that fill the replay before any learning step."""
    profile_steps: int = 5
    """Steps of the profiled eager pass (sub-phases, device ops) and of each phase graph."""
    snapshots_per_day: int = 100_000
    """Synthetic store: snapshots per day (2 days; the step's cost barely depends on it)."""
    min_replay_capacity: int = 1 << 17
    """Replay capacity: the training default, raised to 4 B for large B."""
    seed: int = 0
    top_ops: int = 10
    """Device kernels (by time) and aten ops (by bytes) listed per configuration."""
    kernels: str = "auto"
    """The encoders' Triton kernels (``Encoder.use_kernels_``): "auto" on CUDA, "off" the
    PyTorch path everywhere, "on" wherever Triton runs (the CPU under its interpreter)."""

    def __post_init__(self) -> None:
        for name in ("steps", "repeats", "warmup_steps", "profile_steps", "snapshots_per_day",
                     "top_ops"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.prefill_steps < 1:
            raise ValueError(f"prefill_steps must be >= 1, got {self.prefill_steps}")
        if self.kernels not in KERNEL_MODES:
            raise ValueError(f"kernels must be one of {', '.join(KERNEL_MODES)}, got "
                             f"{self.kernels!r}")


def make_store(root: Path, cfg: BenchConfig) -> Path:
    """The synthetic store the bench trains on (``lobsurf synth``'s generator, edge on)."""
    path = root / "store"
    write_synth_store(path, SynthConfig(snapshots_per_day=cfg.snapshots_per_day, days=2,
                                        edge=1.0, seed=cfg.seed))
    return path


def run_config(store: Path, batch: int, layers: int, device: str, cfg: BenchConfig,
               precision: str = "fp32") -> RunConfig:
    # no validation slice: the bench never validates, and a small --snapshots store would be
    # refused for a slice too short to choose a checkpoint on
    return run_config_from_dict({
        "data": {"store": str(store), "validation_fraction": 0.0},
        "encoder": {"n_layers": layers},
        "train": {"envs": batch, "device": device, "seed": cfg.seed, "precision": precision,
                  "kernels": cfg.kernels != "off"},
        "replay": {"capacity": max(cfg.min_replay_capacity, 4 * batch)}})


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def time_blocks(fn: Callable[[], None], device: str, cfg: BenchConfig) -> dict[str, float]:
    """Median, min and max ms per call over ``repeats`` blocks of ``steps`` calls."""
    blocks = []
    for _ in range(cfg.repeats):
        _sync(device)
        t0 = time.perf_counter()
        for _ in range(cfg.steps):
            fn()
        _sync(device)
        blocks.append((time.perf_counter() - t0) * 1e3 / cfg.steps)
    return {"ms_per_step": statistics.median(blocks), "ms_min": min(blocks),
            "ms_max": max(blocks)}


def rates(ms: float, batch: int, learner_batch: int) -> dict[str, float]:
    steps = 1e3 / ms
    return {"steps_per_s": steps, "transitions_learned_per_s": steps * learner_batch,
            "env_steps_per_s": steps * batch}


def device_ops(step: Callable[[], None], device: str, steps: int, top_n: int = 10
               ) -> dict[str, Any]:
    """Device kernels (and copies, sets) per eager step and their summed device ms."""
    if not device.startswith("cuda"):
        return {"device_ops_per_step": None, "device_busy_ms_per_step": None, "top_ops": []}
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    ops = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    busy_us = sum(e.time_range.elapsed_us() for e in ops)
    by_name: dict[str, float] = {}
    for e in ops:
        by_name[e.name] = by_name.get(e.name, 0.0) + e.time_range.elapsed_us()
    top = sorted(by_name.items(), key=lambda kv: -kv[1])[:top_n]
    return {"device_ops_per_step": len(ops) / steps,
            "device_busy_ms_per_step": busy_us / 1e3 / steps,
            "top_ops": [{"name": n[:160], "ms_per_step": round(us / 1e3 / steps, 4)}
                        for n, us in top]}


def step_flops(step: Callable[[], None]) -> int:
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter:
        step()
    return int(counter.get_total_flops())


def graphed_phases(state, book, scfg, device: str, cfg: BenchConfig) -> dict[str, float]:
    """ms per step of noise + collect and of learn, each replayed as its own graph."""
    def collect_part() -> None:
        fresh_noise_(state)
        collect(state, book, scfg)

    parts = {"collect": collect_part, "learn": functools.partial(learn, state, book, scfg)}
    graphs = {k: GraphedStep(fn, state, step_generators(state), device,
                             GraphConfig(warmup_steps=2)) for k, fn in parts.items()}
    for _ in range(2):  # warm-up calls, then each captures on its next call
        for g in graphs.values():
            g()
    for g in graphs.values():
        g.capture()
    events = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
    total = {k: 0.0 for k in graphs}
    for _ in range(cfg.profile_steps):
        events[0].record()
        graphs["collect"].graph.replay()
        events[1].record()
        graphs["learn"].graph.replay()
        events[2].record()
        torch.cuda.synchronize()
        total["collect"] += events[0].elapsed_time(events[1])
        total["learn"] += events[1].elapsed_time(events[2])
    return {k: round(v / cfg.profile_steps, 4) for k, v in total.items()}


def measure(store: Path, device: str, batch: int, layers: int, cfg: BenchConfig,
            compile_: bool = False, precision: str = "fp32",
            peaks: DevicePeaks | None = None) -> dict[str, Any]:
    """Every figure of one (B, layers, precision) configuration (module docstring);
    ``peaks``: the device's rooflines (lobsurf.bench.roofline), None = no fractions."""
    run_cfg = run_config(store, batch, layers, "cuda" if device.startswith("cuda") else "cpu",
                         cfg, precision)
    data = load_training_data(run_cfg, device, store)
    state = build_state(run_cfg, data, device)
    for net in (state.online, state.target):
        use_kernels_(net, cfg.kernels)
    scfg, book = step_config(run_cfg), data.train_book
    step = functools.partial(train_step, state, book, scfg, True)
    for _ in range(cfg.prefill_steps):
        train_step(state, book, scfg, learning=False)
    for _ in range(cfg.warmup_steps):
        step()
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    row: dict[str, Any] = {"batch": batch, "layers": layers, "precision": precision,
                           "kernels": cfg.kernels,
                           "learner_batch": run_cfg.learner_batch,
                           "replay_capacity": run_cfg.replay.capacity}
    eager = time_blocks(step, device, cfg)
    row["eager"] = {**eager, **rates(eager["ms_per_step"], batch, run_cfg.learner_batch)}
    row["graphed"], row["graph_nodes"], row["graph_kernel_nodes"] = None, None, None
    if graph_unsupported(device) is None:
        graphed = GraphedStep(step, state, step_generators(state), device)
        for _ in range(graphed.cfg.warmup_steps + 1):
            graphed()
        g = time_blocks(graphed, device, cfg)
        row["graphed"] = {**g, **rates(g["ms_per_step"], batch, run_cfg.learner_batch)}
        row["speedup"] = eager["ms_per_step"] / g["ms_per_step"]
        if graphed.nodes is not None:
            row["graph_nodes"], row["graph_kernel_nodes"] = graphed.nodes
        del graphed
    row["peak_gib"] = (torch.cuda.max_memory_allocated() / 2**30
                       if device.startswith("cuda") else None)
    with timed_phases(state, device) as timer:
        for _ in range(cfg.profile_steps):
            step()
    row["phase_ms"] = timer.per_step_ms(cfg.profile_steps)
    row.update(device_ops(step, device, cfg.profile_steps, cfg.top_ops))
    flops = step_flops(step)
    traffic = step_traffic(step)
    row["gflop_per_step"] = flops / 1e9
    row["gb_per_step"] = traffic.total / 1e9
    row["gb_read_per_step"], row["gb_written_per_step"] = traffic.read / 1e9, traffic.written / 1e9
    row["traffic_top_ops"] = [{"op": op, "gb_per_step": b / 1e9}
                              for op, b in traffic.by_op.most_common(cfg.top_ops)]
    best = (row["graphed"] or row["eager"])["ms_per_step"]
    row["peaks"] = None if peaks is None else dataclasses.asdict(peaks)
    row.update(roofline(flops, traffic.total, best, peaks, precision))
    row["graph_phase_ms"] = (graphed_phases(state, book, scfg, device, cfg)
                             if graph_unsupported(device) is None else None)
    row["compiled"] = compiled_graph(state, step, device, batch, run_cfg.learner_batch,
                                     cfg, compile_config(device)
                                     ) if compile_ else None
    if row["compiled"] is not None and "ms_per_step" in row["compiled"]:
        # the per-op traffic against the fused step's time: an upper bound (roofline.py)
        row["compiled"]["roofline"] = roofline(flops, traffic.total,
                                               row["compiled"]["ms_per_step"], peaks, precision)
    return row


def compiled_graph(state, step: Callable[[], None], device: str, batch: int,
                   learner_batch: int, cfg: BenchConfig,
                   compile_cfg: CompileConfig) -> dict[str, Any]:
    """The graphed step again with the encoders compiled (train.compile), last: the
    compilation changes the state's modules for good. Compile time and failures are kept."""
    compile_networks_(state, compile_cfg)
    t0 = time.perf_counter()
    try:
        if graph_unsupported(device) is not None:
            for _ in range(cfg.warmup_steps):
                step()
            run, nodes = step, None
        else:
            run = GraphedStep(step, state, step_generators(state), device)
            for _ in range(run.cfg.warmup_steps + 1):
                run()
        _sync(device)
        prepare_s = time.perf_counter() - t0
        timed = time_blocks(run, device, cfg)
    except Exception as exc:  # noqa: BLE001  (reported in the row, the bench goes on)
        return {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"}
    nodes = getattr(run, "nodes", None)
    # the compiled step's kernels, run eagerly
    ops = device_ops(step, device, cfg.profile_steps, cfg.top_ops)
    return {**timed, **rates(timed["ms_per_step"], batch, learner_batch),
            "prepare_s": prepare_s, "graph_nodes": nodes[0] if nodes else None,
            "graph_kernel_nodes": nodes[1] if nodes else None,
            "device_busy_ms_per_step": ops["device_busy_ms_per_step"], "top_ops": ops["top_ops"]}
