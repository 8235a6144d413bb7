"""One training run as ``lobsurf train`` and ``lobsurf.train()`` start it.

The config is the defaults <- a TOML file <- ``section.key=value`` overrides (the flags'
settings last: ``flag_overrides``), or a resumed run's own config with only its steps and
device changed. Before loading data it states the run's memory ceiling
(lobsurf.training.faults.resources) and refuses a config that cannot fit; it names the fee the run
pays and where it comes from (given, the store's, or the default: lobsurf.sim.fees) and
warns where its round trip is above the typical move of the training rows, and where the run
would revisit each training row more than lobsurf.training.budget.REVISIT_WARNING times, or
when its steps outlast the target rate (lobsurf.training.budget.target_rate_warning). Ctrl-C or
SIGTERM stops after the current step with a checkpoint (exit status 128 + the signal).
Diagnostics go to stderr, the summary at the end to stdout (rank 0 only under torchrun).
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from lobsurf.errors import UserError
from lobsurf.training.faults.interrupts import SIGNAL_EXIT_BASE

#: where a run goes when no folder is named: runs/train-<date>-<time>
DEFAULT_RUNS_DIR = "runs"


def flag_overrides(*, store: str | None = None, steps: int | None = None,
                   envs: int | None = None, device: str | None = None,
                   init_from: str | None = None, tensorboard: bool | None = None,
                   cuda_graph: bool | None = None, compile: bool | None = None) -> list[str]:
    """The ``section.key=value`` settings of the shortcut arguments given (None: not given)."""
    sets = []
    if store is not None:
        sets.append(f"data.store={toml_string(store)}")
    if steps is not None:
        sets.append(f"train.steps={steps}")
    if envs is not None:
        sets.append(f"train.envs={envs}")
    if device is not None:
        sets.append(f"train.device={toml_string(device)}")
    if init_from is not None:
        sets.append(f"train.init_from={toml_string(init_from)}")
    if tensorboard:
        sets.append("train.tensorboard=true")
    if cuda_graph is not None:
        sets.append(f"train.cuda_graph={'true' if cuda_graph else 'false'}")
    if compile is not None:
        sets.append(f"train.compile={'true' if compile else 'false'}")
    return sets


def toml_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _pretrained_base(init_from: str) -> tuple[dict, dict]:
    """Settings a pretrain checkpoint fixes (encoder, features, window) and its weights."""
    from dataclasses import asdict

    from lobsurf.pretrain.checkpoint import load_checkpoint

    try:
        loaded = load_checkpoint(init_from)
    except (OSError, ValueError) as exc:
        raise UserError(f"--init-from {init_from}: {exc}") from exc
    pc = loaded.config
    base = {"encoder": asdict(pc.encoder), "features": asdict(pc.features),
            "sim": {"window": pc.window}, "labels": asdict(pc.labels)}
    return base, loaded.model.state_dict()


def _say_fees(cfg, data, resumed: bool) -> None:
    """The fee the run pays and where it comes from, and a warning where its round trip is
    above the typical move of the training rows (lobsurf.sim.fees)."""
    from lobsurf.sim.fees import fee_warning, holding_rows, resolve_fees

    fees = resolve_fees(cfg.sim, data.book)
    given_as = "the run's config" if resumed else "given: sim.fee_per_lot / sim.fee_bps"
    print(f"train: {fees.describe(data.book, given_as)}", file=sys.stderr)
    if cfg.sim.passive_orders:  # resting orders' fills pay the maker fee
        print(f"train: {fees.describe_maker(data.book, given_as)}", file=sys.stderr)
    warning = fee_warning(fees, data.train_book,
                          holding_rows(cfg.labels.max_horizon, cfg.sim.stride),
                          "--set sim.fee_per_lot=... / sim.fee_bps=..., or the store's fee "
                          "(lobsurf info)", passive=cfg.sim.passive_orders)
    if warning:
        print(f"train: warning: {warning}", file=sys.stderr)


def resolve_lot_size_of(cfg, book):
    """The run's config with ``sim.lot_size_base`` turned into size units (lobsurf.sim.lots)."""
    from dataclasses import replace

    from lobsurf.sim.lots import resolve_lot_size

    sim, note = resolve_lot_size(cfg.sim, book)
    return replace(cfg, sim=sim), note


