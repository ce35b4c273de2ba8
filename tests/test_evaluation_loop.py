"""The one evaluation loop of every JAX run (``bpo.runners.evaluation.run_episodes``), against a
plain Python loop over the same keys, and the episodic runner's evaluation through it."""

import jax
import jax.numpy as jnp
import numpy as np

from bpo.config.presets import get_preset
from bpo.config.schema import replace, traced_hyperparams, with_bpo
from bpo.runners.episodic import act, make_program
from bpo.runners.evaluation import run_episodes
from envs.functional import ShortCorridorFunctional
from envs.short_corridor import ShortCorridorJax

P_RIGHT = 0.6


def logits(obs):
    del obs
    return jnp.log(jnp.array([1 - P_RIGHT, P_RIGHT]))


def plain_episode(env: ShortCorridorJax, key, limit: int) -> tuple[float, int]:
    """One episode step by step in Python: the reset takes the key, each step splits it and draws
    the action with the step's key."""
    state, obs = env.reset(key)
    total, t, done = 0.0, 0, False
    while not done and t < limit:
        key, k_step = jax.random.split(key)
        action = int(jax.random.categorical(k_step, logits(obs)))
        state, obs, reward, terminated, truncated = env.step(state, action)
        total, t, done = total + float(reward), t + 1, bool(terminated | truncated)
    return total, t


def partial_act(deterministic: bool):
    return lambda key, obs: act(logits, deterministic, key, obs)


def test_run_episodes_is_the_plain_loop():
    env = ShortCorridorJax(max_steps=40)
    keys = jax.random.split(jax.random.PRNGKey(3), 12)
    returns, lengths = run_episodes(ShortCorridorFunctional(env=env), partial_act(False), keys)
    expected = [plain_episode(env, k, 40) for k in keys]
    assert np.asarray(lengths).tolist() == [n for _, n in expected]
    np.testing.assert_allclose(np.asarray(returns), [r for r, _ in expected])
    assert len(set(np.asarray(lengths).tolist())) > 1  # the episodes differ: the keys reach the actions


def test_an_episode_that_never_ends_stops_at_the_step_limit():
    always_left = lambda key, obs: jnp.int32(0)  # noqa: E731 - the start cell's left keeps it there
    returns, lengths = run_episodes(ShortCorridorFunctional(max_steps=25), always_left,
                                    jax.random.split(jax.random.PRNGKey(0), 3))
    assert np.asarray(lengths).tolist() == [25] * 3
    assert np.asarray(returns).tolist() == [-25.0] * 3


def test_the_episodic_runner_evaluates_through_the_loop_with_figure_2_s_stream():
    """Each evaluation episode's stream is the one the episodic runner had before the loop was
    shared (the reset's split, then one split a step), so Figure 2's evaluations are unchanged."""
    cfg = replace(with_bpo(get_preset("short_corridor"), False), eval_episodes=6, max_episode_steps=30)
    program = make_program(cfg)
    carry = program.init(jax.random.PRNGKey(5), traced_hyperparams(cfg))
    _, obs0 = program.env.reset(None)
    got = float(program.evaluate(carry, obs0)["eval_return"])
    pi = lambda o: program.policy.apply(carry.pi_params, o)  # noqa: E731
    expected = []
    for k in jax.random.split(jax.random.fold_in(carry.key, 7), cfg.eval_episodes):
        _, k = jax.random.split(k)  # the former loop: the reset's key split off, then one split a step
        state, obs = program.env.reset(None)
        total, done = 0.0, False
        while not done:
            k, k_act = jax.random.split(k)
            state, obs, reward, terminated, truncated = program.env.step(state, jax.random.categorical(k_act, pi(obs)))
            total, done = total + float(reward), bool(terminated | truncated)
        expected.append(total)
    assert len(set(expected)) > 1  # the keys reach the actions
    np.testing.assert_allclose(got, np.mean(expected), rtol=1e-6)
