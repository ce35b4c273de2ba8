"""The KL penalty beta KL(pi_theta || pi_old) of the PPO and BPO-PPO actor loss (``ppo.kl_coef``).

On a categorical policy, enumerating every action weighted by its probability under the policy
that drew the samples gives the exact expected gradient of the penalty; it must equal the
gradient of the exact KL, on-policy (the samples drawn by pi_old, as in PPO) and off-policy (drawn
by mu, as in BPO-PPO), for both loss forms. A known wrong form (k1 as a loss) must not."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bpo.agents.methods import validate
from bpo.agents.ppo import actor_loss
from bpo.config.presets import PRESETS
from bpo.config.schema import ConfigError, replace, traced_hyperparams, with_bpo
from bpo.core import distributions as D
from bpo.core import kl
from bpo.training import make_train

N = 5
THETA = jnp.array([0.3, -0.8, 1.1, 0.0, -0.2])  # pi_theta, some epochs into an update
THETA_OLD = jnp.array([0.0, -0.5, 0.6, 0.4, -0.1])  # pi_old, the reference
MU_LOGITS = jnp.array([-0.4, 0.9, 0.2, -1.0, 0.5])  # a behaviour policy unlike both
BETA = 0.7


def apply(theta, obs):
    return D.logits_dist(jnp.broadcast_to(theta, obs.shape[:-1] + (N,))), None


def exact_kl(theta):
    log_p, log_old = jax.nn.log_softmax(theta), jax.nn.log_softmax(THETA_OLD)
    return jnp.sum(jnp.exp(log_p) * (log_p - log_old))


def one_sample_batch(x, log_sampler):
    """The action x alone, drawn by the sampler; zero advantage, so only the penalty has a gradient."""
    return {"obs": jnp.zeros((1, 1)), "action": jnp.array([x]), "old_log_prob": log_sampler[x][None],
            "advantage": jnp.zeros(1), "adv_weight": jnp.ones(1),
            "pi_old_log_prob": jax.nn.log_softmax(THETA_OLD)[x][None], "behaviour_log_prob": log_sampler[x][None]}


def expected_penalty(estimator, sampler_logits):
    """(E_{x ~ sampler}[grad of the actor loss], E[kl_penalty metric]), both exact, divided by beta."""
    log_sampler = jax.nn.log_softmax(sampler_logits)

    def loss(theta, x):
        return actor_loss(theta, apply, one_sample_batch(x, log_sampler), 0.2, 0.0, True, False, BETA, estimator)

    grads, values = [], []
    for x in range(N):
        (_, metrics), g = jax.value_and_grad(loss, has_aux=True)(THETA, x)
        grads.append(g)
        values.append(metrics["kl_penalty"])
    weights = jnp.exp(log_sampler)
    return (jnp.sum(weights[:, None] * jnp.stack(grads), axis=0) / BETA,
            jnp.sum(weights * jnp.stack(values)) / BETA)


def expected_form_gradient(form, sampler_logits):
    """E_{x ~ sampler}[grad form(log pi_theta(x), log pi_old(x), log sampler(x))], exact."""
    log_sampler = jax.nn.log_softmax(sampler_logits)
    log_old = jax.nn.log_softmax(THETA_OLD)
    grads = [jax.grad(lambda th, x=x: form(jax.nn.log_softmax(th)[x], log_old[x], log_sampler[x]))(THETA)
             for x in range(N)]
    return jnp.sum(jnp.exp(log_sampler)[:, None] * jnp.stack(grads), axis=0)


@pytest.mark.parametrize("estimator", ["k2", "k3"])
@pytest.mark.parametrize("sampler", ["pi_old", "mu"])
def test_expected_penalty_gradient_is_the_kl_gradient(estimator, sampler):
    true = jax.grad(exact_kl)(THETA)
    assert float(jnp.abs(true).max()) > 0.05  # pi_theta is away from pi_old: the test has something to find
    grad, _ = expected_penalty(estimator, THETA_OLD if sampler == "pi_old" else MU_LOGITS)
    np.testing.assert_allclose(grad, true, atol=1e-6)


@pytest.mark.parametrize("sampler", ["pi_old", "mu"])
def test_k3_penalty_value_is_the_kl(sampler):
    """rho * k3 is unbiased for the KL's value too, so the ``kl_penalty`` metric estimates beta KL."""
    _, value = expected_penalty("k3", THETA_OLD if sampler == "pi_old" else MU_LOGITS)
    assert float(value) == pytest.approx(float(exact_kl(THETA)), rel=1e-5)


@pytest.mark.parametrize("sampler", ["pi_old", "mu"])
def test_wrong_forms_do_not_match(sampler):
    """k1 as a loss and k2 without the IS weight, under the same enumeration, miss the KL gradient."""
    logits = THETA_OLD if sampler == "pi_old" else MU_LOGITS
    true = jax.grad(exact_kl)(THETA)
    for wrong in (lambda lp, lr, ls: kl.k1(lp, lr), lambda lp, lr, ls: kl.k2(lp, lr)):
        assert float(jnp.abs(expected_form_gradient(wrong, logits) - true).max()) > 1e-2
    right = expected_form_gradient(kl.rho_k3_loss, logits)
    np.testing.assert_allclose(right, true, atol=1e-6)


def test_no_penalty_at_zero_coefficient():
    batch = one_sample_batch(2, jax.nn.log_softmax(THETA_OLD))
    loss0, metrics0 = actor_loss(THETA, apply, batch, 0.2, 0.0, True, False)
    loss1, metrics1 = actor_loss(THETA, apply, batch, 0.2, 0.0, True, False, BETA, "k3")
    assert "kl_penalty" not in metrics0 and float(loss1 - loss0) == pytest.approx(float(metrics1["kl_penalty"]))


@pytest.mark.parametrize("changes,field", [
    ({"ppo.kl_coef": -0.1}, "ppo.kl_coef"),
    ({"ppo.kl_coef": float("inf")}, "ppo.kl_coef"),
    ({"ppo.kl_estimator": "k1"}, "ppo.kl_estimator"),
])
def test_invalid_kl_settings_name_the_field(changes, field):
    with pytest.raises(ConfigError) as err:
        validate(replace(PRESETS["cartpole_ppo"], **changes))
    assert err.value.field_name == field


def test_a_kl_penalty_changes_a_cartpole_ppo_run():
    base = replace(with_bpo(PRESETS["cartpole_ppo"], False), total_timesteps=2 * 256, eval_every=512, eval_episodes=1,
                   **{"ppo.n_epochs": 4, "ppo.lr_schedule": "constant"})
    runs = {}
    for coef in (0.0, 1.0):
        cfg = validate(replace(base, **{"ppo.kl_coef": coef}))
        runs[coef] = jax.jit(make_train(cfg))(jax.random.PRNGKey(0), traced_hyperparams(cfg))["train"]
    plain, penalised = runs[0.0], runs[1.0]
    assert "kl_penalty" not in plain and np.all(np.asarray(penalised["kl_penalty"]) > 0)
    for key, value in penalised.items():
        if key != "train_return":  # NaN when no episode finished within the rollout
            assert np.all(np.isfinite(value)), key
    assert not np.allclose(plain["approx_kl"], penalised["approx_kl"])
