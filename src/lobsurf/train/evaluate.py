"""``evaluate_run``: a trained run on data it never saw, beside every baseline, in one sweep.

By default the sweep covers the rows after the run's own training split (the same
``time_split`` with the run's window, horizons and train fraction: purged of the window and
the longest label horizon, so no snapshot the simulator trained on or any label it learned
from is traded). ``store`` evaluates on another store instead (another instrument or
period), on that store's held-out split (or every row with ``split="all"``). Fitted
baselines (``imbalance``) learn their threshold from the training rows only.

The result is ``lobsurf.eval.evaluate.evaluate_policies``'s dict with the agent under
``policies["agent"]`` and the run's facts under ``settings``.
"""

from __future__ import annotations

import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from lobsurf.agent.controllers import ControllerState
from lobsurf.agent.network import AgentNetwork
from lobsurf.baselines.policies import BaselineConfig, make_baselines
from lobsurf.data.dataset import BookTensors, load_book_tensors
from lobsurf.data.store import Store
from lobsurf.errors import UserError
from lobsurf.eval.evaluate import EvalSplit, eval_split, evaluate_policies, summarise
from lobsurf.eval.metrics import BacktestRecord
from lobsurf.pretrain.split import time_split
from lobsurf.eval.sweep import SweepConfig, Tiling, sweep, tile_rows
from lobsurf.sim.config import SimConfig
from lobsurf.sim.env import BatchedLobEnv
from lobsurf.train.agent_policy import AgentPolicy, PolicyMode
from lobsurf.train.checkpoint import list_checkpoints, load_payload
from lobsurf.train.config import RunConfig, load_toml, resolve_run_config
from lobsurf.train.data import default_store
from lobsurf.train.loop import step_tables
from lobsurf.train.run_folder import CONFIG_NAME, require_run_folder

#: seed of the sampling policies' generator in evaluation (fixed: evaluations must agree)
EVAL_SEED = 0
#: the baselines swept beside the agent (optimal: the exact optimum its capture is measured by)
RUN_BASELINES = ("hold", "random", "momentum", "imbalance", "oracle", "optimal")


def load_run(run_dir: Path) -> tuple[RunConfig, dict[str, Any], Path]:
    """The run's config and newest checkpoint payload (and its path)."""
    require_run_folder(run_dir)
    cfg = resolve_run_config(None, [], base=load_toml(str(run_dir / CONFIG_NAME)))
    found = list_checkpoints(run_dir)
    if not found:
        raise UserError(f"{run_dir}: no checkpoint yet (is the run still in its first "
                        f"{cfg.train.checkpoint_every} steps?)")
    # newest first; a broken one (a run still writing it, a bad disk) is skipped, not
    # deleted: evaluation only reads the run
    for path in reversed(found):
        try:
            return cfg, load_payload(path), path
        except (OSError, ValueError, RuntimeError, EOFError) as exc:
            print(f"lobsurf eval: warning: skipping checkpoint {path.name}: {exc}",
                  file=sys.stderr)
    raise UserError(f"{run_dir}: no checkpoint loads (every one failed its check)")


def agent_policy(cfg: RunConfig, payload: dict[str, Any], env: BatchedLobEnv, mode: PolicyMode,
                 device: torch.device | str) -> AgentPolicy:
    """The checkpoint's online network and controllers as a Policy for ``env``'s book."""
    net = AgentNetwork(cfg.features, cfg.encoder, cfg.network, cfg.labels, cfg.sim.num_actions)
    net.load_state_dict(payload["online"])
    controllers = ControllerState.bootstrap(device)
    controllers.load_(payload["controllers"])
    return AgentPolicy(net.to(device), controllers, step_tables(cfg, env, device), cfg.gates,
                       cfg.sim.window, max(cfg.sim.order_sizes_lots), mode, EVAL_SEED)


