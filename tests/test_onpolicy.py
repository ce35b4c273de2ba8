"""The on-policy runner (PPO / BPO-PPO): bootstrapping at truncation on a probe environment,
tiny-budget runs of every preset with both algorithms, determinism, vmapped hyperparameters, and
what each BPO switch and ablation changes in the learner (bad inputs: tests/test_bad_inputs.py)."""

from functools import cache

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bpo.agents.learner import make_learner
from bpo.agents.methods import validate
from bpo.config.presets import BUILT_IN, PRESETS
from bpo.config.schema import OnPolicyTrainConfig, PPOConfig, replace, traced_hyperparams, with_bpo
from bpo.core.networks import Actor
from bpo.training import make_train, run
from envs import make_env
from envs.functional import auto_reset_step
from experiments.cli import main

# Presets on JAX environments; the Gymnasium (MuJoCo) presets are run in tests/test_host_runner.py.
ON_POLICY = sorted(name for name, cfg in PRESETS.items()
                   if name in BUILT_IN and isinstance(cfg, OnPolicyTrainConfig) and cfg.backend == "jax")


def tiny(cfg: OnPolicyTrainConfig, algo: str, **changes) -> OnPolicyTrainConfig:
    """One rollout, one evaluation episode: enough to compile and run every piece once; BPO on the
    preset's method (``algo`` 'bpo') or the method alone (its name)."""
    rollout = cfg.settings.n_steps * cfg.settings.n_envs
    return replace(with_bpo(cfg, algo == "bpo"), total_timesteps=rollout, eval_every=rollout, eval_episodes=1,
                   **changes)


def test_auto_reset_keeps_the_final_observation():
    env = make_env("TruncationProbe-v0")
    state, obs = env.reset(jax.random.PRNGKey(0))
    finals, observations, truncs = [], [], []
    for t in range(6):
        step = auto_reset_step(env, jax.random.PRNGKey(t), state, jnp.int32(0))
        state = step.state
        finals.append(float(step.final_obs[0]))
        observations.append(float(step.obs[0]))
        truncs.append(bool(step.truncated))
    assert truncs == [False, False, False, True, False, False]
    assert finals[3] == 1.0 and observations[3] == 0.0  # real final obs B, then the reset obs A


@pytest.mark.parametrize("algo", ["ppo", "bpo"])
def test_truncated_episodes_bootstrap_from_the_final_observation(algo):
    """Probe: v(B) = 1/(1-gamma) = 2 and v(A) = 1 only if truncated steps bootstrap from V(final obs).
    Treating truncation as termination would give v(B) ~ 1.4, bootstrapping from the reset
    observation ~ 1.5 at the last step."""
    base = OnPolicyTrainConfig(
        preset="probe", env="TruncationProbe-v0", total_timesteps=128 * 40, eval_every=128 * 40,
        eval_episodes=1,
        ppo=PPOConfig(learning_rate=3e-3, n_steps=32, n_envs=4, batch_size=64, n_epochs=10, gamma=0.5, gae_lambda=1.0,
                      normalize_observations=False, pi_hidden=(16,), vf_hidden=(16,)),
    )
    cfg = with_bpo(replace(base, **{"bpo.replay_size": 256, "bpo.q_batch_size": 64, "bpo.mu_batch_size": 64}),
                   algo == "bpo")
    out = jax.jit(make_train(cfg))(jax.random.PRNGKey(0), traced_hyperparams(cfg))
    learner = make_learner(cfg, make_env(cfg.env).spec)
    values = learner.critic_apply(out["final"]["critic_params"], jnp.array([[0.0], [1.0]]))
    np.testing.assert_allclose(values, [1.0, 2.0], atol=0.1)


SLOW_PRESET_RUNS = {("acrobot_ppo", "bpo"), ("mountaincar_continuous_ppo", "bpo")}  # over 30 s on 2 cores


@pytest.mark.parametrize("name,algo", [
    pytest.param(name, algo, id=f"{algo}-{name}", marks=pytest.mark.slow if (name, algo) in SLOW_PRESET_RUNS else ())
    for algo in ("alone", "bpo") for name in ON_POLICY])
