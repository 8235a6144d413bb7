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

from lobsurf.agent.config import C51_KERNELS
from lobsurf.errors import UserError
from lobsurf.models.config import CONV_BACKENDS, SSD_BACKENDS

#: the step's on/off switches, each a BenchConfig field and a --[no-]flag of its name
SWITCHES = (
    ("overlap_target", "the target net's forward on a second CUDA stream beside the online "
     "net's (train.overlap_target)"),
    ("flat_parameters", "parameters, gradients and Adam moments as one buffer each: the "
     "clip's norm one reduction, Adam with Polyak one kernel (train.flat_parameters)"),
    ("fused_adam", "without flat parameters, Adam's update as one fused multi-tensor kernel "
     "on CUDA (train.fused_adam)"),
    ("overlap_collect", "the learner's losses and backward on a CUDA stream of their own "
     "beside the collect (train.overlap_collect)"),
    ("prioritize_learner", "the learner's CUDA streams at the highest priority, the "
     "collect's at the default (train.prioritize_learner)"),
    ("collect_beside_backward", "the collect starts after the learner's forwards, beside its "
     "backward (train.collect_beside_backward)"),
    ("split_target", "the learner's target-net forward as two calls of B windows, on CUDA "
     "side by side (train.split_target)"),
    ("draw_ahead", "each learning step draws the next one's replay indices beside its "
     "backward (train.draw_ahead)"),
    ("shared_generator", "on CUDA the step's draws from one generator, not four (fewer "
     "kernels before each graph replay; train.shared_generator)"),
    ("feature_table", "the book's per-snapshot features computed once and gathered by row in "
     "every forward, instead of computed per window (train.feature_table)"),
    ("max_autotune", "Inductor's GEMM autotuning in the compiled step "
     "(train.compile_max_autotune; minutes more compilation)"),
    ("fold_norm_weights", "the Mamba2 block's RMSNorm weights inside the products after "
     "them (encoder.fold_norm_weights)"),
    ("one_in_projection", "under autograd the Mamba2 in-projection as one product each way, "
     "z's gradient written by the conv + dt backward kernel (encoder.one_in_projection)"),
)


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
    for field, help_text in SWITCHES:
        parser.add_argument("--" + field.replace("_", "-"), action=argparse.BooleanOptionalAction,
                            default=getattr(d, field), help=help_text)
    parser.add_argument("--inductor-option", action="append", default=[],
                        metavar="NAME=VALUE", dest="inductor_options",
                        help="an Inductor setting of the compiled step, e.g. "
                        "triton.enable_pdl=True (train.compile_inductor_options; repeat for "
                        "several)")
    parser.add_argument("--ssd-backend", choices=SSD_BACKENDS,
                        default=d.ssd_backend, help="the SSD scan's implementation "
                        "(encoder.ssd_backend)")
    parser.add_argument("--conv-backend", choices=CONV_BACKENDS,
                        default=d.conv_backend, help="the causal conv + SiLU's implementation "
                        "(encoder.conv_backend)")
    parser.add_argument("--scan-gate", choices=["auto", "torch", "triton"],
                        default=d.scan_gate, help="the no-grad forwards' gated-norm gate "
                        "inside the one-chunk scan kernel (encoder.scan_gate)")
    parser.add_argument("--scan-z-proj", choices=["auto", "torch", "triton"],
                        default=d.scan_z_proj, help="z of the gated scan's every-row calls "
                        "computed inside the scan kernel (encoder.scan_z_proj)")
    parser.add_argument("--c51-kernel", choices=C51_KERNELS,
                        default=d.c51_kernel, help="the learner's C51 target side as one "
                        "Triton kernel (train.c51_kernel; auto: on CUDA)")
    parser.add_argument("--scan-last-row", choices=["tile", "vector"], default=d.scan_last_row,
                        help="the last layer's one-chunk scan forward: the [Q, Q] tile kernel or "
                        "the last row as vectors (encoder.scan_last_row)")
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


def _collect_late(cfg, cuda: bool) -> bool:
    # train.collect_beside_backward takes effect only where the collect has a stream of its own
    return cfg.collect_beside_backward and cfg.overlap_collect and cuda


def _split(cfg, cuda: bool) -> bool:
    # train.split_target takes effect only where the s' half has a stream of its own
    return cfg.split_target and cfg.overlap_target and cuda


def _adam_path(cfg, cuda: bool) -> str:
    """How the bench's step runs Adam (train.flat_parameters, train.fused_adam)."""
    if cfg.flat_parameters:
        return "flat (one kernel with Polyak)"
    return "fused" if cfg.fused_adam and cuda else "multi-tensor"


def _inductor_note(options: tuple[str, ...]) -> str:
    """The header's note of the Inductor settings asked for (none: nothing)."""
    return f", Inductor {' '.join(options)}" if options else ""


def _config(args: argparse.Namespace):
    from lobsurf.bench.measure import BenchConfig

    try:
        return BenchConfig(steps=args.steps, repeats=args.repeats,
                           snapshots_per_day=args.snapshots,
                           inductor_options=tuple(args.inductor_options),
                           ssd_backend=args.ssd_backend, conv_backend=args.conv_backend,
                           scan_gate=args.scan_gate, scan_z_proj=args.scan_z_proj,
                           scan_last_row=args.scan_last_row, c51_kernel=args.c51_kernel,
                           **{field: getattr(args, field) for field, _ in SWITCHES})
    except ValueError as exc:
        raise UserError(str(exc)) from exc


def header(device: str) -> dict:
    import torch

    from lobsurf.train.loop import device_name, versions

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
    from lobsurf.train.loop import device_name

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
          f"{out['date']}, {out['model']}, TF32 {'on' if out['tf32'] else 'off'}, target and "
          f"online nets {'side by side' if cfg.overlap_target and cuda else 'in turn'}, Adam "
          f"{_adam_path(cfg, cuda)}, learner "
          f"{'beside' if cfg.overlap_collect and cuda else 'after'} collect"
          f"{', side streams at the highest priority' if cfg.prioritize_learner and cuda else ''}"
          f"{', collect beside the backward' if _collect_late(cfg, cuda) else ''}"
          f"{', target net in two halves' if _split(cfg, cuda) else ''}"
          f"{', C51 target one kernel' if cfg.c51_kernel != 'torch' and cuda else ''}"
          f"{', the next draw ahead' if cfg.draw_ahead else ''}"
          f"{', one generator' if cfg.shared_generator and cuda else ''}"
          f", features "
          f"{'gathered from a table' if cfg.feature_table else 'computed per window'}"
          f"{', GEMMs autotuned' if cfg.max_autotune and cuda and compile_ else ''}"
          f"{_inductor_note(cfg.inductor_options) if cuda and compile_ else ''}"
          f"{f', SSD {cfg.ssd_backend}' if cfg.ssd_backend != 'torch' else ''}"
          f"{f', conv {cfg.conv_backend}' if cfg.conv_backend != 'torch' else ''}"
          f"{f', scan gate {cfg.scan_gate}' if cfg.scan_gate != 'torch' else ''}"
          f"{f', z in the scan {cfg.scan_z_proj}' if cfg.scan_z_proj != 'torch' else ''}"
          f"{', norm weights folded' if cfg.fold_norm_weights else ''}"
          f"{', one in-projection under autograd' if cfg.one_in_projection else ''}"
          f"{', last row as the tile kernel' if cfg.scan_last_row == 'tile' else ''}")
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
