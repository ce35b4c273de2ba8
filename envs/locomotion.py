"""Gymnasium's MuJoCo v5 locomotion tasks (Ant, HalfCheetah, Hopper, Walker2d), each defined once.

A task is what Gymnasium's ``ant_v5.py``, ``half_cheetah_v5.py``, ``hopper_v5.py`` and
``walker2d_v5.py`` add to the physics: the asset and frame skip, the reset noise, the position the
forward reward differentiates, the observation, the healthy check, and the reward and termination
with their terms in Gymnasium's order. Every formula is written once over an array namespace
``xp`` and over the last axis, so the same code serves

* the MJX ports (``envs.mjx``): ``xp = jax.numpy``, one lane at a time (vmapped), float32 or
  float64;
* the threaded MuJoCo backend (``envs.mujoco_threads``): ``xp = numpy``, a batch of lanes at once,
  float64 as in Gymnasium, whose results it repeats bit for bit.

What a task reads after a step or a reset is a ``Readout``: qpos, qvel and, for Ant, the clipped
external contact forces of every body, flattened.
"""

from __future__ import annotations

import os
from typing import Any, NamedTuple

import jax

MAX_EPISODE_STEPS = 1000  # Gymnasium registers every v5 locomotion task with this TimeLimit


class Readout(NamedTuple):
    """What a task reads from the simulator, per lane (leading axes: lanes, if any)."""

    qpos: Any  # [..., nq]
    qvel: Any  # [..., nv]
    contact: Any  # [..., 6 * nbody]: clip(cfrc_ext, contact_force_range) flattened (Ant), else [..., 0]


def gymnasium_asset(xml_file: str) -> str:
    """Path of one of Gymnasium's MuJoCo XML assets, the files its v5 environments load."""
    import gymnasium.envs.mujoco as gym_mujoco

    return os.path.join(os.path.dirname(gym_mujoco.__file__), "assets", xml_file)


def reset_noise(key, qpos0, nv: int, scale: float, qvel_noise: str):
    """Gymnasium's ``reset_model`` of the v5 locomotion tasks: qpos0 plus uniform noise in
    [-scale, scale], and zero velocity plus ``scale`` times uniform or standard-normal noise
    (drawn in JAX by both backends, so that they start from the same states)."""
    k_pos, k_vel = jax.random.split(key)
    qpos = qpos0 + jax.random.uniform(k_pos, qpos0.shape, qpos0.dtype, -scale, scale)
    if qvel_noise == "normal":
        qvel = scale * jax.random.normal(k_vel, (nv,), qpos0.dtype)
    else:
        qvel = jax.random.uniform(k_vel, (nv,), qpos0.dtype, -scale, scale)
    return qpos, qvel


def control_cost(weight: float, action, xp):
    """Gymnasium's ``control_cost``: on the action as given, before MuJoCo clamps ctrl (float32
    actions give float32 costs, as in Gymnasium when it is given float32 actions)."""
    return weight * xp.sum(xp.square(action), axis=-1)


class LocomotionTask:
    """Base of the four tasks: the class attributes are Gymnasium's defaults; the methods are the
    task's formulas (module docstring)."""

    env_id: str
    xml_file: str
    frame_skip: int
    reset_noise_scale: float
    qvel_noise: str  # "uniform" (Hopper, Walker2d) or "normal" (Ant, HalfCheetah), as in Gymnasium
    forward_reward_weight: float
    ctrl_cost_weight: float
    position_body: int | None = None  # the body whose x the reward differentiates; None: qpos[0]
    needs_contact_forces: bool = False  # mj_rnePostConstraint after the step, for cfrc_ext (Ant)
    contact_force_range: tuple[float, float] = (-1.0, 1.0)
    reset_kinematics: bool = False  # position() reads body positions, which a reset must compute

    def position(self, data):
        """What the forward reward differentiates, from MuJoCo's ``MjData`` or MJX's ``Data``."""
        return data.qpos[0] if self.position_body is None else data.xpos[self.position_body, 0]

    def observation(self, r: Readout, xp):
        raise NotImplementedError

    def reward_and_termination(self, r: Readout, velocity, action, xp):
        """Gymnasium's ``_get_rew`` term by term in its order, and ``terminated``."""
        raise NotImplementedError


class HealthyTask(LocomotionTask):
    """Ant, Hopper, Walker2d: reward = forward velocity + healthy bonus - control cost (- contact
    cost for Ant, ``extra_cost``), terminated once unhealthy."""

    healthy_reward: float
    healthy_z_range: tuple[float, float]

    def is_healthy(self, r: Readout, xp):
        raise NotImplementedError

    def extra_cost(self, r: Readout, xp):
        """Costs beyond the control cost (None: none)."""
        return None

    def reward_and_termination(self, r, velocity, action, xp):
        healthy = self.is_healthy(r, xp)
        rewards = self.forward_reward_weight * velocity + healthy * self.healthy_reward
        costs = control_cost(self.ctrl_cost_weight, action, xp)
        extra = self.extra_cost(r, xp)
        if extra is not None:
            costs = costs + extra
        return rewards - costs, ~healthy