def test_every_preset_runs_a_tiny_budget(name, algo):
    """The preset's method alone (PPO or A2C) and BPO on it."""
    cfg = tiny(PRESETS[name], algo=PRESETS[name].method if algo == "alone" else algo, seeds=2)
    out = run(cfg)
    ev = out.metrics["eval"]
    assert ev["eval_return"].shape == (2, 2) and np.all(np.isfinite(ev["eval_return"]))
    assert np.all(ev["eval_step"][:, -1] == cfg.total_timesteps)
    for key, value in out.metrics["train"].items():
        if key != "train_return":  # NaN when no episode finished within the rollout
            assert np.all(np.isfinite(value)), key


def test_a_rollout_in_which_no_episode_ends_records_nan_as_the_host_runner_does():
    """Pendulum's episodes last 200 steps: rollouts of 16 steps end none until the 13th. Its
    training return is NaN, not 0, which the summary and TensorBoard would average with real returns."""
    cfg = replace(tiny(PRESETS["pendulum_ppo"], algo="ppo"), total_timesteps=16 * 14, eval_every=16 * 14,
                  **{"ppo.n_envs": 1, "ppo.n_steps": 16, "ppo.batch_size": 16})
    train = run(cfg).metrics["train"]
    episodes, returns = train["train_episodes"][0], train["train_return"][0]
    assert list(episodes) == [0] * 12 + [1, 0] and np.isnan(returns[episodes == 0]).all()
    assert np.isfinite(returns[12]) and returns[12] < 0  # Pendulum's rewards are all negative


@pytest.mark.parametrize("algo", ["ppo", pytest.param("bpo", marks=pytest.mark.slow)])
def test_same_config_and_seed_give_identical_results(algo):
    cfg = replace(tiny(PRESETS["pendulum_ppo"], algo=algo), total_timesteps=2 * 4096)
    first, second = run(cfg).metrics, run(cfg).metrics
    jax.tree.map(np.testing.assert_array_equal, first, second)
    other = run(replace(cfg, seed=1)).metrics
    assert not np.array_equal(first["train"]["pg_loss"], other["train"]["pg_loss"])


def test_traced_hyperparameters_vmap_like_seeds():
    cfg = replace(tiny(PRESETS["cartpole_ppo"], algo="bpo"), total_timesteps=2 * 256)
    train = make_train(cfg)
    hp = traced_hyperparams(cfg)
    key = jax.random.PRNGKey(0)
    c_bars = jnp.array([1.0, 2.0])
    lrs = jnp.array([1e-3, 3e-3])
    batched = jax.jit(jax.vmap(lambda c, lr: train(key, hp._replace(c_bar=c, learning_rate=lr))))(c_bars, lrs)
    for i in range(2):
        single = jax.jit(train)(key, hp._replace(c_bar=c_bars[i], learning_rate=lrs[i]))
        np.testing.assert_allclose(batched["train"]["pg_loss"][i], single["train"]["pg_loss"], rtol=2e-4, atol=1e-6)
    assert not np.allclose(batched["train"]["pg_loss"][0], batched["train"]["pg_loss"][1])


def test_cli_trains_an_on_policy_preset(tmp_path):
    out = tmp_path / "run"
    assert main(["train", "cartpole_ppo", "--bpo", "--seeds", "2", "--total-timesteps", "512",
                 "--eval-every", "256", "--eval-episodes", "1", "--no-progress", "--out", str(out)]) == 0
    from bpo.infra.results import read_curve, read_summary

    summary = read_summary(out)
    assert summary["algo"] == "bpo" and summary["step_unit"] == "env_step" and summary["total_timesteps"] == 512
    steps = sorted({int(r["step"]) for r in read_curve(out)})
    assert steps == [0, 256, 512]
    assert (out / "train_metrics.csv").read_text().startswith("update,")
    # The off-policy diagnostics reach the summary and the curve; the rollout and the learner agree.
    diag = summary["diagnostics"]
    assert abs(diag["logprob_mismatch"]) < 1e-6 and diag["logprob_mismatch_sq"] < 1e-10 and not summary["warnings"]
    assert 0 < diag["ess_frac"] <= 1 and diag["is_ratio_min"] <= diag["is_ratio_mean"] <= diag["is_ratio_max"]
    assert all(k in read_curve(out)[-1] for k in ("ess_frac", "kl_pi_mu_k3", "kl_mu_pi_exact", "c_truncated_frac"))


