"""Hopper-v5 (Gymnasium defaults): reward = healthy bonus + forward velocity - 1e-3 |a|^2; the
episode terminates once the hopper is unhealthy (state, height or torso angle out of range)."""

import jax.numpy as jnp

from envs.mjx.base import HealthyTask, state_vector


class Hopper(HealthyTask):
    env_id = "Hopper-v5"
    xml_file = "hopper.xml"
    frame_skip = 4
    reset_noise_scale = 5e-3
    qvel_noise = "uniform"
    forward_reward_weight, ctrl_cost_weight, healthy_reward = 1.0, 1e-3, 1.0
    healthy_state_range, healthy_z_range, healthy_angle_range = (-100.0, 100.0), (0.7, float("inf")), (-0.2, 0.2)

    def observation(self, data):
        return jnp.concatenate([data.qpos[1:], jnp.clip(data.qvel, -10.0, 10.0)])

    def is_healthy(self, data):
        z, angle = data.qpos[1], data.qpos[2]
        state = state_vector(data)[2:]
        (s_lo, s_hi), (z_lo, z_hi) = self.healthy_state_range, self.healthy_z_range
        a_lo, a_hi = self.healthy_angle_range
        return jnp.all((s_lo < state) & (state < s_hi)) & (z_lo < z) & (z < z_hi) & (a_lo < angle) & (angle < a_hi)
