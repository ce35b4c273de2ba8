"""The MJX ports against Gymnasium's MuJoCo v5 tasks.

* Parity (float64): from Gymnasium's own state and with the same actions, one MJX step gives
  Gymnasium's observation, reward and termination, for 100 consecutive steps of random actions
  (episodes that end are reset by Gymnasium and the check goes on). From the same reset state and
  the same actions, free-running trajectories also agree for 100 steps on Ant, Hopper and
  Walker2d. HalfCheetah's free-running trajectories separate after ~50 steps of contact-rich
  motion: ~1e-13 rounding differences grow chaotically (re-synced steps agree to 1e-12).
* Without MuJoCo's plane-capsule contact frames (``envs.mjx.contacts``), stock MJX leaves
  Gymnasium's Ant at the first ground contact: the effect of that one difference, measured.
* Returns (float32, the training precision): a uniformly random policy has the same mean episode
  return on both backends, within 3 standard errors of the difference.
"""

import contextlib

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from envs.gymnasium_envs import MUJOCO_ENVS, gym_spec
from envs.mjx import make_mjx_env
from envs.mjx.base import MAX_EPISODE_STEPS, MjxState

STEP_TOL = 1e-9  # observation and reward, re-synced steps, float64 (seen: <= 5e-13)
FREE_TOL = 1e-6  # observation and reward, 100 free-running steps, float64 (seen: <= 2e-7, Ant)

pytestmark = pytest.mark.mjx


def _gym(env_id):
    return gym.make(env_id, disable_env_checker=True)


def _mjx_step_from(u, t):
    """MJX state holding Gymnasium's MjData (every field, stale kinematics included)."""
    from mujoco import mjx

    return MjxState(mjx.put_data(u.model, u.data), jnp.int32(t))


def _resynced_errors(env, step, env_id, steps=100, seed=1):
    """Max |obs| and |reward| differences of one MJX step (``step``: the env's jitted step_env) from
    Gymnasium's state, over ``steps`` steps of random actions; also checks termination and counts
    the episodes that ended."""
    genv = _gym(env_id)
    u = genv.unwrapped
    genv.reset(seed=seed)
    rng = np.random.default_rng(seed)
    obs_err = rew_err = 0.0
    ended = 0
    for t in range(steps):
        action = rng.uniform(-1.0, 1.0, env.spec.n_actions)
        state = _mjx_step_from(u, 0)
        obs, reward, terminated, truncated, _ = genv.step(action)
        _, m_obs, m_reward, m_term, m_trunc = step(jax.random.PRNGKey(0), state, jnp.asarray(action))
        obs_err = max(obs_err, float(np.abs(np.asarray(m_obs) - obs).max()))
        rew_err = max(rew_err, abs(float(m_reward) - reward))
        assert bool(m_term) == terminated, f"{env_id} step {t}: terminated {bool(m_term)} vs {terminated}"
        if terminated or truncated:
            ended += 1
            genv.reset(seed=seed + 1000 + t)
    return obs_err, rew_err, ended


@pytest.mark.parametrize("env_id", MUJOCO_ENVS)
def test_spec_matches_gymnasium(env_id):
    env = make_mjx_env(env_id)
    assert env.spec == gym_spec(env_id)
    assert env.task.frame_skip == _gym(env_id).unwrapped.frame_skip


@pytest.mark.mujoco
@pytest.mark.parametrize("env_id", [pytest.param(e, marks=pytest.mark.slow) if e == "Walker2d-v5" else e
                                    for e in MUJOCO_ENVS])
def test_parity_with_gymnasium_float64(env_id):
    with jax.enable_x64(True):
        env = make_mjx_env(env_id)
        step, set_state = jax.jit(env.step_env), jax.jit(env.set_state)
        obs_err, rew_err, ended = _resynced_errors(env, step, env_id)
        assert obs_err < STEP_TOL and rew_err < STEP_TOL, (obs_err, rew_err)
        if env_id in ("Hopper-v5", "Walker2d-v5"):
            assert ended > 0  # random actions topple them: termination was compared on both sides

        # Free-running from Gymnasium's reset state (its noisy, unnormalised quaternion included).
        genv = _gym(env_id)
        u = genv.unwrapped
        for seed in range(2):
            obs, _ = genv.reset(seed=seed)
            rng = np.random.default_rng(seed)
            state = set_state(jnp.asarray(u.data.qpos), jnp.asarray(u.data.qvel))
            # put_data's integer dtypes, so the step compiled above is reused rather than retraced
            like = _mjx_step_from(u, 0)
            state = jax.tree.map(lambda a, b: jnp.asarray(a, b.dtype), state, like)
            errors = [np.abs(np.asarray(env.observation(state.data)) - obs).max()]
            horizon = 40 if env_id == "HalfCheetah-v5" else 100  # chaotic after ~50 (module docstring)
            for _t in range(horizon):
                action = rng.uniform(-1.0, 1.0, env.spec.n_actions)
                obs, reward, terminated, truncated, _ = genv.step(action)
                state, m_obs, m_reward, m_term, m_trunc = step(None, state, jnp.asarray(action))
                errors += [np.abs(np.asarray(m_obs) - obs).max(), abs(float(m_reward) - reward)]
                assert (bool(m_term), bool(m_trunc)) == (terminated, truncated)
                if terminated:
                    break
            assert max(errors) < FREE_TOL, (seed, max(errors))


