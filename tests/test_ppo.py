"""PPO's loss terms (eqs. 10, 12, entropy) and its update against hand computations, the shared
clipped Adam, the action distributions and action clipping, gSDE's noise and resampling schedule,
and observation normalisation."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from bpo.agents.ppo import (
    PPOState,
    actor_loss,
    clipped_surrogate_loss,
    linear_schedule,
    normalize_advantages,
    ppo_update,
    value_loss,
)
from bpo.core import distributions as D
from bpo.core.normalization import init_stats, normalize, update_stats
from bpo.core.optim import clipped_adam


def test_clipped_surrogate_matches_hand_computation():
    log_prob = jnp.log(jnp.array([0.5, 0.9, 0.21, 0.3]))
    old = jnp.log(jnp.array([0.4, 0.5, 0.25, 0.3]))
    adv = jnp.array([1.0, 2.0, -1.0, 3.0])
    eps = 0.2
    # ratios 1.25, 1.8, 0.84, 1.0
    terms = [min(1.25 * 1.0, 1.2 * 1.0), min(1.8 * 2.0, 1.2 * 2.0), min(0.84 * -1.0, 0.84 * -1.0), 3.0]
    loss, clip_frac, approx_kl = clipped_surrogate_loss(log_prob, old, adv, eps)
    assert float(loss) == pytest.approx(-np.mean(terms), rel=1e-6)
    assert float(clip_frac) == pytest.approx(2 / 4)  # 1.25 and 1.8 lie outside [0.8, 1.2]
    r = np.array([1.25, 1.8, 0.84, 1.0])
    assert float(approx_kl) == pytest.approx(np.mean(r - 1 - np.log(r)), rel=1e-5)


def test_value_loss_is_half_mse():
    assert float(value_loss(jnp.array([1.0, 3.0]), jnp.array([0.0, 1.0]))) == pytest.approx(0.5 * (1 + 4) / 2)


def test_actor_loss_normalises_weights_and_adds_entropy():
    logits = jnp.array([[0.0, 1.0], [2.0, -1.0], [0.5, 0.5]])
    actions = jnp.array([1, 0, 1])
    adv = jnp.array([1.0, -2.0, 4.0])
    weight = jnp.array([1.0, 0.5, 1.5])
    old = jnp.log(jnp.array([0.6, 0.9, 0.4]))

    def apply(params, obs):
        del obs
        return D.Dist(params, jnp.zeros_like(params)), None

    batch = {"obs": jnp.zeros((3, 1)), "action": actions, "old_log_prob": old, "advantage": adv, "adv_weight": weight}
    loss, metrics = actor_loss(logits, apply, batch, 0.2, 0.01, discrete=True, normalize=True)

    p = np.exp(np.asarray(logits)) / np.exp(np.asarray(logits)).sum(1, keepdims=True)
    ratio = p[np.arange(3), np.asarray(actions)] / np.exp(np.asarray(old))
    a = (np.asarray(adv) - adv.mean()) / (np.asarray(adv).std() + 1e-8) * np.asarray(weight)
    surrogate = np.minimum(ratio * a, np.clip(ratio, 0.8, 1.2) * a)
    entropy = -(p * np.log(p)).sum(1).mean()
    assert float(metrics["entropy"]) == pytest.approx(entropy, rel=1e-5)
    assert float(loss) == pytest.approx(-surrogate.mean() - 0.01 * entropy, rel=1e-5)


def test_normalize_advantages_and_schedules():
    a = normalize_advantages(jnp.array([1.0, 2.0, 3.0]))
    np.testing.assert_allclose(a, np.array([-1.0, 0.0, 1.0]) / np.sqrt(2 / 3), rtol=1e-5)  # population std
    # One row is left as it is (SB3 and the authors' code skip it), not standardised to 0.
    np.testing.assert_array_equal(normalize_advantages(jnp.array([2.5])), np.array([2.5]))
    assert float(linear_schedule(1e-3, 0.25, "linear")) == pytest.approx(2.5e-4)
    assert linear_schedule(1e-3, 0.25, "constant") == 1e-3


def test_ppo_update_full_batch_epochs_are_hand_computed_gradient_steps():
    """One whole-rollout minibatch per epoch (batch_size = n), plain SGD, no clipping in reach:
    each epoch is W <- W + lr mean_i A_i r_i x_i (e_{a_i} - p_i)^T for the linear-softmax actor
    and v <- v - lr vf_coef mean_i x_i (x_i v - G_i) for the linear critic."""
    rng = np.random.default_rng(0)
    n, d, k, lr, vf_coef = 6, 3, 2, 0.1, 0.5
    x = rng.normal(size=(n, d)).astype(np.float32)
    a = rng.integers(0, k, n)
    adv, ret = rng.normal(size=n).astype(np.float32), rng.normal(size=n).astype(np.float32)
    old = np.log(rng.uniform(0.2, 0.8, n)).astype(np.float32)
    w0, v0 = rng.normal(size=(d, k)).astype(np.float32) * 0.3, rng.normal(size=d).astype(np.float32)
    batch = {"obs": jnp.asarray(x), "action": jnp.asarray(a), "old_log_prob": jnp.asarray(old),
             "advantage": jnp.asarray(adv), "return": jnp.asarray(ret), "adv_weight": jnp.ones(n)}
    tx = optax.sgd(lr)
    state = PPOState({"w": jnp.asarray(w0)}, {"v": jnp.asarray(v0)}, tx.init({"w": w0}), tx.init({"v": v0}))
    new, metrics = ppo_update(
        jax.random.PRNGKey(0), state, batch, actor_apply=lambda p, o: (D.logits_dist(o @ p["w"]), None),
        critic_apply=lambda p, o: o @ p["v"], tx=tx, n_epochs=2, batch_size=n, clip_range=1e6, ent_coef=0.0,
        vf_coef=vf_coef, discrete=True, normalize_advantage=False)
    w, v, value_losses = w0.astype(np.float64), v0.astype(np.float64), []
    for _ in range(2):
        p = np.exp(x @ w) / np.exp(x @ w).sum(1, keepdims=True)
        ratio = p[np.arange(n), a] / np.exp(old)
        value_losses.append(0.5 * np.mean((x @ v - ret) ** 2))
        w = w + lr * np.einsum("i,id,ik->dk", adv * ratio, x, np.eye(k)[a] - p) / n
        v = v - lr * vf_coef * x.T @ (x @ v - ret) / n
    np.testing.assert_allclose(new.actor_params["w"], w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(new.critic_params["v"], v, rtol=1e-5, atol=1e-6)
    assert float(metrics["value_loss"]) == pytest.approx(np.mean(value_losses), rel=1e-5)


@pytest.mark.parametrize("max_grad_norm", [1.0, float("inf")])
def test_clipped_adam_two_steps_by_hand(max_grad_norm):
    """Global-norm clip (none when infinite), then Adam (b1 = 0.9, b2 = 0.999, bias-corrected,
    the given eps) times -lr. The first gradient has norm 5, the second 0.5."""
    lr, eps = 0.01, 0.1
    grads = [np.array([3.0, -4.0]), np.array([0.3, 0.4])]
    tx = clipped_adam(lr, eps, max_grad_norm)
    params = jnp.zeros(2)
    state = tx.init(params)
    m, v, want = np.zeros(2), np.zeros(2), np.zeros(2)
    for t, g in enumerate(grads, start=1):
        updates, state = tx.update(jnp.asarray(g), state, params)
        params = optax.apply_updates(params, updates)
        g = g * min(1.0, max_grad_norm / np.linalg.norm(g))
        m, v = 0.9 * m + 0.1 * g, 0.999 * v + 0.001 * g**2
        want = want - lr * (m / (1 - 0.9**t)) / (np.sqrt(v / (1 - 0.999**t)) + eps)
    np.testing.assert_allclose(params, want, rtol=1e-5)


def test_clip_action_to_bounds_or_unchanged():
    low, high = np.array([-1.0, 0.0]), np.array([1.0, 2.0])
    action = jnp.array([[-3.0, 1.0], [0.5, 5.0]])
    np.testing.assert_array_equal(D.clip_action(action, low, high), [[-1.0, 1.0], [0.5, 2.0]])
    np.testing.assert_array_equal(D.clip_action(action, None, None), action)  # clipping off
    assert D.clip_action(jnp.array(7), None, None) == 7  # a discrete action


def test_gaussian_log_prob_and_entropy_closed_form():
    dist = D.Dist(jnp.array([0.5, -1.0]), jnp.array([2.0, 0.3]))
    a = jnp.array([1.0, 0.0])
    expected = sum(-0.5 * ((x - m) / s) ** 2 - math.log(s) - 0.5 * math.log(2 * math.pi)
                   for x, m, s in [(1.0, 0.5, 2.0), (0.0, -1.0, 0.3)])
    assert float(D.log_prob(dist, a, discrete=False)) == pytest.approx(expected, rel=1e-6)
    expected_h = sum(0.5 * math.log(2 * math.pi * math.e * s**2) for s in (2.0, 0.3))
    assert float(D.entropy(dist, discrete=False)) == pytest.approx(expected_h, rel=1e-6)
    assert float(D.log_prob(D.logits_dist(jnp.log(jnp.array([0.2, 0.8]))), jnp.array(1), True)) == pytest.approx(
        math.log(0.8), rel=1e-6)


def test_gsde_noise_shapes_and_resampling_frequency():
    n_envs, latent_dim, act_dim, freq, steps = 3, 5, 2, 4, 12
    log_std = jnp.full((latent_dim, act_dim), -0.5)
    latent = jax.random.normal(jax.random.PRNGKey(1), (n_envs, latent_dim))  # fixed features: noise = latent @ E
    dist = D.Dist(jnp.zeros((n_envs, act_dim)), D.sde_scale(latent, log_std))
    matrices = jnp.zeros((n_envs, latent_dim, act_dim))
    noises = []
    for t, key in enumerate(jax.random.split(jax.random.PRNGKey(0), steps)):
        action, matrices = D.gsde_action(key, dist, latent, matrices, log_std, t, freq)
        assert action.shape == (n_envs, act_dim) and matrices.shape == (n_envs, latent_dim, act_dim)
        noises.append(np.asarray(action))
    noises = np.stack(noises)
    for t in range(1, steps):
        same = np.allclose(noises[t], noises[t - 1])
        assert same == (t % freq != 0), t  # constant within a block of `freq` steps, new at block starts
    assert not np.allclose(noises[0, 0], noises[0, 1])  # one matrix per environment

    # sde_sample_freq = -1: one draw at the start of the rollout only.
    matrices = jnp.zeros_like(matrices)
    keys = jax.random.split(jax.random.PRNGKey(2), 3)
    firsts = [D.gsde_action(k, dist, latent, matrices, log_std, t, -1) for t, k in enumerate(keys)]
    assert not np.allclose(firsts[0][1], 0.0) and np.allclose(firsts[1][1], 0.0)


def test_gsde_noise_variance_matches_state_dependent_std():
    latent = jnp.array([[1.0, -2.0, 0.5]])
    log_std = jnp.log(jnp.array([[0.3, 1.0], [0.2, 0.5], [1.5, 0.1]]))
    keys = jax.random.split(jax.random.PRNGKey(0), 20000)
    noise = jax.vmap(lambda k: D.sde_noise(latent, D.sample_exploration_matrices(k, log_std, 1)))(keys)[:, 0]
    expected_std = np.sqrt((np.asarray(latent) ** 2) @ np.exp(np.asarray(log_std)) ** 2)[0]
    np.testing.assert_allclose(np.asarray(noise).std(0), expected_std, rtol=0.03)
    np.testing.assert_allclose(D.sde_scale(latent, log_std)[0], np.sqrt(expected_std**2 + D.SDE_EPS), rtol=1e-6)


def test_running_stats_match_numpy_and_normalise():
    rng = np.random.default_rng(0)
    batches = [rng.normal(3.0, 2.0, size=(7, 2)).astype(np.float32) for _ in range(5)]
    stats = init_stats(2)
    for b in batches:
        stats = update_stats(stats, jnp.asarray(b))
    data = np.concatenate(batches)
    np.testing.assert_allclose(stats.mean, data.mean(0), rtol=1e-4)
    np.testing.assert_allclose(stats.var, data.var(0), rtol=1e-3)
    x = jnp.array([[3.0, 100.0]])
    z = normalize(stats, x)
    assert float(z[0, 0]) == pytest.approx((3.0 - data.mean(0)[0]) / data.std(0)[0], rel=1e-3)
    assert float(z[0, 1]) == 10.0  # clipped
