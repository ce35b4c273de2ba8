"""Gymnasium MuJoCo v5 tasks as functional JAX environments on ``mujoco.mjx``.

``MjxEnv`` offers the interface of ``envs.functional`` (``spec``, ``reset``, ``step_env``) so the
tasks run inside the jitted on-policy runner with seeds vmapped. Each task loads Gymnasium's own
v5 XML asset and repeats Gymnasium's step exactly:

    x_before = position the reward differentiates (qpos[0], or Ant's torso xpos)
    data.ctrl = action; mj_step x frame_skip; mj_rnePostConstraint (for cfrc_ext)
    reward, terminated from the task; truncated once the episode has 1000 steps (TimeLimit)

``reset`` does what ``MujocoEnv.reset`` does: ``mj_resetData``, then the task's reset noise around
``qpos0`` and zero velocity (``mj_forward`` only as far as the next step needs it, see
``set_state``). The physics runs in JAX's default float type (float32 unless x64 is enabled; the
parity tests use float64).
"""

from __future__ import annotations

import os
from typing import NamedTuple

import jax
import jax.numpy as jnp
import mujoco
from mujoco import mjx

from envs.functional import EnvSpec
from envs.mjx.contacts import mujoco_contact_frames
from envs.mujoco_log import quiet_deprecations

MAX_EPISODE_STEPS = 1000  # Gymnasium registers every v5 locomotion task with this TimeLimit


class MjxState(NamedTuple):
    data: mjx.Data
    t: jnp.ndarray  # steps taken in this episode (Gymnasium's TimeLimit counter)


def gymnasium_asset(xml_file: str) -> str:
    """Path of one of Gymnasium's MuJoCo XML assets, the files its v5 environments load."""
    import gymnasium.envs.mujoco as gym_mujoco

    return os.path.join(os.path.dirname(gym_mujoco.__file__), "assets", xml_file)


class MjxEnv:
    """Base of the MJX ports; subclasses set the class attributes and the task methods."""

    env_id: str
    xml_file: str
    frame_skip: int
    reset_noise_scale: float
    qvel_noise: str  # "uniform" (Hopper, Walker2d) or "normal" (Ant, HalfCheetah), as in Gymnasium
    needs_contact_forces: bool = False  # run mj_rnePostConstraint after the step (Ant's cfrc_ext)
    reset_kinematics: bool = False  # position() reads body positions, which a reset must compute

    def __init__(self, iterations: int = 0, ls_iterations: int = 0):
        quiet_deprecations()
        self.mj_model = mujoco.MjModel.from_xml_path(gymnasium_asset(self.xml_file))
        if iterations:
            self.mj_model.opt.iterations = iterations
        if ls_iterations:
            self.mj_model.opt.ls_iterations = ls_iterations
        self.model = mjx.put_model(self.mj_model)
        self._data0 = mjx.make_data(self.model)  # mj_resetData's state: qpos0, zero velocity
        self.dt = float(self.mj_model.opt.timestep) * self.frame_skip
        low, high = self.mj_model.actuator_ctrlrange.T
        obs_dim = int(self.observation(self._data0).shape[0])
        self.spec = EnvSpec(obs_dim, False, int(self.mj_model.nu), tuple(float(x) for x in low),
                            tuple(float(x) for x in high), MAX_EPISODE_STEPS)

    # Task interface -----------------------------------------------------------------------------
    def position(self, data: mjx.Data) -> jnp.ndarray:
        """What the forward reward differentiates: qpos[0] unless the task says otherwise."""
        return data.qpos[0]

    def observation(self, data: mjx.Data) -> jnp.ndarray:
        raise NotImplementedError

    def reward_and_termination(self, data: mjx.Data, velocity: jnp.ndarray, action: jnp.ndarray):
        raise NotImplementedError

    # Functional environment -----------------------------------------------------------------------
    def reset_state(self, key) -> tuple[jnp.ndarray, jnp.ndarray]:
        """qpos0 and zero velocity plus Gymnasium's reset noise."""
        return reset_noise(key, self._data0.qpos, self.mj_model.nv, self.reset_noise_scale, self.qvel_noise)

    def set_state(self, qpos, qvel) -> MjxState:
        """``MujocoEnv.set_state`` after ``mj_resetData``: a fresh episode at (qpos, qvel).

        Gymnasium's ``mj_forward`` here is left out: a step recomputes everything from qpos, qvel
        and the warm start (zero after a reset in both engines), so the reset data only has to
        hold what is read before the next step: the observation and, for Ant, the torso position
        (``reset_kinematics``). Every auto-reset step computes a reset, so this saves a forward
        pass per step and its copy in the compiled program."""
        data = self._data0.replace(qpos=qpos, qvel=qvel)
        if self.reset_kinematics:
            # MJX writes normalised quaternions back into qpos; MuJoCo leaves the noisy ones, which
            # Gymnasium observes at reset (the first step normalises them in both).
            data = mjx.kinematics(self.model, data).replace(qpos=qpos)
        return MjxState(data, jnp.zeros((), jnp.int32))

    def reset(self, key):
        state = self.set_state(*self.reset_state(key))
        return state, self.observation(state.data)

    def physics(self, data: mjx.Data, action) -> mjx.Data:
        data = data.replace(ctrl=action.astype(data.ctrl.dtype))

        def substep(_, d):
            # Under x64, MJX's collision returns int64 contact ids where put_data made int32 ones.
            return jax.tree.map(lambda new, old: new.astype(old.dtype), mjx.step(self.model, d), d)

        with mujoco_contact_frames():
            data = jax.lax.fori_loop(0, self.frame_skip, substep, data)
            if self.needs_contact_forces:
                data = mjx.rne_postconstraint(self.model, data)
        return data

    def step_env(self, key, state: MjxState, action):
        del key  # the dynamics are deterministic
        before = self.position(state.data)
        data = self.physics(state.data, action)
        velocity = (self.position(data) - before) / self.dt
        reward, terminated = self.reward_and_termination(data, velocity, action)
        t = state.t + 1
        return MjxState(data, t), self.observation(data), reward, terminated, t >= MAX_EPISODE_STEPS


