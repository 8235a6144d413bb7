"""Model choice on validation, with "hold" as a candidate: which policy a run trades.

After each validation (``lobsurf.training.selection.validate``) the run keeps the checkpoint that
validates best. A checkpoint is a candidate only when it beats hold beyond its interval: at
least ``train.min_validation_trades`` validation trades, and the lower end of the bootstrap
interval of its validation PnL per trade above 0 (hold's PnL is exactly 0). Among
candidates the highest validation net PnL wins (the earlier step on a tie). Until one
qualifies the chosen policy is hold: "no edge found on validation".

Files, each replaced atomically (temporary file, fsync, rename: a crash mid-write leaves
the previous file whole):

    RUN/chosen.pt    the chosen checkpoint's policy: the online network's state dict, the
                     controllers, the step and its validation metrics (loaded by
                     ``lobsurf eval RUN``, like a training checkpoint's policy part)
    RUN/chosen.json  which policy is chosen and why: {"policy": "checkpoint", "step": N,
                     "reason", "validation"} or {"policy": "hold", "reason"}

chosen.pt is written before chosen.json; a reader that finds their steps disagree (a crash
between the two writes) says so. The choice (best so far with its weights, validations
since, whether patience ran out) travels in every training checkpoint, so ``--resume`` and
a rollback continue it and rewrite both files from it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from lobsurf.backtest.metrics import MetricsConfig
from lobsurf.errors import UserError
from lobsurf.training.recovery.checkpoint import write_packed_atomic, write_text_atomic
from lobsurf.training.recovery.checkpoint_file import unpack_file

CHOSEN_PT = "chosen.pt"
CHOSEN_JSON = "chosen.json"
CHOSEN_FORMAT = "lobsurf-chosen"
CHOSEN_VERSION = 1
#: what ``lobsurf train`` and ``lobsurf eval`` say when hold is chosen
NO_EDGE = "no edge found on validation"


def _level() -> str:
    return f"{MetricsConfig().ci_level * 100:g} %"


def is_candidate(metrics: dict[str, Any], min_trades: int) -> bool:
    """A validation result beats hold beyond its interval (module doc)."""
    ci = metrics.get("pnl_per_trade_ci")
    return metrics["trades"] >= min_trades and ci is not None and ci[0] > 0


def describe(step: int, metrics: dict[str, Any]) -> str:
    """'step N, net PnL X, N trades, CI [a, b]' of one validation result."""
    ci = metrics.get("pnl_per_trade_ci")
    interval = f"[{ci[0]:,.2f}, {ci[1]:,.2f}]" if ci else "none (no trade)"
    return (f"step {step:,}, net PnL {metrics['net_pnl']:,.2f} over {metrics['trades']:,} "
            f"trades, PnL per trade CI {interval}")


@dataclass
class ModelChoice:
    """The choice so far (module doc); ``update`` after each validation."""

    min_trades: int
    """a candidate's minimum validation trades (train.min_validation_trades)."""
    patience: int
    """validations without a new best before the run stops (train.patience; 0 = never)."""
    best_step: int | None = None
    best: dict[str, Any] | None = None
    """the chosen checkpoint's validation metrics (None: hold)."""
    best_online: dict[str, torch.Tensor] | None = None
    """its online network's state dict (host tensors)."""
    best_controllers: dict[str, torch.Tensor] | None = None
    top_step: int | None = None
    top: dict[str, Any] | None = None
    """the highest validation net PnL seen, candidate or not (named when hold is chosen)."""
    since_best: int = 0
    validations: int = 0
    last_step: int | None = None
    """the step of the newest validation."""
    stopped: bool = False
    """patience ran out: the run ended early and stays ended."""

    def update(self, step: int, metrics: dict[str, Any],
               snapshot: Callable[[], tuple[dict, dict]]) -> bool:
        """Take one validation result; ``snapshot()`` gives (online state dict, controllers)
        as host copies, called only for a new best. Returns whether it is a new best."""
        self.validations += 1
        self.last_step = step
        if self.top is None or metrics["net_pnl"] > self.top["net_pnl"]:
            self.top_step, self.top = step, metrics
        new_best = is_candidate(metrics, self.min_trades) and (
            self.best is None or metrics["net_pnl"] > self.best["net_pnl"])
        if new_best:
            self.best_step, self.best = step, metrics
            self.best_online, self.best_controllers = snapshot()
            self.since_best = 0
        else:
            self.since_best += 1
        self.stopped = self.patience > 0 and self.since_best >= self.patience
        return new_best

    def info(self) -> dict[str, Any] | None:
        """chosen.json's content (None before the first validation)."""
        if self.validations == 0:
            return None
        if self.best is not None:
            return {"policy": "checkpoint", "step": self.best_step, "validation": self.best,
                    "validations": self.validations, "validated_to_step": self.last_step,
                    "reason": f"beat hold on validation beyond its {_level()} CI: "
                              f"{describe(self.best_step, self.best)}"}
        return {"policy": "hold", "validations": self.validations,
                "validated_to_step": self.last_step,
                "reason": f"no checkpoint beat hold on validation beyond its {_level()} CI "
                          f"with at least {self.min_trades} trades (best: "
                          f"{describe(self.top_step, self.top)})"}

    def stop_reason(self) -> str:
        best = f"best: step {self.best_step:,}" if self.best is not None else "hold chosen"
        return f"no new best in {self.since_best} validations (train.patience; {best})"

    def state_dict(self) -> dict[str, Any]:
        """Everything ``load_state_dict`` needs (plain values and host tensors)."""
        return {"best_step": self.best_step, "best": self.best, "best_online": self.best_online,
                "best_controllers": self.best_controllers, "top_step": self.top_step,
                "top": self.top, "since_best": self.since_best,
                "validations": self.validations, "last_step": self.last_step,
                "stopped": self.stopped}

    def load_state_dict(self, saved: dict[str, Any] | None) -> None:
        """The choice of a checkpoint (None: a checkpoint from before any validation)."""
        fresh = ModelChoice(self.min_trades, self.patience)
        for name, value in {**fresh.state_dict(), **(saved or {})}.items():
            setattr(self, name, value)

    def write_files(self, run_dir: Path, config: dict[str, Any], weights: bool = True
                    ) -> None:
        """chosen.pt (when ``weights`` and a checkpoint is chosen) then chosen.json; with
        hold chosen chosen.pt is removed, and before any validation both are."""
        info = self.info()
        pt, js = run_dir / CHOSEN_PT, run_dir / CHOSEN_JSON
        if info is None:
            js.unlink(missing_ok=True)
            pt.unlink(missing_ok=True)
            return
        if self.best is not None and weights:
            write_packed_atomic(pt, {
                "format": CHOSEN_FORMAT, "version": CHOSEN_VERSION, "step": self.best_step,
                "online": self.best_online, "controllers": self.best_controllers,
                "config": config, "validation": self.best})
        write_text_atomic(js, json.dumps(info, indent=1) + "\n")
        if self.best is None:
            pt.unlink(missing_ok=True)


