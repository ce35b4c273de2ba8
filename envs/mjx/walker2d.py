"""Walker2d-v5 (Gymnasium defaults, ``walker2d_v5.xml`` with both feet at friction 1.9): reward =
healthy bonus + forward velocity - 1e-3 |a|^2; terminates when height or torso angle leave range."""

import jax.numpy as jnp

from envs.mjx.base import HealthyTask


class Walker2d(HealthyTask):
    env_id = "Walker2d-v5"
    xml_file = "walker2d_v5.xml"
    frame_skip = 4
    reset_noise_scale = 5e-3
    qvel_noise = "uniform"
    forward_reward_weight, ctrl_cost_weight, healthy_reward = 1.0, 1e-3, 1.0
    healthy_z_range, healthy_angle_range = (0.8, 2.0), (-1.0, 1.0)

    def observation(self, data):
        return jnp.concatenate([data.qpos[1:], jnp.clip(data.qvel, -10.0, 10.0)])

    def is_healthy(self, data):
        z, angle = data.qpos[1], data.qpos[2]
        (z_lo, z_hi), (a_lo, a_hi) = self.healthy_z_range, self.healthy_angle_range
        return (z_lo < z) & (z < z_hi) & (a_lo < angle) & (angle < a_hi)
