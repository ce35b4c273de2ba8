"""Ant-v5 (Gymnasium defaults): reward = healthy bonus + forward (x) velocity of the torso
- 0.5 |a|^2 - 5e-4 |clip(cfrc_ext, -1, 1)|^2; the observation ends with the clipped external
contact forces of every body but the world (105 numbers); terminates when the torso height
leaves [0.2, 1.0] or the state is not finite."""

import jax.numpy as jnp

from envs.mjx.base import HealthyTask, state_vector

TORSO = 1  # Gymnasium's main_body


class Ant(HealthyTask):
    env_id = "Ant-v5"
    xml_file = "ant.xml"
    frame_skip = 5
    reset_noise_scale = 0.1
    qvel_noise = "normal"
    needs_contact_forces = True
    reset_kinematics = True
    forward_reward_weight, ctrl_cost_weight, contact_cost_weight, healthy_reward = 1.0, 0.5, 5e-4, 1.0
    healthy_z_range, contact_force_range = (0.2, 1.0), (-1.0, 1.0)

    def position(self, data):
        return data.xpos[TORSO, 0]  # as stale as Gymnasium's: xpos comes from the last substep's kinematics

    def contact_forces(self, data):
        return jnp.clip(data._impl.cfrc_ext, *self.contact_force_range)

    def observation(self, data):
        return jnp.concatenate([data.qpos[2:], data.qvel, self.contact_forces(data)[1:].ravel()])

    def is_healthy(self, data):
        state = state_vector(data)
        z_lo, z_hi = self.healthy_z_range
        return jnp.all(jnp.isfinite(state)) & (z_lo <= state[2]) & (state[2] <= z_hi)

    def extra_cost(self, data):
        return self.contact_cost_weight * jnp.sum(jnp.square(self.contact_forces(data)))
