"""The on-policy runner (PPO / BPO-PPO): bootstrapping at truncation on a probe environment,
tiny-budget runs of every preset with both algorithms, determinism, vmapped hyperparameters,
and invalid inputs rejected before compiling."""

import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bpo.cli import main
from bpo.config import ConfigError, OnPolicyTrainConfig, PPOConfig, replace, traced_hyperparams
from bpo.validation import validate
from bpo.learner import make_learner
from bpo.presets import PRESETS
from bpo.runners.onpolicy import make_train
from bpo.train import run
from envs import make_env
from envs.functional import auto_reset_step

# Presets on JAX environments; the Gymnasium (MuJoCo) presets are run in tests/test_host_runner.py.
ON_POLICY = sorted(name for name, cfg in PRESETS.items() if isinstance(cfg, OnPolicyTrainConfig) and cfg.backend == "jax")


def tiny(cfg: OnPolicyTrainConfig, **changes) -> OnPolicyTrainConfig:
    """One rollout, one evaluation episode: enough to compile and run every piece once."""
    rollout = cfg.ppo.n_steps * cfg.ppo.n_envs
    return replace(cfg, total_timesteps=rollout, eval_every=rollout, eval_episodes=1, **changes)


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
        preset="probe", env="TruncationProbe-v0", algo=algo, total_timesteps=128 * 40, eval_every=128 * 40,
        eval_episodes=1,
        ppo=PPOConfig(learning_rate=3e-3, n_steps=32, n_envs=4, batch_size=64, n_epochs=10, gamma=0.5, gae_lambda=1.0,
                      normalize_observations=False, pi_hidden=(16,), vf_hidden=(16,)),
    )
    cfg = replace(base, **{"bpo.replay_size": 256, "bpo.q_batch_size": 64, "bpo.mu_batch_size": 64})
    out = jax.jit(make_train(cfg))(jax.random.PRNGKey(0), traced_hyperparams(cfg))
    learner = make_learner(cfg, make_env(cfg.env).spec)
    values = learner.critic_apply(out["final"]["critic_params"], jnp.array([[0.0], [1.0]]))
    np.testing.assert_allclose(values, [1.0, 2.0], atol=0.1)


@pytest.mark.parametrize("name", ON_POLICY)
@pytest.mark.parametrize("algo", ["ppo", "bpo"])
def test_every_preset_runs_a_tiny_budget(name, algo):
    cfg = tiny(PRESETS[name], algo=algo, seeds=2)
    out = run(cfg)
    ev = out.metrics["eval"]
    assert ev["eval_return"].shape == (2, 2) and np.all(np.isfinite(ev["eval_return"]))
    assert np.all(ev["eval_step"][:, -1] == cfg.total_timesteps)
    for key, value in out.metrics["train"].items():
        if key != "train_return":  # NaN when no episode finished within the rollout
            assert np.all(np.isfinite(value)), key


@pytest.mark.parametrize("algo", ["ppo", "bpo"])
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


@pytest.mark.parametrize("changes,field", [
    ({"ppo.batch_size": 100}, "ppo.batch_size"),
    ({"ppo.use_sde": True}, "ppo.use_sde"),
    ({"ppo.sde_sample_freq": 0}, "ppo.sde_sample_freq"),
    ({"ppo.gamma": 1.0}, "ppo.gamma"),
    ({"ppo.gae_lambda": 1.5}, "ppo.gae_lambda"),
    ({"ppo.clip_range": 0.0}, "ppo.clip_range"),
    ({"ppo.activation": "gelu"}, "ppo.activation"),
    ({"env": "Pong-v0"}, "env"),
    ({"bpo.advantage": "gae"}, "bpo.advantage"),
    ({"bpo.replay_size": 64}, "bpo.replay_size"),
])
def test_invalid_on_policy_configs_name_the_field(changes, field):
    with pytest.raises(ConfigError) as err:
        validate(replace(PRESETS["cartpole_ppo"], **changes))
    assert err.value.field_name == field


@pytest.mark.parametrize("argv,field", [
    (["train", "cartpole_ppo", "--ppo.batch-size", "100"], "ppo.batch_size"),
    (["train", "pendulum_ppo", "--ppo.sde-sample-freq", "0"], "ppo.sde_sample_freq"),
    (["train", "cartpole_ppo", "--total-timesteps", "0"], "total_timesteps"),
    (["train", "cartpole_ppo", "--bpo.rho-bar", "-1"], "bpo.rho_bar"),
])
def test_cli_rejects_bad_input_before_compiling(argv, field, capsys, caplog):
    jax.config.update("jax_log_compiles", True)
    try:
        with caplog.at_level(logging.WARNING):
            assert main(argv) == 2
    finally:
        jax.config.update("jax_log_compiles", False)
    assert f"error: {field}:" in capsys.readouterr().err
    assert not [r for r in caplog.records if "Compiling" in r.getMessage()]


def test_cli_trains_an_on_policy_preset(tmp_path):
    out = tmp_path / "run"
    assert main(["train", "cartpole_ppo", "--algo", "bpo", "--seeds", "2", "--total-timesteps", "512",
                 "--eval-every", "256", "--eval-episodes", "1", "--no-progress", "--out", str(out)]) == 0
    from bpo.results import read_curve, read_summary

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


@pytest.mark.parametrize("preset,switches", [
    ("cartpole_ppo", {"bpo.traj": "traj", "bpo.use_q_hat": False, "bpo.advantage": "eq11",
                      "bpo.weight_on_advantage": True, "bpo.weight_td": False, "bpo.lr_schedule": "constant",
                      "bpo.trust_region_delta": 0.05}),
    ("cartpole_continuous_ppo", {"bpo.traj": "traj_shifted", "bpo.symlog_targets": False, "bpo.clip_actions": False,
                                 "bpo.clip_targets": False, "bpo.layer_norm": False, "bpo.bootstrap_net": "target",
                                 "bpo.trust_region_delta": 0.01, "bpo.trust_region_criterion": "mean_k3"}),
])
def test_bpo_switches_and_ablations_run(preset, switches):
    """Both trajectory truncation modes, both ablations (no Q-hat, no symlog), eq. (11), the
    weight-on-advantage form, Trust Region Masking and the stabilisers switched off all compile and
    stay finite."""
    cfg = replace(tiny(PRESETS[preset], algo="bpo"), total_timesteps=2 * 256, **switches)
    out = run(cfg)
    for key, value in out.metrics["train"].items():
        if key != "train_return":
            assert np.all(np.isfinite(value)), key
