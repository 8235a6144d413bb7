"""``pretrain(cfg, store)``: supervised training of the encoder and auxiliary heads.

Reads top to bottom in the order a reader would explain it: data (book, labels, time
split), model (seeded init, normaliser fitted on training rows only), train (AdamW,
warm-up + cosine schedule, direction BCE + weighted FRD cross-entropy, both batch means;
early stopping on a purged validation tail of the training side), evaluate (held-out
accuracy and log loss per horizon for the model, the class prior and a logistic regression
on the last snapshot's features), save (checkpoint, config, result).

The result dict (also ``result.json`` in the run folder; docs/pretrain.md) is::

    {"horizons": {"10": {"model":    {"accuracy", "log_loss", "frd_log_loss"},
                         "prior":    {"accuracy", "log_loss", "p_up"},
                         "logistic": {"accuracy", "log_loss"},
                         "n_test": int}, ...},
     "steps", "train_windows", "test_windows", "cut_row", "validation_windows",
     "final_train_loss", "best_step", "validation_loss",
     "wall_s", "device", "checkpoint"}
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any

import torch

from lobsurf.data.dataset import BookTensors, gather_window, load_book_tensors, window_rows
from lobsurf.data.labels import Labels, compute_labels
from lobsurf.data.split import evenly_spaced, time_split, validation_tail
from lobsurf.data.store import Store
from lobsurf.models.features import last_snapshot, last_snapshot_features
from lobsurf.models.heads import direction_loss, frd_loss, frd_loss_per_horizon
from lobsurf.pretrain.baselines import binary_metrics, class_prior, fit_logistic
from lobsurf.pretrain.checkpoint import CHECKPOINT_NAME, save_checkpoint
from lobsurf.pretrain.config import PretrainConfig, config_to_dict
from lobsurf.pretrain.model import PretrainModel
from lobsurf.progress import status, step_progress


def _build_model(cfg: PretrainConfig, device: torch.device) -> PretrainModel:
    # Seeded init without disturbing the caller's global RNG (seed globals only at the CLI).
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        model = PretrainModel(cfg)
    return model.to(device)


def build_optimizer(model: PretrainModel, cfg: PretrainConfig
                    ) -> tuple[torch.optim.AdamW, torch.optim.lr_scheduler.LambdaLR]:
    """AdamW (no decay on vectors) and its warm-up + cosine LambdaLR schedule."""
    # No weight decay on vectors (biases, norms, SSM A/D/dt): decay there only shrinks scales.
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": cfg.weight_decay},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=cfg.lr)

    def factor(step: int) -> float:
        if step < cfg.lr_warmup_steps:
            return (step + 1) / cfg.lr_warmup_steps
        progress = (step - cfg.lr_warmup_steps) / max(1, cfg.steps - cfg.lr_warmup_steps)
        cosine = 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))
        return cfg.lr_final_fraction + (1 - cfg.lr_final_fraction) * cosine

    return opt, torch.optim.lr_scheduler.LambdaLR(opt, factor)


def _batch_loss(model: PretrainModel, book: BookTensors, labels: Labels, rows: torch.Tensor,
                cfg: PretrainConfig) -> torch.Tensor:
    out = model(gather_window(book, rows, cfg.window), all_positions=cfg.supervise_all_positions)
    if cfg.supervise_all_positions:
        lab = labels.rows(window_rows(rows, cfg.window).flatten())  # [B*K, H]
        d_logits, f_logits = out.direction_logits.flatten(0, 1), out.frd_logits.flatten(0, 1)
    else:
        lab = labels.rows(rows)
        d_logits, f_logits = out.direction_logits, out.frd_logits
    return (direction_loss(d_logits, lab.direction, lab.direction_valid)
            + cfg.frd_weight * frd_loss(f_logits, lab.bucket, lab.bucket_valid))


def train_step(model: PretrainModel, opt: torch.optim.Optimizer, book: BookTensors,
               labels: Labels, train_rows: torch.Tensor, cfg: PretrainConfig,
               gen: torch.Generator) -> torch.Tensor:
    """One optimisation step on a batch sampled from ``train_rows``; no host sync.

    Returns:
        The batch loss, a 0-d device tensor (detached).
    """
    pick = torch.randint(len(train_rows), (cfg.batch_size,), generator=gen,
                         device=train_rows.device)
    loss = _batch_loss(model, book, labels, train_rows[pick], cfg)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    if cfg.grad_clip_norm > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip_norm)
    opt.step()
    return loss.detach()


def validation_loss(model: PretrainModel, book: BookTensors, labels: Labels,
                    rows: torch.Tensor, cfg: PretrainConfig) -> float:
    """The training objective (direction BCE + frd_weight * FRD CE, means over horizons) at
    the last position of the windows ending at ``rows`` ([N] int64), the position that
    evaluation scores; leaves the model in eval mode. One deliberate host read."""
    prob, frd_ce = _evaluate_model(model, book, rows, labels, cfg)
    lab = labels.rows(rows)
    bce = [m["log_loss"] for m in binary_metrics(prob, lab.direction, lab.direction_valid)]
    return sum(bce) / len(bce) + cfg.frd_weight * float(frd_ce.mean())


def _train(model: PretrainModel, book: BookTensors, labels: Labels, train_rows: torch.Tensor,
           cfg: PretrainConfig, gen: torch.Generator, progress: bool,
           val_rows: torch.Tensor) -> tuple[float, int, float | None]:
    # -> (last logged training loss, step of the weights kept, their validation loss or None).
    opt, sched = build_optimizer(model, cfg)
    model.train()
    running = torch.zeros((), device=train_rows.device)
    shown = float("nan")
    # Early stopping: keep the weights of the best validation loss (the last ones when
    # there is no validation tail), so a budget too long for a small store cannot overfit.
    best_loss, best_step, best_state = None, cfg.steps, None
    with step_progress(cfg.steps, "pretrain", progress) as advance:
        for step in range(cfg.steps):
            running += train_step(model, opt, book, labels, train_rows, cfg, gen)
            sched.step()
            if (step + 1) % cfg.log_every == 0 or step + 1 == cfg.steps:
                # Deliberate host sync, once per log interval.
                shown = float(running) / ((step % cfg.log_every) + 1)
                running.zero_()
            if len(val_rows) and ((step + 1) % cfg.validate_every == 0 or step + 1 == cfg.steps):
                val = validation_loss(model, book, labels, val_rows, cfg)
                model.train()
                if best_loss is None or val < best_loss:
                    best_loss, best_step = val, step + 1
                    best_state = {k: v.clone() for k, v in model.state_dict().items()}
            # no loss is shown before the first logging step has one (never "nan")
            advance(1, **({} if math.isnan(shown) else {"loss": f"{shown:.4f}"}))
    if best_state is not None:
        model.load_state_dict(best_state)
    return shown, best_step, best_loss


@torch.no_grad()
def _evaluate_model(model: PretrainModel, book: BookTensors, rows: torch.Tensor,
                    labels: Labels, cfg: PretrainConfig) -> tuple[torch.Tensor, torch.Tensor]:
    # → (P(up) [N, H], FRD cross-entropy per horizon [H]) on the held-out end rows.
    model.eval()
    probs, frd = [], []
    for lo in range(0, len(rows), cfg.eval_batch_size):
        out = model(gather_window(book, rows[lo:lo + cfg.eval_batch_size], cfg.window))
        probs.append(torch.sigmoid(out.direction_logits))
        frd.append(out.frd_logits)
    lab = labels.rows(rows)
    return torch.cat(probs), frd_loss_per_horizon(torch.cat(frd), lab.bucket, lab.bucket_valid)


@torch.no_grad()
def _evaluate(model: PretrainModel, book: BookTensors, labels: Labels, train_rows: torch.Tensor,
              test_rows: torch.Tensor, cfg: PretrainConfig) -> dict[str, Any]:
    # Per horizon: the model's, the class prior's and the logistic's held-out scores.
    test = labels.rows(test_rows)
    prob_model, frd_ce = _evaluate_model(model, book, test_rows, labels, cfg)
    train_lab = labels.rows(train_rows)
    p_up = class_prior(train_lab.direction, train_lab.direction_valid)

    def feats(rows: torch.Tensor) -> torch.Tensor:
        return model.normalizer(last_snapshot_features(book, rows, cfg.features, cfg.window))

    fit_rows = evenly_spaced(train_rows, cfg.logistic_max_rows)
    fit_lab = labels.rows(fit_rows)
    with torch.enable_grad():  # L-BFGS needs autograd
        logistic = fit_logistic(feats(fit_rows), fit_lab.direction, fit_lab.direction_valid,
                                cfg.logistic_l2, cfg.logistic_iterations)
    probs = {"model": prob_model, "prior": p_up.expand(len(test_rows), -1),
             "logistic": logistic.predict(feats(test_rows))}
    scores = {k: binary_metrics(p, test.direction, test.direction_valid) for k, p in probs.items()}
    horizons = {}
    for j, h in enumerate(cfg.labels.horizons_snapshots):
        pick = lambda name: {k: scores[name][j][k] for k in ("accuracy", "log_loss")}  # noqa: E731
        horizons[str(h)] = {
            "model": {**pick("model"), "frd_log_loss": float(frd_ce[j])},
            "prior": {**pick("prior"), "p_up": float(p_up[j])},
            "logistic": pick("logistic"),
            "n_test": scores["model"][j]["n"],
        }
    return horizons


def pretrain(cfg: PretrainConfig, store: str | os.PathLike | Store | BookTensors,
             out_dir: str | os.PathLike | None = None, progress: bool = True) -> dict[str, Any]:
    """Train encoder + direction/FRD heads on the early rows, evaluate on the late rows.

    Args:
        cfg: the run's configuration.
        store: a store path, an open Store, or BookTensors already loaded.
        out_dir: run folder for the checkpoint, config.json and result.json (None: no files).
        progress: show a progress bar on stderr.

    Returns:
        The result dict described in the module docstring.
    """
    device = torch.device(cfg.device)
    previous = torch.get_float32_matmul_precision()
    if device.type == "cuda":
        torch.set_float32_matmul_precision(cfg.cuda_matmul_precision)
    try:
        return _pretrain(cfg, store, device, out_dir, progress)
    finally:
        torch.set_float32_matmul_precision(previous)


def _pretrain(cfg: PretrainConfig, store: str | os.PathLike | Store | BookTensors,
              device: torch.device, out_dir: str | os.PathLike | None,
              progress: bool) -> dict[str, Any]:
    started = time.perf_counter()

    # ---- data: book, labels, time split
    if isinstance(store, BookTensors):
        book = store.to(device)
    else:
        book = load_book_tensors(store if isinstance(store, Store) else Store.open(store), device)
    labels = compute_labels(book, cfg.labels)
    split = time_split(book, cfg.window, min(cfg.labels.horizons_snapshots),
                       cfg.labels.max_horizon, cfg.train_fraction, cfg.split_at_segment)
    gen = torch.Generator(device=device).manual_seed(cfg.seed)

    # ---- model: seeded init, normaliser fitted on training rows only
    model = _build_model(cfg, device)
    norm_rows = evenly_spaced(split.train_rows, cfg.normalizer_rows)
    norm_x, norm_log_dt = last_snapshot(book, norm_rows, cfg.features, cfg.window)
    model.normalizer.fit_(norm_x)
    if cfg.encoder.kind == "cfc":
        model.encoder.fit_time_scale_(norm_log_dt)

    # ---- train
    fit_rows, val_rows = validation_tail(split.train_rows, cfg.validation_fraction, cfg.window,
                                         cfg.labels.max_horizon)
    val_rows = evenly_spaced(val_rows, cfg.validation_max_windows)
    final_loss, best_step, val_loss = _train(model, book, labels, fit_rows, cfg, gen, progress,
                                             val_rows)

    # ---- evaluate: model, class prior and logistic regression on the same held-out rows
    test_rows = evenly_spaced(split.test_rows, cfg.eval_max_windows)
    with status(f"pretrain: evaluating {len(test_rows):,} held-out windows", progress):
        horizons = _evaluate(model, book, labels, split.train_rows, test_rows, cfg)
    result: dict[str, Any] = {
        "horizons": horizons, "steps": cfg.steps, "train_windows": len(split.train_rows),
        "test_windows": len(test_rows), "cut_row": split.cut_row,
        "validation_windows": len(val_rows), "final_train_loss": final_loss,
        "best_step": best_step, "validation_loss": val_loss,
        "device": str(device), "checkpoint": None,
    }

    # ---- save
    if out_dir is not None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        result["checkpoint"] = str(save_checkpoint(out / CHECKPOINT_NAME, model, cfg,
                                                   meta={"result": dict(result)}))
        (out / "config.json").write_text(json.dumps(config_to_dict(cfg), indent=2) + "\n")
    result["wall_s"] = time.perf_counter() - started
    if out_dir is not None:
        (Path(out_dir) / "result.json").write_text(json.dumps(result, indent=2) + "\n")
    return result
