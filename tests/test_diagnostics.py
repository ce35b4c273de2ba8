"""Off-policy diagnostics against direct computations, Trust Region Masking against a plain loop,
and the KL penalty forms' expected gradients on a categorical toy against the analytic gradient."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bpo.core import diagnostics as dg
from bpo.core import distributions as D
from bpo.core import kl

jax.config.update("jax_enable_x64", False)


def test_ratio_ess_and_truncation_against_loops():
    rng = np.random.default_rng(0)
    log_ratio = rng.normal(0.0, 0.7, size=(16, 4)).astype(np.float32)
    rho = [math.exp(x) for x in log_ratio.ravel()]
    stats = dg.ratio_stats(jnp.asarray(log_ratio))
    assert float(stats["is_ratio_mean"]) == pytest.approx(sum(rho) / len(rho), rel=1e-5)
    assert float(stats["is_ratio_min"]) == pytest.approx(min(rho), rel=1e-5)
    assert float(stats["is_ratio_max"]) == pytest.approx(max(rho), rel=1e-5)
    ess = sum(rho) ** 2 / (len(rho) * sum(r * r for r in rho))
    assert float(dg.ess_fraction(jnp.asarray(log_ratio))) == pytest.approx(ess, rel=1e-5)
    assert float(dg.ess_fraction(jnp.zeros(10))) == pytest.approx(1.0)
    assert float(dg.ess_fraction(jnp.array([0.0, -50.0, -50.0, -50.0]))) == pytest.approx(0.25, rel=1e-6)
    assert float(dg.ess_fraction(jnp.array([800.0, 0.0]))) == pytest.approx(0.5)  # no overflow
    for bar in (1.0, 1.5):
        assert float(dg.truncated_fraction(jnp.asarray(log_ratio), bar)) == pytest.approx(
            sum(r > bar for r in rho) / len(rho))


def test_sample_kls_converge_to_the_exact_categorical_kl():
    pi_logits, mu_logits = jnp.array([0.3, -1.0, 1.2, 0.0]), jnp.array([0.0, 0.5, 0.4, -0.2])
    pi, mu = D.logits_dist(pi_logits), D.logits_dist(mu_logits)
    p, q = np.asarray(jax.nn.softmax(pi_logits)), np.asarray(jax.nn.softmax(mu_logits))
    kl_pi_mu = float(np.sum(p * np.log(p / q)))
    kl_mu_pi = float(np.sum(q * np.log(q / p)))
    exact = dg.exact_kls(pi, mu, discrete=True)
    assert float(exact["kl_pi_mu_exact"]) == pytest.approx(kl_pi_mu, rel=1e-5)
    assert float(exact["kl_mu_pi_exact"]) == pytest.approx(kl_mu_pi, rel=1e-5)
    # Expectations of the sample estimators under a ~ mu, summed exactly over the 4 actions.
    log_ratio = np.log(p / q)
    for name, target in (("kl_mu_pi", kl_mu_pi), ("kl_pi_mu", kl_pi_mu)):
        for est in ("k1", "k3"):
            per_action = [float(dg.sample_kls(jnp.array([lr]))[f"{name}_{est}"]) for lr in log_ratio]
            assert float(np.dot(q, per_action)) == pytest.approx(target, rel=1e-4), (name, est)
    # And by sampling: 200k draws from mu.
    a = jax.random.categorical(jax.random.PRNGKey(0), mu_logits, shape=(200_000,))
    lr = jax.nn.log_softmax(pi_logits)[a] - jax.nn.log_softmax(mu_logits)[a]
    kls = dg.sample_kls(lr)
    assert float(kls["kl_mu_pi_k3"]) == pytest.approx(kl_mu_pi, rel=0.03)
    assert float(kls["kl_pi_mu_k3"]) == pytest.approx(kl_pi_mu, rel=0.03)
    assert min(float((jnp.exp(lr) - 1 - lr).min()), 0.0) == 0.0  # k3 is never negative


def test_exact_gaussian_kl_against_numerical_integration():
    p = D.Dist(jnp.array([0.3, -1.0]), jnp.array([0.5, 1.2]))
    q = D.Dist(jnp.array([0.0, 0.2]), jnp.array([0.8, 0.6]))
    x = np.linspace(-12, 12, 200_001)
    total = 0.0
    for d in range(2):
        lp = -0.5 * ((x - float(p.loc[d])) / float(p.scale[d])) ** 2 - np.log(float(p.scale[d]) * np.sqrt(2 * np.pi))
        lq = -0.5 * ((x - float(q.loc[d])) / float(q.scale[d])) ** 2 - np.log(float(q.scale[d]) * np.sqrt(2 * np.pi))
        total += np.trapezoid(np.exp(lp) * (lp - lq), x)
    assert float(dg.exact_kl(p, q, discrete=False)) == pytest.approx(total, rel=1e-5)


def test_logprob_mismatch_metrics():
    stored = jnp.array([-1.0, -2.0, -0.5, -3.0])
    assert dg.logprob_mismatch(stored, stored) == {"logprob_mismatch": 0.0, "logprob_mismatch_sq": 0.0}
    shifted = dg.logprob_mismatch(stored, stored - jnp.array([0.2, -0.1, 0.0, 0.3]))
    assert float(shifted["logprob_mismatch"]) == pytest.approx(0.1)
    assert float(shifted["logprob_mismatch_sq"]) == pytest.approx(0.5 * (0.04 + 0.01 + 0.09) / 4)


def trm_reference(log_ratio, done, delta, criterion):
    """Trust Region Masking written as loops over environments and segments."""
    t, n = log_ratio.shape
    mask = np.zeros((t, n))
    for j in range(n):
        start = 0
        for i in range(t):
            if done[i, j] or i == t - 1:
                seg = log_ratio[start:i + 1, j]
                if criterion == "max_abs_log_ratio":
                    score = max(abs(x) for x in seg)
                else:
                    score = sum(math.exp(x) - 1 - x for x in seg) / len(seg)
                mask[start:i + 1, j] = score <= delta
                start = i + 1
    return mask


@pytest.mark.parametrize("criterion, delta", [("max_abs_log_ratio", 0.5), ("mean_k3", 0.05)])
def test_trust_region_mask_matches_the_loop(criterion, delta):
    rng = np.random.default_rng(1)
    log_ratio = rng.normal(0.0, 0.3, size=(12, 5)).astype(np.float32)
    done = rng.random((12, 5)) < 0.2
    mask = np.asarray(dg.trust_region_mask(jnp.asarray(log_ratio), jnp.asarray(done, jnp.float32), delta, criterion))
    expected = trm_reference(log_ratio, done, delta, criterion)
    np.testing.assert_array_equal(mask, expected)
    assert 0 < expected.mean() < 1  # some segments accepted, some rejected


def test_trust_region_mask_accepts_or_rejects_whole_segments():
    # One environment, two episodes: a single bad step rejects only its own episode.
    log_ratio = jnp.array([[0.1], [0.9], [0.0], [0.2], [-0.1]])
    done = jnp.array([[0.0], [0.0], [1.0], [0.0], [0.0]])
    mask = dg.trust_region_mask(log_ratio, done, 0.5)
    np.testing.assert_array_equal(np.asarray(mask)[:, 0], [0, 0, 0, 1, 1])
    assert float(dg.masked_segment_fraction(mask, done)) == pytest.approx(0.5)
    # |log rho| catches ratios below 1 as well as above.
    assert float(dg.trust_region_mask(jnp.array([[-0.9]]), jnp.zeros((1, 1)), 0.5)[0, 0]) == 0.0
    with pytest.raises(ValueError, match="criterion"):
        dg.trust_region_mask(log_ratio, done, 0.5, "max")


def test_masked_loss_is_normalised_by_the_total_count():
    """A masked PPO surrogate averages over every step: rejected steps count in the denominator."""
    from bpo.agents.ppo import clipped_surrogate_loss

    adv = jnp.array([1.0, 2.0, 3.0, 4.0])
    mask = jnp.array([1.0, 0.0, 1.0, 0.0])
    loss, _, _ = clipped_surrogate_loss(jnp.zeros(4), jnp.zeros(4), adv * mask, 0.2)
    assert float(loss) == pytest.approx(-(1.0 + 3.0) / 4)  # not / 2


# ---- KL penalty forms on a categorical toy: p_theta = softmax(theta), reference mu ----

THETA = jnp.array([0.4, -0.3, 1.0, 0.1, -1.2])
REF = jax.nn.log_softmax(jnp.array([0.0, 0.5, -0.5, 0.8, 0.2]))
SAMPLER = jax.nn.log_softmax(jnp.array([1.0, 0.0, 0.0, -0.5, 0.3]))  # an off-policy behaviour


def reverse_kl(theta):
    log_p = jax.nn.log_softmax(theta)
    return jnp.sum(jnp.exp(log_p) * (log_p - REF))


def forward_kl(theta):
    return jnp.sum(jnp.exp(REF) * (REF - jax.nn.log_softmax(theta)))


def expected_loss_gradient(loss_fn, sampler_log_probs):
    """sum_x q(x) grad_theta loss(x): the expected gradient of plain backprop when x ~ q (q held
    fixed, as a sampled batch is)."""
    def grad_at(x):
        return jax.grad(lambda th: loss_fn(jax.nn.log_softmax(th)[x], REF[x], sampler_log_probs[x]))(THETA)
    q = jnp.exp(sampler_log_probs)
    return sum(q[x] * grad_at(x) for x in range(5))


def expected_reward_gradient(penalty_fn):
    """sum_x p(x) score(x) penalty(x): the policy gradient of a detached reward penalty, on-policy."""
    log_p = jax.nn.log_softmax(THETA)
    score = jax.jacobian(lambda th: jax.nn.log_softmax(th))(THETA)  # [x, theta]
    pen = jnp.array([penalty_fn(log_p[x], REF[x]) for x in range(5)])
    return jnp.sum(jnp.exp(log_p)[:, None] * score * pen[:, None], axis=0)


def test_recommended_kl_forms_have_the_analytic_gradient():
    true = jax.grad(reverse_kl)(THETA)
    on_policy = jax.lax.stop_gradient(jax.nn.log_softmax(THETA))
    np.testing.assert_allclose(expected_reward_gradient(kl.k1_reward), true, atol=1e-6)
    np.testing.assert_allclose(expected_loss_gradient(lambda lp, lr, ls: kl.k2_loss(lp, lr), on_policy), true,
                               atol=1e-6)
    for form in (kl.sg_rho_k2_loss, kl.rho_k3_loss):
        for sampler in (on_policy, SAMPLER):
            np.testing.assert_allclose(expected_loss_gradient(form, sampler), true, atol=1e-6)


def test_known_wrong_kl_forms_differ_as_seeds_000_says():
    true, fwd = jax.grad(reverse_kl)(THETA), jax.grad(forward_kl)(THETA)
    on_policy = jax.lax.stop_gradient(jax.nn.log_softmax(THETA))
    assert float(jnp.abs(true - fwd).max()) > 0.05  # the two directions differ here
    # k1 as a plain loss: zero expected gradient.
    np.testing.assert_allclose(expected_loss_gradient(lambda lp, lr, ls: kl.k1(lp, lr), on_policy), 0.0, atol=1e-6)
    # k3 as a plain loss: the forward-KL gradient.
    np.testing.assert_allclose(expected_loss_gradient(lambda lp, lr, ls: kl.k3(lp, lr), on_policy), fwd, atol=1e-6)
    # k3 as a detached reward: reverse minus forward.
    np.testing.assert_allclose(expected_reward_gradient(lambda lp, lr: jax.lax.stop_gradient(kl.k3(lp, lr))),
                               true - fwd, atol=1e-6)
    # Off-policy, k2 without the IS weight optimises the wrong thing; rho * k2 with rho differentiated too.
    wrong = expected_loss_gradient(lambda lp, lr, ls: kl.k2(lp, lr), SAMPLER)
    assert float(jnp.abs(wrong - true).max()) > 1e-3
    both = expected_loss_gradient(lambda lp, lr, ls: jnp.exp(lp - ls) * kl.k2(lp, lr), SAMPLER)
    assert float(jnp.abs(both - true).max()) > 1e-3


# ---- Wired into the learner and the run outputs ----

def _learner_and_rollout(**changes):
    """A BPO-PPO learner on CartPole and one rollout drawn from its own behaviour policy mu."""
    from bpo.agents.learner import make_learner
    from bpo.config.presets import get_preset
    from bpo.config.schema import replace, traced_hyperparams, with_bpo
    from envs import make_env

    cfg = replace(with_bpo(get_preset("cartpole_ppo"), True), **changes)
    spec = make_env(cfg.env).spec
    learner, hp = make_learner(cfg, spec), traced_hyperparams(cfg)
    t, n = cfg.ppo.n_steps, cfg.ppo.n_envs
    k = jax.random.split(jax.random.PRNGKey(0), 6)
    state = learner.init(tuple(k[:3]), hp, jax.random.normal(k[3], (n, spec.obs_dim)))
    obs = jax.random.normal(k[4], (t, n, spec.obs_dim))
    keys = jax.random.split(k[5], t)
    sde = learner.sde_init()
    action, _, log_prob, obs_n, _ = jax.vmap(lambda kk, o: learner.act(state, kk, kk, o, sde, 0))(keys, obs)
    done = (jnp.arange(t)[:, None] % 7 == 6) * jnp.ones((1, n))
    rows = {"obs": obs_n, "raw_obs": obs, "action": action, "log_prob": log_prob, "reward": jnp.ones((t, n)),
            "terminated": done, "truncated": jnp.zeros((t, n)), "next_obs": obs_n, "raw_next_obs": obs}
    return learner, state, rows, hp


def test_learner_reports_a_misaligned_rollout():
    learner, state, rows, hp = _learner_and_rollout()
    _, metrics = learner.update(state, jax.random.PRNGKey(1), jax.random.PRNGKey(2), rows, hp)
    assert abs(float(metrics["logprob_mismatch"])) < 1e-6 and float(metrics["logprob_mismatch_sq"]) < 1e-10
    # mu starts as a copy of pi: every ratio is 1 and every KL 0.
    assert float(metrics["is_ratio_min"]) == pytest.approx(1.0, abs=1e-5)
    assert float(metrics["kl_pi_mu_exact"]) == pytest.approx(0.0, abs=1e-6)
    assert float(metrics["ess_frac"]) == pytest.approx(1.0, abs=1e-6)
    shifted = {**rows, "log_prob": rows["log_prob"] - 0.2}  # the rollout stored the wrong log mu
    _, bad = learner.update(state, jax.random.PRNGKey(1), jax.random.PRNGKey(2), shifted, hp)
    assert float(bad["logprob_mismatch"]) == pytest.approx(-0.2, abs=1e-5)
    assert float(bad["logprob_mismatch_sq"]) == pytest.approx(0.02, abs=1e-6)


def test_trust_region_masking_in_the_learner():
    """delta below every segment's score masks the whole rollout: the policy loss is 0 and pi does
    not move; without masking the same update moves pi."""
    learner, state, rows, hp = _learner_and_rollout(**{"returns.trust_region_delta": 1e-9})
    # pi/mu differ a little, as after a behaviour step.
    rows = {**rows, "log_prob": rows["log_prob"] + 0.01 * jnp.sin(jnp.arange(rows["log_prob"].size)).reshape(
        rows["log_prob"].shape)}
    masked_state, metrics = learner.update(state, jax.random.PRNGKey(1), jax.random.PRNGKey(2), rows, hp)
    assert float(metrics["trm_mask_rate"]) == 1.0 and float(metrics["trm_segments_masked"]) == 1.0
    jax.tree.map(np.testing.assert_array_equal, masked_state.target.actor_params, state.target.actor_params)
    learner, state, _, hp = _learner_and_rollout()
    free_state, metrics = learner.update(state, jax.random.PRNGKey(1), jax.random.PRNGKey(2), rows, hp)
    assert "trm_mask_rate" not in metrics
    moved = jax.tree.map(lambda a, b: float(jnp.abs(a - b).max()), free_state.target.actor_params,
                         state.target.actor_params)
    assert max(jax.tree.leaves(moved)) > 1e-4


def test_summary_warns_about_a_mismatch_and_curves_pool_diagnostics():
    from bpo.config.presets import get_preset
    from bpo.config.schema import replace
    from bpo.training.run_output import RunOutput
    from bpo.training.summary import diagnostic_curves, diagnostics_summary

    cfg = replace(get_preset("short_corridor"), episodes=4, eval_every=2)
    train = {"logprob_mismatch": np.array([[0.0, 0.001, 0.03, 0.0]]), "is_ratio_max": np.array([[1.0, 3.0, 2.0, 5.0]]),
             "is_ratio_min": np.array([[1.0, 0.5, 0.7, 0.9]]), "ess_frac": np.array([[1.0, 0.8, 0.6, 0.4]])}
    out = RunOutput(cfg, {"eval": {"eval_episode": np.array([[0, 2, 4]])}, "train": train}, 0, 0, 0, 1, "cpu")
    pooled, warnings = diagnostics_summary(out)
    assert pooled == {"is_ratio_min": 0.5, "is_ratio_max": 5.0, "ess_frac": pytest.approx(0.7),
                      "logprob_mismatch": pytest.approx(0.00775)}
    assert len(warnings) == 1 and "logprob_mismatch = 0.03 > 0.01 in update 3" in warnings[0]  # from 1
    curves = diagnostic_curves(out)
    np.testing.assert_array_equal(curves["is_ratio_max"], [[np.nan, 3.0, 5.0]])
    np.testing.assert_array_equal(curves["is_ratio_min"], [[np.nan, 0.5, 0.7]])
    np.testing.assert_allclose(curves["ess_frac"], [[np.nan, 0.9, 0.5]])
