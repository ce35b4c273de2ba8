"""bpo.instruments.probe against independent references.

* The oracle: on ShortCorridor and on random MDPs (``bpo.instruments.variance``) the probe's per-state Var_mu,
  Var_pi and their ratio agree with the exact variances of the IS return (``is_return_variance``,
  the dynamic programme ``bpo verify-variance`` reports) within Z standard errors of a sample
  variance (fourth-moment form, as ``bpo.instruments.variance.monte_carlo``), plus a bound on what the horizon
  cuts off (``horizon_tail_bound``).
* mu = pi: with common keys the estimates are identical draw for draw (ratio exactly 1); with
  independent keys the ratio's bootstrap interval contains 1.
* A three-state chain by hand: every segment's eq. (6) estimate (lambda < 1, both truncations, the
  bootstrap at H) is one of the four values an explicit double sum gives for the four action
  sequences, with mu's probabilities; v_ref and the MSE by hand.
* ``probe_statistics`` against a plain-loop NumPy reference; the cost by hand.
"""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bpo.core.distributions import logits_dist
from bpo.instruments import probe as P
from bpo.instruments import variance as V
from envs.functional import ShortCorridorFunctional
from envs.short_corridor import EnvState, optimal_right_probability

Z = 4.0  # |probe - exact| / SE below this counts as agreement for a mean (as tests/test_variance.py)
# A sample variance's z has a heavier left tail: a low draw also lowers its own fourth-moment SE.
# 36 reseeded random-MDP tests (12 key seeds x 3 MDPs) gave z down to -4.13 (one test over 4), so
# single variances and ratios get 5 SE; a systematic error is caught by the mean z over a case's
# states (independent draws: sd about 0.5; at most 1.6 in 48 reseeded cases), which must stay within 2.5.
Z_VAR, Z_POOLED = 5.0, 2.5
HORIZON = 128
K_RANDOM = 1000  # segments per state and policy on the 5-state random MDPs
K_CORRIDOR = 2000  # on ShortCorridor's 3 cells (tabular, mu-hat)
K_CORRIDOR_OWN = 4000  # its own environment: mu = 0.62 has heavier tails (fourth-moment radius 0.89)
ORACLE = P.ProbeReturns(gamma=0.0, lam=1.0, rho_bar=math.inf, c_bar=math.inf)  # gamma set per MDP


@functools.partial(jax.jit, static_argnames=("k", "horizon"))
def tabular_probe(key, key_mu, mdp_P, mdp_R, starts, pi, mu, base, returns, *, k, horizon):
    """The probe on ``bpo.instruments.probe.TabularEnv`` from the start states ``starts`` (indices, t = 0); the
    MDP's arrays are arguments, so one compilation serves every MDP of a shape."""
    env = P.TabularEnv(mdp_P, mdp_R, jnp.full(mdp_R.shape[0], 1.0 / mdp_R.shape[0]))
    states = P.TabularState(starts, jnp.zeros_like(starts))
    obs = jax.vmap(env.observation)(states)
    return P.probe_segments(key, env, states, obs, P.tabular_policy(pi), P.tabular_policy(mu), P.tabular_value(base),
                            returns, horizon=horizon, k=k, discrete=True, key_mu=key_mu)


@functools.partial(jax.jit, static_argnames=("k", "horizon"))
def corridor_probe(key, p_pi, p_mu, base, returns, *, k, horizon):
    """The probe on ShortCorridor's own JAX environment from cells 0, 1, 2: the observation is the
    same everywhere, so the policies are state-independent and the value function a constant."""
    env = ShortCorridorFunctional()
    states = EnvState(jnp.arange(3, dtype=jnp.int32), jnp.zeros(3, jnp.int32))
    obs = jnp.ones((3, 1), jnp.float32)
    policy = lambda p: lambda _obs: logits_dist(jnp.log(jnp.stack([1.0 - p, p])))  # noqa: E731
    return P.probe_segments(key, env, states, obs, policy(p_pi), policy(p_mu), lambda _obs: base, returns,
                            horizon=horizon, k=k, discrete=True)