# --- What each BPO switch and ablation changes -------------------------------------------------
# Three updates of the learner (``bpo.agents.learner``, as both runners call it) on synthetic rollouts
# collected by its acting policy: the first by mu = pi (every ratio pi/mu is 1), the next two by mu
# after behaviour steps (ratios != 1). Observations, rewards and terminations are random; small
# networks and batches: one compile per configuration. c_bar = 1, so that per-decision and
# trajectory-level truncation differ. Rewards are 10 (one step in ten: values above 1, where
# symlog matters; r-hat = 2 r Q - r^2 < 0 there, so Q-hat's targets are clipped at 0) or 0.001
# (r-hat > 0 as soon as Q > 0.0005: Q-hat is not zero from the start).
SWITCH_SIZES = {"total_timesteps": 3 * 64, "ppo.n_steps": 16, "ppo.n_envs": 4, "ppo.batch_size": 32, "ppo.n_epochs": 4,
                "ppo.pi_hidden": (16,), "ppo.vf_hidden": (16,), "bpo.q_hidden": (16,), "bpo.replay_size": 192,
                "bpo.q_batch_size": 32, "bpo.mu_batch_size": 32, "bpo.n_qvf_epochs": 2, "bpo.n_mu_epochs": 2,
                "returns.c_bar": 1.0}
PPO_METRICS = ("pg_loss", "value_loss", "clip_frac", "approx_kl", "entropy")
BEHAVIOUR_METRICS = ("q_loss", "q_hat_loss", "mu_loss")


@cache
def switch_setup(preset: str, switches: tuple = ()):
    """(config, learner, hp, jitted collect(state, key) -> rows, jitted update, initial state)."""
    cfg = validate(replace(with_bpo(PRESETS[preset], True), **{**SWITCH_SIZES, **dict(switches)}))
    spec = make_env(cfg.env).spec
    learner = make_learner(cfg, spec)
    hp = traced_hyperparams(cfg)
    n_steps, n_envs = cfg.ppo.n_steps, cfg.ppo.n_envs

    def collect(state, key):
        k_obs, k_act, k_sde, k_reward, k_term = jax.random.split(key, 5)
        # One observation sequence per environment: step t's next observation is step t+1's.
        sequence = jax.random.normal(k_obs, (n_steps + 1, n_envs, spec.obs_dim))
        raw, raw_next = sequence[:-1], sequence[1:]
        action, _, log_prob, obs, _ = learner.act(state, k_act, k_sde, raw, learner.sde_init(), 0)
        terminated = jax.random.bernoulli(k_term, 0.1, (n_steps, n_envs)).astype(jnp.float32)
        reward = jnp.where(jax.random.bernoulli(k_reward, 0.1, (n_steps, n_envs)), 10.0, 0.001)
        return {"obs": obs, "raw_obs": raw, "action": action, "log_prob": log_prob, "reward": reward,
                "terminated": terminated, "truncated": jnp.zeros_like(terminated),
                "next_obs": learner.normalize(state.stats, raw_next), "raw_next_obs": raw_next}

    keys = jax.random.split(jax.random.PRNGKey(0), 4)
    state = learner.init(tuple(keys[:3]), hp, jax.random.normal(keys[3], (n_envs, spec.obs_dim)))
    return cfg, learner, hp, jax.jit(collect), jax.jit(learner.update), state


def update_once(preset, switches, state, index):
    _, _, hp, collect, update, _ = switch_setup(preset, switches)
    k_rows, k_ppo, k_beh = jax.random.split(jax.random.PRNGKey(100 + index), 3)
    return update(state, k_ppo, k_beh, collect(state, k_rows), hp)


@cache
def three_updates(preset: str, switches: tuple = ()):
    """The metrics of three updates, each an array [update]; and the final learner state."""
    state, history = switch_setup(preset, switches)[-1], []
    for i in range(3):
        state, metrics = update_once(preset, switches, state, i)
        history.append(metrics)
    metrics = {k: np.array([m[k] for m in history]) for k in history[0]}
    for key, value in metrics.items():
        assert np.all(np.isfinite(value)), (preset, switches, key)
    return metrics, state


def same(a, b):
    return np.allclose(a, b, rtol=1e-4, atol=1e-6)


