"""Model choice on validation, with "hold" as a candidate: which policy a run trades.

The rule chooses on one half of the validation slice and confirms once on the other, so
that the chance of calling noise an edge stays at its stated level however many
validations a run takes. Each validation sweeps the slice in contiguous pieces, one per
environment, each closed flat at its end (``lobsurf.training.selection.validate``); the trades of the
even pieces are the *choice half*, those of the odd pieces the *confirmation half*
(interleaved blocks of time that share no trade).

1. A validation is a candidate when its choice half has at least
   ``train.min_validation_trades`` trades and a net PnL above hold's 0.
2. The proposal is the candidate with the highest choice-half net PnL over every
   validation so far (the earlier step on a tie): the confirmation half plays no part.
3. The proposal is chosen when its confirmation half has at least
   ``train.min_validation_trades`` trades and the lower end of the Student-t interval of
   its PnL per trade, at two-sided level 1 - 2 x ``train.false_edge_rate``, is above 0:
   one one-sided t test at ``train.false_edge_rate``. Otherwise the chosen policy is
   hold: "no edge found on validation".

On a market with no edge the proposal is some checkpoint picked without a look at the
confirmation half, so it passes with the test's probability, false_edge_rate, whether the
run validated 5 times or 50 (judging every validation by its own interval, the earlier
rule, calls noise an edge far more often over many looks; docs/training.md gives the
simulation, the power, and where the t test's level is only approximate).

Files, each replaced atomically (temporary file, fsync, rename: a crash mid-write leaves
the previous file whole):

    RUN/chosen.pt    the chosen checkpoint's policy: the online network's state dict, the
                     controllers, the step and its validation metrics (loaded by
                     ``lobsurf eval RUN``, like a training checkpoint's policy part)
    RUN/chosen.json  which policy is chosen and why: {"policy": "checkpoint", "step": N,
                     "reason", "validation"} or {"policy": "hold", "reason"}, with the
                     rule and its level ("rule", "false_edge_rate", "min_trades")

chosen.pt is written before chosen.json; a reader that finds their steps disagree (a crash
between the two writes) says so. The choice (the proposal with its weights, validations
since, whether patience ran out) travels in every training checkpoint, so ``--resume`` and
a rollback continue it and rewrite both files from it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from scipy.stats import t as student_t

from lobsurf.errors import UserError
from lobsurf.training.config import TrainConfig
from lobsurf.training.recovery.checkpoint import write_packed_atomic, write_text_atomic
from lobsurf.training.recovery.checkpoint_file import unpack_file

CHOSEN_PT = "chosen.pt"
CHOSEN_JSON = "chosen.json"
CHOSEN_FORMAT = "lobsurf-chosen"
CHOSEN_VERSION = 1
#: what ``lobsurf train`` and ``lobsurf eval`` say when hold is chosen
NO_EDGE = "no edge found on validation"
#: the rule's name in chosen.json and in a checkpoint's choice state (a state without it
#: was made by the earlier rule, which judged every validation by its own interval)
RULE = "chosen on one half of validation, confirmed once on the other (one-sided t test)"
#: the halves of a validation result (``halves``)
CHOICE, CONFIRMATION = "choice", "confirmation"


def half_summary(pnl: np.ndarray) -> dict[str, Any]:
    """{"trades", "net_pnl", "pnl_per_trade", "pnl_sd"} of one half's trade PnL (sd: ddof 1;
    None below two trades)."""
    n = len(pnl)
    return {"trades": n, "net_pnl": float(pnl.sum()),
            "pnl_per_trade": float(pnl.mean()) if n else None,
            "pnl_sd": float(pnl.std(ddof=1)) if n >= 2 else None}


def halves(trade_pnl: np.ndarray, trade_step: np.ndarray, piece_steps: int
           ) -> dict[str, dict[str, Any]]:
    """The choice and confirmation halves of a sweep's trades (module doc): a trade closed at
    flat step index i lies in piece i // piece_steps; even pieces choose, odd ones confirm."""
    odd = (np.asarray(trade_step) // piece_steps) % 2 == 1
    pnl = np.asarray(trade_pnl, dtype=np.float64)
    return {CHOICE: half_summary(pnl[~odd]), CONFIRMATION: half_summary(pnl[odd])}


def t_interval(half: dict[str, Any], false_edge_rate: float) -> list[float] | None:
    """Student-t interval [lo, hi] of a half's mean PnL per trade at two-sided level
    1 - 2 x false_edge_rate (None below two trades)."""
    if half["pnl_sd"] is None or not math.isfinite(half["pnl_sd"]):
        return None
    n, mean = half["trades"], half["pnl_per_trade"]
    width = float(student_t.ppf(1 - false_edge_rate, n - 1)) * half["pnl_sd"] / math.sqrt(n)
    return [mean - width, mean + width]


def is_candidate(metrics: dict[str, Any], min_trades: int) -> bool:
    """A validation result may be proposed: its choice half beats hold (module doc, 1)."""
    half = metrics.get(CHOICE)
    return half is not None and half["trades"] >= min_trades and half["net_pnl"] > 0


def is_confirmed(metrics: dict[str, Any], min_trades: int, false_edge_rate: float) -> bool:
    """Its confirmation half beats hold beyond the t test (module doc, 3)."""
    half = metrics.get(CONFIRMATION)
    if half is None or half["trades"] < min_trades:
        return False
    ci = t_interval(half, false_edge_rate)
    return ci is not None and ci[0] > 0


def level_text(false_edge_rate: float) -> str:
    """'95 % t interval ... (a one-sided test at 2.5 %)' of a false-edge rate."""
    return (f"the lower end of its {(1 - 2 * false_edge_rate) * 100:g} % t interval of PnL per "
            f"trade above 0, a one-sided test at {false_edge_rate * 100:g} %")


def describe(step: int, metrics: dict[str, Any]) -> str:
    """'step N, net PnL X, N trades, CI [a, b]' of one validation result (whole slice)."""
    ci = metrics.get("pnl_per_trade_ci")
    interval = f"[{ci[0]:,.2f}, {ci[1]:,.2f}]" if ci else "none (no trade)"
    return (f"step {step:,}, net PnL {metrics['net_pnl']:,.2f} over {metrics['trades']:,} "
            f"trades, PnL per trade CI {interval}")


def describe_halves(step: int, metrics: dict[str, Any], false_edge_rate: float) -> str:
    """'step N: choice half net PnL X over T trades; confirmation half PnL per trade
    [a, b] over T trades' of one validation result."""
    choice, confirm = metrics[CHOICE], metrics[CONFIRMATION]
    ci = t_interval(confirm, false_edge_rate)
    interval = f"[{ci[0]:,.2f}, {ci[1]:,.2f}]" if ci else "none (under two trades)"
    return (f"step {step:,}: choice half net PnL {choice['net_pnl']:,.2f} over "
            f"{choice['trades']:,} trades; confirmation half PnL per trade {interval} over "
            f"{confirm['trades']:,} trades")


@dataclass
class ModelChoice:
    """The choice so far (module doc); ``update`` after each validation."""

    min_trades: int
    """a half's minimum validation trades (train.min_validation_trades)."""
    patience: int
    """validations without a new proposal before the run stops (train.patience; 0 = never)."""
    false_edge_rate: float = TrainConfig().false_edge_rate
    """level of the confirmation test (train.false_edge_rate)."""
    best_step: int | None = None
    best: dict[str, Any] | None = None
    """the proposal's validation metrics, with its halves (None: no candidate yet)."""
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

    @property
    def chosen(self) -> bool:
        """The proposal passed its confirmation: it trades (False: hold)."""
        return self.best is not None and is_confirmed(self.best, self.min_trades,
                                                      self.false_edge_rate)

    def update(self, step: int, metrics: dict[str, Any],
               snapshot: Callable[[], tuple[dict, dict]]) -> bool:
        """Take one validation result; ``snapshot()`` gives (online state dict, controllers)
        as host copies, called only for a new proposal. Returns whether it is one."""
        self.validations += 1
        self.last_step = step
        if self.top is None or metrics["net_pnl"] > self.top["net_pnl"]:
            self.top_step, self.top = step, metrics
        new_best = is_candidate(metrics, self.min_trades) and (
            self.best is None or metrics[CHOICE]["net_pnl"] > self.best[CHOICE]["net_pnl"])
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
        rule = {"rule": RULE, "false_edge_rate": self.false_edge_rate,
                "min_trades": self.min_trades, "validations": self.validations,
                "validated_to_step": self.last_step}
        test = (f"at least {self.min_trades} trades there and "
                f"{level_text(self.false_edge_rate)}")
        if self.best is None:
            return {"policy": "hold", **rule, "reason": (
                f"no checkpoint made money on the choice half of validation with at least "
                f"{self.min_trades} trades in {self.validations} validations (best on the "
                f"whole slice: {describe(self.top_step, self.top)})")}
        halves_text = describe_halves(self.best_step, self.best, self.false_edge_rate)
        if not self.chosen:
            return {"policy": "hold", **rule, "reason": (
                f"the best of {self.validations} validations on the choice half was not "
                f"confirmed on the confirmation half ({test}): {halves_text}")}
        return {"policy": "checkpoint", "step": self.best_step, "validation": self.best,
                **rule, "reason": (
                    f"beat hold on validation: the best of {self.validations} validations on "
                    f"the choice half, confirmed once on the confirmation half ({test}): "
                    f"{halves_text}")}

    def stop_reason(self) -> str:
        best = (f"best on the choice half: step {self.best_step:,}" if self.best is not None
                else "no candidate")
        return f"no new best in {self.since_best} validations (train.patience; {best})"

    def state_dict(self) -> dict[str, Any]:
        """Everything ``load_state_dict`` needs (plain values and host tensors)."""
        return {"rule": RULE, "best_step": self.best_step, "best": self.best,
                "best_online": self.best_online, "best_controllers": self.best_controllers,
                "top_step": self.top_step, "top": self.top, "since_best": self.since_best,
                "validations": self.validations, "last_step": self.last_step,
                "stopped": self.stopped}

    def load_state_dict(self, saved: dict[str, Any] | None) -> None:
        """The choice of a checkpoint (None: a checkpoint from before any validation). A
        choice made by the earlier rule keeps its counts but not its pick, which that rule
        judged by the interval of each validation alone: the validations from here on
        propose and confirm afresh."""
        fresh = ModelChoice(self.min_trades, self.patience, self.false_edge_rate)
        saved = dict(saved or {})
        if saved and "rule" not in saved:
            for name in ("best_step", "best", "best_online", "best_controllers"):
                saved.pop(name, None)
        for name, value in {**fresh.state_dict(), **saved}.items():
            if name != "rule":
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
        if self.chosen and weights:
            write_packed_atomic(pt, {
                "format": CHOSEN_FORMAT, "version": CHOSEN_VERSION, "step": self.best_step,
                "online": self.best_online, "controllers": self.best_controllers,
                "config": config, "validation": self.best})
        write_text_atomic(js, json.dumps(info, indent=1) + "\n")
        if not self.chosen:
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
