"""``lobsurf eval baseline:NAME [baseline:NAME ...] --store STORE``: evaluate policies on a store.

``--split heldout`` (the default) trades every held-out row of the purged time split (the
same split as pretraining) once, all policies in one deterministic sweep
(``lobsurf.eval.evaluate.evaluate_policies``); ``--split all`` sweeps every row;
``--split random`` is the older random-cursor backtest (``--envs`` x ``--steps``). Prints a
table of every metric (docs/metrics.md), or with ``--json`` one object::

    {"policies": {"hold": {metric: value, ...}, ...}, "split": {...}, "settings": {...}}

Fees: ``--fee-per-lot`` / ``--fee-bps``, else the store's recorded at ingest, else the
default in bps of notional (a run: its config's); one stderr line names the fee and its
source, and a warning says when its round trip is above the typical move
(``lobsurf.sim.fees``).

``lobsurf eval RUN`` (a run or a seed group) is ``lobsurf.api.evaluate``: this module maps
the flags onto its arguments and prints the dict it returns. Heavy imports happen inside
the functions (``lobsurf --help`` stays fast).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict

from lobsurf.commands.args import DefaultsFormatter, config_error, int_list
from lobsurf.errors import UserError
from lobsurf.eval.evaluate import WARN_MIN_ROWS
from lobsurf.progress import add_progress_flag, status
from lobsurf.sim.fees import announce_fees

POLICY_HELP = ("what to evaluate: a training run folder (lobsurf train), or one or more of "
               "baseline:hold | baseline:random | baseline:momentum | baseline:imbalance | "
               "baseline:oracle | baseline:bayes (the causal ceiling of a synthetic store) | "
               "baseline:optimal (the exact optimum of the sweep), or baseline:all")
SPLITS = ("heldout", "all", "random", "train")
#: fee_bps above this is refused: a fee of more than the whole notional of every fill.
MAX_FEE_BPS = 10_000.0
#: fee_bps above this (1% of notional per fill, far above any exchange) draws a warning.
WARN_FEE_BPS = 100.0
#: a per-lot fee above this many ticks' value (tick size x multiplier) draws a warning.
WARN_FEE_TICKS = 10.0
#: random backtest: warn when the envs x steps visits exceed this many per tradeable row.
WARN_VISITS_PER_ROW = 10.0
#: characters per column of the walk-forward table
WALK_FORWARD_COLUMN = 16
#: config field (or phrase of a config's message) → the flag a user types.
FLAGS = {
    "num_envs": "--envs", "steps": "--steps", "window": "--window", "stride": "--stride",
    "latency_rows": "--latency-rows", "order_sizes_lots": "--order-sizes",
    "position_limit_lots": "--position-limit", "max_episode_steps": "--max-episode-steps",
    "fees": "--fee-per-lot and --fee-bps", "size_index": "--size-index",
    "momentum lookback": "--lookback", "momentum threshold": "--threshold",
    "oracle horizon": "--horizon", "imbalance threshold": "--imbalance-threshold",
    "train_fraction": "--train-fraction", "horizons_snapshots": "--horizons",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from lobsurf.baselines.policies import BaselineConfig
    from lobsurf.eval.evaluate import DEFAULT_TRAIN_FRACTION
    from lobsurf.data.labels import LabelConfig
    from lobsurf.backtest.random_cursors import BacktestConfig
    from lobsurf.sim.config import SimConfig

    parser.formatter_class = DefaultsFormatter  # every default in --help
    sim, run, base = SimConfig(), BacktestConfig(), BaselineConfig()
    horizons = ",".join(map(str, LabelConfig().horizons_snapshots))
    parser.add_argument("policy", nargs="+", help=POLICY_HELP)
    parser.add_argument("--store", default=None,
                        help="snapshot store folder (lobsurf ingest); required for baselines; "
                             "for a run, another store to evaluate on (default: the run's own "
                             "held-out rows)")
    parser.add_argument("--policy", dest="acting_policy", choices=("greedy", "thompson", "pi"),
                        default="greedy",
                        help="a run's acting policy: argmax E[Q], Thompson + gates, or pi")
    parser.add_argument("--split", choices=SPLITS, default="heldout",
                        help="heldout: every row after the purged time split, once; all: every "
                             "row once; random: random cursors, --envs x --steps; train (a "
                             "run): every row it trained on, once (in-sample)")
    parser.add_argument("--checkpoint", default="chosen",
                        help="a run: what trades: chosen (the policy chosen on validation: the "
                             "best checkpoint, or hold), last (the newest checkpoint) or a step")
    parser.add_argument("--train-fraction", type=float, default=DEFAULT_TRAIN_FRACTION,
                        help="heldout: share of rows before the cut (as pretraining)")
    parser.add_argument("--horizons", default=horizons,
                        help="heldout: label horizons (snapshots) purged around the cut")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--walk-forward", type=int, default=None, metavar="K",
                        help="a run: train fold k on segments 0..k-1 and trade segment k, "
                             "k = 1..K, each a run of its own under RUN/walk_forward/ "
                             "(finished folds are skipped); prints the spread over folds")
    parser.add_argument("--fold-steps", type=int, default=None, metavar="N",
                        help="walk-forward: training steps per fold (default: the run's "
                             "train.steps)")
    parser.add_argument("--envs", type=int, default=run.num_envs, help="parallel environments")
    parser.add_argument("--steps", type=int, default=run.steps,
                        help="random split: steps per environment")
    parser.add_argument("--seed", type=int, default=sim.seed,
                        help="seed of random cursors and the random policy")
    parser.add_argument("--device", default="auto",
                        help="torch device: auto (cuda when available, else cpu, as lobsurf "
                             "train), cpu, cuda or cuda:N")
    parser.add_argument("--instrument-id", type=int, default=None,
                        help="instrument to trade when the store holds several (lobsurf info)")
    add_progress_flag(parser)
    g = parser.add_argument_group("simulator")
    g.add_argument("--window", type=int, default=sim.window, help="snapshots per observation window")
    g.add_argument("--stride", type=int, default=sim.stride,
                   help="snapshots per step (random split only; sweeps trade every row)")
    g.add_argument("--latency-rows", type=int, default=sim.latency_rows,
                   help="orders fill at the book this many snapshots after the decision")
    g.add_argument("--order-sizes", default=",".join(map(str, sim.order_sizes_lots)),
                   help="comma-separated lots of the Buy/Sell actions")
    g.add_argument("--position-limit", type=int, default=sim.position_limit_lots,
                   help="max |position|, lots")
    g.add_argument("--fee-per-lot", type=float, default=None,
                   help="fee per lot, currency (default: the store's fee recorded at ingest, "
                        "else lobsurf's default in bps of notional; docs/sim_assumptions.md)")
    g.add_argument("--fee-bps", type=float, default=None,
                   help=f"fee, basis points of notional (at most {MAX_FEE_BPS:g}; default: as "
                        "--fee-per-lot; with one of the two given, the other is 0)")
    g.add_argument("--max-episode-steps", type=int, default=sim.max_episode_steps,
                   help="episode length, steps")
    b = parser.add_argument_group("baselines")
    b.add_argument("--size-index", type=int, default=base.size_index,
                   help="order size (index into --order-sizes) traded by momentum, imbalance, oracle")
    b.add_argument("--lookback", type=int, default=base.momentum_lookback_rows,
                   help="momentum: OFI lookback, snapshots")
    b.add_argument("--threshold", type=float, default=base.momentum_threshold_lots,
                   help="momentum: |OFI| in lots needed to trade")
    b.add_argument("--imbalance-threshold", type=float, default=base.imbalance_threshold,
                   help="imbalance: |top-of-book imbalance| needed to trade (default: fitted "
                        "on the training rows)")
    b.add_argument("--horizon", type=int, default=base.oracle_horizon_rows,
                   help="oracle: snapshots ahead at which it reads the mid")


def parse_policies(texts: list[str]) -> list[str]:
    """``baseline:NAME`` arguments → baseline names (``baseline:all``: every one), in order."""
    from lobsurf.baselines.policies import BASELINES

    names: list[str] = []
    for text in texts:
        kind, _, name = text.partition(":")
        if kind != "baseline" or (name not in BASELINES and name != "all"):
            raise UserError(f"unknown policy {text!r}; {POLICY_HELP}")
        names += list(BASELINES) if name == "all" else [name]
    return list(dict.fromkeys(names))  # each once


def configs(args: argparse.Namespace):
    """(SimConfig, BacktestConfig, SweepConfig, BaselineConfig, horizons) from the flags."""
    from lobsurf.baselines.policies import BaselineConfig
    from lobsurf.backtest.random_cursors import BacktestConfig
    from lobsurf.backtest.sweep import SweepConfig
    from lobsurf.sim.config import SimConfig

    sizes = int_list(args.order_sizes, "--order-sizes", "whole lots")
    horizons = int_list(args.horizons, "--horizons", "whole numbers of snapshots")
    if not 0 < args.train_fraction < 1:
        raise UserError(f"--train-fraction must be in (0, 1), got {args.train_fraction}")
    try:
        sim = SimConfig(window=args.window, stride=args.stride, latency_rows=args.latency_rows,
                        order_sizes_lots=sizes, position_limit_lots=args.position_limit,
                        fee_per_lot=args.fee_per_lot, fee_bps=args.fee_bps,
                        max_episode_steps=args.max_episode_steps, seed=args.seed)
        sweep = SweepConfig(num_envs=args.envs)
        run = BacktestConfig(num_envs=args.envs, steps=args.steps)
        base = BaselineConfig(size_index=args.size_index, momentum_lookback_rows=args.lookback,
                              momentum_threshold_lots=args.threshold,
                              imbalance_threshold=args.imbalance_threshold,
                              oracle_horizon_rows=args.horizon, seed=args.seed)
        if min(horizons) < 1:
            raise ValueError(f"horizons_snapshots must be > 0, got {args.horizons}")
    except ValueError as exc:
        raise config_error(exc, FLAGS) from exc
    if sim.fee_bps is not None and sim.fee_bps > MAX_FEE_BPS:
        raise UserError(f"--fee-bps {sim.fee_bps:g} is more than the whole notional of a fill; "
                        f"at most {MAX_FEE_BPS:g}")
    return sim, run, sweep, base, horizons


def warn(message: str) -> None:
    print(f"lobsurf eval: warning: {message}", file=sys.stderr)


def check_fees(sim, tick_value: float) -> None:
    """Warn about fees far above any exchange's (they are allowed, but likely a typo)."""
    if sim.fee_bps > WARN_FEE_BPS:
        warn(f"--fee-bps {sim.fee_bps:g} is {sim.fee_bps / 100:g}% of notional per fill "
             f"(exchange fees are well under {WARN_FEE_BPS:g} bps)")
    if sim.fee_per_lot > WARN_FEE_TICKS * tick_value:
        warn(f"--fee-per-lot {sim.fee_per_lot:g} is {sim.fee_per_lot / tick_value:.0f} ticks' "
             f"value per lot (a tick is worth {tick_value:g}); exchange fees are a fraction of a tick")


