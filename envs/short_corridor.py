"""ShortCorridor (Sutton & Barto, Example 13.1; BPO paper Figure 2).

Four non-terminal-looking cells 0..3; the episode starts in 0 and terminates on reaching 3.
Action 0 moves left and 1 moves right, except in cell 1 where their effects are reversed.
Moving left from cell 0 stays in 0. Every step costs -1. All states emit the same
observation, so only stochastic policies can reach the goal reliably: the best policy picks
right with probability 2 - sqrt(2) ~ 0.586 for an expected return of about -11.66.

Two implementations with identical dynamics: ``ShortCorridorEnv`` (Gymnasium API) and the
pure-JAX ``reset``/``step`` functions used inside jitted training runs.
"""

from typing import NamedTuple

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np

LEFT, RIGHT = 0, 1
GOAL = 3
N_ACTIONS = 2
OBS_DIM = 1
DEFAULT_MAX_STEPS = 1000
# Move applied for (cell, action): row = cell 0..2, column = action (left, right).
_MOVES = np.array([[0, 1], [1, -1], [-1, 1]], dtype=np.int32)
_OBSERVATION = np.ones(OBS_DIM, dtype=np.float32)


def _next_cell(cell: int, action: int) -> int:
    return max(0, cell + int(_MOVES[cell, action]))


def optimal_right_probability() -> float:
    """argmax_p of the expected return: 2 - sqrt(2)."""
    return 2.0 - np.sqrt(2.0)


def expected_return(p_right):
    """Exact undiscounted expected return of the policy that goes right with probability p.

    Solving the three Bellman equations gives  v(0) = -(4 - 2p) / (p (1 - p)).
    Works on floats, NumPy and JAX arrays.
    """
    return -(4.0 - 2.0 * p_right) / (p_right * (1.0 - p_right))


class ShortCorridorEnv(gym.Env):
    """Gymnasium ShortCorridor with a constant observation and a step limit."""

    metadata = {"render_modes": []}

    def __init__(self, max_steps: int = DEFAULT_MAX_STEPS):
        if not isinstance(max_steps, (int, np.integer)) or max_steps < 1:
            raise ValueError(f"max_steps must be a positive integer, got {max_steps!r}")
        self.max_steps = int(max_steps)
        self.observation_space = gym.spaces.Box(low=0.0, high=1.0, shape=(OBS_DIM,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(N_ACTIONS)
        self._cell = 0
        self._t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._cell, self._t = 0, 0
        return _OBSERVATION.copy(), {"cell": self._cell}

    def step(self, action):
        if not self.action_space.contains(action):
            raise ValueError(f"action must be 0 (left) or 1 (right), got {action!r}")
        self._cell = _next_cell(self._cell, int(action))
        self._t += 1
        terminated = self._cell == GOAL
        truncated = (not terminated) and self._t >= self.max_steps
        return _OBSERVATION.copy(), -1.0, terminated, truncated, {"cell": self._cell}


class EnvState(NamedTuple):
    cell: jax.Array
    t: jax.Array


class ShortCorridorJax:
    """Functional twin of ``ShortCorridorEnv``: ``reset(key)`` and ``step(state, action)``.

    ``step`` returns ``(state, obs, reward, terminated, truncated)``; it does not reset.
    """

    n_actions = N_ACTIONS
    obs_dim = OBS_DIM
    discrete = True

    def __init__(self, max_steps: int = DEFAULT_MAX_STEPS):
        if max_steps < 1:
            raise ValueError(f"max_steps must be a positive integer, got {max_steps!r}")
        self.max_steps = int(max_steps)

    def exact_return(self, action_probs):
        """Expected undiscounted return (no step limit) of a policy with these action probabilities."""
        return expected_return(action_probs[..., RIGHT])

    def observation(self, state: EnvState):
        del state
        return jnp.asarray(_OBSERVATION)

    def reset(self, key):
        del key  # the start state is deterministic
        state = EnvState(cell=jnp.zeros((), jnp.int32), t=jnp.zeros((), jnp.int32))
        return state, self.observation(state)

    def step(self, state: EnvState, action):
        moves = jnp.asarray(_MOVES)
        cell = jnp.maximum(0, state.cell + moves[jnp.minimum(state.cell, GOAL - 1), action])
        t = state.t + 1
        terminated = cell == GOAL
        truncated = jnp.logical_and(~terminated, t >= self.max_steps)
        new_state = EnvState(cell=cell, t=t)
        return new_state, self.observation(new_state), jnp.float32(-1.0), terminated, truncated