def horizon_tail_bound(mdp, pi, mu, base, horizon):
    """What cutting the segments at H can change in the variance. The probe's estimate is the full
    return minus Y = gamma^H rho_{0:H-1} (G_H - b(S_H)) (it bootstraps b(S_H) where G_H would
    follow). E_mu[Y^2 | S_0] = (K^H f)(S_0) with K = gamma^2 sum_a pi^2/mu P (each step's squared
    weight) and f = E[(G_H - b)^2 | S_H] = J_mu + (v_pi - b)^2. Since sd(X - Y) is within sd(Y) of
    sd(X), |Var_probe - J_mu| <= 2 sqrt(J_mu E[Y^2]) + E[Y^2]."""
    v, _ = V.policy_evaluation(mdp, pi)
    J = V.is_return_variance(mdp, pi, mu, base)
    K = mdp.gamma**2 * np.einsum("sa,sat->st", pi**2 / mu, mdp.P)
    y2 = np.linalg.matrix_power(K, horizon) @ (J + (v - base) ** 2)
    return 2.0 * np.sqrt(J * y2) + y2


def fourth_moment_radius(mdp, pi, mu):
    """Spectral radius of gamma^4 sum_a pi^4/mu^3 P: below 1 the IS return has a finite fourth
    moment, so the standard error of a sample variance means something."""
    return np.max(np.abs(np.linalg.eigvals(mdp.gamma**4 * np.einsum("sa,sat->st", pi**4 / mu**3, mdp.P))))


def expected_length(mdp, policy, horizon=HORIZON):
    """E[min(L, H)], the expected steps of a segment inside its episode from each state: the sum
    over t < H of P(the episode is still running at step t) = P_policy^t 1."""
    step = np.einsum("sa,sat->st", policy, mdp.P)
    alive, total = np.ones(len(mdp.p0)), np.zeros(len(mdp.p0))
    for _ in range(horizon):
        total, alive = total + alive, step @ alive
    return total


def z_of_mean(x, exact):
    """(mean - exact) / SE of the mean, per state (rows of x)."""
    return (np.mean(x, axis=1) - exact) / (np.std(x, axis=1, ddof=1) / np.sqrt(x.shape[1]))


def oracle_row(est, mdp, pi, mu, base) -> dict:
    """The probe's per-state Var_mu, Var_pi and ratio against the exact ones, in standard errors;
    also the mean estimate (Theorem 1: v_pi), the mean episode length in a segment (the end of an
    episode is where a segment stops) and the mean segment weight (an untruncated likelihood ratio
    of whole episodes: its mean under mu is 1)."""
    J_mu, J_pi = V.is_return_variance(mdp, pi, mu, base), V.is_return_variance(mdp, pi, pi)
    tail_mu, tail_pi = horizon_tail_bound(mdp, pi, mu, base, HORIZON), horizon_tail_bound(mdp, pi, pi, base, HORIZON)
    s = P.per_state_statistics(est.mu.estimate, est.pi.estimate, np.zeros(len(J_mu)))
    ratio = s["var_ratio"]
    ratio_se = ratio * np.hypot(s["var_mu_se"] / s["var_mu"], s["var_pi_se"] / s["var_pi"])  # independent draws
    return {"exact_ratio": J_mu / J_pi, "probe_ratio": ratio,
            "z_mu": (s["var_mu"] - J_mu) / s["var_mu_se"], "z_pi": (s["var_pi"] - J_pi) / s["var_pi_se"],
            "z_ratio": (ratio - J_mu / J_pi) / ratio_se, "tail_in_se": np.maximum(tail_mu / s["var_mu_se"],
                                                                                   tail_pi / s["var_pi_se"]),
            "rel_se": np.maximum(s["var_mu_se"] / J_mu, s["var_pi_se"] / J_pi),
            "mean_z": z_of_mean(est.mu.estimate, V.policy_evaluation(mdp, pi)[0]),
            "steps_z_mu": z_of_mean(est.mu.steps, expected_length(mdp, mu)),
            "steps_z_pi": z_of_mean(est.pi.steps, expected_length(mdp, pi)),
            "weight_z": z_of_mean(np.exp(est.mu.log_weight), 1.0)}