def read_choice(run_dir: Path) -> dict[str, Any] | None:
    """RUN/chosen.json, or None where the run has not validated (or has no validation)."""
    path = run_dir / CHOSEN_JSON
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: unreadable ({exc})") from exc


def load_chosen(run_dir: Path, step: int) -> dict[str, Any]:
    """RUN/chosen.pt's payload, checked to be the policy of ``step`` (chosen.json's)."""
    path = run_dir / CHOSEN_PT
    resume = f"lobsurf train --resume {run_dir} rewrites it"
    try:
        payload = unpack_file(path)
    except FileNotFoundError:
        raise UserError(f"{path}: missing, though {CHOSEN_JSON} names step {step}; "
                        f"{resume}") from None
    except (OSError, ValueError, RuntimeError, EOFError) as exc:
        raise UserError(f"{path}: unreadable ({exc}); {resume}") from exc
    if not isinstance(payload, dict) or payload.get("format") != CHOSEN_FORMAT:
        raise UserError(f"{path}: not a lobsurf chosen policy")
    if int(payload["step"]) != step:
        raise UserError(f"{path} holds step {payload['step']} but {CHOSEN_JSON} names step "
                        f"{step} (the run stopped between the two writes); {resume}")
    return payload


def choice_summary(info: dict[str, Any] | None) -> str:
    """One line on the chosen policy for the end of ``lobsurf train`` (``info``: chosen.json's
    content, None without validation)."""
    if info is None:
        return "validation off (data.validation_fraction = 0): the last checkpoint trades"
    if info["policy"] == "hold":
        return f"{NO_EDGE}: {info['reason']}; the chosen policy is hold (it never trades)"
    return f"chosen policy: the checkpoint of step {info['step']:,}, which {info['reason']}"