def split_rows(book, args, sim, horizons):
    """(decision rows, training rows for fitted baselines, split info) of ``--split``
    (``random`` fits on every row, like ``all``)."""
    from lobsurf.eval.evaluate import eval_split

    mode = "heldout" if args.split == "heldout" else "all"
    split = eval_split(book, sim.window, mode, horizons, args.train_fraction)
    return split.rows, split.train_rows, split.info


def build_policies(names: list[str], env, base, train_rows, progress: bool,
                   sweep_rows=None, sweep_envs: int | None = None) -> dict:
    from lobsurf.baselines.policies import FITTED_BASELINES, PLANNED_BASELINES, make_baseline
    from lobsurf.progress import status

    policies = {}
    for name in names:
        doing = "fitting {} on training rows" if name in FITTED_BASELINES else "planning {}"
        with status(f"eval: {doing.format(name)}",
                    progress and name in FITTED_BASELINES + PLANNED_BASELINES):
            try:
                policies[name] = make_baseline(name, env, base, train_rows, sweep_rows,
                                               sweep_envs)
            except ValueError as exc:
                raise config_error(exc, FLAGS) from exc
    return policies


def run_sweep(book, names, args, sim, sweep_cfg, base, horizons) -> dict:
    from lobsurf.eval.evaluate import evaluate_policies
    from lobsurf.backtest.sweep import tile_rows
    from lobsurf.progress import step_progress
    from lobsurf.sim.env import BatchedLobEnv

    rows, train_rows, info = split_rows(book, args, sim, horizons)
    try:
        env = BatchedLobEnv(book, 1, sim)
        tiling = tile_rows(book, rows, sim, sweep_cfg.num_envs)
    except ValueError as exc:
        raise UserError(str(exc)) from exc
    if len(tiling.rows) < WARN_MIN_ROWS:
        warn(f"only {len(tiling.rows):,} rows to sweep ({info['mode']}): every metric rests on few "
             "trades; use a larger store")
    policies = build_policies(names, env, base, train_rows, args.progress, rows,
                              sweep_cfg.num_envs)
    fitted = {f"{name}_{key}": getattr(p, key) for name, p in policies.items()
              for key in ("threshold", "expected_net_pnl") if hasattr(p, key)}
    settings = {"store": str(args.store), "device": str(book.device),
                "instrument_id": args.instrument_id, "baselines": {**asdict(base), **fitted}}
    with step_progress(tiling.steps, "eval", args.progress) as advance:
        return evaluate_policies(book, rows, policies, sim, sweep_cfg, split_info=info,
                                 settings=settings, progress=advance)


