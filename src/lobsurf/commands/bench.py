"""``lobsurf bench``: the real training step, eager and as one CUDA graph, per batch size.

Makes a synthetic store (``lobsurf synth``'s generator) in a temporary folder, then for
each (precision, layers, B) measures the step ``lobsurf train`` runs (lobsurf.bench.measure): train
steps/s, transitions learned/s, env steps/s, eager and graphed side by side in one process,
ms per sub-phase from a profiled eager pass, the graph-mode collect/learn split, device
ops per eager step, graph nodes, FLOPs and bytes per step against the device's tensor-core
and HBM peaks (lobsurf.bench.roofline), peak GPU memory, with the device name, versions
and date; on CUDA the compiled step too. On CPU it runs eagerly only (the graphed columns
are empty). docs/bench.md.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
import time
from pathlib import Path

from lobsurf.errors import UserError
from lobsurf.models.kernels.triton_support import KERNEL_MODES

def _ints(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}")
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def _choice_list(text: str, allowed: tuple[str, ...]) -> list[str]:
    values = [v.strip() for v in text.split(",") if v.strip()]
    if not values or any(v not in allowed for v in values):
        raise argparse.ArgumentTypeError(f"expected a comma-separated list of "
                                         f"{', '.join(allowed)}, got {text!r}")
    return values


def _precisions(text: str) -> list[str]:
    from lobsurf.models.precision import PRECISIONS

    return _choice_list(text, PRECISIONS)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from lobsurf.bench.measure import BenchConfig

    d = BenchConfig()
    parser.formatter_class = argparse.ArgumentDefaultsHelpFormatter
    parser.add_argument("--batch", type=_ints, default=[16, 256, 1024],
                        help="batch sizes B (envs; the learner batch too), comma-separated")
    parser.add_argument("--layers", type=_ints, default=[2], help="Mamba2 layers, "
                        "comma-separated")
    parser.add_argument("--precision", type=_precisions, default=["fp32"],
                        help="network forward precisions (train.precision: fp32, bf16 "
                        "autocast), comma-separated")
    parser.add_argument("--steps", type=int, default=d.steps, help="timed steps per block")
    parser.add_argument("--repeats", type=int, default=d.repeats, help="timed blocks per mode")
    parser.add_argument("--snapshots", type=int, default=d.snapshots_per_day,
                        help="synthetic snapshots per day (2 days)")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                        help="also time the graphed step compiled, as lobsurf train runs it "
                        "on CUDA (train.compile; about a minute of compilation per "
                        "configuration; default: on for CUDA, off on CPU)")
    parser.add_argument("--kernels", choices=KERNEL_MODES, default=d.kernels,
                        help="the step's Triton kernels (train.kernels): auto = on CUDA, off = "
                        "the PyTorch path, on = wherever Triton runs (the CPU under its "
                        "interpreter)")
    from lobsurf.bench.memory_plan import PlanConfig

    plan = PlanConfig()
    parser.add_argument("--plan-snapshots", type=int, default=plan.snapshots,
                        help="dataset rows of the memory plan (does it fit with the replay?)")
    parser.add_argument("--plan-transitions", type=int, default=plan.transitions,
                        help="replay capacity of the memory plan")
    parser.add_argument("--peak-tflops", type=float, default=None,
                        help="tensor-core peak (TFLOP/s) of the run's precision, for a device "
                        "not in lobsurf.bench.roofline.DEVICE_PEAKS (with --peak-tbs)")
    parser.add_argument("--peak-tbs", type=float, default=None,
                        help="memory bandwidth peak (TB/s) for such a device")
    parser.add_argument("--json", default=None, metavar="FILE", help="write every figure here")


def kernels_note(mode: str, cuda: bool) -> str:
    """What computes the encoders in the bench's step: "kernels auto (Triton)" and so on."""
    runs = "Triton" if mode == "on" or (mode == "auto" and cuda) else "PyTorch"
    return f"kernels {mode} ({runs})"