def test_switch_runs_start_on_policy_and_then_leave_it():
    metrics, _ = three_updates("cartpole_ppo")
    assert metrics["is_ratio_min"][0] > 0.999 and metrics["is_ratio_max"][0] < 1.001  # mu = pi at the start
    assert np.all(metrics["is_ratio_max"][1:] > 1.001) and np.all(metrics["is_ratio_min"][1:] < 0.999)


# Switches of the target update: the returns, the advantages, the PPO ratio, Trust Region Masking.
# They act through pi/mu, so the first update (mu = pi) is the default's; the later ones differ in
# ``changed``. ``value_targets_kept``: the value targets (returns) are the default's, so the second
# update's value loss is too.
PPO_SWITCHES = [
    ("cartpole_ppo", {"returns.traj": "traj"}, ("pg_loss", "value_loss"), False),
    ("cartpole_continuous_ppo", {"returns.traj": "traj_shifted"}, ("pg_loss", "value_loss"), False),
    ("cartpole_ppo", {"returns.advantage": "authors"}, ("pg_loss",), True),
    ("cartpole_ppo", {"returns.weight_on_advantage": True}, ("pg_loss", "clip_frac", "approx_kl"), True),
    ("cartpole_ppo", {"returns.trust_region_delta": 1e-3}, ("pg_loss",), True),
    ("cartpole_continuous_ppo", {"returns.trust_region_delta": 1e-4}, ("pg_loss",), True),
    ("cartpole_continuous_ppo", {"returns.trust_region_delta": 1e-4, "returns.trust_region_criterion": "mean_k3"},
     ("pg_loss",), True),
]


@pytest.mark.parametrize("preset,switches,changed,value_targets_kept", PPO_SWITCHES,
                         ids=[f"{p}:{','.join(f'{k}={v}' for k, v in s.items())}" for p, s, _, _ in PPO_SWITCHES])
def test_target_update_switches_act_through_the_ratios(preset, switches, changed, value_targets_kept):
    base, _ = three_updates(preset)
    metrics, _ = three_updates(preset, tuple(switches.items()))
    for key in PPO_METRICS + BEHAVIOUR_METRICS:
        assert same(metrics[key][0], base[key][0]), f"{key} changed while mu = pi"
    for key in changed:
        assert not same(metrics[key][1:], base[key][1:]), f"{key} did not change"
    if value_targets_kept:
        assert same(metrics["value_loss"][1], base["value_loss"][1])
    if "returns.trust_region_delta" in switches:
        assert "trm_mask_rate" not in base
        assert metrics["trm_mask_rate"][0] == 0 and np.all(metrics["trm_mask_rate"][1:] > 0)


def test_trust_region_criteria_mask_differently():
    """The same delta bounds max |log pi/mu| or the mean k3 ~ (log pi/mu)^2 / 2, which is smaller: the
    k3 criterion masks fewer steps."""
    delta = (("returns.trust_region_delta", 1e-4),)
    by_max, _ = three_updates("cartpole_continuous_ppo", delta)
    by_k3, _ = three_updates("cartpole_continuous_ppo", delta + (("returns.trust_region_criterion", "mean_k3"),))
    assert np.all(by_k3["trm_mask_rate"][1:] < by_max["trm_mask_rate"][1:])


