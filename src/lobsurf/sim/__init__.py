"""Batched LOB execution simulator: config, state, pure fill/fee functions, env, resting
orders and their queue models, references."""

from lobsurf.sim.config import SimConfig
from lobsurf.sim.env import BatchedLobEnv
from lobsurf.sim.state import PassiveState, PassiveStats, SimState, SimStats, StepResult

__all__ = ["BatchedLobEnv", "PassiveState", "PassiveStats", "SimConfig", "SimState", "SimStats",
           "StepResult"]