def _config(args: argparse.Namespace):
    from lobsurf.bench.measure import BenchConfig

    try:
        return BenchConfig(steps=args.steps, repeats=args.repeats,
                           snapshots_per_day=args.snapshots, kernels=args.kernels)
    except ValueError as exc:
        raise UserError(str(exc)) from exc


def header(device: str) -> dict:
    import torch

    from lobsurf.devices import device_name
    from lobsurf.training.run.prepare import versions

    return {"device": device_name(device), "versions": versions(),
            "date": time.strftime("%Y-%m-%d"), "tf32": device.startswith("cuda"),
            "model": "K=64 d_model=128 Mamba2, 11 actions x 21 atoms (training defaults)",
            "torch_threads": torch.get_num_threads()}


def _peaks(args: argparse.Namespace, name: str):
    """The device's rooflines: --peak-tflops and --peak-tbs together, else the registry's
    entry for ``name``, else None (no fractions)."""
    from lobsurf.bench.roofline import DevicePeaks, peaks_for

    given = (args.peak_tflops, args.peak_tbs)
    if given.count(None) == 1:
        raise UserError("--peak-tflops and --peak-tbs go together")
    if None not in given:
        if min(given) <= 0:
            raise UserError("--peak-tflops and --peak-tbs must be > 0")
        return DevicePeaks(name, hbm_tb_s=args.peak_tbs, tf32_tflops=args.peak_tflops,
                           bf16_tflops=args.peak_tflops)
    return peaks_for(name)


def _fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def table(rows: list[dict]) -> str:
    lines = [f"{'B':>5} {'L':>2} {'prec':>4} {'eager/s':>8} {'graph/s':>8} {'x':>5} {'trans/s':>10} "
             f"{'env/s':>10} {'nodes':>6} {'ops/step':>8} {'busy ms':>8} {'collect':>8} "
             f"{'learn':>8} {'TFLOP/s':>8} {'GiB':>6}"]
    for r in rows:
        best = r["graphed"] or r["eager"]
        gp = r["graph_phase_ms"] or {}
        lines.append(
            f"{r['batch']:>5} {r['layers']:>2} {r['precision']:>4} "
            f"{r['eager']['steps_per_s']:>8.1f} "
            f"{_fmt(r['graphed'] and r['graphed']['steps_per_s'], '8.1f'):>8} "
            f"{_fmt(r.get('speedup'), '5.2f'):>5} {best['transitions_learned_per_s']:>10,.0f} "
            f"{best['env_steps_per_s']:>10,.0f} {_fmt(r['graph_nodes'], 'd'):>6} "
            f"{_fmt(r['device_ops_per_step'], '.0f'):>8} "
            f"{_fmt(r['device_busy_ms_per_step'], '.2f'):>8} {_fmt(gp.get('collect'), '.2f'):>8} "
            f"{_fmt(gp.get('learn'), '.2f'):>8} {r['achieved_tflops']:>8.2f} "
            f"{_fmt(r['peak_gib'], '.2f'):>6}")
    return "\n".join(lines)


def _fraction(value) -> str:
    return "peak unknown" if value is None else f"{100 * value:.1f} % of peak"