# Switches of the behaviour step (FQE of Q and Q-hat, mu): the PPO update runs before it, so every
# update's first PPO step is the default's; the first update's ``changed`` metrics differ.
BEHAVIOUR_SWITCHES = [
    ("cartpole_ppo", {"bpo.weight_td": False}, ("q_loss",)),
    ("cartpole_ppo", {"bpo.bootstrap_net": "target"}, ("q_loss",)),
    ("cartpole_ppo", {"bpo.layer_norm": False}, ("q_loss",)),
    # The preset's is linear: at the first update the rates differ by 0.3 %, which Q's loss shows
    # (mu's mean loss moves by ~1e-6, inside the comparison's tolerance).
    ("cartpole_ppo", {"bpo.lr_schedule": "constant"}, ("q_loss",)),
    ("cartpole_ppo", {"bpo.mu_loss": "reverse_kl"}, ("mu_loss",)),
    ("cartpole_ppo", {"bpo.use_q_hat": False}, ("mu_loss",)),
    ("cartpole_continuous_ppo", {"bpo.use_q_hat": False}, ("mu_loss",)),
    ("cartpole_continuous_ppo", {"bpo.clip_actions": False}, ("q_loss",)),
    ("cartpole_ppo", {"bpo.clip_targets": False}, ("q_hat_loss",)),
    # Early r-hat = 2 r Q - r^2 < 0 while Q ~ 0: only Q-hat's targets meet the lower bound 0.
    ("cartpole_ppo", {"bpo.clip_lower_bounds": False}, ("q_hat_loss",)),
    ("cartpole_ppo", {"bpo.q_init": "orthogonal"}, ("q_loss",)),
    ("cartpole_ppo", {"bpo.symlog_targets": False}, ("q_loss",)),
    ("cartpole_ppo", {"bpo.fqe_loss": "authors"}, ("q_loss",)),
    ("cartpole_ppo", {"bpo.q_hat_head": "softplus"}, ("q_hat_loss",)),
    ("cartpole_ppo", {"bpo.mu_ent_coef": 0.01}, ("mu_loss",)),
    ("cartpole_continuous_ppo", {"bpo.mu_ent_coef": 0.01}, ("mu_loss",)),
    ("cartpole_continuous_ppo", {"bpo.q_hat_head": "softplus"}, ("q_hat_loss",)),
    # r-hat and mu's Q-hat from the Polyak target networks: Q is fitted as before; mu's targets move.
    ("cartpole_ppo", {"bpo.value_net": "target"}, ("mu_loss",)),
    # The authors' code's bugs (docs/authors_code.md rows 14, 15, 17, 21).
    ("cartpole_ppo", {"bpo.q_hat_reward": "last_q_batch_reward"}, ("q_hat_loss",)),
    ("cartpole_continuous_ppo", {"bpo.q_hat_reward": "last_q_batch_reward"}, ("q_hat_loss",)),
    ("cartpole_continuous_ppo", {"bpo.fqe_unclipped_actions": True}, ("q_loss",)),
    # 64 of 192 rows at the first update: 2 minibatches an epoch instead of 6
    ("cartpole_ppo", {"bpo.replay_epoch_filled_only": True}, ("q_loss", "q_hat_loss", "mu_loss")),
]


@pytest.mark.parametrize("preset,switches,changed", BEHAVIOUR_SWITCHES,
                         ids=[f"{p}:{','.join(f'{k}={v}' for k, v in s.items())}" for p, s, _ in BEHAVIOUR_SWITCHES])
def test_behaviour_step_switches_change_what_they_govern(preset, switches, changed):
    base, _ = three_updates(preset)
    metrics, _ = three_updates(preset, tuple(switches.items()))
    for key in PPO_METRICS:
        assert same(metrics[key][0], base[key][0]), f"{key} changed before the behaviour step"
    for key in changed:
        assert not same(metrics[key][0], base[key][0]), f"{key} did not change"
    if changed == ("mu_loss",):  # mu is fitted after Q and Q-hat, which it does not feed back into
        assert same(metrics["q_loss"][0], base["q_loss"][0]) and same(metrics["q_hat_loss"][0], base["q_hat_loss"][0])
    if "bpo.clip_targets" in switches:
        assert np.sum(base["q_clip_frac"] + base["q_hat_clip_frac"]) > 0
        assert not np.any(metrics["q_clip_frac"]) and not np.any(metrics["q_hat_clip_frac"])
    if "bpo.clip_lower_bounds" in switches:  # only the lower bound binds this early
        assert np.all(base["q_hat_clip_frac"] > 0) and not np.any(metrics["q_hat_clip_frac"])
    if {"bpo.value_net", "bpo.q_hat_head", "bpo.clip_lower_bounds", "bpo.q_hat_reward"} & set(switches):  # Q as before
        assert same(metrics["q_loss"][0], base["q_loss"][0])
    if "bpo.symlog_targets" in switches:
        # Q's network regresses Q itself instead of symlog(Q): with values up to 10, larger errors.
        assert np.all(metrics["q_loss"] > 3 * base["q_loss"])


