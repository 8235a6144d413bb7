"""Proof of learning: train on the tradeable preset and on its edge-0 null, evaluate both
greedy agents on held-out rows beside every baseline, and check the issue's criteria.

Criteria (exit code 1 when one fails, with the table printed either way):
* tradeable: the agent's held-out net PnL beats hold, random and momentum, and reaches at
  least ``--imbalance-fraction`` (default 0.5) of the imbalance baseline's;
* null (edge 0): the agent does not beat hold beyond its confidence interval (the upper
  end of the bootstrap CI of PnL per trade is not below 0 while net PnL is positive: a
  profit there means leakage or a simulator bug);
* behaviour on the tradeable run's training metrics: hold fraction strictly between 0 and
  1, post-gate action entropy above ``--entropy-floor`` nats, win rate reported.

    python benchmarks/proof_of_learning.py --device cpu --steps 6000 --envs 64 --small

(``tests/train/test_learning.py`` is the same check in CI, seeded, on one thread.)
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from lobsurf.cli import main as lobsurf
from lobsurf.train.run_folder import read_metrics

#: a CPU-sized network for quick proofs (--small)
SMALL = ["encoder.d_model=64", "encoder.n_layers=1", "encoder.d_state=16", "encoder.headdim=16",
         "sim.window=32", "network.q_hidden=128", "learner.lr=5e-4"]


def make_store(root: Path, preset: str, days: int, snapshots: int) -> Path:
    from lobsurf.data.store.ingest import IngestConfig, ingest
    from lobsurf.data.synth import write_synth
    from lobsurf.presets import preset as get_preset

    cfg = replace(get_preset(preset), days=days, snapshots_per_day=snapshots)
    paths = write_synth(root / f"{preset}-dbn", cfg)
    ingest(paths, root / f"{preset}-store", IngestConfig(multiplier=cfg.multiplier,
                                                        currency="USD"), overwrite=True)
    return root / f"{preset}-store"


def train_and_eval(store: Path, run: Path, args: argparse.Namespace) -> dict:
    sets = [f"--set={s}" for s in (SMALL if args.small else []) + args.set]
    code = lobsurf(["train", "--store", str(store), "--out", str(run), "--overwrite",
                    "--steps", str(args.steps), "--envs", str(args.envs), "--device",
                    args.device, "--no-progress", *sets])
    if code != 0:
        raise SystemExit(f"training failed with exit code {code}")
    out = run / "eval.json"
    with open(out, "w") as fh:
        stdout, sys.stdout = sys.stdout, fh
        try:
            code = lobsurf(["eval", str(run), "--json", "--no-progress", "--device", args.device])
        finally:
            sys.stdout = stdout
    if code != 0:
        raise SystemExit(f"evaluation failed with exit code {code}")
    return json.loads(out.read_text())


def table(name: str, result: dict) -> None:
    print(f"== {name}: {result['split']['rows']:,} held-out rows, cut at row "
          f"{result['split']['cut_row']:,}")
    for pol, m in result["policies"].items():
        ci = m.get("pnl_per_trade_ci")
        ci_text = f"[{ci[0]:,.1f}, {ci[1]:,.1f}]" if ci else "-"
        win = "-" if m["win_rate"] is None else f"{m['win_rate']:.3f}"
        print(f"  {pol:10s} net {m['net_pnl']:>13,.1f}  trades {m['trades']:>6,}  win {win:>5}  "
              f"hold {m['hold_fraction']:.3f}  PnL/trade CI {ci_text}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--steps", type=int, default=6000)
    p.add_argument("--envs", type=int, default=64)
    p.add_argument("--days", type=int, default=4)
    p.add_argument("--snapshots", type=int, default=100_000, help="per day")
    p.add_argument("--small", action="store_true", help="CPU-sized network (SMALL)")
    p.add_argument("--set", action="append", default=[], help="extra train --set overrides")
    p.add_argument("--imbalance-fraction", type=float, default=0.5)
    p.add_argument("--entropy-floor", type=float, default=0.3)
    p.add_argument("--out", default=None, help="keep the runs here (default: a temp folder)")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.out or tmp)
        root.mkdir(parents=True, exist_ok=True)
        results = {}
        for preset in ("tradeable", "tradeable-null"):
            store = make_store(root, preset, args.days, args.snapshots)
            results[preset] = train_and_eval(store, root / f"run-{preset}", args)
            table(preset, results[preset])
        failures = []
        pol = results["tradeable"]["policies"]
        agent = pol["agent"]["net_pnl"]
        for base in ("hold", "random", "momentum"):
            if not agent > pol[base]["net_pnl"]:
                failures.append(f"tradeable: agent {agent:,.0f} does not beat {base} "
                                f"{pol[base]['net_pnl']:,.0f}")
        bar = args.imbalance_fraction * pol["imbalance"]["net_pnl"]
        if not agent >= bar:
            failures.append(f"tradeable: agent {agent:,.0f} below {args.imbalance_fraction} x "
                            f"imbalance = {bar:,.0f}")
        null = results["tradeable-null"]["policies"]["agent"]
        ci = null.get("pnl_per_trade_ci")
        if null["net_pnl"] > 0 and ci and ci[0] > 0:
            failures.append(f"null: agent makes {null['net_pnl']:,.0f} with PnL/trade CI {ci} "
                            "above 0 (leakage or a simulator bug)")
        metrics = [r for r in read_metrics(root / "run-tradeable" / "metrics.jsonl")
                   if r.get("event") == "metrics"]
        last = metrics[-1]
        print(f"training (last interval): hold {last['hold_fraction']:.3f}, post-gate entropy "
              f"{last['action_entropy']:.3f}, win rate {last['win_rate']}")
        if not 0 < last["hold_fraction"] < 1:
            failures.append(f"hold fraction {last['hold_fraction']} is 0 or 1")
        if not last["action_entropy"] > args.entropy_floor:
            failures.append(f"post-gate entropy {last['action_entropy']:.3f} below the floor")
        print("PASS" if not failures else "FAIL:\n  " + "\n  ".join(failures))
        return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
