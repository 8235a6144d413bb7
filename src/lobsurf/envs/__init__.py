"""Gymnasium vector-env wrapper of the batched simulator."""

from lobsurf.envs.vector import LobVectorEnv, make_vec_env

__all__ = ["LobVectorEnv", "make_vec_env"]