def assert_agrees(row, case):
    assert np.all(row["tail_in_se"] < 0.1), (case, row)  # the horizon's cut is negligible
    # Resolution: SE below 7-10 % of the variance, so a variance off by half in one state fails, and
    # one off by a fifth to a quarter in every state (a wrong formula) fails the pooled check.
    assert np.all(row["rel_se"] < 0.1), (case, row)
    for name in ("z_mu", "z_pi", "z_ratio"):
        assert np.all(np.abs(row[name]) < Z_VAR) and abs(np.mean(row[name])) < Z_POOLED, (case, name, row)
    for name in ("mean_z", "steps_z_mu", "steps_z_pi", "weight_z"):
        assert np.all(np.abs(row[name]) < Z), (case, name, row)


def random_case(seed):
    """A random MDP with mu-hat (eq. 5) and a bad mu (towards pi / sqrt(q-hat), away from mu-hat)."""
    mdp, pi = V.random_mdp(seed)
    v, q = V.policy_evaluation(mdp, pi)
    qh = V.q_hat(mdp, pi, q)
    away = pi / np.sqrt(qh)
    bad = 0.3 * pi + 0.7 * away / away.sum(axis=1, keepdims=True)
    return mdp, pi, v, V.mu_hat(pi, qh), bad


def run_tabular(seed, mdp, pi, mu, base, k):
    returns = ORACLE._replace(gamma=mdp.gamma)
    starts = jnp.arange(len(mdp.p0), dtype=jnp.int32)
    key_pi, key_mu = jax.random.split(jax.random.PRNGKey(seed))
    out = tabular_probe(key_pi, key_mu, mdp.P, mdp.R, starts, pi, mu, base, returns, k=k, horizon=HORIZON)
    return jax.tree.map(np.asarray, out)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_oracle_random_mdps(seed):
    mdp, pi, v, mu_hat, bad = random_case(seed)
    for name, mu in (("mu_hat", mu_hat), ("bad", bad)):
        assert fourth_moment_radius(mdp, pi, mu) < 1.0
        for base_name, base in (("b=0", np.zeros_like(v)), ("b=v_pi", v)):
            row = oracle_row(run_tabular(seed, mdp, pi, mu, base, K_RANDOM), mdp, pi, mu, base)
            assert_agrees(row, (mdp.name, name, base_name))
    # The cases are distinguishable at this resolution: mu-hat lowers, the bad mu raises every variance.
    assert np.all(V.is_return_variance(mdp, pi, mu_hat) < V.is_return_variance(mdp, pi, pi))
    assert np.all(V.is_return_variance(mdp, pi, bad) > 1.03 * V.is_return_variance(mdp, pi, pi))


def test_oracle_short_corridor_tabular_mu_hat():
    """ShortCorridor at the optimal pi with the state-dependent mu-hat; both baselines. With b = 0
    mu-hat cuts the variance 20-fold or more, with b = v_pi it raises it by half (docs/choices.md,
    "Theorem 2 and the value term of eq. (6)"): the probe sees both, and a probe that confused the
    two baselines would be off by dozens of standard errors."""
    mdp = V.short_corridor_mdp(0.99)
    pi = V.state_independent(optimal_right_probability())
    v, q = V.policy_evaluation(mdp, pi)
    mu = V.mu_hat(pi, V.q_hat(mdp, pi, q))
    assert fourth_moment_radius(mdp, pi, mu) < 1.0
    rows = {}
    for name, base in (("zero", np.zeros(3)), ("v_pi", v)):
        rows[name] = oracle_row(run_tabular(0, mdp, pi, mu, base, K_CORRIDOR), mdp, pi, mu, base)
        assert_agrees(rows[name], name)
    assert np.all(rows["zero"]["probe_ratio"] < 0.1) and np.all(rows["v_pi"]["probe_ratio"] > 1.3)
    assert np.all(np.abs(rows["v_pi"]["probe_ratio"] - rows["zero"]["exact_ratio"]) > 20 * rows["zero"]["probe_ratio"])


def test_oracle_short_corridor_own_environment():
    """ShortCorridor's own JAX environment (state (cell, t), one observation everywhere): pi at the
    optimum, mu going right with probability 0.62; value 0, and the constant v_pi(cell 0) (the best
    a critic that cannot tell the cells apart can do at the start)."""
    mdp = V.short_corridor_mdp(0.99)
    p = optimal_right_probability()
    pi, mu = V.state_independent(p), V.state_independent(0.62)
    v, _ = V.policy_evaluation(mdp, pi)
    assert fourth_moment_radius(mdp, pi, mu) < 1.0
    returns = ORACLE._replace(gamma=mdp.gamma)
    for base in (0.0, float(v[0])):
        out = corridor_probe(jax.random.PRNGKey(1), p, 0.62, jnp.float32(base), returns, k=K_CORRIDOR_OWN,
                             horizon=HORIZON)
        row = oracle_row(jax.tree.map(np.asarray, out), mdp, pi, mu, np.full(3, base))
        assert_agrees(row, base)
        assert np.all(row["exact_ratio"] > 1.0)  # worse than pi in every cell, with either baseline


