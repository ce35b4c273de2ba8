"""bpo.instruments.variance against independent references: exhaustive trajectory enumeration of a small
acyclic MDP (plain recursion, eq. (6) evaluated term by term), closed forms, and Monte Carlo on
random MDPs; Theorem 2; the verify-variance command's arguments and outputs."""

import json

import numpy as np
import pytest

from bpo.instruments import variance as V
from envs.short_corridor import expected_return, optimal_right_probability
from experiments.cli import main

N_RANDOM = 24
MC_EPISODES = 20_000
Z = 4.0


def dag_mdp(seed: int, S: int = 4, A: int = 2, gamma: float = 0.9):
    """Acyclic: from s only to s' > s or termination, so every trajectory has at most S steps."""
    rng = np.random.default_rng(seed)
    P = np.zeros((S, A, S))
    for s in range(S):
        for a in range(A):
            w = rng.dirichlet(np.ones(S - s))  # next states s+1..S-1, then termination
            P[s, a, s + 1:] = w[:-1]
    R = rng.uniform(-1.0, 2.0, size=(S, A))
    pi = rng.dirichlet(np.full(A, 2.0), size=S)
    mu = rng.dirichlet(np.full(A, 2.0), size=S)
    return V.TabularMDP(P, R, gamma, np.eye(S)[0]), pi, mu


def trajectories(mdp, policy, s, first_action=None):
    """Every trajectory from s as (probability, [(state, action, reward), ...]), by recursion."""
    out = []
    actions = [first_action] if first_action is not None else range(mdp.R.shape[1])
    for a in actions:
        p_a = 1.0 if first_action is not None else policy[s][a]
        if p_a == 0:
            continue
        step = (s, a, mdp.R[s][a])
        p_end = 1.0 - sum(mdp.P[s][a])
        if p_end > 1e-15:
            out.append((p_a * p_end, [step]))
        for s2 in range(len(mdp.p0)):
            if mdp.P[s][a][s2] > 0:
                out += [(p_a * mdp.P[s][a][s2] * p, [step] + rest) for p, rest in trajectories(mdp, policy, s2)]
    return out


def discounted(traj, gamma):
    return sum(gamma**k * r for k, (_, _, r) in enumerate(traj))


def eq6_return(traj, pi, mu, v, gamma):
    """Eq. (6), lambda = 1, c = rho = pi/mu: v(S_0) + sum_k gamma^k (prod_{i<k} c_i) delta_k, with
    delta_k = rho_k (R_{k+1} + gamma v(S_{k+1}) - v(S_k)) and v = 0 after the last step."""
    g, trace = v[traj[0][0]], 1.0
    for k, (s, a, r) in enumerate(traj):
        v_next = v[traj[k + 1][0]] if k + 1 < len(traj) else 0.0
        rho = pi[s][a] / mu[s][a]
        g += gamma**k * trace * rho * (r + gamma * v_next - v[s])
        trace *= rho
    return g


def moments(pairs):
    mean = sum(p * x for p, x in pairs)
    return mean, sum(p * (x - mean) ** 2 for p, x in pairs)


@pytest.mark.parametrize("seed", range(3))
def test_dp_matches_trajectory_enumeration(seed):
    mdp, pi, mu_rand = dag_mdp(seed)
    S, A = mdp.R.shape
    v, q = V.policy_evaluation(mdp, pi)
    qh = V.q_hat(mdp, pi, q)
    ref_v = [sum(p * discounted(t, mdp.gamma) for p, t in trajectories(mdp, pi, s)) for s in range(S)]
    ref_q = [[sum(p * discounted(t, mdp.gamma) for p, t in trajectories(mdp, pi, s, a)) for a in range(A)]
             for s in range(S)]
    # Theorem 3 / Lemma 6: q-hat is the second moment of the return after (s, a).
    ref_qh = [[sum(p * discounted(t, mdp.gamma) ** 2 for p, t in trajectories(mdp, pi, s, a)) for a in range(A)]
              for s in range(S)]
    np.testing.assert_allclose(v, ref_v, atol=1e-12)
    np.testing.assert_allclose(q, ref_q, atol=1e-12)
    np.testing.assert_allclose(qh, ref_qh, atol=1e-12)
    ref_mu_hat = np.array(ref_qh) ** 0.5 * pi
    np.testing.assert_allclose(V.mu_hat(pi, qh), ref_mu_hat / ref_mu_hat.sum(1, keepdims=True), atol=1e-12)
    zero = np.zeros(S)
    for mu in (pi, V.mu_hat(pi, qh), mu_rand):
        for base in (zero, np.array(ref_v)):
            J = V.is_return_variance(mdp, pi, mu, None if base is zero else base)
            for s in range(S):
                mean, var = moments([(p, eq6_return(t, pi, mu, base, mdp.gamma)) for p, t in trajectories(mdp, mu, s)])
                assert mean == pytest.approx(ref_v[s], abs=1e-12)  # Theorem 1
                assert J[s] == pytest.approx(var, rel=1e-10, abs=1e-12)


