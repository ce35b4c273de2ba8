"""tis_lambda_returns against plain-Python references, Lemma 3, PDIS and Theorem 1."""

import math
import zlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bpo.core.returns import gae_returns, pdis_returns, tis_advantages, tis_lambda_returns
from bpo.core.transforms import symexp, symlog

INF = math.inf


@pytest.fixture(autouse=True)
def float64():
    """Exact comparisons against the float64 references; scoped so other tests keep float32."""
    with jax.enable_x64(True):
        yield


def reference_returns(r, v, nv, term, done, log_ratio, gamma, lam, rho_bar, c_bar, mode="per_decision"):
    """Double loop over (t, k) of  G_t = v_t + sum_k (gamma lam)^(k-t) w_{t,k} dtilde_k  for one column."""
    steps = len(r)
    ratio = [math.exp(x) if x < 700 else math.inf for x in log_ratio]  # float64's overflow
    out = []
    for t in range(steps):
        g = v[t]
        for k in range(t, steps):
            dtilde = r[k] + gamma * (1 - term[k]) * nv[k] - v[k]
            if mode == "per_decision":
                w = min(rho_bar, ratio[k])
                for i in range(t, k):
                    w *= min(c_bar, ratio[i])
            elif mode == "traj":
                w = min(c_bar, math.prod(ratio[t : k + 1]))
            else:  # traj_shifted
                w = min(rho_bar, ratio[t]) * min(c_bar, math.prod(ratio[t + 1 : k + 1]))
            g += (gamma * lam) ** (k - t) * w * dtilde
            if done[k]:
                break
        out.append(g)
    return out


def random_batch(rng, steps=14, batch=(3,)):
    shape = (steps,) + batch
    rewards = rng.normal(size=shape)
    values = rng.normal(size=shape)
    next_values = np.concatenate([values[1:], rng.normal(size=(1,) + batch)])
    terminated = (rng.uniform(size=shape) < 0.12).astype(float)
    truncated = (rng.uniform(size=shape) < 0.12).astype(float)
    truncated = truncated * (terminated == 0)
    # One of each at least, set after the masking so that a random termination cannot erase the truncation.
    terminated.reshape(steps, -1)[2, 0], truncated.reshape(steps, -1)[2, 0] = 1.0, 0.0
    terminated.reshape(steps, -1)[5, 0], truncated.reshape(steps, -1)[5, 0] = 0.0, 1.0
    # After a truncation the next value is the real final observation's, not the next row's.
    next_values = np.where(truncated == 1, rng.normal(size=shape), next_values)
    done = np.maximum(terminated, truncated)
    log_ratio = rng.normal(scale=0.6, size=shape)
    return rewards, values, next_values, terminated, done, log_ratio


def columns(x):
    flat = x.reshape(x.shape[0], -1)
    return [flat[:, j] for j in range(flat.shape[1])]


@pytest.mark.parametrize("mode", ["per_decision", "traj", "traj_shifted"])
@pytest.mark.parametrize("rho_bar,c_bar", [(1.0, 1.0), (1.5, 1.0), (1.0, 1.5), (INF, INF), (0.7, 2.0)])
@pytest.mark.parametrize("batch", [(3,), (2, 2)])
def test_tis_matches_double_loop(mode, rho_bar, c_bar, batch):
    # zlib.crc32, not hash(): a string's hash is salted per process, so the data would change per run.
    rng = np.random.default_rng(zlib.crc32(repr((mode, rho_bar, c_bar, batch)).encode()))
    r, v, nv, term, done, lr = random_batch(rng, batch=batch)
    gamma, lam = 0.97, 0.85
    got = tis_lambda_returns(r, v, nv, term, done, lr, gamma=gamma, lam=lam, rho_bar=rho_bar, c_bar=c_bar, traj=mode)
    got_cols = columns(np.asarray(got))
    args = [columns(a) for a in (r, v, nv, term, done, lr)]
    for j, got_col in enumerate(got_cols):
        want = reference_returns(*(a[j] for a in args), gamma, lam, rho_bar, c_bar, mode)
        np.testing.assert_allclose(got_col, want, rtol=1e-9, atol=1e-9)
    assert (done.sum() > 0) and (term.sum() > 0) and ((done - term).sum() > 0)  # both kinds of episode end