def test_mu_equal_pi_common_keys_is_identical_and_ratio_exactly_one():
    mdp, pi, v, _, _ = random_case(0)
    returns = P.ProbeReturns(mdp.gamma, 0.9, 1.0, 1.0)
    key = jax.random.PRNGKey(3)
    out = tabular_probe(key, key, mdp.P, mdp.R, jnp.arange(5, dtype=jnp.int32), pi, pi.copy(), v, returns,
                        k=K_RANDOM, horizon=HORIZON)
    np.testing.assert_array_equal(out.mu.estimate, out.pi.estimate)
    np.testing.assert_array_equal(out.mu.log_weight, 0.0)
    stats = P.probe_statistics(out.mu.estimate, out.pi.estimate, v, out.mu.log_weight, n_boot=200)
    for name in ("var_ratio", "mse_ratio"):
        assert stats[f"{name}_median"] == stats[f"{name}_lo"] == stats[f"{name}_hi"] == 1.0
    assert stats["frac_var_mu_lower"] == 0.0 and stats["ess_median"] == stats["ess_min"] == K_RANDOM


def test_mu_equal_pi_independent_keys_ratio_one_within_interval():
    mdp, pi, v, _, _ = random_case(0)
    returns = P.ProbeReturns(mdp.gamma, 0.9, 1.0, 1.0)
    out = tabular_probe(*jax.random.split(jax.random.PRNGKey(4)), mdp.P, mdp.R, jnp.arange(5, dtype=jnp.int32), pi,
                        pi.copy(), v, returns, k=K_RANDOM, horizon=HORIZON)
    assert not np.array_equal(out.mu.estimate, out.pi.estimate)
    stats = P.probe_statistics(out.mu.estimate, out.pi.estimate, v, out.mu.log_weight, n_boot=500)
    for name in ("var_ratio", "mse_ratio"):
        assert stats[f"{name}_lo"] <= 1.0 <= stats[f"{name}_hi"], stats
        assert stats[f"{name}_hi"] - stats[f"{name}_lo"] < 0.3  # an interval that could exclude 1


# -- a three-state chain by hand -------------------------------------------------------------------

CHAIN_P = np.zeros((3, 2, 3))
CHAIN_P[0, :, 1] = CHAIN_P[1, :, 2] = 1.0  # 0 -> 1 -> 2 -> end, whatever the action
CHAIN_R = np.array([[1.0, -2.0], [0.5, 3.0], [2.0, -1.0]])
CHAIN_PI = np.tile([0.3, 0.7], (3, 1))
CHAIN_MU = np.tile([0.6, 0.4], (3, 1))
CHAIN_V = np.array([0.5, -1.0, 1.5])  # a value function, not v_pi
CHAIN = P.ProbeReturns(gamma=0.9, lam=0.5, rho_bar=1.5, c_bar=1.0)  # rho 0.7/0.4 = 1.75 is cut to 1.5
SEQUENCES = [(a0, a1) for a0 in (0, 1) for a1 in (0, 1)]
K_CHAIN = 4000


def chain_eq6(actions, behaviour, ret):
    """Eq. (6) from state 0 over the steps ``actions`` (H = 2, so v(s_2) is bootstrapped), written
    out as the double sum G = v(s_0) + sum_k (gamma lam)^k (prod_{i<k} c_i) rho_k delta_k with
    delta_k = r_k + gamma v(s_{k+1}) - v(s_k). Also returns prod_k min(c_bar, pi/mu), the weight."""
    g, trace, weight = CHAIN_V[0], 1.0, 1.0
    for k, a in enumerate(actions):
        ratio = CHAIN_PI[k, a] / behaviour[k, a]
        delta = CHAIN_R[k, a] + ret.gamma * CHAIN_V[k + 1] - CHAIN_V[k]
        g += (ret.gamma * ret.lam) ** k * trace * min(ret.rho_bar, ratio) * delta
        trace *= min(ret.c_bar, ratio)
        weight *= min(ret.c_bar, ratio)
    return g, weight


