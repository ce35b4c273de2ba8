"""ShortCorridor: Gymnasium checks, the JAX twin, and the closed-form return."""

import gymnasium as gym
import jax
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import envs  # noqa: F401  (registers ShortCorridor-v0)
from envs.short_corridor import ShortCorridorJax, expected_return, optimal_right_probability


def test_check_env_passes():
    env = gym.make("ShortCorridor-v0")
    check_env(env.unwrapped, skip_render_check=True)
    assert env.action_space == gym.spaces.Discrete(2)


def test_dynamics_reversed_in_cell_1_and_goal_terminates():
    env = gym.make("ShortCorridor-v0").unwrapped
    env.reset(seed=0)
    cells = [env.step(a)[4]["cell"] for a in (0, 1, 1, 0, 1, 0)]
    assert cells == [0, 1, 0, 0, 1, 2]  # in cell 1 'right' goes back to 0 and 'left' forward to 2
    obs, reward, terminated, truncated, info = env.step(1)
    assert info["cell"] == 3 and terminated and not truncated and reward == -1.0


def test_truncation_at_step_limit():
    env = gym.make("ShortCorridor-v0", max_steps=5).unwrapped
    env.reset(seed=0)
    flags = [env.step(0)[2:4] for _ in range(5)]
    assert flags[-1] == (False, True) and all(f == (False, False) for f in flags[:-1])


@pytest.mark.parametrize("seed", range(5))
def test_jax_twin_matches_gymnasium(seed):
    rng = np.random.default_rng(seed)
    actions = rng.integers(0, 2, size=60)
    genv = gym.make("ShortCorridor-v0", max_steps=40).unwrapped
    jenv = ShortCorridorJax(max_steps=40)
    gobs, _ = genv.reset(seed=seed)
    state, jobs = jenv.reset(jax.random.PRNGKey(seed))
    step = jax.jit(jenv.step)
    np.testing.assert_array_equal(gobs, jobs)
    for a in actions:
        gobs, gr, gterm, gtrunc, info = genv.step(int(a))
        state, jobs, jr, jterm, jtrunc = step(state, a)
        assert (info["cell"], gr, gterm, gtrunc) == (int(state.cell), float(jr), bool(jterm), bool(jtrunc))
        np.testing.assert_array_equal(gobs, jobs)
        if gterm or gtrunc:
            break


def test_closed_form_return_matches_linear_solve():
    for p in (0.1, 0.3, optimal_right_probability(), 0.9):
        # v = r + P v over cells 0..2 (3 is terminal), solved directly.
        trans = np.zeros((3, 4))
        trans[0, 0], trans[0, 1] = 1 - p, p
        trans[1, 2], trans[1, 0] = 1 - p, p
        trans[2, 1], trans[2, 3] = 1 - p, p
        v = np.linalg.solve(np.eye(3) - trans[:, :3], -np.ones(3))
        assert expected_return(p) == pytest.approx(v[0], rel=1e-12)
    assert expected_return(optimal_right_probability()) == pytest.approx(-11.657, abs=1e-3)