def train_one(config_file: str | None, overrides: list[str], run_dir: Path, *,
              resume: bool = False, overwrite: bool = False, progress: bool = False):
    """Train (or with ``resume`` continue) the run in ``run_dir`` (module doc).

    Args:
        config_file: TOML file of settings, or None (not read on resume).
        overrides: ``section.key=value`` settings applied after the file (on resume only
            train.steps and train.device may be among them: the caller checks).
        run_dir: the run folder, created (``overwrite``: replaced) unless resumed.
        resume: continue ``run_dir`` from its newest checkpoint up to train.steps.
        overwrite: replace an existing training run in ``run_dir``.
        progress: a progress bar on stderr when it is a terminal.

    Returns:
        (the loop's RunResult, the exit status of ``lobsurf train``: 0, or 128 + the signal
        that stopped the run).
    """
    from lobsurf.devices import enable_tf32, resolve_device
    from lobsurf.training.selection.choice import choice_summary
    from lobsurf.training.config import resolve_run_config
    from lobsurf.training.budget import revisit_warning, target_rate_warning
    from lobsurf.training.data import default_store, load_training_data
    from lobsurf.training.distributed.collective import init_collective
    from lobsurf.training.run.loop import train
    from lobsurf.training.faults.resources import check_fits, memory_estimate, store_rows
    from lobsurf.training.recovery.run_folder import prepare_run_folder, require_run_folder
    from lobsurf.training.recovery.saved_config import saved_values
    from lobsurf.data.dataset import require_trades
    from lobsurf.data.store import Store

    pretrained = None
    if resume:
        require_run_folder(run_dir)
        cfg = resolve_run_config(None, overrides, base=saved_values(run_dir))
    else:
        cfg = resolve_run_config(config_file, overrides)
        if cfg.train.init_from:
            # the pretrain run fixes the encoder, features, window and labels
            base, pretrained = _pretrained_base(cfg.train.init_from)
            cfg = resolve_run_config(config_file, overrides, base=base)

    device = resolve_device(cfg.train.device)
    # one process per device under torchrun: rank, process group, this rank's device
    collective, device = init_collective(device)
    progress = progress and collective.is_main
    if device.startswith("cuda"):
        enable_tf32()
    store_path = Path(cfg.data.store) if cfg.data.store else default_store(progress)
    if cfg.sim.passive_orders:  # refused before anything is written
        require_trades(Store.open(store_path), "passive orders (sim.passive_orders)",
                       store_path)
    # ---- the memory ceiling, stated and checked before anything is loaded
    estimate = memory_estimate(cfg, store_rows(store_path, cfg.data.instrument_id), device)
    check_fits(estimate, device)
    say = print if collective.is_main else (lambda *a, **k: None)  # rank 0 speaks
    say(f"train: memory ceiling: {estimate.summary()}", file=sys.stderr)
    if not resume and collective.is_main:
        prepare_run_folder(run_dir, overwrite)
    collective.barrier()  # the folder exists before any rank writes into it
    data = load_training_data(cfg, device, store_path)
    ranks = f" x {collective.world_size} processes" if collective.active else ""
    vs = data.validation
    validation = f", validation rows {vs.cut_row:,}..{vs.stop_row - 1:,}" if vs else ""
    say(f"train: {run_dir} | {cfg.train.envs} envs{ranks} x {cfg.train.steps:,} steps on "
        f"{device} | store {store_path} ({len(data.book):,} rows, training rows < "
        f"{data.train_stop:,}{validation})", file=sys.stderr)
    cfg, lots = resolve_lot_size_of(cfg, data.book)  # sim.lot_size_base -> size units
    if lots:
        say(f"train: {lots}", file=sys.stderr)
    if collective.is_main:
        _say_fees(cfg, data, resumed=resume)
        warnings = (revisit_warning(cfg.train.steps, cfg.train.envs * collective.world_size,
                                    cfg.sim.stride, len(data.fit_rows)),
                    target_rate_warning(cfg.train.steps, cfg.learner.polyak_tau))
        for warning in filter(None, warnings):
            print(f"train: warning: {warning}", file=sys.stderr)
    result = train(cfg, run_dir, data, device, resume=resume, pretrained=pretrained,
                   progress=progress, init_note=cfg.train.init_from, collective=collective)
    status = (SIGNAL_EXIT_BASE + int(getattr(signal, result.interrupted))
              if result.interrupted else 0)
    if not collective.is_main:
        return result, status
    if result.interrupted:
        print(f"train: stopped by {result.interrupted} at step {result.step:,} (checkpoint "
              f"{result.checkpoint.name if result.checkpoint else 'none'}); continue with: "
              f"lobsurf train --resume {run_dir} --steps {cfg.train.steps}", file=sys.stderr)
        return result, status
    m = result.last_metrics
    if m is not None:
        print(f"step {m['step']:,}: l_q {m['l_q']:.4f}  win rate {m['win_rate']:.3f}  "
              f"hold {m['hold_fraction']:.3f}  net PnL {m['net_pnl']:,.2f} over the last "
              f"{cfg.train.log_every} steps  ({m['steps_per_s']:.1f} steps/s)")
    if result.stopped_early:
        print(f"stopped early at step {result.step:,}: {result.stopped_early}")
    print(f"run saved in {run_dir} (checkpoint {result.checkpoint.name}, metrics.jsonl)")
    print(choice_summary(result.chosen))
    print(f"next: lobsurf eval {run_dir}   (held-out evaluation of the chosen policy)\n"
          f"      lobsurf report {run_dir}   (RUN/report/index.html: curves, equity, tables)")
    if not result.stopped_early:
        print(f"      lobsurf train --resume {run_dir} --steps {cfg.train.steps * 2}   "
              "(train longer)")
    return result, status


def train_keywords(args: argparse.Namespace) -> dict:
    """The flags as ``lobsurf.api.train``'s arguments (``--resume RUN``: out=RUN, resume)."""
    if args.resume and args.out:
        raise UserError("a resumed run keeps its config: only --steps (and --device) may be "
                        "given with --resume")
    return {"config": args.config, "out": args.resume or args.out, "store": args.store,
            "overrides": args.set, "steps": args.steps, "envs": args.envs,
            "seeds": args.seeds, "device": args.device, "overwrite": args.overwrite,
            "progress": args.progress, "resume": bool(args.resume),
            "init_from": args.init_from, "tensorboard": bool(args.tensorboard),
            "cuda_graph": args.cuda_graph, "compile": args.compile}