def roofline_line(row: dict) -> str:
    """FLOPs and per-op bytes of a step, and the fastest mode against the device's peaks."""
    mode = "graphed" if row["graphed"] else "eager"
    line = (f"B={row['batch']} layers={row['layers']} {row['precision']} roofline: "
            f"{row['gflop_per_step']:.1f} GFLOP (matrix products) and {row['gb_per_step']:.2f} "
            f"GB (per op: read {row['gb_read_per_step']:.2f}, written "
            f"{row['gb_written_per_step']:.2f}) per step; {mode}: "
            f"{row['achieved_tflops']:.2f} TFLOP/s ({_fraction(row['tensor_core_fraction'])}), "
            f"{row['achieved_tb_s']:.3f} TB/s ({_fraction(row['hbm_fraction'])})")
    c = row["compiled"]
    if c is not None and "roofline" in c:
        rc = c["roofline"]
        line += (f"; compiled: {rc['achieved_tflops']:.2f} TFLOP/s "
                 f"({_fraction(rc['tensor_core_fraction'])}), at most "
                 f"{rc['achieved_tb_s']:.3f} TB/s")
        over = rc["hbm_fraction"] is not None and rc["hbm_fraction"] > 1
        line += (f" ({100 * rc['hbm_fraction']:.0f} % of peak if every op's bytes went "
                 "through HBM: the fused kernels keep the rest on chip)" if over else
                 " (fused kernels move less than the per-op count)")
    return line


def phase_table(row: dict) -> str:
    lines = [f"phases of one eager step, B={row['batch']} layers={row['layers']} "
             f"{row['precision']} (ms, a synchronize around each range):"]
    lines += [f"  {path:<48} {ms:>9.3f}" for path, ms in row["phase_ms"].items()]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    import torch

    from lobsurf.bench.measure import make_store, measure
    from lobsurf.bench.memory_plan import PlanConfig, memory_plan, plan_line
    from lobsurf.devices import enable_tf32, resolve_device
    from lobsurf.devices import device_name

    cfg = _config(args)
    try:
        plan = PlanConfig(snapshots=args.plan_snapshots, transitions=args.plan_transitions)
    except ValueError as exc:
        raise UserError(f"--plan-snapshots/--plan-transitions: {exc}") from exc
    device = resolve_device(None if args.device == "auto" else args.device)
    compile_ = device.startswith("cuda") if args.compile is None else args.compile
    peaks = _peaks(args, device_name(device))
    if device.startswith("cuda"):
        enable_tf32()
    out = {**header(device), "config": vars(cfg), "memory_plan": memory_plan(device, plan),
           "rows": []}
    with tempfile.TemporaryDirectory(prefix="lobsurf-bench-") as tmp:
        store = make_store(Path(tmp), cfg)
        for precision, layers, batch in itertools.product(args.precision, args.layers,
                                                          args.batch):
            row = measure(store, device, batch, layers, cfg, compile_, precision, peaks)
            out["rows"].append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
            if device.startswith("cuda"):
                torch.cuda.empty_cache()
    for row in out["rows"]:
        print(phase_table(row))
    v, cuda = out["versions"], device.startswith("cuda")
    print(f"lobsurf bench on {out['device']}, torch {v['torch']}, CUDA {v['cuda']}, "
          f"{out['date']}, {out['model']}, TF32 {'on' if out['tf32'] else 'off'}, "
          f"{'learner beside the collect on side streams' if cuda else 'one stream'}, "
          f"{kernels_note(cfg.kernels, cuda)}")
    print("steps/s eager and graphed (x = speed-up), transitions learned/s and env steps/s "
          "of the faster; nodes = graph nodes; ops/step and busy ms = device ops of an "
          "eager step and their summed time; collect/learn = ms of each as its own graph")
    print(table(out["rows"]))
    print(plan_line(out["memory_plan"]))
    for r in out["rows"]:
        print(roofline_line(r))
    for r in out["rows"]:
        c = r["compiled"]
        if c is not None:
            print(f"B={r['batch']} layers={r['layers']} {r['precision']} with compiled "
                  "encoders: " + (
                c["error"] if "error" in c else
                f"{c['steps_per_s']:.1f} steps/s ({c['ms_per_step']:.2f} ms), "
                f"{c['transitions_learned_per_s']:,.0f} transitions/s, nodes "
                f"{c['graph_nodes']}, prepared in {c['prepare_s']:.0f} s"))
    if args.json:
        try:
            Path(args.json).write_text(json.dumps(out, indent=1))
        except OSError as exc:
            raise UserError(f"cannot write {args.json}: {exc.strerror or exc}") from exc
    return 0
