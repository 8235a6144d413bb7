"""``evaluate_run``: a trained run on data it never saw, beside every baseline, in one sweep.

By default the sweep covers the rows after the run's own training split (the same
``time_split`` with the run's window, horizons and train fraction: purged of the window and
the longest label horizon, so no snapshot the simulator trained on or any label it learned
from is traded). ``store`` evaluates on another store instead (another instrument or
period), on that store's held-out split (or every row with ``split="all"``). Fitted
baselines (``imbalance``) learn their threshold from the training rows only.

The agent is the run's chosen policy by default (``checkpoint="chosen"``: RUN/chosen.json,
``lobsurf.training.selection.choice``): the checkpoint that validated best, or hold when none beat hold
on validation ("no edge found on validation": the agent's row is then hold's, zero
trades); a run without validation trades its last checkpoint. ``"last"`` or a step number
picks a training checkpoint instead.

The result is ``lobsurf.eval.evaluate.evaluate_policies``'s dict with the agent under
``policies["agent"]``, the run's facts under ``settings`` and the policy evaluated under
``chosen``: ``{"policy": "checkpoint", "step", "source": "chosen" | "last" | "step"}`` or
``{"policy": "hold", "source": "chosen", "reason"}``.
"""

from __future__ import annotations

import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from lobsurf.agent.controllers import ControllerState
from lobsurf.agent.network import AgentNetwork
from lobsurf.backtest.agent_policy import AgentPolicy, PolicyMode
from lobsurf.backtest.metrics import BacktestRecord
from lobsurf.backtest.sweep import SweepConfig, Tiling, sweep, tile_rows
from lobsurf.baselines.policies import BaselineConfig, HoldPolicy, make_baselines
from lobsurf.data.dataset import BookTensors, load_book_tensors
from lobsurf.data.split import time_split
from lobsurf.data.store import Store
from lobsurf.errors import UserError
from lobsurf.eval.evaluate import EvalSplit, eval_split, evaluate_policies, summarise
from lobsurf.sim.config import SimConfig
from lobsurf.sim.env import BatchedLobEnv
from lobsurf.training.config import RunConfig
from lobsurf.training.data import default_store, head_rows, validation_slice
from lobsurf.training.recovery.checkpoint import list_checkpoints, load_payload
from lobsurf.training.recovery.run_folder import require_run_folder
from lobsurf.training.recovery.saved_config import load_run_config
from lobsurf.training.run.state import step_tables
from lobsurf.training.selection.choice import CHOSEN_PT, NO_EDGE, load_chosen, read_choice

#: seed of the sampling policies' generator in evaluation (fixed: evaluations must agree)
EVAL_SEED = 0
#: the baselines swept beside the agent (optimal: the exact optimum its capture is measured
#: by; bayes: the causal ceiling, on synthetic stores only)
RUN_BASELINES = ("hold", "random", "momentum", "imbalance", "oracle", "bayes", "optimal")


def load_run(run_dir: Path, checkpoint: str = "last") -> tuple[RunConfig, dict[str, Any], Path]:
    """The run's config and a checkpoint's payload (and its path): the newest that loads
    (``checkpoint="last"``) or the one of a given step (``checkpoint="STEP"``)."""
    require_run_folder(run_dir)
    cfg = load_run_config(run_dir)
    found = list_checkpoints(run_dir)
    if not found:
        raise UserError(f"{run_dir}: no checkpoint yet (is the run still in its first "
                        f"{cfg.train.checkpoint_every} steps?)")
    if checkpoint != "last":
        if not checkpoint.isdigit():
            raise UserError(f"--checkpoint {checkpoint!r}: expected chosen, last or a step "
                            "number")
        steps = {int(p.stem.split("_")[-1]): p for p in found}
        if int(checkpoint) not in steps:
            raise UserError(f"{run_dir}: no checkpoint of step {int(checkpoint)} (kept: "
                            f"{', '.join(map(str, sorted(steps)))})")
        path = steps[int(checkpoint)]
        return cfg, load_payload(path), path
    # newest first; a broken one (a run still writing it, a bad disk) is skipped, not
    # deleted: evaluation only reads the run
    for path in reversed(found):
        try:
            return cfg, load_payload(path), path
        except (OSError, ValueError, RuntimeError, EOFError) as exc:
            print(f"lobsurf eval: warning: skipping checkpoint {path.name}: {exc}",
                  file=sys.stderr)
    raise UserError(f"{run_dir}: no checkpoint loads (every one failed its check)")


