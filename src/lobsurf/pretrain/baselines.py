"""Baselines the pretrained model is judged against, and the shared held-out metrics.

* Class prior: the training split's share of "up" labels per horizon, predicted for every
  held-out row (accuracy = the majority class's share; log loss = the label entropy under p).
* Logistic regression on the same normalised features of the last snapshot, one
  independent logistic per horizon, fitted by L-BFGS in float64 on training rows with an
  L2 penalty. It shows how much of the model's edge the last snapshot alone already holds.

``binary_metrics`` computes accuracy and log loss (nats) of any probabilities on the valid
labels of each horizon, so the model and both baselines are scored by the same code.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

#: Probabilities are clipped to [EPS, 1 - EPS] before the log loss (finite for a 0/1 guess).
EPS = 1e-7


def binary_metrics(prob_up: torch.Tensor, targets: torch.Tensor,
                   valid: torch.Tensor) -> list[dict[str, float]]:
    """Accuracy and log loss per horizon over the valid entries.

    Args:
        prob_up: [N, H] predicted P(up). targets: [N, H] float {0, 1}. valid: [N, H] bool.

    Returns:
        One dict per horizon: accuracy (share of valid labels where the prediction
        prob_up > 0.5 matches), log_loss (mean binary cross-entropy, nats) and n (count).
    """
    p = prob_up.double().clamp(EPS, 1 - EPS)
    y = targets.double()
    m = valid.double()
    n = m.sum(0)
    correct = ((p > 0.5).double() == y).double()
    nll = -(y * p.log() + (1 - y) * (1 - p).log())
    acc = (correct * m).sum(0) / n.clamp(min=1)
    loss = (nll * m).sum(0) / n.clamp(min=1)
    # One host read at the end of evaluation (not a hot path).
    return [{"accuracy": float(a), "log_loss": float(ll), "n": int(c)}
            for a, ll, c in zip(acc.tolist(), loss.tolist(), n.tolist())]


def class_prior(targets: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """[H] share of "up" among the valid training labels (0.5 where there are none)."""
    m = valid.double()
    n = m.sum(0)
    return torch.where(n > 0, (targets.double() * m).sum(0) / n.clamp(min=1), 0.5)


@dataclass
class LogisticBaseline:
    """weight [F, H] and bias [H], float64: P(up) = sigmoid(x @ weight + bias)."""

    weight: torch.Tensor
    bias: torch.Tensor

    def predict(self, x: torch.Tensor) -> torch.Tensor:
        """x [N, F] → [N, H] P(up)."""
        return torch.sigmoid(x.double() @ self.weight + self.bias)


def fit_logistic(x: torch.Tensor, targets: torch.Tensor, valid: torch.Tensor,
                 l2: float, iterations: int) -> LogisticBaseline:
    """Fit one L2-penalised logistic regression per horizon (full batch, L-BFGS, float64).

    Args:
        x: [N, F] features. targets: [N, H] float {0, 1}. valid: [N, H] bool.
        l2: penalty on the squared weights (not the bias).
        iterations: L-BFGS iterations.
    """
    x = x.double()
    y = targets.double()
    m = valid.double()
    n = m.sum(0).clamp(min=1)
    w = torch.zeros(x.shape[1], y.shape[1], dtype=torch.float64, device=x.device,
                    requires_grad=True)
    b = torch.zeros(y.shape[1], dtype=torch.float64, device=x.device, requires_grad=True)
    opt = torch.optim.LBFGS([w, b], max_iter=iterations, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        opt.zero_grad()
        nll = F.binary_cross_entropy_with_logits(x @ w + b, y, reduction="none")
        loss = ((nll * m).sum(0) / n).sum() + l2 * (w * w).sum()
        loss.backward()
        return loss

    opt.step(closure)
    return LogisticBaseline(weight=w.detach(), bias=b.detach())
