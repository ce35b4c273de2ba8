"""A step under a traced condition is traced once (bpo.core.branches), in the helper and in the
programs of both runners: tracing the update twice doubled the tracing and lowering of every
compile and of every compile-cache hit."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bpo.config.presets import get_preset
from bpo.config.schema import OnPolicyTrainConfig, PPOConfig, replace, traced_hyperparams, with_bpo
from bpo.core.branches import step_or_skip, traced_once, zeros_shaped
from bpo.runners import episodic, onpolicy
from bpo.runners.host import HostRunner
from bpo.training import run


def counted(fn, calls: list):
    def wrapped(*args, **kwargs):
        calls.append(1)
        return fn(*args, **kwargs)
    return wrapped


def step(carry, x):
    return carry * 2.0 + x, {"sum": jnp.sum(carry), "count": jnp.int32(carry.shape[0])}


@pytest.mark.parametrize("pred", [True, False])
def test_step_or_skip_is_the_step_or_the_carry_and_zeros(pred):
    """Against plain Python: the step where pred holds; else the carry as it is and zero metrics of
    the step's dtypes."""
    carry, x = jnp.arange(3.0), jnp.float32(1.0)
    got_carry, got = jax.jit(lambda p, c: step_or_skip(p, step, c, x))(pred, carry)
    want_carry, want = step(carry, x) if pred else (carry, {"sum": 0.0, "count": 0})
    np.testing.assert_array_equal(got_carry, want_carry)
    assert {k: float(v) for k, v in got.items()} == {k: float(v) for k, v in want.items()}
    assert got["count"].dtype == jnp.int32 and got["sum"].dtype == jnp.float32


def test_step_or_skip_traces_its_step_once_where_shapes_then_cond_traced_it_twice():
    calls = []
    jax.make_jaxpr(lambda p, c: step_or_skip(p, counted(step, calls), c, 1.0))(True, jnp.ones(3))
    assert len(calls) == 1
    # what the runners did before: the step's shapes from one trace, its branch from another
    calls.clear()

    def before(p, c):
        shapes = jax.eval_shape(counted(step, calls), c, 1.0)[1]
        return jax.lax.cond(p, lambda c: counted(step, calls)(c, 1.0), lambda c: (c, zeros_shaped(shapes)), c)

    jax.make_jaxpr(before)(True, jnp.ones(3))
    assert len(calls) == 2


def test_traced_once_reuses_its_trace_in_a_switch_and_closes_over_tracers():
    calls = []

    def program(scale, c, which):
        jitted, (_, shapes) = traced_once(counted(lambda c: step(c * scale, 0.0), calls), c)
        return jax.lax.switch(which, [jitted, lambda c: (c, zeros_shaped(shapes))], c)

    out, metrics = jax.jit(program)(3.0, jnp.ones(2), 0)
    assert len(calls) == 1
    np.testing.assert_array_equal(out, [6.0, 6.0])
    assert float(metrics["sum"]) == 6.0


@pytest.mark.parametrize("runner,method,preset,changes", [
    (onpolicy, "train_on_rollout", "cartpole_ppo", {"total_timesteps": 2048, "eval_every": 2048, "eval_episodes": 1}),
    (episodic, "train_on_episode", "short_corridor", {"episodes": 20})], ids=["on-policy update", "episodic block"])
def test_a_program_traces_its_update_once(monkeypatch, runner, method, preset, changes):
    cfg = replace(with_bpo(get_preset(preset), True), **changes)
    program = runner.make_program(cfg)
    calls = []
    monkeypatch.setattr(type(program), method, counted(getattr(type(program), method), calls))
    hp = traced_hyperparams(cfg)
    carry = jax.eval_shape(program.init, jax.random.PRNGKey(0), hp)
    jax.make_jaxpr(lambda c, i: program.segment(c, hp, i))(carry, jnp.arange(2))
    assert len(calls) == 1


def test_the_host_runner_traces_its_first_state_and_its_update_once(monkeypatch):
    """The Gymnasium runner's memory check takes the shapes of the first state and of the update
    from the same jitted functions that it then compiles, not from a trace of their own."""
    cfg = OnPolicyTrainConfig(
        preset="probe", env="TruncationProbe-v0", backend="gymnasium", total_timesteps=256, eval_every=256,
        eval_episodes=1, eval_in_background=False,
        ppo=PPOConfig(n_steps=32, n_envs=4, batch_size=64, n_epochs=1, pi_hidden=(8,), vf_hidden=(8,)))
    cfg = with_bpo(replace(cfg, seeds=2, **{"bpo.replay_size": 256, "bpo.q_batch_size": 64,
                                            "bpo.mu_batch_size": 64}), True)
    calls = {"_init_one": [], "_update_one": []}
    for name, seen in calls.items():
        monkeypatch.setattr(HostRunner, name, counted(getattr(HostRunner, name), seen))
    run(cfg)
    assert {name: len(seen) for name, seen in calls.items()} == {"_init_one": 1, "_update_one": 1}