@pytest.fixture(scope="module")
def chain_run():
    out = tabular_probe(*jax.random.split(jax.random.PRNGKey(5)), CHAIN_P, CHAIN_R, jnp.zeros(1, jnp.int32), CHAIN_PI,
                        CHAIN_MU, CHAIN_V, CHAIN, k=K_CHAIN, horizon=2)
    return jax.tree.map(lambda x: np.asarray(x)[0], out)


def match(est, values):
    """Index of the hand value each estimate equals (to float32 rounding)."""
    which = np.argmin(np.abs(est[:, None] - values[None]), axis=1)
    np.testing.assert_allclose(est, values[which], atol=1e-5)
    return which


def test_chain_segments_are_eq6_by_hand(chain_run):
    """Each of mu's segments is one of the four hand values of its action sequences (lambda = 0.5,
    rho_bar and c_bar cutting, the bootstrap at H), drawn with mu's probabilities, with weight
    prod min(c_bar, pi/mu); pi's segments are the same sum with unit ratios and pi's probabilities."""
    on_policy = P.ProbeReturns(CHAIN.gamma, CHAIN.lam, math.inf, math.inf)
    for seg, behaviour, ret in ((chain_run.mu, CHAIN_MU, CHAIN), (chain_run.pi, CHAIN_PI, on_policy)):
        hand = [chain_eq6(s, behaviour, ret) for s in SEQUENCES]
        values = np.array([g for g, _ in hand])
        assert np.min(np.abs(np.subtract.outer(values, values)) + np.eye(4)) > 0.05  # four distinct values
        which = match(seg.estimate, values)
        prob = np.array([behaviour[0, a0] * behaviour[1, a1] for a0, a1 in SEQUENCES])
        freq = np.bincount(which, minlength=4) / K_CHAIN
        assert np.all(np.abs(freq - prob) < Z * np.sqrt(prob * (1 - prob) / K_CHAIN)), (freq, prob)
        np.testing.assert_allclose(np.exp(seg.log_weight), np.array([w for _, w in hand])[which], rtol=1e-5)
        assert not np.any(seg.ended) and np.all(seg.steps == 2)


def test_chain_mse_by_hand(chain_run):
    """MSE_mu = E_mu[(G - v_pi)^2], summed over the four sequences by hand (bias included: G
    bootstraps a value function that is not v_pi), against the probe's within its SE."""
    v_pi = sum(CHAIN.gamma**k * CHAIN_PI[k] @ CHAIN_R[k] for k in range(3))
    stats = P.per_state_statistics(chain_run.mu.estimate[None], chain_run.pi.estimate[None], np.array([v_pi]))
    for seg, behaviour, name in ((chain_run.mu, CHAIN_MU, "mse_mu"), (chain_run.pi, CHAIN_PI, "mse_pi")):
        ret = CHAIN if name == "mse_mu" else P.ProbeReturns(CHAIN.gamma, CHAIN.lam, math.inf, math.inf)
        values = np.array([chain_eq6(s, behaviour, ret)[0] for s in SEQUENCES])
        prob = np.array([behaviour[0, a0] * behaviour[1, a1] for a0, a1 in SEQUENCES])
        exact = prob @ (values - v_pi) ** 2
        se = np.std((seg.estimate - v_pi) ** 2) / np.sqrt(K_CHAIN)
        assert abs(stats[name][0] - exact) < Z * se, (name, stats[name], exact, se)
        assert se < 0.05 * exact


@jax.jit
def chain_reference(key, mdp_P, rewards):
    """reference_values from state 0 over H = 2 steps, without and with the bootstrap at H."""
    env = P.TabularEnv(mdp_P, rewards, np.eye(3)[0])
    states = P.TabularState(jnp.zeros(1, jnp.int32), jnp.zeros(1, jnp.int32))
    obs = jax.vmap(env.observation)(states)
    kw = dict(gamma=CHAIN.gamma, horizon=2, k=500, discrete=True)
    return (P.reference_values(key, env, states, obs, P.tabular_policy(CHAIN_PI), **kw),
            P.reference_values(key, env, states, obs, P.tabular_policy(CHAIN_PI), value=P.tabular_value(CHAIN_V), **kw))


