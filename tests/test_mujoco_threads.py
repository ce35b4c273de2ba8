"""``--backend threads``: Gymnasium's MuJoCo v5 physics on host threads inside the jitted program.

The oracle is Gymnasium itself: its environment, stepped with the same actions and reset to the
same states, must give bit-identical observations, rewards, terminations and truncations."""


import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bpo.agents.methods import validate
from bpo.config.presets import get_preset
from bpo.config.schema import ConfigError, replace
from envs.functional import auto_reset_step
from envs.mujoco_threads import ThreadedMujocoEnv

pytestmark = pytest.mark.mujoco

TASKS = ["HalfCheetah-v5", "Hopper-v5", "Walker2d-v5", "Ant-v5"]


def floats(state) -> np.ndarray:
    return np.asarray(state.bits).view(np.float64)


def mirror_reset(gym_env, state):
    """What Gymnasium's ``reset`` does (``mj_resetData``, then ``set_state``), at our reset's
    qpos and qvel: the two draw their noise from different generators."""
    gym_env.reset(seed=0)
    f, nq, nv = floats(state), gym_env.model.nq, gym_env.model.nv
    gym_env.set_state(f[1:1 + nq].copy(), f[1 + nq:1 + nq + nv].copy())
    return gym_env._get_obs().astype(np.float32)


@pytest.mark.parametrize("env_id", TASKS)
def test_bit_identical_to_gymnasium_over_1000_random_steps_with_resets(env_id):
    env = ThreadedMujocoEnv(env_id, threads=2)
    reference = gym.make(env_id).unwrapped  # no TimeLimit: the 1000-step truncation is counted here
    key = jax.random.PRNGKey(1)
    state, obs = jax.jit(env.reset)(key)
    np.testing.assert_array_equal(np.asarray(obs), mirror_reset(reference, state))
    step = jax.jit(lambda k, s, a: auto_reset_step(env, k, s, a))
    rng, t, episodes = np.random.default_rng(0), 0, 0
    for i in range(1000):
        action = rng.uniform(-1.0, 1.0, env.spec.n_actions).astype(np.float32)
        key, k = jax.random.split(key)
        out = step(k, state, jnp.asarray(action))
        obs, reward, terminated, _, _ = reference.step(action)
        t += 1
        truncated = t >= 1000 and not terminated
        np.testing.assert_array_equal(np.asarray(out.final_obs), obs.astype(np.float32), err_msg=f"step {i}")
        assert np.asarray(out.reward) == np.float32(reward), f"step {i}"
        assert (bool(out.terminated), bool(out.truncated)) == (terminated, truncated), f"step {i}"
        if terminated or truncated:
            np.testing.assert_array_equal(np.asarray(out.obs), mirror_reset(reference, out.state))
            t, episodes = 0, episodes + 1
        else:
            np.testing.assert_array_equal(np.asarray(out.obs), np.asarray(out.final_obs))
        state = out.state
    assert episodes >= 1  # HalfCheetah's truncation at 1000 steps, the others' terminations


def test_lanes_threads_and_batching_do_not_change_any_lane():
    """12 Hopper lanes (many resets) vmapped on 1 or 3 threads, and each lane alone: identical."""
    steps, lanes = 60, 12
    keys = jax.random.split(jax.random.PRNGKey(3), lanes)
    actions = jax.random.uniform(jax.random.PRNGKey(4), (steps, lanes, 3), minval=-1.0, maxval=1.0)

    def trajectory(env, keys, actions):
        state, _ = jax.vmap(env.reset)(keys)

        def body(state, xs):
            key, action = xs
            out = jax.vmap(lambda k, s, a: auto_reset_step(env, k, s, a))(jax.random.split(key, len(action)),
                                                                        state, action)
            return out.state, (out.obs, out.reward, out.terminated)

        step_keys = jax.random.split(jax.random.PRNGKey(5), steps)
        return jax.jit(lambda: jax.lax.scan(body, state, (step_keys, actions))[1])()

    one, three = ThreadedMujocoEnv("Hopper-v5", threads=1), ThreadedMujocoEnv("Hopper-v5", threads=3)
    batched = trajectory(three, keys, actions)
    assert int(jnp.sum(batched[2])) > 0  # some lanes terminated and were reset
    for a, b in zip(batched, trajectory(one, keys, actions), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # Lane 5 alone (split keys are per lane, so the same keys give it the same resets).
    alone = ThreadedMujocoEnv("Hopper-v5", threads=2)
    state, _ = alone.reset(keys[5])
    for i, key in enumerate(jax.random.split(jax.random.PRNGKey(5), steps)):
        out = auto_reset_step(alone, jax.random.split(key, lanes)[5], state, actions[i, 5])
        np.testing.assert_array_equal(np.asarray(out.obs), np.asarray(batched[0][i, 5]), err_msg=f"step {i}")
        state = out.state


@pytest.mark.parametrize("changes, field, message", [
    ({"backend": "threads", "env": "CartPole-v1"}, "env", "with backend threads"),
    ({"backend": "threads", "physics_threads": -1}, "physics_threads", "from 0 (one per core) to 1024"),
    ({"backend": "threads", "mjx_iterations": 4}, "mjx_iterations", "does not apply to backend threads"),
    ({"backend": "mjx", "mjx_ls_iterations": -1}, "mjx_ls_iterations", ">= 0"),
])
def test_invalid_threads_configs_name_the_field(changes, field, message):
    with pytest.raises(ConfigError) as err:
        validate(replace(get_preset("mujoco_default"), **changes))
    assert err.value.field_name == field and message in str(err.value)