@dataclass
class PolicyChoice:
    """The policy an evaluation of a run trades (``choose_policy``).

    Attributes:
        payload: a checkpoint's policy part (``online``, ``controllers``, ``step``), or None
            for hold.
        name: what ``settings["checkpoint"]`` calls it (a checkpoint file, chosen.pt, hold).
        info: the result's ``chosen`` entry (module doc).
        trained_steps: steps the evaluated policy was trained (hold: the run's steps
            validated).
    """

    payload: dict[str, Any] | None
    name: str
    info: dict[str, Any]
    trained_steps: int | None

    @property
    def is_hold(self) -> bool:
        return self.payload is None

    def agent(self, cfg: RunConfig, env: BatchedLobEnv, mode: PolicyMode,
              device: torch.device | str):
        """The agent's Policy: the checkpoint's network, or hold."""
        return HoldPolicy() if self.is_hold else agent_policy(cfg, self.payload, env, mode, device)


def choose_policy(run_dir: Path, cfg: RunConfig, checkpoint: str = "chosen") -> PolicyChoice:
    """The run's policy to evaluate: ``checkpoint`` "chosen" (module doc), "last" or a step."""
    if checkpoint == "chosen":
        info = read_choice(run_dir)
        if info is None:  # no validation slice, or none run yet: the last checkpoint trades
            why = ("validation off (data.validation_fraction = 0)"
                   if cfg.data.validation_fraction == 0 else "the run has not validated yet")
            pick = choose_policy(run_dir, cfg, "last")
            pick.info["note"] = f"{why}: the last checkpoint trades"
            return pick
        if info["policy"] == "hold":
            return PolicyChoice(None, "hold", {"policy": "hold", "source": "chosen",
                                               "reason": info["reason"]},
                                info.get("validated_to_step"))
        payload = load_chosen(run_dir, int(info["step"]))
        return PolicyChoice(payload, CHOSEN_PT, {"policy": "checkpoint", "step": info["step"],
                                                 "source": "chosen", "reason": info["reason"]},
                            int(payload["step"]))
    _, payload, path = load_run(run_dir, checkpoint)
    step = int(payload["step"])
    return PolicyChoice(payload, path.name, {"policy": "checkpoint", "step": step,
                                             "source": "last" if checkpoint == "last" else "step"},
                        step)


def chosen_line(info: dict[str, Any]) -> str:
    """What ``lobsurf eval`` says about the policy it evaluated (``info``: ``chosen``)."""
    if info["policy"] == "hold":
        return (f"{NO_EDGE}: {info['reason']}; the agent's row is hold's (zero trades)")
    what = {"chosen": "the chosen checkpoint", "last": "the last checkpoint",
            "step": "the checkpoint"}[info["source"]]
    why = info.get("reason") or info.get("note")
    return f"agent = {what} of step {info['step']:,}" + (f" ({why})" if why else "")


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
    chosen: dict[str, Any] | list[dict[str, Any]]
    """the policy evaluated as the agent (the result's ``chosen``; a seed group: one each)."""

    @property
    def steps(self) -> int:
        """Sweep steps (for a progress bar)."""
        return tile_rows(self.book, self.rows, self.sim, self.sweep.num_envs).steps

    def run(self, progress: Callable[[int], None] | None = None) -> dict[str, Any]:
        result = evaluate_policies(self.book, self.rows, self.policies, self.sim, self.sweep,
                                   split_info=self.split_info, settings=self.settings,
                                   progress=progress)
        return {**result, "chosen": self.chosen}

    def run_with_records(self, progress: Callable[[int], None] | None = None
                         ) -> tuple[dict[str, Any], dict[str, BacktestRecord], Tiling]:
        """``run``'s dict plus every policy's per-step record and the tiling (for plots)."""
        records, tiling = sweep(self.book, self.rows, self.policies, self.sim, self.sweep,
                                progress)
        result = summarise(records, tiling, self.sim, split_info=self.split_info,
                           settings=self.settings)
        return {**result, "chosen": self.chosen}, records, tiling