@pytest.mark.parametrize("mode", ["per_decision", "traj", "traj_shifted"])
def test_a_ratio_of_zero_cuts_only_its_own_episode(mode):
    """pi(a|s) = 0 (log-ratio -inf) zeroes the weights through that step in its episode and no
    others: the trajectory forms once turned every later entry of the column into NaN."""
    rng = np.random.default_rng(7)
    r, v, nv, term, done, lr = random_batch(rng, batch=(2,))
    first_end = int(np.flatnonzero(done[:, 0])[0])
    lr[first_end - 1 if first_end > 0 else 0, 0] = -np.inf  # in the first episode of column 0
    lr[-1, 1] = -np.inf
    got = np.asarray(tis_lambda_returns(r, v, nv, term, done, lr, gamma=0.97, lam=0.85, rho_bar=1.5, c_bar=1.0,
                                        traj=mode))
    assert np.isfinite(got).all()
    args = [columns(a) for a in (r, v, nv, term, done, lr)]
    for j, got_col in enumerate(columns(got)):
        want = reference_returns(*(a[j] for a in args), 0.97, 0.85, 1.5, 1.0, mode)
        np.testing.assert_allclose(got_col, want, rtol=1e-9, atol=1e-9)


def test_an_overflowing_ratio_at_an_episode_end_does_not_make_nan_with_untruncated_traces():
    """c_bar = inf (Theorem 1's setting): a ratio that overflows to inf on a step that ends its
    episode must cut the trace there (the old product inf * (1 - done) was NaN)."""
    rng = np.random.default_rng(3)
    r, v, nv, term, done, lr = random_batch(rng, batch=(1,))
    end = int(np.flatnonzero(done[:, 0])[0])
    lr[end, 0] = 1000.0  # exp overflows in float64
    got = np.asarray(tis_lambda_returns(r, v, nv, term, done, lr, gamma=0.97, lam=0.85, rho_bar=1.0, c_bar=INF))
    want = reference_returns(*(columns(a)[0] for a in (r, v, nv, term, done, lr)), 0.97, 0.85, 1.0, INF)
    np.testing.assert_allclose(got[:, 0], want, rtol=1e-9, atol=1e-9)


def test_traj_true_is_traj_mode_and_jit_vmap():
    rng = np.random.default_rng(0)
    r, v, nv, term, done, lr = random_batch(rng, batch=(4,))
    kw = dict(gamma=0.9, lam=0.8, rho_bar=1.5, c_bar=1.0)
    a = tis_lambda_returns(r, v, nv, term, done, lr, traj=True, **kw)
    b = tis_lambda_returns(r, v, nv, term, done, lr, traj="traj", **kw)
    np.testing.assert_array_equal(a, b)
    # vmapping over the trailing batch axis and jitting with traced hyperparameters agree.
    f = jax.jit(jax.vmap(lambda *xs: tis_lambda_returns(*xs[:6], gamma=0.9, lam=0.8, rho_bar=1.5, c_bar=xs[6]),
                         in_axes=(1,) * 6 + (None,), out_axes=1))
    np.testing.assert_allclose(f(r, v, nv, term, done, lr, 1.0),
                               tis_lambda_returns(r, v, nv, term, done, lr, **kw), rtol=1e-12)


def reference_gae(r, v, nv, term, done, gamma, lam):
    adv, out = 0.0, [0.0] * len(r)
    for t in reversed(range(len(r))):
        delta = r[t] + gamma * (1 - term[t]) * nv[t] - v[t]
        adv = delta + gamma * lam * (1 - done[t]) * adv
        out[t] = adv + v[t]
    return out


