"""HalfCheetah-v5 (Gymnasium defaults): reward = forward velocity - 0.1 |a|^2, never terminates."""

import jax.numpy as jnp

from envs.mjx.base import MjxEnv, control_cost


class HalfCheetah(MjxEnv):
    env_id = "HalfCheetah-v5"
    xml_file = "half_cheetah.xml"
    frame_skip = 5
    reset_noise_scale = 0.1
    qvel_noise = "normal"
    forward_reward_weight, ctrl_cost_weight = 1.0, 0.1

    def observation(self, data):
        return jnp.concatenate([data.qpos[1:], data.qvel])

    def reward_and_termination(self, data, velocity, action):
        reward = self.forward_reward_weight * velocity - control_cost(self.ctrl_cost_weight, action)
        return reward, jnp.array(False)