@dataclass
class RunEvaluation:
    """Everything one sweep of a run needs (``prepare_run_evaluation``), before it runs."""

    book: BookTensors
    rows: torch.Tensor
    policies: dict[str, Any]
    sim: SimConfig
    sweep: SweepConfig
    split_info: dict[str, Any]
    settings: dict[str, Any]

    @property
    def steps(self) -> int:
        """Sweep steps (for a progress bar)."""
        return tile_rows(self.book, self.rows, self.sim, self.sweep.num_envs).steps

    def run(self, progress: Callable[[int], None] | None = None) -> dict[str, Any]:
        return evaluate_policies(self.book, self.rows, self.policies, self.sim, self.sweep,
                                 split_info=self.split_info, settings=self.settings,
                                 progress=progress)

    def run_with_records(self, progress: Callable[[int], None] | None = None
                         ) -> tuple[dict[str, Any], dict[str, BacktestRecord], Tiling]:
        """``run``'s dict plus every policy's per-step record and the tiling (for plots)."""
        records, tiling = sweep(self.book, self.rows, self.policies, self.sim, self.sweep,
                                progress)
        result = summarise(records, tiling, self.sim, split_info=self.split_info,
                           settings=self.settings)
        return result, records, tiling


def prepare_run_evaluation(run_dir: Path, store: str | None = None,
                           policy: PolicyMode = "greedy", split: str = "heldout",
                           device: torch.device | str = "cpu",
                           num_envs: int = SweepConfig().num_envs) -> RunEvaluation:
    """Load the run, the store and its split, and build the agent and every baseline."""
    cfg, payload, ckpt = load_run(run_dir)
    own_store = store is None
    store_path = Path(store) if store else (Path(cfg.data.store) if cfg.data.store
                                            else default_store())
    instrument = (cfg.data.instrument_id or None) if own_store else None
    book = load_book_tensors(Store.open(store_path), device, instrument_id=instrument)
    horizons = cfg.labels.horizons_snapshots
    if own_store:
        if split != "heldout":
            raise UserError("the run's own store is evaluated on its held-out rows only; "
                            "--split all needs --store (another store)")
        # exactly the training split: the simulator trained on rows < cut - max horizon
        ts = time_split(book, cfg.sim.window, min(horizons), max(horizons),
                        cfg.data.train_fraction, cfg.data.split_at_segment)
        chosen = EvalSplit(ts.test_rows, ts.train_rows, {
            "mode": "heldout", "cut_row": ts.cut_row, "train_fraction": cfg.data.train_fraction,
            "purge_horizons": list(horizons), "train_rows": len(ts.train_rows),
            "train_stop_row": ts.cut_row - cfg.labels.max_horizon})
    else:
        chosen = eval_split(book, cfg.sim.window, split, horizons, cfg.data.train_fraction)
    env = BatchedLobEnv(book, 1, cfg.sim)
    # momentum reads OFI inside the observation window: its lookback fits the run's window
    base = BaselineConfig(momentum_lookback_rows=min(BaselineConfig().momentum_lookback_rows,
                                                     cfg.sim.window - 1))
    policies = make_baselines(RUN_BASELINES, env, base, chosen.train_rows, chosen.rows,
                              num_envs)
    policies["agent"] = agent_policy(cfg, payload, env, policy, device)
    settings = {"run": str(run_dir), "checkpoint": ckpt.name, "trained_steps": payload["step"],
                "store": str(store_path), "policy": policy, "device": str(device),
                "own_store": own_store, "baselines": asdict(base)}
    return RunEvaluation(book=book, rows=chosen.rows, policies=policies, sim=cfg.sim,
                         sweep=SweepConfig(num_envs), split_info=chosen.info, settings=settings)


def evaluate_run(run_dir: Path, store: str | None = None, policy: PolicyMode = "greedy",
                 split: str = "heldout", device: torch.device | str = "cpu",
                 num_envs: int = SweepConfig().num_envs,
                 progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Sweep the run's agent and every baseline over held-out rows (module doc)."""
    return prepare_run_evaluation(run_dir, store, policy, split, device, num_envs).run(progress)