@pytest.mark.parametrize("rho_bar,c_bar", [(1.0, 1.0), (1.5, 1.5), (INF, 2.0)])
def test_lemma3_equals_gae_when_on_policy(rho_bar, c_bar):
    rng = np.random.default_rng(1)
    r, v, nv, term, done, _ = random_batch(rng, batch=(3,))
    zeros = np.zeros_like(r)
    tis = tis_lambda_returns(r, v, nv, term, done, zeros, gamma=0.95, lam=0.9, rho_bar=rho_bar, c_bar=c_bar)
    gae = gae_returns(r, v, nv, term, done, gamma=0.95, lam=0.9)
    np.testing.assert_allclose(tis, gae, rtol=1e-12)
    for j, col in enumerate(columns(np.asarray(gae))):
        want = reference_gae(*(a[:, j] for a in (r, v, nv, term, done)), 0.95, 0.9)
        np.testing.assert_allclose(col, want, rtol=1e-10)


def test_pdis_is_lambda_one_zero_values():
    rng = np.random.default_rng(2)
    r, _, _, term, done, lr = random_batch(rng, batch=(3,))
    gamma = 0.9
    got = pdis_returns(r, term, done, lr, gamma=gamma)
    zeros = np.zeros_like(r)
    same = tis_lambda_returns(r, zeros, zeros, term, done, lr, gamma=gamma, lam=1.0, rho_bar=INF, c_bar=INF)
    np.testing.assert_allclose(got, same, rtol=1e-12)
    # Eq. (1) directly: sum_k gamma^(k-t) prod_{i=t}^{k} rho_i r_k within the episode.
    for j in range(r.shape[1]):
        for t in range(r.shape[0]):
            want, prod = 0.0, 1.0
            for k in range(t, r.shape[0]):
                prod *= math.exp(lr[k, j])
                want += gamma ** (k - t) * prod * r[k, j]
                if done[k, j]:
                    break
            assert got[t, j] == pytest.approx(want, rel=1e-9, abs=1e-9)


def random_episodic_mdp(rng, n_states=4, n_actions=3, p_end=0.25):
    """Transitions P[s, a, s'] with an extra absorbing terminal column, rewards R[s, a]."""
    p = rng.dirichlet(np.ones(n_states), size=(n_states, n_actions)) * (1 - p_end)
    p = np.concatenate([p, np.full((n_states, n_actions, 1), p_end)], axis=-1)
    return p, rng.normal(size=(n_states, n_actions))


def exact_v(p, rew, pi, gamma):
    n = rew.shape[0]
    p_pi = np.einsum("sa,sat->st", pi, p[:, :, :n])
    return np.linalg.solve(np.eye(n) - gamma * p_pi, np.sum(pi * rew, axis=1))


def sample_episodes(rng, p, rew, mu, n_episodes, max_steps):
    """Episodes from state 0 under mu, time-major [max_steps, n_episodes]; truncated at max_steps."""
    n = rew.shape[0]
    shape = (max_steps, n_episodes)
    states = np.zeros(shape, int)
    next_states = np.zeros(shape, int)
    actions = np.zeros(shape, int)
    terminated = np.zeros(shape)
    truncated = np.zeros(shape)
    alive = np.ones(n_episodes, bool)
    s = np.zeros(n_episodes, int)
    for t in range(max_steps):
        a = (rng.uniform(size=n_episodes)[:, None] > np.cumsum(mu[s], axis=1)).sum(axis=1)
        s2 = (rng.uniform(size=n_episodes)[:, None] > np.cumsum(p[s, a], axis=1)).sum(axis=1)
        states[t], actions[t], next_states[t] = s, a, np.minimum(s2, n - 1)
        terminated[t] = alive & (s2 == n)
        truncated[t] = alive & (s2 < n) & (t == max_steps - 1)
        alive &= s2 < n
        s = np.where(alive, s2, 0)
    return states, actions, next_states, terminated, truncated