def run_random(book, names, args, sim, run_cfg, base, horizons) -> dict:
    from lobsurf.backtest.random_cursors import make_env, run_backtest
    from lobsurf.progress import step_progress

    from lobsurf.baselines.policies import PLANNED_BASELINES

    planned = [n for n in names if n in PLANNED_BASELINES]
    if planned:
        warn(f"{', '.join(planned)} plans over a sweep's rows: left out of --split random")
        if not (names := [n for n in names if n not in PLANNED_BASELINES]):
            raise UserError("nothing left to evaluate: use --split heldout or all")
    _, train_rows, _ = split_rows(book, args, sim, horizons)
    # envs and (fitted) policies first: a fit's spinner cannot run inside the progress bar
    runs = {}
    for name in names:
        try:
            env = make_env(book, sim, run_cfg)
        except ValueError as exc:
            raise UserError(str(exc)) from exc
        runs[name] = env, build_policies([name], env, base, train_rows, args.progress)[name]
    visits = run_cfg.num_envs * run_cfg.steps / env.total_cursors
    if visits > WARN_VISITS_PER_ROW:
        warn(f"{run_cfg.num_envs} envs x {run_cfg.steps} steps over {env.total_cursors:,} "
             f"tradeable rows visit each row ~{visits:,.0f} times: the result says little "
             "about new data (use a larger store, fewer --envs/--steps, or --split heldout)")
    with step_progress(run_cfg.steps * len(names), "eval", args.progress) as advance:
        results = {name: run_backtest(env, policy, run_cfg, progress=advance)
                   for name, (env, policy) in runs.items()}
    settings = {"store": str(args.store), "device": str(book.device),
                "instrument_id": args.instrument_id, "sim": asdict(sim),
                "num_envs": run_cfg.num_envs, "steps_per_env": run_cfg.steps,
                "steps": run_cfg.num_envs * run_cfg.steps, "baselines": asdict(base)}
    return {"policies": results, "split": {"mode": "random"}, "settings": settings}