class HalfCheetah(LocomotionTask):
    """HalfCheetah-v5: reward = forward velocity - 0.1 |a|^2, never terminates."""

    env_id, xml_file, frame_skip, reset_noise_scale, qvel_noise = "HalfCheetah-v5", "half_cheetah.xml", 5, 0.1, "normal"
    forward_reward_weight, ctrl_cost_weight = 1.0, 0.1

    def observation(self, r, xp):
        return xp.concatenate([r.qpos[..., 1:], r.qvel], axis=-1)

    def reward_and_termination(self, r, velocity, action, xp):
        reward = self.forward_reward_weight * velocity - control_cost(self.ctrl_cost_weight, action, xp)
        return reward, xp.zeros(xp.shape(velocity), bool)


class Ant(HealthyTask):
    """Ant-v5: reward = healthy bonus + forward (x) velocity of the torso - 0.5 |a|^2
    - 5e-4 |clip(cfrc_ext, -1, 1)|^2; the observation ends with the clipped external contact
    forces of every body but the world (13 bodies, 78 numbers; 105 in all); terminates when the
    torso height leaves [0.2, 1.0] or the state is not finite."""

    env_id, xml_file, frame_skip, reset_noise_scale, qvel_noise = "Ant-v5", "ant.xml", 5, 0.1, "normal"
    forward_reward_weight, ctrl_cost_weight, contact_cost_weight, healthy_reward = 1.0, 0.5, 5e-4, 1.0
    healthy_z_range = (0.2, 1.0)
    position_body = 1  # Gymnasium's main_body, the torso: its xpos is as stale as Gymnasium's (last substep's)
    needs_contact_forces = reset_kinematics = True

    def observation(self, r, xp):
        return xp.concatenate([r.qpos[..., 2:], r.qvel, r.contact[..., 6:]], axis=-1)  # the world body's 6 left out

    def is_healthy(self, r, xp):
        z = r.qpos[..., 2]
        finite = xp.all(xp.isfinite(r.qpos), axis=-1) & xp.all(xp.isfinite(r.qvel), axis=-1)
        return finite & (self.healthy_z_range[0] <= z) & (z <= self.healthy_z_range[1])

    def extra_cost(self, r, xp):
        return self.contact_cost_weight * xp.sum(xp.square(r.contact), axis=-1)


class PlanarWalker(HealthyTask):
    """Hopper and Walker2d: the observation clips the velocities to [-10, 10]; healthy while the
    height and the torso angle lie strictly inside their ranges."""

    healthy_angle_range: tuple[float, float]

    def observation(self, r, xp):
        return xp.concatenate([r.qpos[..., 1:], xp.clip(r.qvel, -10.0, 10.0)], axis=-1)

    def is_healthy(self, r, xp):
        z, angle = r.qpos[..., 1], r.qpos[..., 2]
        (z_lo, z_hi), (a_lo, a_hi) = self.healthy_z_range, self.healthy_angle_range
        return (z_lo < z) & (z < z_hi) & (a_lo < angle) & (angle < a_hi)


class Hopper(PlanarWalker):
    """Hopper-v5: reward = healthy bonus + forward velocity - 1e-3 |a|^2; also unhealthy once any
    of the state but the first two coordinates leaves (-100, 100)."""

    env_id, xml_file, frame_skip, reset_noise_scale, qvel_noise = "Hopper-v5", "hopper.xml", 4, 5e-3, "uniform"
    forward_reward_weight, ctrl_cost_weight, healthy_reward = 1.0, 1e-3, 1.0
    healthy_state_range, healthy_z_range, healthy_angle_range = (-100.0, 100.0), (0.7, float("inf")), (-0.2, 0.2)

    def is_healthy(self, r, xp):
        state = xp.concatenate([r.qpos, r.qvel], axis=-1)[..., 2:]
        s_lo, s_hi = self.healthy_state_range
        return super().is_healthy(r, xp) & xp.all((s_lo < state) & (state < s_hi), axis=-1)


class Walker2d(PlanarWalker):
    """Walker2d-v5 (``walker2d_v5.xml``, both feet at friction 1.9): reward = healthy bonus +
    forward velocity - 1e-3 |a|^2."""

    env_id, xml_file, frame_skip, reset_noise_scale, qvel_noise = "Walker2d-v5", "walker2d_v5.xml", 4, 5e-3, "uniform"
    forward_reward_weight, ctrl_cost_weight, healthy_reward = 1.0, 1e-3, 1.0
    healthy_z_range, healthy_angle_range = (0.8, 2.0), (-1.0, 1.0)


TASKS: dict[str, LocomotionTask] = {task.env_id: task for task in (Ant(), HalfCheetah(), Hopper(), Walker2d())}


def get_task(env_id: str, backend: str) -> LocomotionTask:
    """The task of ``env_id``; raises ValueError naming the tasks there are."""
    if env_id not in TASKS:
        raise ValueError(f"env: no {backend} MuJoCo task {env_id!r}; allowed: {sorted(TASKS)}")
    return TASKS[env_id]