def test_reference_values_by_hand():
    """Rewards that do not depend on the action make every return the same number: v_ref is exact.
    The three-state chain outlives H = 2: without a bootstrap v_ref is r_0 + gamma r_1, with one
    it adds gamma^2 v(s_2). A two-state chain ends within H: both are the whole return. With
    action-dependent rewards v_ref is v_pi within its standard error."""
    flat = np.array([[1.0, 1.0], [0.5, 0.5], [2.0, 2.0]])
    short = CHAIN_P.copy()
    short[1] = 0.0  # state 1 ends the episode
    g = CHAIN.gamma
    for mdp_P, plain, boot, ended in ((CHAIN_P, 1.0 + g * 0.5, 1.0 + g * 0.5 + g**2 * CHAIN_V[2], 0.0),
                                      (short, 1.0 + g * 0.5, 1.0 + g * 0.5, 1.0)):
        no_boot, with_boot = chain_reference(jax.random.PRNGKey(6), mdp_P, flat)
        np.testing.assert_allclose([no_boot.mean[0], with_boot.mean[0]], [plain, boot], rtol=1e-6)
        np.testing.assert_allclose([no_boot.se[0], no_boot.ended_frac[0], with_boot.ended_frac[0]], [0.0, ended, ended],
                                   atol=1e-6)
    no_boot, _ = chain_reference(jax.random.PRNGKey(7), short, CHAIN_R)
    v_pi = CHAIN_PI[0] @ CHAIN_R[0] + g * CHAIN_PI[1] @ CHAIN_R[1]
    assert abs(no_boot.mean[0] - v_pi) < Z * no_boot.se[0] and 0.05 < no_boot.se[0] < 0.2


# -- statistics, cost ------------------------------------------------------------------------------

def loop_statistics(est_mu, est_pi, v_ref, v_ref_se, log_w, n_boot, level, seed):
    """probe_statistics written with plain loops (the bootstrap draws the same indices)."""
    m, k = est_mu.shape
    per = {key: [] for key in ("var_mu", "var_pi", "mse_mu", "mse_pi", "ess")}
    for i in range(m):
        for name, est in (("mu", est_mu[i]), ("pi", est_pi[i])):
            mean = sum(est) / k
            per[f"var_{name}"].append(sum((x - mean) ** 2 for x in est) / (k - 1))
            per[f"mse_{name}"].append(sum((x - v_ref[i]) ** 2 for x in est) / k)
        w = [math.exp(x) for x in log_w[i]]
        per["ess"].append(sum(w) ** 2 / sum(x * x for x in w))
    rng = np.random.default_rng(seed)
    out = {}
    for name in ("var", "mse"):
        ratios = []
        for a, b in zip(per[f"{name}_mu"], per[f"{name}_pi"], strict=True):
            if b > 0:
                ratios.append(a / b)
            elif a > 0:
                ratios.append(math.inf)
        idx = rng.integers(0, len(ratios), size=(n_boot, len(ratios)))
        medians = sorted(float(np.median([ratios[j] for j in row])) for row in idx)
        # Percentile by the inverted empirical CDF: the smallest resampled median with CDF >= p.
        lo = medians[math.ceil((1 - level) / 2 * n_boot) - 1]
        hi = medians[math.ceil((1 + level) / 2 * n_boot) - 1]
        out.update({f"{name}_ratio_median": float(np.median(ratios)), f"{name}_ratio_lo": lo,
                    f"{name}_ratio_hi": hi, f"{name}_ratio_states": len(ratios),
                    f"frac_{name}_mu_lower": sum(a < b for a, b in zip(per[f"{name}_mu"], per[f"{name}_pi"],
                                                                       strict=True)) / m})
    out.update({"ess_median": float(np.median(per["ess"])), "ess_min": min(per["ess"]),
                "ess_frac_mean": sum(per["ess"]) / m / k,
                "ref_noise_share_median": float(np.median([se**2 / mse for se, mse in zip(v_ref_se, per["mse_pi"],
                                                                                            strict=True)]))})
    return out


