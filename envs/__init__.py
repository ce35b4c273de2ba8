"""Environments for bpo. Importing this package registers ``ShortCorridor-v0`` with Gymnasium.

* ``JAX_ENVS``: ShortCorridor's pure-JAX twin for the episodic (REINFORCE) runner.
* ``FUNCTIONAL_ENVS``: environments behind the auto-resetting functional interface of
  ``envs.functional`` for the vectorised on-policy (PPO) runner.
* ``envs.mjx``: MJX ports of the MuJoCo v5 tasks behind the same interface (``make_env(id, "mjx")``).
* ``envs.mujoco_threads``: the same tasks stepped by MuJoCo on host threads from inside the jitted
  program (``make_env(id, "threads")``).
"""

import gymnasium as gym

from envs.functional import ContinuousCartPole, GymnaxEnv, ShortCorridorFunctional, TruncationProbe
from envs.short_corridor import ShortCorridorEnv, ShortCorridorJax

if "ShortCorridor-v0" not in gym.registry:
    gym.register(id="ShortCorridor-v0", entry_point="envs.short_corridor:ShortCorridorEnv")

JAX_ENVS = {"ShortCorridor-v0": ShortCorridorJax}

FUNCTIONAL_ENVS = {
    "CartPole-v1": lambda: GymnaxEnv("CartPole-v1"),
    "Acrobot-v1": lambda: GymnaxEnv("Acrobot-v1"),
    "Pendulum-v1": lambda: GymnaxEnv("Pendulum-v1"),
    "MountainCarContinuous-v0": lambda: GymnaxEnv("MountainCarContinuous-v0"),
    "ContinuousCartPole-v0": ContinuousCartPole,
    "ShortCorridor-v0": ShortCorridorFunctional,
    "TruncationProbe-v0": TruncationProbe,  # a probe for tests: bootstrapping at truncation
}


def make_jax_env(env_id: str, **kwargs) -> ShortCorridorJax:
    """Build the pure-JAX twin of ``env_id``; raises ValueError naming the known ids."""
    if env_id not in JAX_ENVS:
        raise ValueError(f"env: unknown environment {env_id!r}; allowed: {sorted(JAX_ENVS)}")
    return JAX_ENVS[env_id](**kwargs)


def make_env(env_id: str, backend: str = "jax", physics_threads: int = 0, solver: tuple[int, int] = (0, 0)):
    """Build a functional (auto-resettable) environment: one of ``FUNCTIONAL_ENVS``, or with
    ``backend="mjx"`` the MJX port of a MuJoCo v5 task, with ``backend="threads"`` the task stepped
    by MuJoCo on ``physics_threads`` host threads (0: one per core); ``solver``: MJX's (iterations,
    line-search iterations), 0 for the XML's; raises ValueError naming the
    known ids. The MuJoCo backends are imported only when asked for (MJX's import takes seconds)."""
    if backend == "threads":
        from envs.mujoco_threads import make_threaded_env

        return make_threaded_env(env_id, physics_threads)
    if backend == "mjx":
        from envs.mjx import make_mjx_env

        return make_mjx_env(env_id, *solver)
    if env_id not in FUNCTIONAL_ENVS:
        raise ValueError(f"env: unknown environment {env_id!r}; allowed: {sorted(FUNCTIONAL_ENVS)}")
    return FUNCTIONAL_ENVS[env_id]()


__all__ = ["FUNCTIONAL_ENVS", "JAX_ENVS", "ShortCorridorEnv", "ShortCorridorJax", "make_env", "make_jax_env"]
