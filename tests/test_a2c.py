"""A2C and BPO-A2C (``bpo.agents.a2c``): the loss, its gradient and the RMSprop step against hand
computations; BPO-A2C's truncated IS weights by hand and through the learner; the configuration's
checks; and runs on every backend."""

import dataclasses
import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from bpo.agents.a2c import A2CState, a2c_loss, a2c_update, behaviour_weights, joint_params
from bpo.agents.learner import make_learner
from bpo.agents.methods import validate
from bpo.config.presets import apply_variant, get_preset, with_bpo_labelled
from bpo.config.schema import (
    A2CConfig,
    ConfigError,
    PPOConfig,
    replace,
    traced_hyperparams,
    with_bpo,
    with_method,
)
from bpo.core import distributions as D
from bpo.core.optim import clipped
from bpo.core.returns import tis_advantages
from bpo.runners.onpolicy import make_program
from experiments.cli import main


def linear_apply(params, obs):
    return D.logits_dist(obs @ params["w"]), None


def linear_value(params, obs):
    return obs @ params["v"]


def hand_gradient(w, v, x, a, adv, weight, ret, ent_coef, vf_coef):
    """The gradient of -mean(weight A log pi) - ent_coef mean H + vf_coef mean((G - V)^2) for the
    linear-softmax actor z = x W and the linear critic V = x v, written out in NumPy (float64)."""
    n, k = len(a), w.shape[1]
    z = x @ w
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    d_log_pi = np.eye(k)[a] - p  # d log pi(a|x) / dz
    h = -(p * np.log(p)).sum(1)
    d_entropy = -p * (np.log(p) + h[:, None])  # dH / dz
    d_z = -(weight * adv)[:, None] * d_log_pi / n - ent_coef * d_entropy / n
    g_w = x.T @ d_z
    g_v = 2 * vf_coef * x.T @ (x @ v - ret) / n
    return g_w, g_v


def batch_and_params(seed=0, n=7, d=3, k=3):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d))
    a = rng.integers(0, k, n)
    adv, ret = rng.normal(size=n), rng.normal(size=n)
    weight = rng.uniform(0.2, 1.5, n)
    w, v = rng.normal(size=(d, k)) * 0.5, rng.normal(size=d)
    batch = {"obs": x, "action": a, "advantage": adv, "return": ret, "adv_weight": weight}
    batch = {key: jnp.asarray(val, jnp.int32 if key == "action" else jnp.float32) for key, val in batch.items()}
    return x, a, adv, ret, weight, w, v, batch


