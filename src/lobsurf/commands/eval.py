"""``lobsurf eval baseline:NAME --store STORE``: backtest a baseline policy on a store.

Prints net PnL, trades, win rate, hold fraction, fees and PnL per trade (currency of the
instrument), or one JSON object with ``--json``. Heavy imports happen inside ``run``.
"""

from __future__ import annotations

import argparse
import json

from lobsurf.errors import UserError

POLICY_HELP = "what to evaluate: baseline:hold | baseline:random | baseline:momentum | baseline:oracle"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from lobsurf.baselines.policies import BaselineConfig
    from lobsurf.eval.backtest import BacktestConfig
    from lobsurf.sim.config import SimConfig

    sim, run, base = SimConfig(), BacktestConfig(), BaselineConfig()
    parser.add_argument("policy", help=POLICY_HELP)
    parser.add_argument("--store", required=True, help="snapshot store folder (lobsurf ingest)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--envs", type=int, default=run.num_envs, help="parallel environments")
    parser.add_argument("--steps", type=int, default=run.steps, help="steps per environment")
    parser.add_argument("--seed", type=int, default=sim.seed,
                        help="seed of cursors and the random policy")
    parser.add_argument("--device", default="cpu", help="torch device (cpu, cuda)")
    parser.add_argument("--instrument-id", type=int, default=None,
                        help="instrument to trade when the store holds several (lobsurf info)")
    g = parser.add_argument_group("simulator")
    g.add_argument("--window", type=int, default=sim.window, help="snapshots per observation window")
    g.add_argument("--stride", type=int, default=sim.stride, help="snapshots per step")
    g.add_argument("--latency-rows", type=int, default=sim.latency_rows,
                   help="orders fill at the book this many snapshots after the decision")
    g.add_argument("--order-sizes", default=",".join(map(str, sim.order_sizes_lots)),
                   help="comma-separated lots of the Buy/Sell actions")
    g.add_argument("--position-limit", type=int, default=sim.position_limit_lots,
                   help="max |position|, lots")
    g.add_argument("--fee-per-lot", type=float, default=sim.fee_per_lot, help="fee per lot, currency")
    g.add_argument("--fee-bps", type=float, default=sim.fee_bps, help="fee, basis points of notional")
    g.add_argument("--max-episode-steps", type=int, default=sim.max_episode_steps,
                   help="episode length, steps")
    b = parser.add_argument_group("baselines")
    b.add_argument("--size-index", type=int, default=base.size_index,
                   help="order size (index into --order-sizes) traded by momentum and oracle")
    b.add_argument("--lookback", type=int, default=base.momentum_lookback_rows,
                   help="momentum: OFI lookback, snapshots")
    b.add_argument("--threshold", type=float, default=base.momentum_threshold_lots,
                   help="momentum: |OFI| in lots needed to trade")
    b.add_argument("--horizon", type=int, default=base.oracle_horizon_rows,
                   help="oracle: snapshots ahead at which it reads the mid")


def parse_policy(text: str) -> str:
    from lobsurf.baselines.policies import BASELINES

    kind, _, name = text.partition(":")
    if kind != "baseline" or name not in BASELINES:
        raise UserError(f"unknown policy {text!r}; {POLICY_HELP}")
    return name


def configs(args: argparse.Namespace):
    from lobsurf.baselines.policies import BaselineConfig
    from lobsurf.eval.backtest import BacktestConfig
    from lobsurf.sim.config import SimConfig

    try:
        sizes = tuple(int(x) for x in args.order_sizes.split(","))
    except ValueError:
        raise UserError(f"--order-sizes must be comma-separated whole lots, got "
                        f"{args.order_sizes!r}") from None
    try:
        sim = SimConfig(window=args.window, stride=args.stride, latency_rows=args.latency_rows,
                        order_sizes_lots=sizes, position_limit_lots=args.position_limit,
                        fee_per_lot=args.fee_per_lot, fee_bps=args.fee_bps,
                        max_episode_steps=args.max_episode_steps, seed=args.seed)
        run = BacktestConfig(num_envs=args.envs, steps=args.steps)
        base = BaselineConfig(size_index=args.size_index, momentum_lookback_rows=args.lookback,
                              momentum_threshold_lots=args.threshold,
                              oracle_horizon_rows=args.horizon, seed=args.seed)
    except ValueError as exc:
        raise UserError(str(exc)) from exc
    return sim, run, base


def run(args: argparse.Namespace) -> int:
    from lobsurf.baselines.policies import make_baseline
    from lobsurf.data.dataset import load_book_tensors
    from lobsurf.data.store import Store
    from lobsurf.devices import resolve_device
    from lobsurf.eval.backtest import make_env, run_backtest

    name = parse_policy(args.policy)
    sim, run_cfg, base = configs(args)
    device = resolve_device(args.device)
    book = load_book_tensors(Store.open(args.store), device, instrument_id=args.instrument_id)
    try:
        env = make_env(book, sim, run_cfg)
        policy = make_baseline(name, env, base)
    except ValueError as exc:
        raise UserError(str(exc)) from exc
    summary = {"policy": args.policy, **run_backtest(env, policy, run_cfg)}
    if args.json:
        print(json.dumps(summary))
        return 0
    print(f"{args.policy} on {args.store}: {summary['envs']} envs x {run_cfg.steps} steps")
    for key in ("net_pnl", "gross_pnl", "fees", "pnl_per_trade"):
        print(f"  {key:<14} {summary[key]:>14.2f}")
    for key in ("trades", "wins", "turnover_lots", "unfilled_lots"):
        print(f"  {key:<14} {summary[key]:>14d}")
    for key in ("win_rate", "hold_fraction"):
        print(f"  {key:<14} {summary[key]:>14.3f}")
    return 0