def _cell(key: str, value) -> str:
    if value is None:
        return "-"
    if isinstance(value, list):
        return f"{value[0]:,.2f}..{value[1]:,.2f}"
    if isinstance(value, int):
        return f"{value:,}"
    if key in ("win_rate", "hold_fraction", "turnover", "sharpe_per_trade", "sharpe_per_day",
               "capture", "capture_bayes"):
        return f"{value:.3f}"
    return f"{value:,.2f}"


def print_table(result: dict) -> None:
    """One row per metric, one column per policy."""
    names = list(result["policies"])
    split, settings = result["split"], result["settings"]
    if split["mode"] == "random":
        print(f"{settings['store']}: random cursors, {settings['num_envs']} envs x "
              f"{settings['steps_per_env']} steps = {settings['steps']:,} steps")
    else:
        where = (f", cut at row {split['cut_row']:,} (train fraction {split['train_fraction']:g})"
                 if split["mode"] == "heldout" else "")
        stride = settings["sim"]["stride"]
        per = "one per row" if stride == 1 else f"one every {stride} rows"
        print(f"{settings['store']}: {split['mode']} sweep of {split['rows']:,} rows in "
              f"{split['ranges']} range(s){where}: {settings['steps']:,} steps ({per}) "
              f"on {settings['num_envs']} envs, up to {settings['steps_per_env']:,} each")
    metrics = list(next(iter(result["policies"].values())))
    cells = {(k, n): _cell(k, result["policies"][n][k]) for k in metrics for n in names}
    width = max(len(c) for c in [*cells.values(), *names]) + 2
    print(f"{'':<20}" + "".join(f"{n:>{width}}" for n in names))
    for key in metrics:
        print(f"{key:<20}" + "".join(f"{cells[key, n]:>{width}}" for n in names))


