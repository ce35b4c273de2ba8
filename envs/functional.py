"""A small functional environment interface for the jitted runners, with auto-reset.

Every environment here offers

    spec                                   EnvSpec (observation size, action space, step limit)
    reset(key) -> (state, obs)
    step_env(key, state, action) -> (state, obs, reward, terminated, truncated)   # no reset

``auto_reset_step`` turns ``step_env`` into the vectorised-env step the rollouts use: when an
episode ends the returned observation is the reset one, and the real final observation is
returned beside it so that truncated episodes bootstrap from it (brax / Gymnasium semantics).
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

import jax
import jax.numpy as jnp

from envs.short_corridor import ShortCorridorJax


class EnvSpec(NamedTuple):
    obs_dim: int
    discrete: bool
    n_actions: int  # discrete: number of actions; continuous: action dimension
    action_low: tuple[float, ...] | None  # continuous only
    action_high: tuple[float, ...] | None
    max_episode_steps: int


class Step(NamedTuple):
    state: object
    obs: jnp.ndarray  # next observation, the reset observation after an episode end
    reward: jnp.ndarray
    terminated: jnp.ndarray
    truncated: jnp.ndarray
    final_obs: jnp.ndarray  # the real next observation, also after an episode end


class FunctionalEnv(Protocol):
    """The interface of the module docstring, which every environment of the on-policy runner has."""

    spec: EnvSpec

    def reset(self, key) -> tuple: ...

    def step_env(self, key, state, action) -> tuple: ...


def auto_reset_step(env: FunctionalEnv, key, state, action) -> Step:
    """``env.step_env``, and for an ended episode the reset state and observation (module
    docstring). An environment may fuse the two (``env.auto_reset_step``, the same semantics):
    the threaded MuJoCo backend resets only the lanes that need it, in the same host call."""
    if hasattr(env, "auto_reset_step"):
        return env.auto_reset_step(key, state, action)
    k_step, k_reset = jax.random.split(key)
    state_next, obs_next, reward, terminated, truncated = env.step_env(k_step, state, action)
    truncated = truncated & ~terminated
    done = terminated | truncated
    state_reset, obs_reset = env.reset(k_reset)
    state = jax.tree.map(lambda r, s: jnp.where(done, r, s), state_reset, state_next)
    obs = jnp.where(done, obs_reset, obs_next)
    return Step(state, obs, reward.astype(jnp.float32), terminated, truncated, obs_next)


class GymnaxEnv:
    """A gymnax environment (https://github.com/RobertTLange/gymnax) behind this interface."""

    def __init__(self, env_id: str):
        import gymnax

        self._env, self._params = gymnax.make(env_id)
        space = self._env.action_space(self._params)
        obs_dim = int(self._env.observation_space(self._params).shape[0])
        steps = int(self._params.max_steps_in_episode)
        if hasattr(space, "n"):
            self.spec = EnvSpec(obs_dim, True, int(space.n), None, None, steps)
        else:
            low = tuple(float(x) for x in jnp.broadcast_to(space.low, space.shape))
            high = tuple(float(x) for x in jnp.broadcast_to(space.high, space.shape))
            self.spec = EnvSpec(obs_dim, False, int(space.shape[0]), low, high, steps)

    def reset(self, key):
        obs, state = self._env.reset_env(key, self._params)
        return state, obs.astype(jnp.float32)

    def step_env(self, key, state, action):
        obs, state, reward, terminated, _ = self._env.step_env(key, state, action, self._params)
        truncated = self._env.is_truncated(state, self._params)
        return state, obs.astype(jnp.float32), reward, jnp.asarray(terminated, bool), jnp.asarray(truncated, bool)


class ShortCorridorFunctional:
    """The pure-JAX ShortCorridor (``envs.short_corridor``) behind this interface."""

    def __init__(self, max_steps: int = 1000, env: ShortCorridorJax | None = None):
        """``env``: an existing twin to view through this interface (its own step limit), as the
        episodic runner's evaluation does; else a new one with ``max_steps``."""
        self._env = ShortCorridorJax(max_steps=max_steps) if env is None else env
        self.spec = EnvSpec(self._env.obs_dim, True, self._env.n_actions, None, None, self._env.max_steps)

    def reset(self, key):
        return self._env.reset(key)

    def step_env(self, key, state, action):
        del key
        return self._env.step(state, action)


class CartPoleState(NamedTuple):
    x: jnp.ndarray
    x_dot: jnp.ndarray
    theta: jnp.ndarray
    theta_dot: jnp.ndarray
    t: jnp.ndarray


class ContinuousCartPole:
    """CartPole-v1 dynamics (Barto et al. 1983, Gymnasium's constants, Euler integration) with a
    continuous force: action a in [-1, 1] pushes with a * 10 N (clipped). Reward 1 per step,
    terminates when the pole passes 12 degrees or the cart leaves [-2.4, 2.4], truncated at 500."""

    gravity, masscart, masspole, length, force_mag, tau = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
    theta_threshold, x_threshold = 12 * 2 * jnp.pi / 360, 2.4

    def __init__(self, max_steps: int = 500):
        self.spec = EnvSpec(4, False, 1, (-1.0,), (1.0,), max_steps)

    def _obs(self, s: CartPoleState):
        return jnp.stack([s.x, s.x_dot, s.theta, s.theta_dot]).astype(jnp.float32)

    def reset(self, key):
        x = jax.random.uniform(key, (4,), minval=-0.05, maxval=0.05)
        state = CartPoleState(x[0], x[1], x[2], x[3], jnp.zeros((), jnp.int32))
        return state, self._obs(state)

    def step_env(self, key, s: CartPoleState, action):
        del key
        force = self.force_mag * jnp.clip(jnp.reshape(action, ()), -1.0, 1.0)
        total_mass = self.masscart + self.masspole
        polemass_length = self.masspole * self.length
        cos, sin = jnp.cos(s.theta), jnp.sin(s.theta)
        temp = (force + polemass_length * s.theta_dot**2 * sin) / total_mass
        theta_acc = (self.gravity * sin - cos * temp) / (
            self.length * (4.0 / 3.0 - self.masspole * cos**2 / total_mass)
        )
        x_acc = temp - polemass_length * theta_acc * cos / total_mass
        new = CartPoleState(
            x=s.x + self.tau * s.x_dot,
            x_dot=s.x_dot + self.tau * x_acc,
            theta=s.theta + self.tau * s.theta_dot,
            theta_dot=s.theta_dot + self.tau * theta_acc,
            t=s.t + 1,
        )
        terminated = (jnp.abs(new.x) > self.x_threshold) | (jnp.abs(new.theta) > self.theta_threshold)
        truncated = new.t >= self.spec.max_episode_steps
        return new, self._obs(new), jnp.float32(1.0), terminated, truncated


class TruncationProbe:
    """Probe environment for bootstrapping at truncation. Observation [0] in the start state A,
    [1] in every later state B; reward 1 in B, 0 in A; never terminates; truncated after
    ``max_steps`` steps. With correct bootstrapping from the final observation,
    v(B) = 1/(1-gamma) and v(A) = gamma/(1-gamma); treating truncation as termination, or
    bootstrapping from the reset observation A, gives smaller values of B."""

    def __init__(self, max_steps: int = 4):
        self.spec = EnvSpec(1, True, 2, None, None, max_steps)

    def reset(self, key):
        del key
        return jnp.zeros((), jnp.int32), jnp.zeros(1, jnp.float32)

    def step_env(self, key, t, action):
        del key, action
        t = t + 1
        reward = jnp.where(t > 1, 1.0, 0.0).astype(jnp.float32)  # the reward of leaving state B
        return t, jnp.ones(1, jnp.float32), reward, jnp.array(False), t >= self.spec.max_episode_steps