def test_lemma4_between_action_term_only_fits_the_zero_baseline():
    """Lemma 4 as printed uses E_mu[rho^2 q^2] - v^2, i.e. E[G_t | s, a] = rho q: true for b = 0. With
    b = v_pi (eq. 6 as printed) the enumerated variance differs from it off-policy."""
    mdp, pi, mu = dag_mdp(0)
    v, _ = V.policy_evaluation(mdp, pi)
    lemma4 = V.is_return_variance(mdp, pi, mu)
    _, var_v = moments([(p, eq6_return(t, pi, mu, v, mdp.gamma)) for p, t in trajectories(mdp, mu, 0)])
    assert abs(var_v - lemma4[0]) > 1e-3 * lemma4[0]


def test_short_corridor_model_matches_closed_form_return():
    mdp = V.short_corridor_mdp(gamma=1.0)
    for p in (0.1, 0.3, optimal_right_probability(), 0.9):
        v, _ = V.policy_evaluation(mdp, V.state_independent(p))
        assert v[0] == pytest.approx(expected_return(p), rel=1e-12)
    # Cell 1 reverses the actions; right from cell 2 ends the episode.
    np.testing.assert_array_equal(mdp.P[1, 0], [0, 0, 1])
    np.testing.assert_array_equal(mdp.P[1, 1], [1, 0, 0])
    assert mdp.P[2, 1].sum() == 0 and np.all(mdp.R == -1.0)


@pytest.mark.parametrize("seed", range(N_RANDOM))
def test_theorem2_and_monte_carlo_on_random_mdps(seed):
    mdp, pi = V.random_mdp(seed)
    v, q = V.policy_evaluation(mdp, pi)
    qh = V.q_hat(mdp, pi, q)
    mh = V.mu_hat(pi, qh)
    J_pi, J_hat = V.is_return_variance(mdp, pi, pi), V.is_return_variance(mdp, pi, mh)
    eps = V.theorem2_gap(mdp, pi, qh)
    assert np.all(eps >= 0) and np.all(J_hat <= J_pi + 1e-12)  # Theorem 2, every state
    np.testing.assert_allclose(J_pi - J_hat, eps, atol=1e-12)  # the equality its proof derives
    rng = np.random.default_rng(seed)
    for mu, base in ((pi, None), (mh, None), (mh, v)):
        exact = V.start_variance(mdp, V.is_return_variance(mdp, pi, mu, base), v)
        est = V.monte_carlo(mdp, pi, mu, MC_EPISODES, rng, base)
        assert est.truncated == 0
        assert est.var_se < 0.03 * exact  # resolution: a formula off by a few percent would fail
        assert abs(est.mean - v[0]) < Z * est.mean_se
        assert abs(est.var - exact) < Z * est.var_se


def test_mu_hat_zero_variance_on_a_one_step_problem():
    """One decision, then termination: Var_pi = E_pi[r^2] - E_pi[r]^2; with rewards of one sign mu-hat
    ∝ pi |r| makes rho r constant (Lemma 2), so its variance is 0 < Var_pi; mu = pi gives Var_pi."""
    R = np.array([[1.0, 3.0, 0.5]])
    mdp = V.TabularMDP(np.zeros((1, 3, 1)), R, 0.9, np.ones(1))
    pi = np.array([[0.2, 0.3, 0.5]])
    v, q = V.policy_evaluation(mdp, pi)
    mh = V.mu_hat(pi, V.q_hat(mdp, pi, q))
    np.testing.assert_allclose(mh, pi * R / np.sum(pi * R))
    var_pi = np.sum(pi * R**2) - np.sum(pi * R) ** 2
    assert V.is_return_variance(mdp, pi, pi)[0] == pytest.approx(var_pi, rel=1e-14)
    assert V.is_return_variance(mdp, pi, mh)[0] == pytest.approx(0.0, abs=1e-12)


def test_short_corridor_mu_hat_strictly_reduces_variance_and_mu_equal_pi_is_on_policy():
    mdp = V.short_corridor_mdp(0.99)
    pi = V.state_independent(optimal_right_probability())
    v, q = V.policy_evaluation(mdp, pi)
    mh = V.mu_hat(pi, V.q_hat(mdp, pi, q))
    J_pi = V.is_return_variance(mdp, pi, pi)
    # On-policy every ratio is 1 and eq. (6) is the plain return, whatever the baseline.
    np.testing.assert_allclose(V.is_return_variance(mdp, pi, pi, v), J_pi, rtol=1e-12)
    assert np.all(V.is_return_variance(mdp, pi, mh) < 0.1 * J_pi)


def test_eq6_with_value_baseline_is_not_covered_by_theorem2():
    """Documents a finding: with b = v_pi, mu-hat *raises* ShortCorridor's variance (exact and MC)."""
    mdp = V.short_corridor_mdp(0.99)
    pi = V.state_independent(optimal_right_probability())
    v, q = V.policy_evaluation(mdp, pi)
    mh = V.mu_hat(pi, V.q_hat(mdp, pi, q))
    var_pi, var_v = V.is_return_variance(mdp, pi, pi)[0], V.is_return_variance(mdp, pi, mh, v)[0]
    assert var_v > 1.3 * var_pi
    est = V.monte_carlo(mdp, pi, mh, 20_000, np.random.default_rng(0), v)
    assert est.var - Z * est.var_se > var_pi


