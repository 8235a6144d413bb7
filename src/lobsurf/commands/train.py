"""``lobsurf train``: train the agent (defaults <- --config FILE.toml <- --set key=value <- flags).

With no arguments it trains on the bundled default data set (generated once, cached) on
CUDA when available, else CPU, for a budget of a few minutes on a 2-core CPU, and says at
the end where the run is and what to run next. ``--resume RUN`` continues a run to
``--steps`` total steps, exactly where its newest complete checkpoint left off.

Before loading data it states the run's memory ceiling (lobsurf.train.resources) and refuses
a config that cannot fit; Ctrl-C or SIGTERM stops after the current step with a checkpoint
and prints the command that continues the run (exit status 128 + the signal).

``--gpus N`` starts N processes, one per GPU, through torchrun's API
(lobsurf.train.launch); ``torchrun --nproc-per-node N -m lobsurf train ...`` does the same
by hand (``--device cpu``: N CPU processes over gloo). Rank 0 prints and writes the run
folder; docs/distributed.md.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path

from lobsurf.errors import UserError
from lobsurf.train.interrupts import SIGNAL_EXIT_BASE

DEFAULT_RUNS_DIR = "runs"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.ArgumentDefaultsHelpFormatter
    parser.add_argument("--store", default=None,
                        help="snapshot store (lobsurf ingest); default: the bundled data set")
    parser.add_argument("--config", default=None, help="TOML file of settings (see config.toml "
                        "in any run folder for every key)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override one setting, e.g. --set learner.lr=1e-4 (repeatable)")
    parser.add_argument("--steps", type=int, default=None,
                        help="total training steps of the run (default: train.steps)")
    parser.add_argument("--envs", type=int, default=None,
                        help="parallel environments B (default: train.envs)")
    parser.add_argument("--out", default=None,
                        help=f"run folder (default: {DEFAULT_RUNS_DIR}/train-<date>-<time>)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an existing training run in --out")
    parser.add_argument("--resume", default=None, metavar="RUN",
                        help="continue RUN from its newest checkpoint up to --steps")
    parser.add_argument("--device", default=None, choices=["auto", "cpu", "cuda"],
                        help="torch device (default: train.device, auto = cuda if available)")
    parser.add_argument("--init-from", default=None, metavar="RUN",
                        help="start the normaliser and encoder from a lobsurf pretrain run")
    parser.add_argument("--gpus", type=int, default=None, metavar="N",
                        help="train on N GPUs, one process each (torchrun; docs/distributed.md)")
    parser.add_argument("--tensorboard", action="store_true", default=None,
                        help="also write the metrics to RUN/tb for TensorBoard")
    parser.add_argument("--cuda-graph", action=argparse.BooleanOptionalAction, default=None,
                        help="replay the learning step as one CUDA graph (default: "
                        "train.cuda_graph, on; ignored on CPU)")
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                        help="torch.compile the step's networks and tensor functions (default: "
                        "train.compile, auto: on for one CUDA process, off on CPU)")
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=True,
                        help="progress bar (shown only on a terminal)")


def _flag_overrides(args: argparse.Namespace) -> list[str]:
    sets = []
    if args.store is not None:
        sets.append(f"data.store={_toml_string(args.store)}")
    if args.steps is not None:
        sets.append(f"train.steps={args.steps}")
    if args.envs is not None:
        sets.append(f"train.envs={args.envs}")
    if args.device is not None:
        sets.append(f"train.device={_toml_string(args.device)}")
    if args.init_from is not None:
        sets.append(f"train.init_from={_toml_string(args.init_from)}")
    if getattr(args, "tensorboard", None):
        sets.append("train.tensorboard=true")
    if getattr(args, "cuda_graph", None) is not None:
        sets.append(f"train.cuda_graph={'true' if args.cuda_graph else 'false'}")
    if getattr(args, "compile", None) is not None:
        sets.append(f"train.compile={'true' if args.compile else 'false'}")
    return sets


def _toml_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _pretrained_base(init_from: str) -> tuple[dict, dict]:
    """Settings a pretrain checkpoint fixes (encoder, features, window) and its weights."""
    from lobsurf.pretrain.checkpoint import load_checkpoint

    try:
        loaded = load_checkpoint(init_from)
    except (OSError, ValueError) as exc:
        raise UserError(f"--init-from {init_from}: {exc}") from exc
    from dataclasses import asdict

    pc = loaded.config
    base = {"encoder": asdict(pc.encoder), "features": asdict(pc.features),
            "sim": {"window": pc.window}, "labels": asdict(pc.labels)}
    return base, loaded.model.state_dict()


def run(args: argparse.Namespace) -> int:
    from lobsurf.train.distributed import launched_by_torchrun

    if args.gpus is not None and not launched_by_torchrun():
        if args.device == "cpu":
            raise UserError("--gpus needs CUDA; for CPU processes run torchrun "
                            "--nproc-per-node N -m lobsurf train --device cpu ...")
        from lobsurf.train.launch import launch

        return launch(args.gpus, args._argv)
    from lobsurf.train.distributed import shutdown

    try:
        return _run(args)
    finally:
        shutdown()  # the process group of a torchrun launch, if one was started


def _run(args: argparse.Namespace) -> int:
    from lobsurf.devices import enable_tf32, resolve_device
    from lobsurf.train.config import load_toml, resolve_run_config
    from lobsurf.train.data import default_store, load_training_data
    from lobsurf.train.distributed import init_collective
    from lobsurf.train.loop import train
    from lobsurf.train.resources import check_fits, memory_estimate, store_rows
    from lobsurf.train.run_folder import CONFIG_NAME, prepare_run_folder, require_run_folder

    pretrained = None
    if args.resume:
        run_dir = Path(args.resume)
        require_run_folder(run_dir)
        if args.config or args.set or args.store or args.envs or args.init_from or args.out:
            raise UserError("a resumed run keeps its config: only --steps (and --device) may "
                            "be given with --resume")
        base = load_toml(str(run_dir / CONFIG_NAME))
        cfg = resolve_run_config(None, _flag_overrides(args), base=base)
    else:
        overrides = args.set + _flag_overrides(args)
        cfg = resolve_run_config(args.config, overrides)
        if cfg.train.init_from:
            # the pretrain run fixes the encoder, features, window and labels
            base, pretrained = _pretrained_base(cfg.train.init_from)
            cfg = resolve_run_config(args.config, overrides, base=base)
        run_dir = Path(args.out or f"{DEFAULT_RUNS_DIR}/train-{time.strftime('%Y%m%d-%H%M%S')}")

    device = resolve_device(None if cfg.train.device == "auto" else cfg.train.device)
    # one process per device under torchrun: rank, process group, this rank's device
    collective, device = init_collective(device)
    if not collective.is_main:
        args.progress = False
    if device.startswith("cuda"):
        enable_tf32()
    store_path = Path(cfg.data.store) if cfg.data.store else default_store(args.progress)
    # ---- the memory ceiling, stated and checked before anything is loaded
    estimate = memory_estimate(cfg, store_rows(store_path, cfg.data.instrument_id), device)
    check_fits(estimate, device)
    say = print if collective.is_main else (lambda *a, **k: None)  # rank 0 speaks
    say(f"train: memory ceiling: {estimate.summary()}", file=sys.stderr)
    if not args.resume and collective.is_main:
        prepare_run_folder(run_dir, args.overwrite)
    collective.barrier()  # the folder exists before any rank writes into it
    data = load_training_data(cfg, device, store_path)
    ranks = f" x {collective.world_size} processes" if collective.active else ""
    say(f"train: {run_dir} | {cfg.train.envs} envs{ranks} x {cfg.train.steps:,} steps on "
        f"{device} | store {store_path} ({len(data.book):,} rows, training rows < "
        f"{data.train_stop:,})", file=sys.stderr)
    result = train(cfg, run_dir, data, device, resume=bool(args.resume), pretrained=pretrained,
                   progress=args.progress, init_note=cfg.train.init_from,
                   collective=collective)
    if not collective.is_main:
        return (SIGNAL_EXIT_BASE + int(getattr(signal, result.interrupted))
                if result.interrupted else 0)
    if result.interrupted:
        print(f"train: stopped by {result.interrupted} at step {result.step:,} (checkpoint "
              f"{result.checkpoint.name if result.checkpoint else 'none'}); continue with: "
              f"lobsurf train --resume {run_dir} --steps {cfg.train.steps}", file=sys.stderr)
        return SIGNAL_EXIT_BASE + int(getattr(signal, result.interrupted))
    m = result.last_metrics
    if m is not None:
        print(f"step {m['step']:,}: l_q {m['l_q']:.4f}  win rate {m['win_rate']:.3f}  "
              f"hold {m['hold_fraction']:.3f}  net PnL {m['net_pnl']:,.2f} over the last "
              f"{cfg.train.log_every} steps  ({m['steps_per_s']:.1f} steps/s)")
    print(f"run saved in {run_dir} (checkpoint {result.checkpoint.name}, metrics.jsonl)")
    print(f"next: lobsurf eval {run_dir}   (held-out evaluation)\n"
          f"      lobsurf report {run_dir}   (RUN/report/index.html: curves, equity, tables)\n"
          f"      lobsurf train --resume {run_dir} --steps {cfg.train.steps * 2}   (train longer)")
    return 0