def test_constant_sde_features_hold_a_state_independent_gaussian_draw_per_environment():
    """``ppo.sde_features 'constant'`` (departures row 13), the authors' "gSDE": a ~ N(m(s), sigma^2)
    with sigma = exp(log_std) whatever the state, each environment's standard-normal draw held for
    sde_sample_freq steps and redrawn at the window's start, the log-probability the diagonal
    Gaussian's (a plain loop over the steps with the closed form)."""
    n_envs, freq, steps = 3, 4, 12
    cfg = validate(replace(PRESETS["pendulum_ppo"], **{"ppo.n_envs": n_envs, "ppo.sde_sample_freq": freq,
                                                       "ppo.sde_features": "constant", "ppo.log_std_init": -0.7}))
    spec = make_env(cfg.env).spec
    learner = make_learner(cfg, spec)
    keys = jax.random.split(jax.random.PRNGKey(0), 4)
    state = learner.init(tuple(keys[:3]), traced_hyperparams(cfg), jnp.zeros((n_envs, spec.obs_dim)))
    params = state.target.actor_params
    assert params["params"]["log_std"].shape == (1, spec.n_actions)
    sigma = np.sqrt(np.exp(-1.4) + 1e-6)  # exp(log_std), with gSDE's variance floor 1e-6
    sde, draws = learner.sde_init(), []
    for t, key in enumerate(jax.random.split(jax.random.PRNGKey(1), steps)):
        obs = jax.random.normal(jax.random.fold_in(key, 7), (n_envs, spec.obs_dim))
        k_act, k_sde = jax.random.split(key)
        action, _, log_prob, obs_n, sde = learner.act_with(params, state.stats, k_act, k_sde, obs, sde, t)
        dist = learner.dist_fn(params)(obs_n)
        np.testing.assert_allclose(dist.scale, sigma, rtol=1e-6)
        z = (np.asarray(action) - np.asarray(dist.loc)) / sigma
        expected = np.sum(-0.5 * z**2 - np.log(sigma) - 0.5 * np.log(2 * np.pi), axis=-1)
        np.testing.assert_allclose(log_prob, expected, rtol=1e-5)
        draws.append(z)
    for t in range(1, steps):
        assert np.allclose(draws[t], draws[t - 1], atol=1e-5) == (t % freq != 0), t
    assert len({round(float(z), 4) for z in draws[0][:, 0]}) == n_envs  # one draw per environment


def test_whole_step_minibatches_reach_every_minibatch_and_change_nothing_with_one_environment():
    """Row 26 (``ppo.whole_step_minibatches``): with 4 environments PPO's epochs draw other
    minibatches, so its losses change; with PPO's minibatch the whole rollout (then unchanged), the
    behaviour step's Q, Q-hat and mu losses still change, through its own minibatches (their index
    structure: tests/test_agents.py). With one environment the switch changes nothing, bit for bit."""
    switch = (("ppo.whole_step_minibatches", True),)
    base, _ = three_updates("cartpole_ppo")
    metrics, _ = three_updates("cartpole_ppo", switch)
    for key in ("pg_loss", "value_loss"):  # the value loss moves by 1e-4 only
        assert metrics[key][0] != base[key][0], f"{key} did not change"
    whole = (("ppo.batch_size", 64),)  # the rollout: one minibatch, every row in order
    base, _ = three_updates("cartpole_ppo", whole)
    metrics, _ = three_updates("cartpole_ppo", whole + switch)
    assert switch_setup("cartpole_ppo", whole + switch)[1].behaviour.step_rows == 4
    for key in PPO_METRICS:
        assert metrics[key][0] == base[key][0], f"{key} changed before the behaviour step"
    for key in BEHAVIOUR_METRICS:
        assert metrics[key][0] != base[key][0], f"{key} did not change"
    one_env = (("ppo.n_envs", 1), ("ppo.n_steps", 64))
    off, _ = three_updates("cartpole_ppo", one_env)
    on, _ = three_updates("cartpole_ppo", one_env + switch)
    for key in off:
        np.testing.assert_array_equal(on[key], off[key], err_msg=key)


@pytest.mark.parametrize("switch", ["bpo.mu_q_hat_batch_min", "bpo.mu_q_hat_unclipped_actions"])
def test_the_authors_mu_switches_change_mu_alone(switch):
    """The authors' eq. (16) (rows 15, 17): mu's loss changes, Q and Q-hat before it do not. Q-hat
    is positive (softplus head) and unclamped, or this early it sits at its floor everywhere and
    the switches have nothing to act on."""
    positive = (("bpo.q_hat_head", "softplus"), ("bpo.clip_targets", False))
    base, _ = three_updates("cartpole_continuous_ppo", positive)
    metrics, _ = three_updates("cartpole_continuous_ppo", positive + ((switch, True),))
    for key in PPO_METRICS + ("q_loss", "q_hat_loss"):
        assert same(metrics[key][0], base[key][0]), f"{key} changed"
    assert not same(metrics["mu_loss"][0], base["mu_loss"][0])


