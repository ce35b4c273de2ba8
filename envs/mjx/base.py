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

from typing import NamedTuple

import jax
import jax.numpy as jnp
import mujoco
from mujoco import mjx

from envs.functional import EnvSpec
from envs.locomotion import MAX_EPISODE_STEPS, LocomotionTask, Readout, gymnasium_asset, reset_noise
from envs.mjx.contacts import mujoco_contact_frames
from envs.mujoco_log import quiet_deprecations


class MjxState(NamedTuple):
    data: mjx.Data
    t: jnp.ndarray  # steps taken in this episode (Gymnasium's TimeLimit counter)


class MjxEnv:
    """A task of ``envs.locomotion`` on MJX, behind the functional interface."""

    def __init__(self, task: LocomotionTask, iterations: int = 0, ls_iterations: int = 0):
        quiet_deprecations()
        self.task = task
        self.mj_model = mujoco.MjModel.from_xml_path(gymnasium_asset(task.xml_file))
        if iterations:
            self.mj_model.opt.iterations = iterations
        if ls_iterations:
            self.mj_model.opt.ls_iterations = ls_iterations
        self.model = mjx.put_model(self.mj_model)
        self._data0 = mjx.make_data(self.model)  # mj_resetData's state: qpos0, zero velocity
        self.dt = float(self.mj_model.opt.timestep) * task.frame_skip
        low, high = self.mj_model.actuator_ctrlrange.T
        obs_dim = int(self.observation(self._data0).shape[0])
        self.spec = EnvSpec(obs_dim, False, int(self.mj_model.nu), tuple(float(x) for x in low),
                            tuple(float(x) for x in high), MAX_EPISODE_STEPS)

    def readout(self, data: mjx.Data) -> Readout:
        """What the task reads: qpos, qvel and, for Ant, the clipped external contact forces."""
        task = self.task
        contact = (jnp.clip(data._impl.cfrc_ext, *task.contact_force_range).ravel() if task.needs_contact_forces
                   else jnp.zeros((0,), data.qpos.dtype))
        return Readout(data.qpos, data.qvel, contact)

    def observation(self, data: mjx.Data) -> jnp.ndarray:
        return self.task.observation(self.readout(data), jnp)

    # Functional environment -----------------------------------------------------------------------
    def reset_state(self, key) -> tuple[jnp.ndarray, jnp.ndarray]:
        """qpos0 and zero velocity plus Gymnasium's reset noise."""
        task = self.task
        return reset_noise(key, self._data0.qpos, self.mj_model.nv, task.reset_noise_scale, task.qvel_noise)

    def set_state(self, qpos, qvel) -> MjxState:
        """``MujocoEnv.set_state`` after ``mj_resetData``: a fresh episode at (qpos, qvel).

        Gymnasium's ``mj_forward`` here is left out: a step recomputes everything from qpos, qvel
        and the warm start (zero after a reset in both engines), so the reset data only has to
        hold what is read before the next step: the observation and, for Ant, the torso position
        (``reset_kinematics``). Every auto-reset step computes a reset, so this saves a forward
        pass per step and its copy in the compiled program."""
        data = self._data0.replace(qpos=qpos, qvel=qvel)
        if self.task.reset_kinematics:
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
            data = jax.lax.fori_loop(0, self.task.frame_skip, substep, data)
            if self.task.needs_contact_forces:
                data = mjx.rne_postconstraint(self.model, data)
        return data

    def step_env(self, key, state: MjxState, action):
        del key  # the dynamics are deterministic
        before = self.task.position(state.data)
        data = self.physics(state.data, action)
        velocity = (self.task.position(data) - before) / self.dt
        reward, terminated = self.task.reward_and_termination(self.readout(data), velocity, action, jnp)
        t = state.t + 1
        return MjxState(data, t), self.observation(data), reward, terminated, t >= MAX_EPISODE_STEPS


__all__ = ["MjxEnv", "MjxState"]