def run_folder_argument(args: argparse.Namespace):
    """The run folder named as the policy, or None when the policies are baselines."""
    from pathlib import Path

    from lobsurf.training.recovery.run_folder import is_run_folder
    from lobsurf.training.run.seed_group import is_seed_group

    if len(args.policy) == 1 and not args.policy[0].startswith("baseline:"):
        path = Path(args.policy[0])
        if not (is_run_folder(path) or is_seed_group(path)):
            raise UserError(f"{path}: not a lobsurf training run (and not baseline:NAME); "
                            f"{POLICY_HELP}")
        return path
    return None


def run_walk_forward(run_dir, args: argparse.Namespace) -> int:
    """``lobsurf eval RUN --walk-forward K``: K folds of the run's recipe (train.walk_forward)."""
    from pathlib import Path

    from lobsurf.data.dataset import load_book_tensors
    from lobsurf.data.store import Store
    from lobsurf.devices import resolve_device
    from lobsurf.training.config import load_toml, resolve_run_config
    from lobsurf.training.data import default_store
    from lobsurf.training.recovery.run_folder import CONFIG_NAME, require_run_folder
    from lobsurf.eval.walk_forward import WalkForwardConfig, walk_forward

    require_run_folder(run_dir)
    try:
        wf = WalkForwardConfig(args.walk_forward, args.fold_steps, args.envs, args.acting_policy)
    except ValueError as exc:
        raise UserError(str(exc)) from exc
    cfg = resolve_run_config(None, [], base=load_toml(str(run_dir / CONFIG_NAME)))
    device = resolve_device(args.device)
    store_path = Path(args.store or cfg.data.store or default_store(args.progress))
    instrument = args.instrument_id or cfg.data.instrument_id or None
    with status(f"eval: loading {store_path}", args.progress):
        book = load_book_tensors(Store.open(store_path), device, instrument_id=instrument)

    def said(k: int, what: str) -> None:
        print(f"walk-forward fold {k}/{wf.folds}: {what}", file=sys.stderr)

    summary = walk_forward(run_dir, cfg, book, store_path, wf, str(device), args.progress, said)
    if args.json:
        print(json.dumps(summary))
        return 0
    print(f"{run_dir}: walk-forward over {wf.folds} fold(s), {summary['fold_steps']:,} "
          "training steps each (fold k trains on segments 0..k-1, trades segment k)")
    width = WALK_FORWARD_COLUMN
    print(f"{'':<12}" + "".join(f"{h:>{width}}" for h in ("net_pnl mean", "sd", "min", "max",
                                                          "capture mean")))
    for name, metrics in summary["spread"].items():
        s, cap = metrics["net_pnl"], metrics.get("capture", {}).get("mean")
        cells = [_cell("net_pnl", s[k]) for k in ("mean", "sd", "min", "max")]
        print(f"{name:<12}" + "".join(f"{c:>{width}}" for c in [*cells, _cell("capture", cap)]))
    return 0