def test_unclipped_fqe_actions_fit_q_as_without_clipping_and_read_r_hat_clipped():
    """bpo.fqe_unclipped_actions with bpo.mu_q_hat_unclipped_actions (the authors' code, rows 22 and
    17): every action is read unclipped but r-hat's, so the first update's Q regression is exactly
    that of a run that clips no action, and Q-hat's, which regresses on r-hat = 2 r Q - r^2, is not
    (its loss is ~5e-6 this early: compared relatively)."""
    theirs = (("bpo.fqe_unclipped_actions", True), ("bpo.mu_q_hat_unclipped_actions", True))
    switch, _ = three_updates("cartpole_continuous_ppo", theirs)
    unclipped, _ = three_updates("cartpole_continuous_ppo", (("bpo.clip_actions", False),))
    assert switch["q_loss"][0] == unclipped["q_loss"][0]
    assert not np.allclose(switch["q_hat_loss"][0], unclipped["q_hat_loss"][0], rtol=1e-4, atol=0)


# Continuous actions: with clipped targets, Q-hat is clamped to [floor, r_hat_max / (1 - gamma^2)],
# a range of ~1e-4 this early, where mu's loss sees a constant; without the clip it does not.
@pytest.mark.parametrize("preset,other", [("cartpole_ppo", ()),
                                          ("cartpole_continuous_ppo", (("bpo.clip_targets", False),))])
def test_without_q_hat_mu_ignores_q_hat(preset, other):
    """The no-Q-hat ablation: mu's target is pi alone. From Q-hat networks that start elsewhere, the
    behaviour step gives bit-identical mu without Q-hat, and a different mu with it."""

    def mu_after_one_update(use_q_hat, shift):
        switches = (("bpo.use_q_hat", use_q_hat),) + other
        state = switch_setup(preset, switches)[-1]
        q_hat = state.behaviour.q_hat
        moved = jax.tree.map(lambda x: x + shift, q_hat.params)
        state = state._replace(behaviour=state.behaviour._replace(q_hat=q_hat._replace(params=moved,
                                                                                       target_params=moved)))
        new_state, _ = update_once(preset, switches, state, 0)
        return new_state.behaviour.mu_params

    jax.tree.map(np.testing.assert_array_equal, mu_after_one_update(False, 0.0), mu_after_one_update(False, 0.3))
    with_q_hat = jax.tree.leaves(mu_after_one_update(True, 0.0)), jax.tree.leaves(mu_after_one_update(True, 0.3))
    assert any(not np.array_equal(a, b) for a, b in zip(*with_q_hat, strict=True))


def test_without_q_hat_mu_tracks_pi():
    """Discrete actions: with pi held fixed (learning rate 0) and mu starting equal to it, the
    behaviour step without Q-hat keeps mu at pi up to Adam's noise; with Q-hat, which varies with
    the action, mu moves away from pi."""

    def gap(use_q_hat):
        cfg, _, hp, collect, update, state = switch_setup("cartpole_ppo", (("bpo.use_q_hat", use_q_hat),))
        frozen = hp._replace(learning_rate=jnp.float32(0.0))
        k_rows, k_ppo, k_beh = jax.random.split(jax.random.PRNGKey(7), 3)
        rows = collect(state, k_rows)
        new_state, _ = update(state, k_ppo, k_beh, rows, frozen)
        p = cfg.ppo
        actor = Actor(p.pi_hidden, 2, True, False, p.log_std_init, p.activation, p.ortho_init)
        pi = jax.nn.softmax(actor.apply(new_state.target.actor_params, rows["obs"])[0].loc)
        pi0 = jax.nn.softmax(actor.apply(state.target.actor_params, rows["obs"])[0].loc)
        mu = jax.nn.softmax(actor.apply(new_state.behaviour.mu_params, rows["obs"])[0].loc)
        np.testing.assert_array_equal(pi, pi0)  # pi did not move
        return float(jnp.max(jnp.abs(mu - pi)))

    without, with_q_hat = gap(False), gap(True)
    assert without < 0.005 and with_q_hat > 10 * without, (without, with_q_hat)  # seen: 7e-4 and 0.027