def prepare_run_evaluation(run_dir: Path, store: str | None = None,
                           policy: PolicyMode = "greedy", split: str = "heldout",
                           device: torch.device | str = "cpu",
                           num_envs: int = SweepConfig().num_envs,
                           checkpoint: str = "chosen") -> RunEvaluation:
    """Load the run, the store and its split, and build the agent and every baseline.

    ``split`` on the run's own store: "heldout" (the rows after the purged cut, never
    trained on) or "train" (every row the simulator trained on, in-sample: beside
    "heldout" it measures how much of the training result is memorised).
    ``checkpoint``: "chosen", "last" or a step (module doc)."""
    require_run_folder(run_dir)
    cfg = load_run_config(run_dir)
    pick = choose_policy(run_dir, cfg, checkpoint)
    own_store = store is None
    store_path = Path(store) if store else (Path(cfg.data.store) if cfg.data.store
                                            else default_store())
    instrument = (cfg.data.instrument_id or None) if own_store else None
    book = load_book_tensors(Store.open(store_path), device, instrument_id=instrument)
    horizons = cfg.labels.horizons_snapshots
    if own_store:
        if split not in ("heldout", "train"):
            raise UserError("the run's own store is evaluated on its held-out rows or its "
                            "training rows (--split heldout or train); --split all needs "
                            "--store (another store)")
        # exactly the training split: the simulator trained on rows < (the validation cut,
        # else the held-out cut) - max horizon
        ts = time_split(book, cfg.sim.window, min(horizons), max(horizons),
                        cfg.data.train_fraction, cfg.data.split_at_segment)
        train_stop = (validation_slice(book, cfg, ts) or ts).cut_row - cfg.labels.max_horizon
        if split == "train":
            book = head_rows(book, train_stop)
            chosen = eval_split(book, cfg.sim.window, "all", horizons, cfg.data.train_fraction)
            chosen.info.update({"mode": "train", "train_stop_row": train_stop})
        else:
            chosen = EvalSplit(ts.test_rows, ts.train_rows, {
                "mode": "heldout", "cut_row": ts.cut_row,
                "train_fraction": cfg.data.train_fraction, "purge_horizons": list(horizons),
                "train_rows": len(ts.train_rows), "train_stop_row": train_stop})
    else:
        chosen = eval_split(book, cfg.sim.window, split, horizons, cfg.data.train_fraction)
    env = BatchedLobEnv(book, 1, cfg.sim)
    # momentum reads OFI inside the observation window: its lookback fits the run's window
    base = BaselineConfig(momentum_lookback_rows=min(BaselineConfig().momentum_lookback_rows,
                                                     cfg.sim.window - 1))
    policies = make_baselines(RUN_BASELINES, env, base, chosen.train_rows, chosen.rows,
                              num_envs)
    policies["agent"] = pick.agent(cfg, env, policy, device)
    settings = {"run": str(run_dir), "checkpoint": pick.name,
                "trained_steps": pick.trained_steps, "store": str(store_path), "policy": policy,
                "device": str(device), "own_store": own_store, "baselines": asdict(base)}
    return RunEvaluation(book=book, rows=chosen.rows, policies=policies, sim=cfg.sim,
                         sweep=SweepConfig(num_envs), split_info=chosen.info, settings=settings,
                         chosen=pick.info)


def evaluate_run(run_dir: Path, store: str | None = None, policy: PolicyMode = "greedy",
                 split: str = "heldout", device: torch.device | str = "cpu",
                 num_envs: int = SweepConfig().num_envs,
                 progress: Callable[[int], None] | None = None,
                 checkpoint: str = "chosen") -> dict[str, Any]:
    """Sweep the run's agent and every baseline over held-out rows (module doc)."""
    return prepare_run_evaluation(run_dir, store, policy, split, device, num_envs,
                                  checkpoint).run(progress)