def test_monte_carlo_reports_cut_episodes_and_infinite_variance_is_inf():
    mdp = V.short_corridor_mdp(0.99)
    pi = V.state_independent(0.5)
    assert V.monte_carlo(mdp, pi, pi, 500, np.random.default_rng(0), max_steps=3).truncated > 0
    # Ratio 0.5/0.01 on the path to the goal: gamma^2 pi^2/mu exceeds 1 and the second moment diverges.
    assert np.all(np.isinf(V.is_return_variance(mdp, pi, V.state_independent(0.01))))
    with pytest.raises(ValueError, match="cover"):
        V.is_return_variance(mdp, pi, V.state_independent(0.0))


def test_learned_variances_use_the_checkpoint_policies():
    from experiments.verify_variance import learned_variances

    mdp = V.short_corridor_mdp(0.99)
    p_pi = np.array([[0.05, 0.4, 0.6], [0.05, 0.5, 0.55]])
    p_mu = np.array([[0.05, 0.45, 0.5], [0.05, 0.3, 0.6]])
    stack = lambda p: np.stack([1 - p, p], axis=-1)  # noqa: E731
    rows = learned_variances(stack(p_pi), stack(p_mu), np.array([[0, 10, 20]] * 2), (0, 20), mdp)
    assert [r["episode"] for r in rows] == [0, 20]
    assert rows[0]["var_mu_learned"] == pytest.approx(rows[0]["var_pi"], rel=1e-12)  # mu = pi at the start
    var = lambda a, b: V.is_return_variance(mdp, V.state_independent(a), V.state_independent(b))[0]  # noqa: E731
    assert rows[1]["var_mu_learned"] == pytest.approx((var(0.6, 0.5) + var(0.55, 0.6)) / 2, rel=1e-12)
    assert rows[1]["var_pi"] == pytest.approx((var(0.6, 0.6) + var(0.55, 0.55)) / 2, rel=1e-12)
    # The grid contains both pi and mu here, so its minimum is at most either variance.
    assert rows[1]["var_mu_best_state_independent"] <= min(rows[1]["var_pi"], rows[1]["var_mu_learned"])


@pytest.mark.parametrize("args, message", [
    (["--n-random", "0"], "n_random: must be an integer in [1, 10000], got 0"),
    (["--episodes", "10"], "episodes: must be an integer in [100, 10000000], got 10"),
    (["--seed", "-1"], "seed: must be an integer >= 0"),
    (["--seeds", "1"], "seeds: must be an integer >= 2"),
    (["--train-episodes", "15"], "train_episodes: must be a positive multiple of 10, got 15"),
    (["--checkpoints", "0", "55"], "checkpoints: must be multiples of 10 in [0, 300], got 55"),
    (["--checkpoints", "0", "400"], "checkpoints: must be multiples of 10 in [0, 300], got 400"),
    (["--checkpoints", "50", "50"], "checkpoints: must be distinct"),
])
def test_cli_rejects_bad_arguments(tmp_path, capsys, args, message):
    assert main(["verify-variance", "--out", str(tmp_path / "v"), *args]) == 2
    assert f"error: {message}" in capsys.readouterr().err
    assert not (tmp_path / "v").exists()


def test_a_bad_bpo_setting_is_refused_before_the_out_folder_is_made(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("BPO_THREADS", "0")
    assert main(["verify-variance", "--out", str(tmp_path / "v")]) == 2
    assert "error: BPO_THREADS" in capsys.readouterr().err and not (tmp_path / "v").exists()


def test_cli_writes_summary_table_and_plot(tmp_path, capsys):
    """The whole command on a small budget, BPO-REINFORCE training included."""
    out = tmp_path / "v"
    assert main(["verify-variance", "--out", str(out), "--n-random", "2", "--episodes", "2000", "--seeds", "2",
                 "--train-episodes", "20", "--checkpoints", "0", "10", "20"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary) == {"ShortCorridor", "random-0", "random-1", "provenance"}
    assert summary["provenance"]["code_version"] and summary["provenance"]["packages"]["jax"]
    assert json.loads((out / "table.json").read_text())["provenance"] == summary["provenance"]
    sc = summary["ShortCorridor"]
    assert sc["var_mu_hat"] < sc["var_pi"] and sc["theorem2_holds"]
    rows = sc["learned_checkpoints"]
    assert [r["episode"] for r in rows] == [0, 10, 20]
    assert rows[0]["var_mu_learned"] == pytest.approx(rows[0]["var_pi"], rel=1e-5)  # mu starts as pi (float32)
    assert np.isfinite(sc["var_mu_learned"]) and sc["var_mu_learned"] > 0
    for name in ("table.md", "table.json", "variance.png", "variance.pdf"):
        assert (out / name).stat().st_size > 0
    assert "| ShortCorridor |" in capsys.readouterr().out