def test_a2c_loss_and_its_gradient_are_the_hand_computed_ones():
    x, a, adv, ret, weight, w, v, batch = batch_and_params()
    params = {"actor": {"w": jnp.asarray(w, jnp.float32)}, "critic": {"v": jnp.asarray(v, jnp.float32)}}
    ent_coef, vf_coef = 0.01, 0.4
    loss_fn = lambda prm: a2c_loss(prm, batch, actor_apply=linear_apply, critic_apply=linear_value,  # noqa: E731
                                   ent_coef=ent_coef, vf_coef=vf_coef, discrete=True, normalize_advantage=False)
    (loss, metrics), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
    z = x @ w
    log_p = z - np.log(np.exp(z).sum(1, keepdims=True))
    p = np.exp(log_p)
    pg = -np.mean(weight * adv * log_p[np.arange(len(a)), a])
    h = -(p * log_p).sum(1).mean()
    value = np.mean((ret - x @ v) ** 2)  # SB3's F.mse_loss: no one-half
    assert float(metrics["pg_loss"]) == pytest.approx(pg, rel=1e-5)
    assert float(metrics["entropy"]) == pytest.approx(h, rel=1e-5)
    assert float(metrics["value_loss"]) == pytest.approx(value, rel=1e-5)
    assert float(loss) == pytest.approx(pg - ent_coef * h + vf_coef * value, rel=1e-5)
    g_w, g_v = hand_gradient(w, v, x, a, adv, weight, ret, ent_coef, vf_coef)
    np.testing.assert_allclose(grads["actor"]["w"], g_w, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(grads["critic"]["v"], g_v, rtol=1e-4, atol=1e-6)


def test_normalised_advantages_are_standardised_before_the_weights():
    x, a, adv, ret, weight, w, v, batch = batch_and_params(seed=1)
    params = {"actor": {"w": jnp.asarray(w, jnp.float32)}, "critic": {"v": jnp.asarray(v, jnp.float32)}}
    _, metrics = a2c_loss(params, batch, actor_apply=linear_apply, critic_apply=linear_value, ent_coef=0.0,
                          vf_coef=0.5, discrete=True, normalize_advantage=True)
    z = x @ w
    log_p = z - np.log(np.exp(z).sum(1, keepdims=True))
    std_adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    assert float(metrics["pg_loss"]) == pytest.approx(-np.mean(weight * std_adv * log_p[np.arange(len(a)), a]),
                                                      rel=1e-5)


@pytest.mark.parametrize("max_grad_norm", [0.05, float("inf")])
def test_two_a2c_updates_are_clipped_rmsprop_steps_by_hand(max_grad_norm):
    """One optimiser over actor and critic: one global norm clip over both gradients (0.05 binds),
    then torch's RMSprop (alpha 0.99, eps outside the root, nu from 0), twice."""
    x, a, adv, ret, weight, w, v, batch = batch_and_params(seed=2)
    lr, eps, ent_coef, vf_coef = 7e-4, 1e-5, 0.01, 0.5
    tx = clipped(lr, "rmsprop", eps, max_grad_norm)
    state = A2CState({"w": jnp.asarray(w, jnp.float32)}, {"v": jnp.asarray(v, jnp.float32)}, None)
    state = state._replace(opt_state=tx.init(joint_params(state)))
    nu_w, nu_v = np.zeros_like(w), np.zeros_like(v)
    for _ in range(2):
        state, _ = a2c_update(state, batch, actor_apply=linear_apply, critic_apply=linear_value, tx=tx,
                              ent_coef=ent_coef, vf_coef=vf_coef, discrete=True, normalize_advantage=False)
        g_w, g_v = hand_gradient(w, v, x, a, adv, weight, ret, ent_coef, vf_coef)
        scale = min(1.0, max_grad_norm / math.sqrt((g_w**2).sum() + (g_v**2).sum()))
        g_w, g_v = g_w * scale, g_v * scale
        nu_w, nu_v = 0.99 * nu_w + 0.01 * g_w**2, 0.99 * nu_v + 0.01 * g_v**2
        w = w - lr * g_w / (np.sqrt(nu_w) + eps)
        v = v - lr * g_v / (np.sqrt(nu_v) + eps)
    np.testing.assert_allclose(state.actor_params["w"], w, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(state.critic_params["v"], v, rtol=1e-5, atol=1e-7)


def test_clipped_adam_is_still_adam():
    tx, ref = clipped(0.1, "adam", 1e-5, float("inf")), optax.adam(0.1, eps=1e-5)
    g = jnp.array([0.3, -2.0])
    np.testing.assert_array_equal(tx.update(g, tx.init(g))[0], ref.update(g, ref.init(g))[0])


def test_behaviour_weights_truncate_the_ratio_at_rho_bar_by_hand():
    log_pi = jnp.log(jnp.array([0.5, 0.2, 0.9, 0.3]))
    log_mu = jnp.log(jnp.array([0.25, 0.4, 0.3, 0.3]))
    mask = jnp.array([1.0, 1.0, 1.0, 0.0])  # a Trust Region Mask leaves the last step out
    # ratios 2, 0.5, 3, 1; truncated at 1.5: 1.5, 0.5, 1.5, 1; masked: 1.5, 0.5, 1.5, 0
    np.testing.assert_allclose(behaviour_weights(mask, log_pi, log_mu, 1.5), [1.5, 0.5, 1.5, 0.0], rtol=1e-6)
    np.testing.assert_allclose(behaviour_weights(jnp.ones(4), log_pi, log_mu, jnp.inf), [2.0, 0.5, 3.0, 1.0],
                               rtol=1e-6)


def a2c_setup(algo: str, **changes):
    """cartpole_a2c (BPO with c-bar 1, rho-bar 1.5) on CartPole's JAX environment: the learner, its
    first state, a rollout of its acting policy and the traced hyperparameters."""
    cfg = get_preset("cartpole_a2c")
    cfg = apply_variant(cfg, "bpo_c1.0_rho1.5") if algo == "bpo" else with_bpo(cfg, False)
    cfg = validate(replace(cfg, **changes))
    hp, program = traced_hyperparams(cfg), make_program(cfg)
    carry = program.init(jax.random.PRNGKey(3), hp)
    return cfg, program, carry, hp


def test_bpo_a2c_weights_each_step_by_min_rho_bar_pi_over_mu():
    """mu moved away from pi collects a rollout; the learner's step equals A2C's step on the batch
    whose weights are min(1.5, pi/mu) computed here in NumPy from the two policies' probabilities
    and whose advantages are eq. (11)'s, G_t - V(s_t), from the truncated IS-TD(lambda) returns."""
    cfg, program, carry, hp = a2c_setup("bpo", **{"a2c.n_steps": 16})
    learner = program.learner
    beh = carry.learner.behaviour
    noisy = jax.tree.map(lambda x: x + 0.5 * jax.random.normal(jax.random.PRNGKey(9), x.shape), beh.mu_params)
    carry = carry._replace(learner=carry.learner._replace(behaviour=beh._replace(mu_params=noisy)))
    carry, rows = program.rollout(carry)
    state = carry.learner
    new, _ = learner.update(state, jax.random.PRNGKey(0), jax.random.PRNGKey(1), rows, hp)

    pi = np.asarray(jax.nn.softmax(learner.dist_fn(state.target.actor_params)(rows["obs"]).loc))
    mu = np.asarray(jax.nn.softmax(learner.dist_fn(noisy)(rows["obs"]).loc))
    a = np.asarray(rows["action"])
    pick = lambda p: np.take_along_axis(p, a[..., None], -1)[..., 0]  # noqa: E731
    ratio = pick(pi) / pick(mu)
    assert ratio.min() < 0.8 and ratio.max() > 1.5  # the truncation and both sides of 1 are exercised
    values = learner.critic_apply(state.target.critic_params, rows["obs"])
    next_values = learner.critic_apply(state.target.critic_params, rows["next_obs"])
    done = jnp.maximum(rows["terminated"], rows["truncated"])
    adv, ret = tis_advantages(rows["reward"], values, next_values, rows["terminated"], done, jnp.log(ratio),
                              gamma=0.99, lam=1.0, rho_bar=1.5, c_bar=1.0, current_rho=True)
    flat = lambda x: jnp.reshape(x, (-1,) + x.shape[2:])  # noqa: E731
    batch = {"obs": flat(rows["obs"]), "action": flat(rows["action"]), "advantage": flat(adv), "return": flat(ret),
             "adv_weight": flat(jnp.asarray(np.minimum(1.5, ratio), jnp.float32))}
    want, _ = a2c_update(state.target, batch, actor_apply=learner.actor.apply, critic_apply=learner.critic_apply,
                         tx=learner.tx(7e-4), ent_coef=0.0, vf_coef=0.5, discrete=True, normalize_advantage=False)
    for got, exp in ((new.target.actor_params, want.actor_params), (new.target.critic_params, want.critic_params)):
        jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-7), got, exp)


