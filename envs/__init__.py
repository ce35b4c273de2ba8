"""Environments for bpo. Importing this package registers ``ShortCorridor-v0`` with Gymnasium."""

import gymnasium as gym

from envs.short_corridor import ShortCorridorEnv, ShortCorridorJax

if "ShortCorridor-v0" not in gym.registry:
    gym.register(id="ShortCorridor-v0", entry_point="envs.short_corridor:ShortCorridorEnv")

# Pure-JAX environments usable by the jitted runners, by Gymnasium id.
JAX_ENVS = {"ShortCorridor-v0": ShortCorridorJax}


def make_jax_env(env_id: str, **kwargs):
    """Build the pure-JAX twin of ``env_id``; raises ValueError naming the known ids."""
    if env_id not in JAX_ENVS:
        raise ValueError(f"env: unknown environment {env_id!r}; allowed: {sorted(JAX_ENVS)}")
    return JAX_ENVS[env_id](**kwargs)


__all__ = ["JAX_ENVS", "ShortCorridorEnv", "ShortCorridorJax", "make_jax_env"]