class HealthyTask(MjxEnv):
    """Ant, Hopper, Walker2d: reward = forward velocity + healthy bonus - control cost (- contact
    cost for Ant, ``extra_cost``), terminated once unhealthy; the terms in Gymnasium's order."""

    forward_reward_weight: float
    ctrl_cost_weight: float
    healthy_reward: float

    def is_healthy(self, data: mjx.Data) -> jnp.ndarray:
        raise NotImplementedError

    def extra_cost(self, data: mjx.Data) -> jnp.ndarray:
        return jnp.zeros((), data.qpos.dtype)

    def reward_and_termination(self, data, velocity, action):
        healthy = self.is_healthy(data)
        rewards = self.forward_reward_weight * velocity + healthy * self.healthy_reward
        costs = control_cost(self.ctrl_cost_weight, action) + self.extra_cost(data)
        return rewards - costs, ~healthy


def reset_noise(key, qpos0, nv: int, scale: float, qvel_noise: str) -> tuple[jnp.ndarray, jnp.ndarray]:
    """Gymnasium's ``reset_model`` of the v5 locomotion tasks: qpos0 plus uniform noise in
    [-scale, scale], and zero velocity plus ``scale`` times uniform or standard-normal noise."""
    k_pos, k_vel = jax.random.split(key)
    qpos = qpos0 + jax.random.uniform(k_pos, qpos0.shape, qpos0.dtype, -scale, scale)
    if qvel_noise == "normal":
        qvel = scale * jax.random.normal(k_vel, (nv,), qpos0.dtype)
    else:
        qvel = jax.random.uniform(k_vel, (nv,), qpos0.dtype, -scale, scale)
    return qpos, qvel


def control_cost(weight: float, action) -> jnp.ndarray:
    """Gymnasium's ``control_cost``: on the action as given, before MuJoCo clamps ctrl."""
    return weight * jnp.sum(jnp.square(action))


def state_vector(data: mjx.Data) -> jnp.ndarray:
    return jnp.concatenate([data.qpos, data.qvel])


__all__ = ["MAX_EPISODE_STEPS", "HealthyTask", "MjxEnv", "MjxState", "control_cost", "gymnasium_asset", "reset_noise",
           "state_vector"]
