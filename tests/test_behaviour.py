"""Behaviour-policy losses: minimisers equal the variance-optimal target (eqs. 5, 15, 16)."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from bpo.agents.bpo import make_behaviour, mu_loss
from bpo.config.presets import get_preset
from bpo.config.schema import replace
from bpo.core.behaviour import behaviour_target_log_probs, continuous_mu_loss, discrete_mu_loss
from bpo.core.distributions import Dist, logits_dist


def minimise(loss, x0, steps=3000, lr=0.05):
    tx = optax.adam(lr)
    state = tx.init(x0)

    @jax.jit
    def step(x, state):
        g = jax.grad(loss)(x)
        u, state = tx.update(g, state)
        return optax.apply_updates(x, u), state

    x = x0
    for _ in range(steps):
        x, state = step(x, state)
    return x


@pytest.mark.parametrize("kind", ["cross_entropy", "reverse_kl"])
def test_discrete_mu_loss_minimiser_is_pi_sqrt_qhat(kind):
    rng = np.random.default_rng(0)
    pi_logits = jnp.asarray(rng.normal(size=(5, 4)))
    q_hat = jnp.asarray(rng.uniform(0.1, 50.0, size=(5, 4)))
    target = behaviour_target_log_probs(pi_logits, q_hat)
    mu_logits = minimise(lambda m: discrete_mu_loss(m, target, kind), jnp.zeros((5, 4)))
    pi = jax.nn.softmax(pi_logits)
    analytic = pi * jnp.sqrt(q_hat) / jnp.sum(pi * jnp.sqrt(q_hat), axis=-1, keepdims=True)
    np.testing.assert_allclose(jax.nn.softmax(mu_logits), analytic, atol=2e-3)
    assert not np.allclose(analytic, pi, atol=1e-2)  # the target really differs from pi


def test_continuous_mu_loss_theorem4_gaussian():
    """pi = N(0, 1), Q-hat(a) = exp(2 b a): pi sqrt(Q-hat) ∝ N(b, 1), so eq. (16) is minimised there."""
    b = 0.7
    eps = jax.random.normal(jax.random.PRNGKey(0), (4096,))

    def loss(params):
        mean, log_std = params
        a = mean + jnp.exp(log_std) * eps  # reparameterised samples from mu
        log_mu = jax.scipy.stats.norm.logpdf(a, mean, jnp.exp(log_std))
        log_pi = jax.scipy.stats.norm.logpdf(a)
        return continuous_mu_loss(log_mu, log_pi, jnp.exp(2 * b * a))

    mean, log_std = minimise(loss, (jnp.array(0.0), jnp.array(-0.5)), steps=1500, lr=0.02)
    assert float(mean) == pytest.approx(b, abs=0.03)
    assert float(log_std) == pytest.approx(0.0, abs=0.03)


def test_q_hat_softplus_head_is_positive_and_leaves_q_linear():
    cfg = replace(get_preset("cartpole_ppo").bpo, q_hat_head="softplus")
    beh = make_behaviour(cfg, True, 2, mu_apply=None)
    raw = jnp.array([-30.0, -1.0, 0.0, 2.0])
    np.testing.assert_allclose(beh.head(raw, hat=True), np.log1p(np.exp(np.asarray(raw))) + 1e-6, rtol=1e-6)
    assert float(beh.head(raw, hat=True).min()) >= 1e-6
    np.testing.assert_array_equal(beh.head(raw, hat=False), raw)
    linear = make_behaviour(get_preset("cartpole_ppo").bpo, True, 2, mu_apply=None)
    np.testing.assert_array_equal(linear.head(raw, hat=True), raw)


def test_mu_entropy_bonus_subtracts_its_weighted_entropy():
    """bpo.mu_ent_coef (the authors' entropy bonus in mu's loss): the loss falls by exactly
    coef x mean entropy of mu."""
    obs = jnp.array([[0.0, 1.0], [1.0, 0.0], [0.5, 0.5]])
    mu_logits = jnp.array([[0.2, -0.1], [1.0, 0.3], [-0.5, 0.5]])
    pi = logits_dist(jnp.array([[0.0, 0.4], [0.1, 0.1], [0.3, -0.2]]))
    q_hat = jnp.array([[1.0, 2.0], [0.5, 0.5], [3.0, 1.0]])
    losses = {}
    for coef in (0.0, 0.01):
        cfg = replace(get_preset("cartpole_ppo").bpo, mu_ent_coef=coef)
        beh = make_behaviour(cfg, True, 2, mu_apply=lambda p, o: logits_dist(p))
        losses[coef] = float(mu_loss(mu_logits, None, obs, pi, None, None, q_hat, beh=beh))
    p = np.asarray(jax.nn.softmax(mu_logits))
    entropy = -np.sum(p * np.log(p), axis=-1).mean()
    assert losses[0.01] == pytest.approx(losses[0.0] - 0.01 * entropy, rel=1e-6)


@pytest.mark.parametrize("clip", [True, False])
def test_continuous_q_reads_the_action_the_environment_executes(clip):
    """With ``clip_actions`` Q(s, a) sees a clipped to the action bounds, as the environment does
    (``bpo.core.distributions.clip_action``); without it, the raw sample."""
    cfg = replace(get_preset("mujoco_default").bpo, zero_init_head=False)  # a zero head would ignore the input
    beh = make_behaviour(cfg, False, 2, None, action_low=-np.ones(2), action_high=np.ones(2), clip_actions=clip)
    obs = jnp.array([[0.3, -0.2], [0.1, 0.4]])
    params = beh.q_net.init(jax.random.PRNGKey(0), jnp.zeros(4))
    raw = jnp.array([[2.5, -0.5], [-3.0, 0.2]])
    inside = jnp.array([[1.0, -0.5], [-1.0, 0.2]])
    want = beh.q_net.apply(params, jnp.concatenate([obs, inside if clip else raw], axis=-1))[..., 0]
    np.testing.assert_array_equal(beh.q_output(params, obs, raw), want)
    unclipped = beh.q_net.apply(params, jnp.concatenate([obs, raw], axis=-1))[..., 0]
    assert np.allclose(beh.q_output(params, obs, raw), unclipped) != clip


@pytest.mark.parametrize("batch_min,unclipped", [(False, False), (True, False), (False, True), (True, True)])
def test_the_authors_mu_loss_switches_against_a_hand_computation(batch_min, unclipped):
    """bpo.mu_q_hat_batch_min and bpo.mu_q_hat_unclipped_actions (the authors' eq. (16)): the loss
    is mean(ln mu - ln pi) - 0.5 mean(ln Q-hat), with Q-hat read at the clipped or the raw samples,
    and per sample or as the minimum over the minibatch; computed here in NumPy from the same draws."""
    cfg = replace(get_preset("mujoco_default").bpo, zero_init_head=False, clip_targets=False, q_hat_head="softplus",
                  mu_q_hat_batch_min=batch_min, mu_q_hat_unclipped_actions=unclipped)
    beh = make_behaviour(cfg, False, 2, mu_apply=lambda p, o: Dist(p[0], jnp.exp(p[1])),
                         action_low=-np.ones(2), action_high=np.ones(2), clip_actions=True)
    obs = jnp.array([[0.3, -0.2], [0.1, 0.4], [-0.6, 0.2], [0.0, 0.9]])
    mu = (jnp.array([[0.9, -0.5], [-1.2, 0.2], [0.1, 0.4], [0.5, 1.1]]), jnp.full((4, 2), -0.2))
    pi = Dist(jnp.zeros((4, 2)), jnp.full((4, 2), 0.8))
    q_hat_params = beh.q_net.init(jax.random.PRNGKey(1), jnp.zeros(4))
    key = jax.random.PRNGKey(2)
    got = float(mu_loss(mu, key, obs, pi, q_hat_params, None, None, beh=beh))

    eps = np.asarray(jax.random.normal(key, (4, 2)), np.float64)
    loc, scale = np.asarray(mu[0], np.float64), np.exp(np.asarray(mu[1], np.float64))
    a = loc + scale * eps
    assert np.any(np.abs(a) > 1)  # some samples leave the bounds, so clipping matters

    def log_normal(x, m, s):
        return np.sum(-0.5 * ((x - m) / s) ** 2 - np.log(s) - 0.5 * np.log(2 * np.pi), axis=-1)

    seen = a if unclipped else np.clip(a, -1, 1)
    out = np.asarray(beh.q_net.apply(q_hat_params, jnp.concatenate([obs, jnp.asarray(seen, jnp.float32)], -1)))[:, 0]
    q_hat = np.expm1(np.log1p(np.exp(out.astype(np.float64))) + 1e-6)  # symexp(softplus + 1e-6), all > 0 here
    q_hat = np.maximum(q_hat, cfg.q_hat_floor)
    log_q = np.full(4, np.log(q_hat.min())) if batch_min else np.log(q_hat)
    want = np.mean(log_normal(a, loc, scale) - log_normal(a, 0.0, 0.8) - 0.5 * log_q)
    assert got == pytest.approx(want, rel=1e-5, abs=1e-5)
