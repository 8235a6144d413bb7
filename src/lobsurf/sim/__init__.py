"""Batched LOB execution simulator: config, state, pure fill/fee functions, env, reference."""

from lobsurf.sim.config import SimConfig
from lobsurf.sim.env import BatchedLobEnv
from lobsurf.sim.state import SimState, SimStats, StepResult

__all__ = ["BatchedLobEnv", "SimConfig", "SimState", "SimStats", "StepResult"]
