"""Evaluation: policies side by side on held-out rows (``evaluate``), a trained run's chosen
policy beside every baseline (``run``), the verdict over a seed group (``seed_verdict``,
``aggregate``) and walk-forward folds of a run's recipe (``walk_forward``)."""