def test_bpo_a2c_with_mu_equal_to_pi_takes_the_a2c_step():
    """mu starts equal to pi: every weight is 1 and, with c-bar and rho-bar >= 1, the truncated
    IS-TD(lambda) returns are GAE's (Lemma 3), so BPO-A2C's first target update is A2C's."""
    cfg, program, carry, hp = a2c_setup("bpo")
    carry, rows = program.rollout(carry)
    learner = program.learner
    bpo_state, _ = learner.update(carry.learner, jax.random.PRNGKey(0), jax.random.PRNGKey(1), rows, hp)
    a2c_cfg = validate(with_bpo_labelled(cfg, False))  # the BPO row names A2C alone no more
    a2c_learner = make_learner(a2c_cfg, learner.spec)
    plain = carry.learner._replace(behaviour=(), replay=())
    a2c_state, _ = a2c_learner.update(plain, jax.random.PRNGKey(0), jax.random.PRNGKey(1), rows,
                                      traced_hyperparams(a2c_cfg))
    jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-7), bpo_state.target,
                 a2c_state.target)


@pytest.mark.parametrize("changes,field", [
    ({"returns.weight_on_advantage": True}, "returns.weight_on_advantage"),  # BPO-A2C, the preset's own
    ({"a2c.optimizer": "sgd"}, "a2c.optimizer"),
    ({"a2c.rms_prop_eps": 0.0}, "a2c.rms_prop_eps"),
    ({"a2c.n_steps": 0}, "a2c.n_steps"),
    ({"method": "trpo"}, "method"),
    ({"method": "ppo"}, "ppo"),  # PPO reads its own section, which this config lacks
    ({"ppo": PPOConfig()}, "ppo"),  # PPO's section beside A2C's: it would be read by nothing
])
def test_invalid_a2c_configs_name_the_field(changes, field):
    with pytest.raises(ConfigError) as e:
        validate(replace(get_preset("cartpole_a2c"), **changes))
    assert e.value.field_name == field


