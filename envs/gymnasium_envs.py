"""Gymnasium environments for the host runner: the MuJoCo v5 tasks of the paper's Table 1, a few
classic-control tasks, and a probe for bootstrapping at truncation.

Vector environments use Gymnasium's same-step auto-reset: when an episode ends, ``step`` returns
the reset observation and puts the real final observation in ``info["final_obs"]``, which
truncated episodes bootstrap from (Stable-Baselines3's semantics).

Every sub-environment gets its own seed from ``env_seeds``, a function of (base seed, run,
stream, index) only, so adding seeds to a run or evaluations to a schedule never changes the
environments of the existing ones.
"""

from __future__ import annotations

import functools
import os
import pickle
import zlib
from collections.abc import Callable

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from envs.functional import EnvSpec

MUJOCO_ENVS = ("Ant-v5", "HalfCheetah-v5", "Hopper-v5", "Walker2d-v5")
GYMNASIUM_ENVS = MUJOCO_ENVS + ("CartPole-v1", "Pendulum-v1", "ShortCorridor-v0", "TruncationProbe-v0")
TRAIN_STREAM, EVAL_STREAM = 0, 1


class TruncationProbeEnv(gym.Env):
    """Gymnasium twin of ``envs.functional.TruncationProbe``: observation [0] in the start state
    A and [1] in every later state B, reward 1 for each step taken from B, never terminates,
    truncated after ``max_steps`` steps (by Gymnasium's TimeLimit). The final observation of an
    episode (B) differs from the reset observation (A), so bootstrapping from the wrong one shows."""

    metadata = {"render_modes": []}

    def __init__(self):
        self.observation_space = gym.spaces.Box(0.0, 1.0, (1,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self._t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self._t += 1
        reward = 1.0 if self._t > 1 else 0.0
        return np.ones(1, np.float32), reward, False, False, {}


if "TruncationProbe-v0" not in gym.registry:
    gym.register(id="TruncationProbe-v0", entry_point="envs.gymnasium_envs:TruncationProbeEnv", max_episode_steps=4)


def _make(env_id: str) -> gym.Env:
    if env_id in MUJOCO_ENVS:
        from envs.mujoco_log import quiet_deprecations  # MuJoCo is imported only for its tasks (start-up time)

        quiet_deprecations()
    # ShortCorridor-v0 is registered by the ``envs`` package, which importing this module imports first.
    return Snapshots(gym.make(env_id, disable_env_checker=True))


class Snapshots(gym.Wrapper):
    """Saves and restores everything that decides an environment's future: the simulator state
    (MuJoCo's whole MjData, warm starts included; other environments' attributes), its random
    generator and the TimeLimit's step count. A checkpointed run restores its vector env with
    ``env.set_attr("snapshot", blobs)`` (one blob per sub-environment, sync and async alike) after
    taking them with ``env.call("take_snapshot")``."""

    def take_snapshot(self) -> bytes:
        inner = self.env.unwrapped
        limit = self._time_limit()
        state = {"np_random": inner.np_random.bit_generator.state,
                 "elapsed": None if limit is None else limit._elapsed_steps}
        if hasattr(inner, "data") and hasattr(inner, "model"):
            # The whole MjData, not mj_getState's integration state: the tasks read derived fields the
            # last step left (Ant's reward takes xpos from before the step), which mj_setState and
            # mj_forward recompute for the current qpos: Ant-v5 then differs from its first step on.
            # The pickle (0.71 MB on Ant-v5) compresses well: zlib at level 1, the fastest, makes it 42 KB.
            state["mjdata_zlib"] = zlib.compress(pickle.dumps(inner.data), 1)
        else:
            state["attributes"] = pickle.dumps({k: v for k, v in vars(inner).items() if k not in _NOT_STATE})
        return pickle.dumps(state)

    @property
    def snapshot(self) -> bytes:
        return self.take_snapshot()

    @snapshot.setter
    def snapshot(self, blob: bytes) -> None:
        state, inner = pickle.loads(blob), self.env.unwrapped
        inner.np_random.bit_generator.state = state["np_random"]
        if state["elapsed"] is not None:
            self._time_limit()._elapsed_steps = state["elapsed"]
        if "mjdata_zlib" in state or "mjdata" in state:  # "mjdata": uncompressed, checkpoints before 2026-11-28
            import mujoco

            data = zlib.decompress(state["mjdata_zlib"]) if "mjdata_zlib" in state else state["mjdata"]
            mujoco.mj_copyData(inner.data, inner.model, pickle.loads(data))
        else:
            vars(inner).update(pickle.loads(state["attributes"]))

    def _time_limit(self) -> gym.wrappers.TimeLimit | None:
        """The TimeLimit wrapper, or None for an environment registered without one
        (ShortCorridor-v0 ends its own episodes; its step count is among its attributes)."""
        env = self.env
        while isinstance(env, gym.Wrapper) and not isinstance(env, gym.wrappers.TimeLimit):
            env = env.env
        return env if isinstance(env, gym.wrappers.TimeLimit) else None


# Attributes of an environment that are configuration, not state (and may not pickle).
_NOT_STATE = ("observation_space", "action_space", "spec", "_np_random", "np_random", "render_mode", "metadata")


@functools.cache
def gym_spec(env_id: str) -> EnvSpec:
    """Observation size, action space and step limit of a Gymnasium environment (cached: validating a
    sweep builds hundreds of configs, and each MuJoCo model compile costs time and log lines)."""
    if env_id not in GYMNASIUM_ENVS:
        raise ValueError(f"env: unknown Gymnasium environment {env_id!r}; allowed: {sorted(GYMNASIUM_ENVS)}")
    env = _make(env_id)
    try:
        obs_dim = int(np.prod(env.observation_space.shape))
        space = env.action_space
        steps = int(env.spec.max_episode_steps or 0)
        if isinstance(space, gym.spaces.Discrete):
            return EnvSpec(obs_dim, True, int(space.n), None, None, steps)
        return EnvSpec(obs_dim, False, int(space.shape[0]), tuple(float(x) for x in space.low),
                       tuple(float(x) for x in space.high), steps)
    finally:
        env.close()


def env_seeds(base_seed: int, run: int, stream: int, n: int, start: int = 0) -> list[int]:
    """Seeds of sub-environments ``start .. start + n - 1`` of ``run`` (a seed of the config) in
    ``stream`` (TRAIN_STREAM, or EVAL_STREAM + evaluation index)."""
    return [int(np.random.SeedSequence([base_seed, run, stream, start + i]).generate_state(1)[0]) for i in range(n)]


def _make_in_worker(env_id: str, worker_setup: Callable[[int], None] | None, parent_pid: int) -> gym.Env:
    # AsyncVectorEnv also calls the first factory in the parent, to read the spaces.
    if worker_setup is not None and os.getpid() != parent_pid:
        worker_setup(parent_pid)
    return _make(env_id)


def make_vector_env(env_id: str, n: int, mode: str = "sync", worker_setup: Callable[[int], None] | None = None
                    ) -> InProcessVectorEnv | gym.vector.AsyncVectorEnv:
    """``n`` copies of ``env_id`` stepped together (``sync`` in this process, ``async`` in
    worker processes), auto-resetting in the same step. ``worker_setup(parent_pid)``, a picklable
    function, runs first in each worker process (so that it can tie its life to the parent's)."""
    if mode not in ("sync", "async"):
        raise ValueError(f"vector_mode: must be one of ['async', 'sync'], got {mode!r}")
    if mode == "async":
        make = functools.partial(_make_in_worker, env_id, worker_setup, os.getpid())
        return gym.vector.AsyncVectorEnv([make] * n, context="spawn", autoreset_mode=AutoresetMode.SAME_STEP)
    return InProcessVectorEnv([_make(env_id) for _ in range(n)])


class InProcessVectorEnv:
    """``n`` environments stepped one after another in this process, auto-resetting in the same
    step: what ``gym.vector.SyncVectorEnv`` with ``AutoresetMode.SAME_STEP`` does for a training
    loop, the same calls on the same environments in the same order, without the per-step work a
    training loop does not use (merging every sub-environment's info dict, copying observations
    through the spaces' batching helpers). On HalfCheetah-v5 that work took about a third of the
    time of a MuJoCo step (docs/speed.md).

    ``step`` returns (observations, rewards, terminated, truncated, info); where an episode ended,
    the observation is the reset one and ``info["final_obs"][i]`` the real final one."""

    def __init__(self, envs: list[gym.Env]):
        self.envs = envs
        self.num_envs = len(envs)
        self.single_observation_space = envs[0].observation_space
        self.single_action_space = envs[0].action_space
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, self.num_envs)
        shape = self.single_observation_space.shape
        self._obs = np.zeros((self.num_envs,) + shape, self.single_observation_space.dtype)

    def reset(self, seed: list[int] | None = None):
        seeds = [None] * self.num_envs if seed is None else seed
        for i, (env, s) in enumerate(zip(self.envs, seeds, strict=True)):
            self._obs[i], _ = env.reset(seed=s)
        return self._obs.copy(), {}

    def step(self, actions):
        n = self.num_envs
        rewards = np.zeros(n)
        terminated, truncated = np.zeros(n, bool), np.zeros(n, bool)
        final_obs = None
        for i, env in enumerate(self.envs):
            obs, rewards[i], terminated[i], truncated[i], _ = env.step(actions[i])
            if terminated[i] or truncated[i]:
                if final_obs is None:
                    final_obs = np.full(n, None, object)
                final_obs[i] = obs
                obs, _ = env.reset()
            self._obs[i] = obs
        return self._obs.copy(), rewards, terminated, truncated, ({} if final_obs is None else {"final_obs": final_obs})

    def call(self, name: str, *args, **kwargs) -> tuple:
        return tuple(getattr(env, name)(*args, **kwargs) for env in self.envs)

    def set_attr(self, name: str, values: list) -> None:
        for env, value in zip(self.envs, values, strict=True):
            setattr(env, name, value)

    def close(self) -> None:
        for env in self.envs:
            env.close()


def final_observations(obs: np.ndarray, done: np.ndarray, info: dict) -> np.ndarray:
    """The real next observations of a same-step auto-reset vector step: ``obs`` where the episode
    goes on, ``info['final_obs']`` where it ended."""
    if not done.any():
        return obs
    final = obs.copy()
    for i in np.flatnonzero(done):
        final[i] = info["final_obs"][i]
    return final
