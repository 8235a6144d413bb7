"""Baseline trading policies for the batched simulator (hold, random, momentum, oracle)."""

from lobsurf.baselines.policies import BASELINES, BaselineConfig, make_baseline

__all__ = ["BASELINES", "BaselineConfig", "make_baseline"]
