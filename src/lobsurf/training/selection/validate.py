"""Validation during training, and the model choice it feeds.

Every ``train.validate_every`` steps and at the last step, ``ModelSelection.validate``:

1. copies the online network's weights into an eager network of its own (the training
   network may be compiled or replayed as a CUDA graph, so it is never called with another
   batch shape) and acts greedily: argmax E[Q], mean weights, no gates, exactly what
   ``lobsurf eval RUN`` trades (``lobsurf.backtest.agent_policy``);
2. sweeps it deterministically over the purged validation slice (``lobsurf.backtest.sweep``,
   as eval sweeps the held-out rows; ``lobsurf.training.data``), on the training device, in
   at least two pieces (their trades make the choice and confirmation halves), and over as
   many of the simulator's last training rows: the training sweep's win rate beside the
   validation one is the memorisation gauge;
3. updates the model choice (``lobsurf.training.selection.choice``: the checkpoint chosen on one half
   and confirmed on the other, or hold), writes
   RUN/chosen.pt and RUN/chosen.json, and a ``validation`` record into metrics.jsonl
   (keys in docs/training.md). ``val_capture`` is the validation net PnL as a share of
   ``baseline:optimal`` over the same rows (the exact optimum, computed once per process).

Nothing here draws from a generator the training step uses, so a run's trajectory is the
same with validation on or off (only the simulator's rows differ, by the slice).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from lobsurf.agent.controllers import ControllerState
from lobsurf.agent.network import AgentNetwork
from lobsurf.agent.state import TrainState
from lobsurf.backtest.agent_policy import AgentPolicy, mean_weights_
from lobsurf.backtest.metrics import compute_metrics
from lobsurf.backtest.sweep import SweepConfig, sweep, tile_rows
from lobsurf.baselines.policies import BaselineConfig, make_baseline
from lobsurf.models.feature_table import with_feature_table
from lobsurf.sim.env import BatchedLobEnv
from lobsurf.training.config import RunConfig
from lobsurf.training.data import TrainingData, head_rows
from lobsurf.training.selection.choice import (
    CHOICE,
    CONFIRMATION,
    ModelChoice,
    halves,
    is_candidate,
    is_confirmed,
    t_interval,
)

#: seed of the agent policy's generator (the greedy policy draws nothing from it)
GREEDY_SEED = 0
#: decisions per env at least in a validation sweep: each env's piece ends with a forced
#: close, so short pieces cut trades short (lobsurf eval's 64 envs give held-out pieces of
#: ~150 decisions on the bundled data)
MIN_PIECE_DECISIONS = 32
#: pieces at least: the even ones make the choice half, the odd ones the confirmation half
MIN_PIECES = 2


def sweep_envs(book, rows: torch.Tensor, cfg: RunConfig) -> int:
    """Envs of a validation sweep: eval's default, fewer where pieces would be shorter
    than MIN_PIECE_DECISIONS, and never fewer than MIN_PIECES."""
    decisions = len(tile_rows(book, rows, cfg.sim, 1).rows)
    return max(MIN_PIECES, min(SweepConfig().num_envs, decisions // MIN_PIECE_DECISIONS))


class Validator:
    """Sweeps the greedy agent of a training state over the validation slice and the
    training slice beside it (module doc, steps 1-2)."""

    def __init__(self, cfg: RunConfig, data: TrainingData, device: torch.device | str) -> None:
        vs = data.validation
        if vs is None:
            raise ValueError("no validation slice (data.validation_fraction = 0)")
        self.cfg = cfg
        # with a feature table, as the training book: the agent's windows are read from it
        self.val_book = with_feature_table(head_rows(data.book, vs.stop_row), cfg.features)
        self.val_rows = vs.rows
        self.train_book, self.train_rows = data.train_book, vs.train_slice_rows
        self.sweep_cfg = SweepConfig(sweep_envs(self.val_book, self.val_rows, cfg))
        # the global generator is left as it was: the run's trajectory does not see this
        with torch.random.fork_rng(devices=[]):
            net = AgentNetwork(cfg.features, cfg.encoder, cfg.network, cfg.labels,
                               cfg.sim.num_actions)
        self.network = net.to(device)
        self.controllers = ControllerState.bootstrap(device)
        self._optimum: float | None = None

    def optimum(self) -> float:
        """Net PnL of ``baseline:optimal`` over the validation rows (computed once)."""
        if self._optimum is None:
            env = BatchedLobEnv(self.val_book, 1, self.cfg.sim)
            plan = make_baseline("optimal", env, BaselineConfig(), None, self.val_rows,
                                 self.sweep_cfg.num_envs)
            records, _ = sweep(self.val_book, self.val_rows, {"optimal": plan}, self.cfg.sim,
                               self.sweep_cfg)
            self._optimum = compute_metrics(records["optimal"])["net_pnl"]
        return self._optimum

    @torch.no_grad()
    def __call__(self, state: TrainState) -> tuple[dict[str, Any], dict[str, Any]]:
        """(validation metrics, training-slice metrics) of the state's greedy agent
        (``lobsurf.backtest.metrics.compute_metrics`` dicts; the validation one with its choice
        and confirmation halves, ``lobsurf.training.selection.choice.halves``)."""
        self.network.load_state_dict(state.online.state_dict())
        self.controllers.load_(state.controllers.as_dict())
        policy = AgentPolicy(mean_weights_(self.network), self.controllers, state.tables,
                             self.cfg.gates, self.cfg.sim.window,
                             max(self.cfg.sim.order_sizes_lots), "greedy", GREEDY_SEED)
        swept = []
        for book, rows in ((self.val_book, self.val_rows), (self.train_book, self.train_rows)):
            records, tiling = sweep(book, rows, {"agent": policy}, self.cfg.sim,
                                    self.sweep_cfg)
            swept.append((records["agent"], tiling.steps))
        (val, piece_steps), (train, _) = swept
        return ({**compute_metrics(val), **halves(val.trade_pnl, val.trade_step, piece_steps)},
                compute_metrics(train))

    def snapshot(self) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """Host copies of the last validated weights and controllers (a new best's)."""
        online = {k: v.detach().to("cpu", copy=True) for k, v in
                  self.network.state_dict().items()}
        controllers = {k: v.detach().to("cpu", copy=True) for k, v in
                       self.controllers.as_dict().items()}
        return online, controllers


def validation_record(step: int, val: dict[str, Any], train: dict[str, Any], optimum: float,
                      choice: ModelChoice) -> dict[str, Any]:
    """The ``validation`` record of metrics.jsonl (docs/training.md)."""
    choice_half, confirm_half = val[CHOICE], val[CONFIRMATION]
    rate = choice.false_edge_rate
    return {"event": "validation", "step": step,
            "val_net_pnl": val["net_pnl"], "val_trades": val["trades"],
            "val_win_rate": val["win_rate"], "val_pnl_per_trade": val["pnl_per_trade"],
            "val_pnl_per_trade_ci": val["pnl_per_trade_ci"],
            "val_hold_fraction": val["hold_fraction"],
            "val_capture": val["net_pnl"] / optimum if optimum > 0 else None,
            "val_optimal_net_pnl": optimum,
            "train_sweep_win_rate": train["win_rate"], "train_sweep_net_pnl": train["net_pnl"],
            "train_sweep_trades": train["trades"],
            "val_choice_trades": choice_half["trades"],
            "val_choice_net_pnl": choice_half["net_pnl"],
            "val_confirm_trades": confirm_half["trades"],
            "val_confirm_net_pnl": confirm_half["net_pnl"],
            "val_confirm_pnl_per_trade_ci": t_interval(confirm_half, rate),
            "candidate": is_candidate(val, choice.min_trades),
            "confirmed": is_confirmed(val, choice.min_trades, rate),
            "new_best": choice.best_step == step, "best_step": choice.best_step,
            "chosen": "checkpoint" if choice.chosen else "hold",
            "since_best": choice.since_best}


class ModelSelection:
    """Validation and model choice of one run (module doc). Every process of a run holds
    one (the loop calls ``validate`` at the same steps everywhere); only the one with
    ``sweeps`` (rank 0) sweeps, chooses and writes."""

    def __init__(self, cfg: RunConfig, data: TrainingData, device: torch.device | str,
                 run_dir: Path, config: dict[str, Any], sweeps: bool = True) -> None:
        self.every = cfg.train.validate_every
        self.validator = Validator(cfg, data, device) if sweeps else None
        self.choice = ModelChoice(cfg.train.min_validation_trades, cfg.train.patience,
                                  cfg.train.false_edge_rate)
        self.run_dir, self.config = run_dir, config
        self.last: dict[str, Any] | None = None
        """The newest validation record (None before the first)."""

    def due(self, step: int, total: int) -> bool:
        return step % self.every == 0 or step == total

    def validate(self, state: TrainState, step: int, log) -> bool:
        """Validate at ``step`` (module doc); returns whether train.patience ran out."""
        if self.validator is None:
            return False  # another process: rank 0 decides, the loop shares its verdict
        val, train = self.validator(state)
        new_best = self.choice.update(step, val, self.validator.snapshot)
        self.choice.write_files(self.run_dir, self.config, weights=new_best)
        self.last = validation_record(step, val, train, self.validator.optimum(), self.choice)
        log.write(self.last)
        return self.choice.stopped

    def state_dict(self) -> dict[str, Any]:
        return self.choice.state_dict()

    def restore_(self, payload: dict[str, Any]) -> None:
        """The choice of a checkpoint payload (resume, rollback), and the files with it."""
        self.choice.load_state_dict(payload.get("model_choice"))
        self.last = None
        if self.validator is not None:
            self.choice.write_files(self.run_dir, self.config)

    def bar_fields(self) -> dict[str, str]:
        """The progress line's validation fields (empty before the first validation)."""
        if self.last is None:
            return {}
        win = self.last["val_win_rate"]
        return {"val_pnl": f"{self.last['val_net_pnl']:,.0f}",
                "val_win": "-" if win is None else f"{win:.2f}"}