def test_a2c_has_no_field_of_ppo_s_own():
    """PPO's minibatches, epochs, clip range and KL penalty are not A2C's settings: its section
    has none of them, so setting one is refused by name (before, PPO's section held A2C's
    settings and accepted them without effect)."""
    cfg = get_preset("cartpole_a2c")
    for name in ("batch_size", "n_epochs", "clip_range", "clip_range_schedule", "kl_coef", "kl_estimator"):
        assert not hasattr(cfg.a2c, name)
        with pytest.raises(ConfigError) as e:
            replace(cfg, **{f"a2c.{name}": 1})
        assert e.value.field_name == f"a2c.{name}"
        with pytest.raises(ConfigError, match="method a2c does not read") as e:
            replace(cfg, **{f"ppo.{name}": 1})
        assert e.value.field_name == f"ppo.{name}"


def test_the_ppo_row_on_an_a2c_preset_is_refused_naming_the_variant():
    """Table 1's 'ppo' row runs PPO alone; an A2C preset's method alone is its 'a2c' row."""
    with pytest.raises(ConfigError, match="use variant 'a2c'") as e:
        apply_variant(get_preset("cartpole_a2c"), "ppo")
    assert e.value.field_name == "variant"
    assert apply_variant(get_preset("cartpole_a2c"), "a2c").bpo is None


def test_method_a2c_on_a_ppo_preset_from_the_command_line_runs_a2c_with_its_own_section(tmp_path):
    """``--method a2c`` on a PPO preset: A2C's section at its defaults with the flags given to it,
    PPO's section dropped from the recorded config."""
    out = tmp_path / "run"
    assert main(["train", "cartpole_ppo", "--method", "a2c", "--no-bpo", "--a2c.n-envs", "4", "--seeds", "1",
                 "--total-timesteps", "200", "--eval-every", "200", "--eval-episodes", "1", "--no-progress",
                 "--out", str(out)]) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["method"] == "a2c" and config["ppo"] is None
    assert config["a2c"] == {**dataclasses.asdict(A2CConfig()), "n_envs": 4, "pi_hidden": [64, 64],
                             "vf_hidden": [64, 64]}


def test_switching_the_method_takes_the_new_method_s_section():
    """``with_method``: PPO on an A2C preset reads PPO's section at its defaults, and back; the
    other section is dropped, so a config holds the settings its method reads and no others."""
    ppo = with_method(get_preset("cartpole_a2c"), "ppo")
    assert ppo.a2c is None and ppo.ppo == PPOConfig() and validate(ppo).rollout_size == 2048
    a2c = with_method(ppo, "a2c")
    assert a2c.ppo is None and a2c.a2c == A2CConfig() and validate(a2c).rollout_size == 5