@pytest.mark.parametrize("lam,max_steps", [(1.0, 60), (0.6, 60), (0.8, 4)])
def test_theorem1_unbiased_off_policy(lam, max_steps):
    """E_mu[G_0] = v_pi(s_0) with rho_bar = c_bar = inf and v = v_pi, including truncated episodes
    that bootstrap from v_pi of the final state."""
    rng = np.random.default_rng(3)
    p, rew = random_episodic_mdp(rng)
    gamma = 0.9
    pi = rng.dirichlet(np.ones(3), size=4)
    mu = rng.dirichlet(np.ones(3) * 2, size=4)
    v = exact_v(p, rew, pi, gamma)
    s, a, s2, term, trunc = sample_episodes(rng, p, rew, mu, 40000, max_steps)
    valid = np.cumsum(np.concatenate([np.zeros((1, s.shape[1])), term[:-1] + trunc[:-1]]), axis=0) == 0
    g = tis_lambda_returns(
        rew[s, a] * valid, v[s] * valid, v[s2] * valid, term, np.maximum(term, trunc),
        np.log(pi[s, a] / mu[s, a]) * valid, gamma=gamma, lam=lam, rho_bar=INF, c_bar=INF,
    )[0]
    g = np.asarray(g)
    se = g.std(ddof=1) / np.sqrt(len(g))
    assert abs(g.mean() - v[0]) < 4 * se, (g.mean(), v[0], se)
    # The same data with the behaviour ratios ignored is biased towards v_mu: the test can fail.
    g_naive = np.asarray(tis_lambda_returns(
        rew[s, a] * valid, v[s] * valid, v[s2] * valid, term, np.maximum(term, trunc), np.zeros_like(g, shape=s.shape),
        gamma=gamma, lam=lam, rho_bar=INF, c_bar=INF)[0])
    assert abs(g_naive.mean() - v[0]) > 4 * se


def test_symexp_inverts_symlog():
    x = jnp.array([-1e6, -123.4, -1.0, -1e-4, 0.0, 1e-4, 0.5, 7.0, 1e6], dtype=jnp.float64)
    np.testing.assert_allclose(symexp(symlog(x)), x, rtol=1e-12)
    np.testing.assert_allclose(symlog(x), np.sign(x) * np.log(np.abs(x) + 1), rtol=1e-12)


@pytest.mark.parametrize("current_rho", [False, True])
def test_tis_advantages_match_loop_and_reduce_to_gae(current_rho):
    rng = np.random.default_rng(4)
    r, v, nv, term, done, lr = random_batch(rng, batch=(3,))
    gamma, lam, kw = 0.95, 0.9, dict(rho_bar=1.5, c_bar=1.0)
    adv, ret = tis_advantages(r, v, nv, term, done, lr, gamma=gamma, lam=lam, current_rho=current_rho, **kw)
    for j in range(r.shape[1]):
        g = reference_returns(r[:, j], v[:, j], nv[:, j], term[:, j], done[:, j], lr[:, j], gamma, lam, 1.5, 1.0)
        np.testing.assert_allclose(ret[:, j], g, rtol=1e-9)
        for t in range(r.shape[0]):
            if current_rho:
                want = g[t] - v[t, j]
            else:
                g_next = nv[t, j] if (done[t, j] or t == r.shape[0] - 1) else g[t + 1]
                want = r[t, j] + gamma * (1 - term[t, j]) * ((1 - lam) * nv[t, j] + lam * g_next) - v[t, j]
            assert adv[t, j] == pytest.approx(want, rel=1e-9, abs=1e-9)
    # On-policy (log ratio 0) both forms are the GAE(lambda) advantage.
    zeros = np.zeros_like(r)
    adv0, _ = tis_advantages(r, v, nv, term, done, zeros, gamma=gamma, lam=lam, current_rho=current_rho, **kw)
    np.testing.assert_allclose(adv0, gae_returns(r, v, nv, term, done, gamma=gamma, lam=lam) - v, rtol=1e-9, atol=1e-12)