def test_statistics_match_a_loop_reference():
    rng = np.random.default_rng(0)
    m, k = 12, 9
    est_mu = rng.normal(size=(m, k)) * rng.uniform(0.5, 2.0, size=(m, 1)) + 1.0
    est_pi = rng.normal(size=(m, k)) + 1.0
    est_mu[0], est_pi[0] = 2.0, 2.0  # both constant: no ratio, left out
    est_pi[1] = 1.5  # Var_pi = 0 < Var_mu: ratio inf, counted
    v_ref = rng.normal(size=m)
    log_w = rng.normal(size=(m, k))
    v_ref_se = rng.uniform(0.1, 0.3, size=m)
    got = P.probe_statistics(est_mu, est_pi, v_ref, log_w, v_ref_se, n_boot=300, level=0.9, seed=3)
    want = loop_statistics(est_mu, est_pi, v_ref, v_ref_se, log_w, 300, 0.9, 3)
    assert got["var_ratio_states"] == m - 1 and got["mse_ratio_states"] == m
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=1e-12), key
    assert got["states"] == m and got["segments"] == k


def test_statistics_are_json_ready():
    """Everything undefined is None: every variance 0 (no ratio, no interval), every weight 0."""
    est = np.ones((4, 5))
    got = P.probe_statistics(est, est, np.ones(4), np.full((4, 5), -np.inf), n_boot=10)
    assert got["var_ratio_median"] is None and got["var_ratio_lo"] is None and got["var_ratio_states"] == 0
    assert got["ess_median"] is None and got["frac_var_mu_lower"] == 0.0
    assert all(v is None or isinstance(v, int | float) and math.isfinite(v) for v in got.values())
    assert P.probe_statistics(est, est + np.arange(5), np.ones(4))["ess_median"] is None  # no weights given


def test_kish_ess_and_variance_se():
    w = np.array([[1.0, 1.0, 1.0, 1.0], [4.0, 0.0, 0.0, 0.0], [1.0, 2.0, 3.0, 4.0]])
    with np.errstate(divide="ignore"):
        log_w = np.log(w)
    np.testing.assert_allclose(P.kish_ess(log_w), [4.0, 1.0, 100.0 / 30.0])
    np.testing.assert_allclose(P.kish_ess(log_w + 800.0), P.kish_ess(log_w))  # exp(800) would overflow
    x = np.array([[1.0, 2.0, 4.0, 7.0]])
    dev = x - 3.5
    np.testing.assert_allclose(P.variance_se(x), np.sqrt((np.mean(dev**4) - np.mean(dev**2) ** 2) / 4))


def test_cost_by_hand():
    settings = P.ProbeSettings()
    cost = P.probe_cost(settings, steps_per_s=100_000.0)
    assert cost["probe_steps"] == 2 * 32 * 32 * 256 == 524_288
    assert cost["reference_steps"] == 32 * 128 * 512 == 2_097_152
    assert cost["env_steps"] == 2_621_440 and cost["seconds"] == pytest.approx(26.2144)
    assert cost["policy_evals"] == 3 * 524_288 // 2 + 2_097_152
    line = P.format_cost(settings, cost)
    assert "2,621,440 environment steps" in line and "about 26 s" in line
    assert P.probe_cost(settings)["seconds"] is None
    for bad in ({"k": 1}, {"m": 0}, {"level": 1.0}, {"ref_k": 1}):
        with pytest.raises(ValueError):
            P.ProbeSettings(**bad)


def test_visited_states_are_mu_s_states_with_their_observations():
    mdp, pi, _, _, _ = random_case(0)

    @jax.jit
    def run(key):
        env = P.TabularEnv(mdp.P, mdp.R, mdp.p0)
        states, obs = jax.vmap(env.reset)(jax.random.split(key, 4))
        return P.visited_states(key, env, states, obs, P.tabular_policy(pi), n_steps=50, discrete=True), states

    (seen, obs), first = run(jax.random.PRNGKey(8))
    assert seen.s.shape == (200,) and obs.shape == (200, 6)
    np.testing.assert_array_equal(obs, np.eye(6)[np.asarray(seen.s)])
    np.testing.assert_array_equal(seen.s[:4], first.s)
    assert np.all(seen.s < 5)  # never the terminal state: an ended episode was reset
    assert np.any(seen.t[4:] == 0) and np.any(seen.t > 1)  # episodes ended and restarted, others went on