def run_agent(run_dir, args: argparse.Namespace) -> int:
    """``lobsurf eval RUN``: the run's agent (a seed group: each seed's) beside every baseline
    on held-out rows (``lobsurf.api.evaluate``), as JSON or as tables."""
    from lobsurf.api import evaluate
    from lobsurf.eval.run import chosen_line
    from lobsurf.eval.seed_verdict import print_verdict

    result = evaluate(run_dir, store=args.store, checkpoint=args.checkpoint,
                      split="heldout" if args.split == "random" else args.split,
                      policy=args.acting_policy, device=args.device, envs=args.envs,
                      progress=args.progress)
    if args.json:
        print(json.dumps(result))
    elif "seeds" in result:
        print_verdict(result)
    else:
        print(f"{run_dir}: agent ({args.acting_policy}, {result['settings']['checkpoint']}, "
              f"{result['settings']['trained_steps'] or 0:,} steps trained) beside every "
              f"baseline\n{chosen_line(result['chosen'])}")
        print_table(result)
    return 0


def run(args: argparse.Namespace) -> int:
    from lobsurf.baselines.bayes import without_bayes_where_no_ceiling
    from lobsurf.data.dataset import load_book_tensors
    from lobsurf.data.store import Store
    from lobsurf.devices import resolve_device

    run_dir = run_folder_argument(args)
    from lobsurf.training.run.seed_group import is_seed_group

    if run_dir is not None and args.walk_forward is not None:
        if is_seed_group(run_dir):
            raise UserError(f"--walk-forward runs on one run: give {run_dir}/seed_S")
        return run_walk_forward(run_dir, args)
    if run_dir is not None:
        return run_agent(run_dir, args)
    if args.walk_forward is not None:
        raise UserError("--walk-forward needs a training run folder (lobsurf train), not "
                        "baselines")
    if args.store is None:
        raise UserError("--store is required to evaluate baselines")
    if args.split == "train":
        raise UserError("--split train sweeps a training run's own training rows; for "
                        "baselines use --split all or heldout")
    names = parse_policies(args.policy)
    sim, run_cfg, sweep_cfg, base, horizons = configs(args)
    device = resolve_device(args.device)
    with status(f"eval: loading {args.store}", args.progress):
        book = load_book_tensors(Store.open(args.store), device, instrument_id=args.instrument_id)
    if "baseline:bayes" not in args.policy:  # baseline:all: the ceiling where there is one
        names = without_bayes_where_no_ceiling(names, book, sim)
    from lobsurf.sim.fees import holding_rows

    sim = announce_fees(sim, book, holding_rows(max(horizons), sim.stride),
                   "given: --fee-per-lot / --fee-bps", "--fee-per-lot / --fee-bps")
    check_fees(sim, book.tick_size * book.multiplier)
    if args.split == "random":
        result = run_random(book, names, args, sim, run_cfg, base, horizons)
    else:
        result = run_sweep(book, names, args, sim, sweep_cfg, base, horizons)
    if args.json:
        print(json.dumps(result))
    else:
        print_table(result)
    return 0