@pytest.mark.parametrize("algo", ["a2c", "bpo"])
def test_cartpole_a2c_runs_from_the_command_line(tmp_path, algo):
    out = tmp_path / algo
    switch = "--bpo" if algo == "bpo" else "--no-bpo"
    assert main(["train", "cartpole_a2c", switch, "--seeds", "2", "--total-timesteps", "2000",
                 "--eval-every", "1000", "--eval-episodes", "2", "--no-progress", "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    config = json.loads((out / "config.json").read_text())
    assert (config["method"], summary["algo"], summary["total_timesteps"]) == ("a2c", algo, 2000)
    assert (config["bpo"] is not None) == (algo == "bpo") and "algo" not in config
    assert config["ppo"] is None and config["a2c"]["n_steps"] == 5 and "batch_size" not in config["a2c"]
    assert all(math.isfinite(r) for r in summary["final_eval_returns"])


@pytest.mark.mujoco
@pytest.mark.parametrize("backend", ["gymnasium", "threads"])
def test_mujoco_a2c_runs_on_the_host_backends(tmp_path, backend):
    out = tmp_path / backend
    assert main(["train", "mujoco_a2c", "--env", "Hopper-v5", "--backend", backend, "--variant", "bpo_c1.0_rho1.5",
                 "--seeds", "2", "--total-timesteps", "200", "--eval-every", "100", "--eval-episodes", "1",
                 "--no-progress", "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert all(math.isfinite(r) for r in summary["final_eval_returns"])


@pytest.mark.mjx
@pytest.mark.slow
def test_mujoco_a2c_runs_on_mjx(tmp_path):
    out = tmp_path / "mjx"
    assert main(["train", "mujoco_a2c", "--env", "HalfCheetah-v5", "--backend", "mjx", "--variant",
                 "bpo_c1.0_rho1.5", "--seeds", "2", "--total-timesteps", "100", "--eval-every", "50",
                 "--eval-episodes", "1", "--no-progress", "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert all(math.isfinite(r) for r in summary["final_eval_returns"])


@pytest.mark.parametrize(("argv", "shown", "hidden"), [
    (["cartpole_a2c"], "a2c", "ppo"),
    (["cartpole_ppo"], "ppo", "a2c"),
    (["cartpole_ppo", "--method", "a2c"], "a2c", "ppo"),  # the section of the method the run will have
])
def test_help_lists_the_flags_of_the_section_the_run_reads(argv, shown, hidden, capsys):
    with pytest.raises(SystemExit) as e:
        main(["train", *argv, "--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0
    assert f"--{shown}.learning-rate" in out and f"--{hidden}." not in out
    assert ("--ppo.batch-size" in out) == (shown == "ppo")  # PPO's own fields in PPO's section only


def _bandit_gradient(current_rho: bool):
    """E_mu[w_t A_t grad log pi(a_t)] of BPO-A2C on a one-step bandit, the expectation over mu's two
    actions computed exactly (each action one column of a one-step batch), and the true gradient
    of J = sum_a pi(a) r(a) with respect to pi's logits."""
    pi, mu, r, v = np.array([0.7, 0.3]), np.array([0.4, 0.6]), np.array([1.0, 0.0]), 0.5
    log_ratio = jnp.log(jnp.asarray(pi / mu))[None]
    one = jnp.ones((1, 2))
    adv, _ = tis_advantages(jnp.asarray(r)[None], v * one, 0.0 * one, one, one, log_ratio, gamma=0.99, lam=0.95,
                            rho_bar=math.inf, c_bar=math.inf, current_rho=current_rho)
    w = behaviour_weights(one, jnp.log(jnp.asarray(pi))[None], jnp.log(jnp.asarray(mu))[None], math.inf)
    grad_log_pi = np.eye(2) - pi  # row a: d log pi(a) / d logits
    estimate = sum(mu[a] * float(w[0, a]) * float(adv[0, a]) * grad_log_pi[a] for a in range(2))
    return estimate, sum(pi[a] * r[a] * grad_log_pi[a] for a in range(2))


def test_bpo_a2c_with_the_authors_advantage_is_v_traces_unbiased_gradient_and_eq11_counts_rho_twice():
    """Untruncated (rho_bar = c_bar = inf), the weight pi_old/mu with the authors' advantage (no rho_t
    on the first TD error) is V-trace's policy gradient, unbiased; with eq. (11)'s advantage the
    current step carries rho_t twice, as BPO-PPO's eq. (10) with eq. (11) does at theta = theta_old
    (docs/a2c.md): here (+0.23625, -0.23625) instead of (+0.21, -0.21), by hand."""
    estimate, true = _bandit_gradient(current_rho=False)
    np.testing.assert_allclose(estimate, true, atol=1e-6)
    np.testing.assert_allclose(true, [0.21, -0.21], atol=1e-9)
    estimate, _ = _bandit_gradient(current_rho=True)
    np.testing.assert_allclose(estimate, [0.23625, -0.23625], atol=1e-6)