def test_truncation_after_1000_steps():
    env = make_mjx_env("HalfCheetah-v5")
    step = jax.jit(env.step_env)
    state, _ = jax.jit(env.reset)(jax.random.PRNGKey(0))
    zero = jnp.zeros(env.spec.n_actions)
    state, *_, truncated = step(None, state._replace(t=jnp.int32(MAX_EPISODE_STEPS - 2)), zero)
    assert not bool(truncated)
    *_, terminated, truncated = step(None, state, zero)
    assert bool(truncated) and not bool(terminated)


@pytest.mark.slow
@pytest.mark.mujoco
def test_stock_mjx_contact_frames_leave_gymnasium_ant(monkeypatch):
    """The reason for ``envs.mjx.contacts``: measured on the same 100 re-synced steps."""
    import envs.mjx.base

    monkeypatch.setattr(envs.mjx.base, "mujoco_contact_frames", contextlib.nullcontext)
    with jax.enable_x64(True):
        env = make_mjx_env("Ant-v5")
        obs_err, _, _ = _resynced_errors(env, jax.jit(env.step_env), "Ant-v5")
    assert obs_err > 1e-2, obs_err


@pytest.mark.parametrize("env_id", ["HalfCheetah-v5", "Hopper-v5", "Walker2d-v5", "Ant-v5"])
def test_reset_noise_matches_gymnasium(env_id):
    """Reset states: Gymnasium's noise law (uniform qpos; uniform or normal qvel) around qpos0."""
    env = make_mjx_env(env_id)
    qpos, qvel = jax.vmap(env.reset_state)(jax.random.split(jax.random.PRNGKey(0), 4000))
    qpos0 = np.asarray(env._data0.qpos)
    s = env.task.reset_noise_scale
    noise = np.asarray(qpos) - qpos0
    assert np.all(np.abs(noise) <= s * (1 + 1e-6))
    np.testing.assert_allclose(noise.std(axis=0), s / np.sqrt(3), rtol=0.06)
    expected_vel_std = s if env.task.qvel_noise == "normal" else s / np.sqrt(3)
    np.testing.assert_allclose(np.asarray(qvel).std(axis=0), expected_vel_std, rtol=0.06)
    assert env.task.qvel_noise == ("normal" if env_id in ("HalfCheetah-v5", "Ant-v5") else "uniform")


def _mjx_random_returns(env, n, key, horizon):
    """Returns of ``n`` episodes of uniformly random actions, cut at ``horizon`` steps, all stepped
    together (float32)."""
    dim = env.spec.n_actions

    def run(key):
        k_reset, key = jax.random.split(key)
        state, _ = jax.vmap(env.reset)(jax.random.split(k_reset, n))

        def cond(c):
            return jnp.any(~c[2]) & (c[3] < horizon)

        def body(c):
            state, total, done, t, key = c
            key, k = jax.random.split(key)
            action = jax.random.uniform(k, (n, dim), minval=-1.0, maxval=1.0)
            state, _, reward, terminated, truncated = jax.vmap(env.step_env, in_axes=(None, 0, 0))(None, state, action)
            total = total + jnp.where(done, 0.0, reward)
            return state, total, done | terminated | truncated, t + 1, key

        init = (state, jnp.zeros(n), jnp.zeros(n, bool), jnp.int32(0), key)
        return jax.lax.while_loop(cond, body, init)[1]

    return np.asarray(jax.jit(run)(key))


def _gym_random_returns(env_id, n, seed, horizon):
    env = _gym(env_id)
    rng = np.random.default_rng(seed)
    returns = []
    for i in range(n):
        env.reset(seed=seed + i)
        total, done, t = 0.0, False, 0
        while not done and t < horizon:
            _, reward, terminated, truncated, _ = env.step(rng.uniform(-1.0, 1.0, env.action_space.shape))
            total, done, t = total + reward, terminated or truncated, t + 1
        returns.append(total)
    return np.asarray(returns)


# Whole episodes; Ant's random episodes mostly last 1000 steps and MJX's Ant runs at ~100 steps/s
# on a CPU, so there the returns are of the first 200 steps.
HORIZON = {"Ant-v5": 200}


@pytest.mark.slow
@pytest.mark.mujoco
@pytest.mark.parametrize("env_id", MUJOCO_ENVS)
def test_random_policy_returns_match_gymnasium(env_id):
    n, horizon = 16, HORIZON.get(env_id, MAX_EPISODE_STEPS)
    mjx_returns = _mjx_random_returns(make_mjx_env(env_id), n, jax.random.PRNGKey(3), horizon)
    gym_returns = _gym_random_returns(env_id, n, 3, horizon)
    se = np.sqrt(mjx_returns.var(ddof=1) / n + gym_returns.var(ddof=1) / n)
    z = abs(mjx_returns.mean() - gym_returns.mean()) / se
    assert z < 3.0, (env_id, mjx_returns.mean(), gym_returns.mean(), se)
