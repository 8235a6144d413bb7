"""lobsurf from Python: ``ingest``, ``train`` and ``evaluate`` do what ``lobsurf ingest``,
``lobsurf train`` and ``lobsurf eval RUN --json`` do, for notebooks and scripts.

The commands are thin layers over these functions: they parse their flags, call one of
them and print what it returns. Bad input raises ``lobsurf.errors.UserError`` (a command
prints it as one line); what the work says on the way (memory ceiling, fee, warnings) goes
to stderr as the commands print it. Torch is imported inside the functions, so ``import
lobsurf`` stays light::

    import lobsurf
    store = lobsurf.ingest(["day1.mbp-10.dbn.zst"], "store", multiplier=50, fee_per_lot=1.0)
    run = lobsurf.train(store=store, overrides=["train.steps=1200"])
    result = lobsurf.evaluate(run)      # the dict `lobsurf eval RUN --json` prints
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from lobsurf.errors import UserError

if TYPE_CHECKING:
    from lobsurf.data.store import Store
    from lobsurf.training.config import RunConfig

PathLike = str | os.PathLike
#: a run's acting policies in evaluation (lobsurf.backtest.agent_policy)
POLICIES = ("greedy", "thompson", "pi")


@dataclass(frozen=True)
class Run:
    """A training run (or seed group) that ``train`` finished or stopped; ``evaluate``
    takes it, as it takes the folder's path (``os.fspath(run)`` is the folder).

    Attributes:
        path: the run folder (a seed group: the group's folder, a run folder per seed).
        seeds: a seed group's seeds; empty for one run.
        step: the step reached (None for a seed group).
        last_metrics: the last metrics record (docs/metrics.md), or None.
        chosen: the policy chosen on validation (RUN/chosen.json), or None (no
            validation; a seed group).
        stopped_early: why training ended before train.steps, or None.
        interrupted: the signal that stopped training (``train(out=run.path,
            resume=True)`` continues it), or None.
        exit_status: what ``lobsurf train`` exits with: 0, 128 + the signal, or a seed's
            failed process's status.
    """

    path: Path
    seeds: tuple[int, ...] = ()
    step: int | None = None
    last_metrics: dict[str, Any] | None = None
    chosen: dict[str, Any] | None = None
    stopped_early: str | None = None
    interrupted: str | None = None
    exit_status: int = 0

    def __fspath__(self) -> str:
        return str(self.path)


def ingest(paths: PathLike | Iterable[PathLike], out: PathLike, *,
           format: Literal["auto", "dbn", "lobster", "binance", "tardis"] = "auto",
           multiplier: float | None = None, currency: str | None = None,
           fee_per_lot: float | None = None, fee_bps: float | None = None,
           maker_fee_per_lot: float | None = None, maker_fee_bps: float | None = None,
           tick_size: float | None = None, definitions: PathLike | None = None,
           instrument_id: int | None = None, gap_seconds: float | None = None,
           chunk_records: int | None = None, size_unit: str | float | None = None,
           overwrite: bool = False, progress: bool = False) -> Store:
    """Build a snapshot store from DBN (MBP-10 or MBO), LOBSTER, Binance recordings or
    Tardis CSV files: ``lobsurf ingest``.

    Args:
        paths: input files (or one), ingested in the order given (sort them by time; the
            files of one Binance or Tardis stream are put in time order).
        out: the store folder to create.
        format: "auto" (from the file name and contents), "dbn", "lobster", "binance" or
            "tardis".
        multiplier: contract multiplier, currency per price unit per lot (None: from
            ``definitions``, else 1 marked unknown, with a warning); for Binance and Tardis
            per one unit of the source's quantity (1 for spot and linear futures, known).
        currency: price currency (None: from ``definitions``, else unknown).
        fee_per_lot: fee per lot filled, currency, recorded for training and evaluation.
        fee_bps: fee in basis points of filled notional, recorded likewise (with one of the
            two given, the other is 0; neither: lobsurf's default applies). These two are
            the taker fee, paid by market orders.
        maker_fee_per_lot: maker fee per lot a resting (passive) order fills, currency;
            negative: a rebate; recorded likewise.
        maker_fee_bps: maker fee in basis points of filled notional, recorded likewise
            (neither maker fee given: resting orders pay the taker fee).
        tick_size: the tick in currency units (None: inferred from the prices).
        definitions: a Databento instrument-definition DBN file.
        instrument_id: keep only this instrument (None: the first seen in each file).
        gap_seconds: a capture-time gap longer than this starts a new segment.
        chunk_records: records processed at a time (bounds memory).
        size_unit: Binance / Tardis: the quantity step in base-asset amount (e.g.
            "0.00001"), the unit sizes are stored in (None: inferred, printed).
        overwrite: replace an existing store at ``out``.
        progress: progress bars on stderr when it is a terminal.

    Returns:
        The store, opened (``store.manifest``: what was kept and skipped).
    """
    from lobsurf.data.store import Store
    from lobsurf.data.store.ingest import IngestConfig
    from lobsurf.data.store.ingest import ingest as build_store
    from lobsurf.data.store.summary import money_warnings
    from lobsurf.progress import byte_progress

    from lobsurf.data.store.inputs import FORMATS

    if format not in FORMATS:
        raise UserError(f"format must be one of {', '.join(FORMATS)}, got {format!r}")
    files = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    given = {"gap_threshold_s": gap_seconds, "chunk_records": chunk_records,
             "tick_size": tick_size, "multiplier": multiplier, "currency": currency,
             "definitions": definitions, "instrument_id": instrument_id,
             "fee_per_lot": fee_per_lot, "fee_bps": fee_bps,
             "maker_fee_per_lot": maker_fee_per_lot, "maker_fee_bps": maker_fee_bps,
             "size_unit": None if size_unit is None else str(size_unit)}
    numbers = {"gap_threshold_s": "gap_seconds", "tick_size": "tick_size",
               "multiplier": "multiplier", "fee_per_lot": "fee_per_lot", "fee_bps": "fee_bps",
               "maker_fee_per_lot": "maker_fee_per_lot", "maker_fee_bps": "maker_fee_bps"}
    for field, argument in numbers.items():
        if given[field] is not None:  # 50 and 50.0 alike, in the manifest too
            given[field] = _number(given[field], argument)
    cfg = IngestConfig(**{k: v for k, v in given.items() if v is not None})  # else defaults
    notes: list[str] = []  # said after the progress bar is gone
    with byte_progress(progress) as update:
        manifest = build_store(files, out, cfg, fmt=format, overwrite=overwrite,
                               progress=update, warn=notes.append)
    for line in notes:
        _say("ingest", line)
    for line in money_warnings(manifest):
        _warn("ingest", line)
    return Store.open(out)


def train(config: RunConfig | Mapping[str, Any] | PathLike | None = None, *,
          out: PathLike | None = None, store: PathLike | Store | None = None,
          overrides: Iterable[str] = (), steps: int | None = None, envs: int | None = None,
          seeds: int | None = None, device: Literal["auto", "cpu", "cuda"] | None = None,
          overwrite: bool = False, progress: bool = False, resume: bool = False,
          init_from: PathLike | None = None, tensorboard: bool = False,
          cuda_graph: bool | None = None, compile: bool | None = None) -> Run:
    """Train the agent: ``lobsurf train`` (docs/training.md).

    Settings apply in order: the defaults, ``config``, ``overrides``, then the shortcut
    arguments (``store``, ``steps``, ``envs``, ``device``, ...; None: not given).

    Args:
        config: a RunConfig, nested settings (``{"learner": {"lr": 1e-4}}``) or a TOML file.
        out: the run folder (None: runs/train-<date>-<time>); with ``resume``, the run to
            continue.
        store: a snapshot store (None: data.store, else the bundled data set).
        overrides: ``section.key=value`` settings, as ``--set``.
        steps: total training steps (train.steps).
        envs: parallel environments (train.envs).
        seeds: train this many runs, seeds train.seed + k, into ``out``/seed_S
            (lobsurf.training.run.seed_group); ``evaluate`` then gives the verdict over them.
        device: "auto" (CUDA when available), "cpu" or "cuda" (train.device).
        overwrite: replace an existing training run in ``out``.
        progress: a progress bar on stderr when it is a terminal.
        resume: continue the run (or seed group) in ``out`` from its newest checkpoint up
            to ``steps``; only ``steps`` and ``device`` may change.
        init_from: a lobsurf pretrain run whose normaliser and encoder start the run.
        tensorboard: also write the metrics to RUN/tb.
        cuda_graph: replay the learning step as one CUDA graph (None: train.cuda_graph).
        compile: torch.compile the step (None: train.compile).

    Returns:
        The run; it prints what ``lobsurf train`` prints.

    Raises:
        UserError: a bad setting (naming its key), folder or store.
    """
    from lobsurf.training.run.job import DEFAULT_RUNS_DIR, flag_overrides, train_one
    from lobsurf.training.run.seed_group import is_seed_group

    overrides = [overrides] if isinstance(overrides, str) else list(overrides)
    if device not in (None, "auto", "cpu", "cuda"):
        raise UserError(f"device must be auto, cpu or cuda, got {device!r}")
    store = _store_path(store)
    init_from = None if init_from is None else os.fspath(init_from)
    if resume and out is None:
        raise UserError("resume continues the run folder named by out; give it")
    if resume and (config is not None or overrides or store is not None or envs is not None
                   or init_from is not None):
        raise UserError("a resumed run keeps its config: only --steps (and --device) may be "
                        "given with --resume")
    config_file, config_sets = _config_source(config)
    run_dir = Path(out or f"{DEFAULT_RUNS_DIR}/train-{time.strftime('%Y%m%d-%H%M%S')}")
    shortcuts = {"store": store, "steps": steps, "envs": envs, "device": device,
                 "init_from": init_from, "tensorboard": tensorboard,
                 "cuda_graph": cuda_graph, "compile": compile}
    if seeds is not None or (resume and is_seed_group(run_dir)):
        return _train_group(run_dir, config_file, [*config_sets, *overrides], shortcuts,
                            seeds, resume=resume, overwrite=overwrite, progress=progress)
    from lobsurf.training.distributed.collective import shutdown

    try:
        result, status = train_one(config_file, [*config_sets, *overrides,
                                                 *flag_overrides(**shortcuts)],
                                   run_dir, resume=resume, overwrite=overwrite,
                                   progress=progress)
    finally:
        shutdown()  # the process group of a torchrun launch, if one was started
    return Run(path=run_dir, step=result.step, last_metrics=result.last_metrics,
               chosen=result.chosen, stopped_early=result.stopped_early,
               interrupted=result.interrupted, exit_status=status)


def evaluate(run: Run | PathLike, *, store: PathLike | Store | None = None,
             split: Literal["heldout", "train", "all"] = "heldout",
             checkpoint: str | int = "chosen",
             policy: Literal["greedy", "thompson", "pi"] = "greedy",
             device: str | None = None, envs: int | None = None,
             progress: bool = False) -> dict[str, Any]:
    """The run's agent beside every baseline on held-out rows: ``lobsurf eval RUN``.

    Args:
        run: a Run, a run folder or a seed group's folder.
        store: another store to trade (None: the run's own held-out rows).
        split: "heldout" (rows after the purged cut), "train" (a run's own training rows,
            in-sample) or "all" (every row of another ``store``); a seed group: "heldout".
        checkpoint: "chosen" (the policy chosen on validation), "last" or a step.
        policy: the acting policy: "greedy" (argmax E[Q]), "thompson" (+ gates) or "pi".
        device: a torch device; None or "auto": CUDA when available, else CPU.
        envs: parallel environments of the sweep (None: 64).
        progress: a progress bar on stderr when it is a terminal.

    Returns:
        What ``lobsurf eval RUN --json`` prints (docs/metrics.md): ``policies`` (the agent,
        or ``seed_S`` per seed, and every baseline), ``split``, ``settings``, ``chosen``,
        and for a seed group ``seeds``, the verdict over seeds.
    """
    from lobsurf.devices import resolve_device
    from lobsurf.backtest.sweep import SweepConfig
    from lobsurf.training.recovery.run_folder import require_run_folder
    from lobsurf.training.run.seed_group import is_seed_group

    path = Path(os.fspath(run))
    group = is_seed_group(path)
    if not group:
        require_run_folder(path)
    if policy not in POLICIES:
        raise UserError(f"policy must be one of {', '.join(POLICIES)}, got {policy!r}")
    envs = SweepConfig().num_envs if envs is None else envs
    if envs < 1:
        raise UserError(f"envs must be >= 1, got {envs}")
    store = _store_path(store)
    device = resolve_device(device)
    if group:
        return _evaluate_group(path, store, split, str(checkpoint), policy, device, envs,
                               progress)
    from lobsurf.eval.evaluate import WARN_MIN_ROWS
    from lobsurf.progress import status, step_progress
    from lobsurf.eval.run import prepare_run_evaluation

    with status(f"eval: loading {path} and its data", progress):
        plan = prepare_run_evaluation(path, store, policy, split, device, envs,
                                      str(checkpoint))
    _say_run_fees(path, plan)
    if len(plan.rows) < WARN_MIN_ROWS:
        _warn("eval", f"only {len(plan.rows):,} rows to sweep: every metric rests on few "
                      "trades")
    with step_progress(plan.steps, "eval", progress) as advance:
        return plan.run(advance)


def _evaluate_group(group: Path, store: str | None, split: str, checkpoint: str,
                    policy: str, device: str, envs: int, progress: bool) -> dict[str, Any]:
    from lobsurf.progress import status, step_progress
    from lobsurf.eval.seed_verdict import prepare_group_evaluation, verdict

    if split != "heldout":
        raise UserError(f"--split {split}: a seed group is evaluated on its held-out rows; "
                        "give one seed's folder for another split")
    with status(f"eval: loading {group}'s seeds and their data", progress):
        plan = prepare_group_evaluation(group, store, policy, device, envs, checkpoint)
    with step_progress(plan.steps, "eval", progress) as advance:
        result = plan.run(advance)
    return {**result, "seeds": verdict(result, group)}


def _say_run_fees(run_dir: Path, plan) -> None:
    # the fee the run trained with (its config.toml), over the run's holding horizon
    from lobsurf.sim.fees import announce_fees
    from lobsurf.sim.fees import holding_rows
    from lobsurf.training.recovery.run_folder import CONFIG_NAME
    from lobsurf.training.recovery.saved_config import load_run_config

    labels = load_run_config(run_dir).labels
    announce_fees(plan.sim, plan.book, holding_rows(labels.max_horizon, plan.sim.stride),
             "the run's config, as it trained", f"sim.fee_per_lot / sim.fee_bps in "
             f"{run_dir / CONFIG_NAME}")


def _train_group(group: Path, config_file: str | None, sets: list[str],
                 shortcuts: dict[str, Any], seeds: int | None, *, resume: bool,
                 overwrite: bool, progress: bool) -> Run:
    # A seed group is kept as a `lobsurf train` command line per seed (seeds.json), so the
    # arguments are written as one and each seed runs through the train command.
    from lobsurf.training.run.job import train_keywords
    from lobsurf.training.faults.interrupts import SIGNAL_EXIT_BASE
    from lobsurf.training.run.seed_group import read_group, train_seeds

    argv = ["train", "--resume" if resume else "--out", str(group)]
    if config_file:
        argv += ["--config", config_file]
    for text in sets:
        argv += ["--set", text]
    for name in ("store", "steps", "envs", "device", "init_from"):
        if shortcuts[name] is not None:
            argv += [f"--{name.replace('_', '-')}", str(shortcuts[name])]
    if shortcuts["tensorboard"]:
        argv.append("--tensorboard")
    for name in ("cuda_graph", "compile"):
        if shortcuts[name] is not None:
            argv.append(f"--{'' if shortcuts[name] else 'no-'}{name.replace('_', '-')}")
    argv += [*(["--seeds", str(seeds)] if seeds is not None else []),
             *(["--overwrite"] if overwrite else []), *([] if progress else ["--no-progress"])]
    status = train_seeds(argv, lambda args: train(**train_keywords(args)).exit_status)
    interrupted = (signal.Signals(status - SIGNAL_EXIT_BASE).name
                   if status > SIGNAL_EXIT_BASE else None)
    return Run(path=group, seeds=tuple(read_group(group)["seeds"]), interrupted=interrupted,
               exit_status=status)


def _config_source(config: Any) -> tuple[str | None, list[str]]:
    """(a TOML file to read, ``section.key=value`` settings) of ``train``'s ``config``: a
    RunConfig gives the settings where it differs from the defaults."""
    if config is None:
        return None, []
    if isinstance(config, (str, os.PathLike)):
        return os.fspath(config), []
    from dataclasses import asdict

    from lobsurf.training.config import RunConfig

    if isinstance(config, RunConfig):
        defaults = _flatten(asdict(RunConfig()))
        values = {k: v for k, v in _flatten(asdict(config)).items() if v != defaults.get(k)}
        unset = next((k for k, v in values.items() if v is None), None)
        if unset is not None:
            raise UserError(f"config: {unset} = None cannot be set (leave it at its default)")
    elif isinstance(config, Mapping):
        values = {k: v for k, v in _flatten(config).items() if v is not None}
    else:
        raise UserError("config must be a RunConfig, a dict of settings or a TOML file path, "
                        f"got {type(config).__name__}")
    return None, [f"{key}={_toml_value(value)}" for key, value in values.items()]


def _flatten(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    # {"learner": {"lr": 1e-4}} -> {"learner.lr": 1e-4}
    out = {}
    for key, value in values.items():
        if isinstance(value, Mapping):
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _toml_value(value: Any) -> str:
    # one line of TOML (an override's value): arrays inline, scalars as tomli_w writes them
    import tomli_w

    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    try:
        return tomli_w.dumps({"v": value}).partition("=")[2].strip()
    except TypeError as exc:
        raise UserError(f"config: {value!r} is not a setting's value ({exc})") from None


def _number(value: Any, name: str) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise UserError(f"{name} must be a number, got {value!r}") from None


def _store_path(store: Any) -> str | None:
    # a Store (lobsurf.ingest's result) or a folder
    if store is None:
        return None
    return os.fspath(getattr(store, "path", store))


def _warn(command: str, message: str) -> None:
    import sys

    print(f"lobsurf {command}: warning: {message}", file=sys.stderr)


def _say(command: str, message: str) -> None:
    """A line for the user on stderr (a warning when it starts with "warning:")."""
    import sys

    print(f"lobsurf {command}: {message}", file=sys.stderr)
