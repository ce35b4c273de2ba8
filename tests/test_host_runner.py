"""The host runner (Gymnasium environments on the CPU): bootstrapping at truncation on a
Gymnasium probe, agreement with the JAX runner, smoke runs of every MuJoCo task x {ppo, bpo} x
{mujoco_default, mujoco_gsde}, presets and variants, and the CLI."""

import dataclasses
import json

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

from bpo.agents.learner import keyed_update, make_learner
from bpo.agents.methods import validate
from bpo.config.presets import PAPER_TABLE1, apply_variant, best_bpo_row, get_preset, with_bpo_labelled
from bpo.config.schema import (
    A2CConfig,
    ConfigError,
    EpisodicTrainConfig,
    OnPolicyTrainConfig,
    PPOConfig,
    replace,
    to_dict,
    traced_hyperparams,
    with_bpo,
    with_method,
)
from bpo.runners.host import HostRunner
from bpo.training import run
from bpo.training.driver import drive
from envs.gymnasium_envs import MUJOCO_ENVS, _make, final_observations, gym_spec, make_vector_env
from experiments.cli import _parse_train_args, main


def probe_config(algo: str, **changes) -> OnPolicyTrainConfig:
    cfg = OnPolicyTrainConfig(
        preset="probe", env="TruncationProbe-v0", backend="gymnasium", total_timesteps=128 * 40,
        eval_every=128 * 40, eval_episodes=1, eval_in_background=False,
        ppo=PPOConfig(learning_rate=3e-3, n_steps=32, n_envs=4, batch_size=64, n_epochs=10, gamma=0.5, gae_lambda=1.0,
                      normalize_observations=False, pi_hidden=(16,), vf_hidden=(16,)),
    )
    cfg = replace(cfg, **{"bpo.replay_size": 256, "bpo.q_batch_size": 64, "bpo.mu_batch_size": 64, **changes})
    return with_bpo(cfg, algo == "bpo")


def test_same_step_auto_reset_returns_the_real_final_observation():
    env = make_vector_env("TruncationProbe-v0", 2)
    env.reset(seed=[0, 1])
    for _t in range(4):
        obs, _, terminated, truncated, info = env.step(np.zeros(2, np.int64))
        done = terminated | truncated
        final = final_observations(obs, done, info)
    env.close()
    assert done.all() and not terminated.any()
    np.testing.assert_array_equal(obs, [[0.0], [0.0]])  # the reset observation A
    np.testing.assert_array_equal(final, [[1.0], [1.0]])  # the real last observation B


@pytest.mark.parametrize("env_id", ["CartPole-v1", "TruncationProbe-v0",
                                    pytest.param("HalfCheetah-v5", marks=pytest.mark.mujoco)])
def test_in_process_vector_env_steps_as_gymnasiums_sync_vector_env(env_id):
    """The runner's vector env against Gymnasium's own (same-step auto-reset) on the same seeds and
    actions: observations, rewards, end flags and real final observations identical, step by step,
    through terminations (CartPole), truncations (the probe, HalfCheetah at 1,000 steps) and resets."""
    n, steps = 3, 1100 if env_id == "HalfCheetah-v5" else 300
    ours = make_vector_env(env_id, n)
    theirs = gym.vector.SyncVectorEnv([lambda: _make(env_id) for _ in range(n)], autoreset_mode=AutoresetMode.SAME_STEP)
    np.testing.assert_array_equal(ours.reset(seed=[1, 2, 3])[0], theirs.reset(seed=[1, 2, 3])[0])
    rng, ends = np.random.default_rng(0), 0
    for _ in range(steps):
        space = theirs.single_action_space
        action = (rng.integers(0, space.n, n) if isinstance(space, gym.spaces.Discrete)
                  else rng.uniform(space.low, space.high, (n,) + space.shape).astype(np.float32))
        a, b = ours.step(action), theirs.step(action)
        for x, y in zip(a[:4], b[:4], strict=True):
            np.testing.assert_array_equal(x, y)
        done = a[2] | a[3]
        np.testing.assert_array_equal(final_observations(a[0], done, a[4]), final_observations(b[0], done, b[4]))
        ends += int(done.sum())
    ours.close(), theirs.close()
    assert ends > 0


@pytest.mark.parametrize("algo", ["ppo", "bpo"])
def test_truncated_episodes_bootstrap_from_the_final_observation(algo):
    """v(B) = 1/(1-gamma) = 2 and v(A) = 1 only if a truncated step bootstraps from V(B), the real
    final observation; the Gymnasium vector env hands back A (the reset observation) instead,
    and treating truncation as termination gives v(B) ~ 1.4."""
    cfg = probe_config(algo)
    out = run(cfg)
    learner = make_learner(cfg, gym_spec(cfg.env))
    critic = jax.tree.map(lambda x: x[0], out.metrics["final"]["critic_params"])
    values = learner.critic_apply(critic, jnp.array([[0.0], [1.0]]))
    np.testing.assert_allclose(values, [1.0, 2.0], atol=0.1)


@pytest.mark.parametrize("algo,method", [("ppo", "ppo"), ("bpo", "ppo"), ("a2c", "a2c"), ("bpo", "a2c")])
def test_host_runner_trains_like_the_jax_runner_on_twin_environments(algo, method):
    """TruncationProbe-v0 exists as a Gymnasium env and as a functional JAX env with the same
    dynamics; its transitions do not depend on the actions or keys. The host runner splits keys as
    the JAX runner does, so both collect the same rollouts (actions, log-probabilities, observation
    statistics) and make the same updates. Evaluations and statistics agree exactly; parameters to
    float32 rounding (~1e-8), because XLA fuses the one-program JAX run differently from the
    host runner's separate calls. The same for A2C and BPO-A2C."""
    cfg = probe_config(algo, seeds=2, total_timesteps=128 * 3, eval_every=128, eval_in_background=True,
                       **{"ppo.normalize_observations": True, "ppo.n_epochs": 2})
    if method == "a2c":  # A2C's section with the probe's shared settings
        shared = {f.name: getattr(cfg.ppo, f.name) for f in dataclasses.fields(A2CConfig)}
        cfg = with_method(cfg, "a2c", A2CConfig(**{**shared, "optimizer": "rmsprop"}))
    jax_run = run(replace(cfg, backend="jax"), seed_chunk=2).metrics
    host_run = run(cfg).metrics
    jax.tree.map(np.testing.assert_array_equal, jax_run["eval"], host_run["eval"])
    jax.tree.map(np.testing.assert_array_equal, jax_run["final"]["obs_stats"], host_run["final"]["obs_stats"])
    np.testing.assert_array_equal(jax_run["train"]["train_episodes"], host_run["train"]["train_episodes"])
    for part in ("actor_params", "critic_params"):
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7),
                     jax_run["final"][part], host_run["final"][part])
    for name in jax_run["train"]:
        np.testing.assert_allclose(jax_run["train"][name], host_run["train"][name], rtol=1e-4, atol=1e-6,
                                   err_msg=name)


@pytest.mark.mujoco
@pytest.mark.parametrize("algo", ["ppo", "bpo"])
def test_host_update_equals_the_learner_update_on_the_same_batch(algo):
    """A rollout collected by the host runner on HalfCheetah-v5, then one update. The host runner's
    compiled update equals, bit for bit, the learner's update as the JAX runner calls it for a
    chunk of 2 seeds (jitted, vmapped over seeds, time-major rows); a single seed outside vmap
    agrees to float32 rounding (XLA batches the matrix products differently)."""
    small = replace(get_preset("mujoco_default"), **{"bpo.replay_size": 256, "bpo.n_qvf_epochs": 2,
                                                     "bpo.n_mu_epochs": 2})
    cfg = replace(apply_variant(small, "ppo" if algo == "ppo" else "bpo_c1.5_rho1.5"),
                  seeds=2, total_timesteps=256, eval_every=256, eval_episodes=1,
                  **{"ppo.n_steps": 128, "ppo.batch_size": 64, "ppo.n_epochs": 2})
    runner = HostRunner(cfg, traced_hyperparams(cfg))
    captured = {}

    def capture_build(obs0, build=runner._build):
        out = build(obs0)
        update = runner._update

        def spy(state, key, rows):
            captured.update(state=state, key=key, rows={k: np.array(v) for k, v in rows.items()})
            result = update(state, key, rows)
            captured["host_state"] = result[1]
            return result

        runner._update = spy
        return out

    runner._build = capture_build
    drive(runner, cfg)
    state, key, rows, host_state = captured["state"], captured["key"], captured["rows"], captured["host_state"]
    learner, hp = make_learner(cfg, gym_spec(cfg.env)), traced_hyperparams(cfg)
    update = lambda st, k, r: keyed_update(learner, st, k, r, hp)  # noqa: E731
    chunk = jax.jit(jax.vmap(update))(state, key, {k: jnp.asarray(v) for k, v in rows.items()})[1]
    jax.tree.map(np.testing.assert_array_equal, host_state, chunk)
    for s in range(cfg.seeds):
        pick = lambda x: x[s]  # noqa: E731
        single = jax.jit(update)(jax.tree.map(pick, state), key[s], {k: jnp.asarray(v[s]) for k, v in rows.items()})[1]
        # atol 1e-7: Adam's step is about lr * sign(g) where a gradient is near zero, so a rounding
        # difference there moves a parameter by up to ~1e-7 (parameters are ~1e-2).
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7),
                     jax.tree.map(pick, host_state), single)


SMOKE = [(env, algo, preset) for env in MUJOCO_ENVS for algo in ("ppo", "bpo")
         for preset in ("mujoco_default", "mujoco_gsde")]


@pytest.mark.mujoco
@pytest.mark.parametrize("env,algo,preset", SMOKE)
def test_every_mujoco_task_runs_a_tiny_budget(env, algo, preset):
    """One rollout of at most 2,048 steps of the preset on the task (gSDE: 16 envs x 128 steps),
    with 2 FQE/mu epochs and inline evaluation (one episode) to keep CI short; evaluation in a
    worker process is tested below."""
    cfg = get_preset(preset, env)
    n_steps = 2048 // cfg.ppo.n_envs
    cfg = replace(cfg, seeds=1, total_timesteps=n_steps * cfg.ppo.n_envs, eval_every=4096, eval_episodes=1,
                  eval_in_background=False, **{"ppo.n_steps": n_steps, "bpo.n_qvf_epochs": 2, "bpo.n_mu_epochs": 2})
    cfg = with_bpo_labelled(cfg, algo == "bpo")
    out = run(cfg)
    ev = out.metrics["eval"]
    assert ev["eval_return"].shape == (1, 2) and np.all(np.isfinite(ev["eval_return"]))
    assert ev["eval_step"][0, -1] == 2048
    for key, value in out.metrics["train"].items():
        if key != "train_return":  # NaN when no episode ended in the rollout
            assert np.all(np.isfinite(value)), key
    assert out.eval_time_s > 0 and out.compile_time_s > 0


def test_presets_follow_the_paper_tables():
    d, g = get_preset("mujoco_default"), get_preset("mujoco_gsde")
    assert (d.total_timesteps, g.total_timesteps) == (1_500_000, 2_000_000)
    assert (d.ppo.n_steps, d.ppo.n_envs, d.ppo.batch_size, d.ppo.n_epochs, d.ppo.gae_lambda, d.ppo.ent_coef) == (
        2048, 1, 64, 10, 0.95, 0.001)
    assert (g.ppo.n_steps, g.ppo.n_envs, g.ppo.batch_size, g.ppo.n_epochs, g.ppo.clip_range, g.ppo.use_sde) == (
        512, 16, 128, 20, 0.4, True)
    assert (d.bpo.q_batch_size, d.bpo.mu_batch_size, d.bpo.n_qvf_epochs, g.bpo.n_qvf_epochs) == (256, 128, 20, 40)
    assert (g.bpo.weight_td, g.bpo.clip_targets, d.bpo.weight_td, d.bpo.clip_targets) == (False, False, True, True)
    # Table 5
    assert not get_preset("mujoco_gsde", "Ant-v5").ppo.normalize_observations
    assert get_preset("mujoco_gsde", "HalfCheetah-v5").ppo.log_std_init == -2.0
    assert get_preset("mujoco_gsde", "Hopper-v5").ppo.log_std_init == -1.0
    assert get_preset("mujoco_default", "Ant-v5").ppo.normalize_observations


def test_a_config_built_field_by_field_is_labelled_custom_not_a_preset_it_differs_from():
    """``OnPolicyTrainConfig()``'s defaults are no preset's (cartpole_ppo has 32 steps x 8 envs, not
    2048 x 1): its results are labelled 'custom'. ``EpisodicTrainConfig()`` is short_corridor's."""
    bare = OnPolicyTrainConfig()
    assert bare.preset == "custom" and bare != replace(get_preset("cartpole_ppo"), preset="custom")
    assert EpisodicTrainConfig() == get_preset("short_corridor")


def test_variants_are_the_rows_of_table_1_and_ablate_the_best_row():
    cfg = get_preset("mujoco_default", "Hopper-v5")
    row = apply_variant(cfg, "bpo_c1.0_rho1.5")
    assert (row.algo, row.returns.c_bar, row.returns.rho_bar, row.returns.traj) == ("bpo", 1.0, 1.5, "per_decision")
    assert apply_variant(cfg, "bpo_traj_c1.0").returns.traj == "traj"
    assert apply_variant(cfg, "ppo").algo == "ppo"
    # Hopper default: the best BPO row of Table 1 is traj (2770); the ablations start from it.
    assert best_bpo_row("Hopper-v5", "mujoco_default") == "bpo_traj_c1.0"
    no_qhat = apply_variant(cfg, "bpo_no_qhat")
    assert (no_qhat.returns.traj, no_qhat.bpo.use_q_hat, no_qhat.variant) == ("traj", False, "bpo_no_qhat")
    no_symlog = apply_variant(get_preset("mujoco_gsde", "HalfCheetah-v5"), "bpo_no_symlog")
    assert (no_symlog.returns.c_bar, no_symlog.returns.rho_bar, no_symlog.bpo.symlog_targets) == (1.5, 1.5, False)
    assert len(PAPER_TABLE1) == 5 and all(len(rows) == 5 for rows in PAPER_TABLE1.values())
    with pytest.raises(ConfigError, match="variant"):
        apply_variant(cfg, "bpo_c2")
    # The authors' presets run their "traj" row (configs.yaml ppo_bpo_zero1.0_traj): the shifted
    # product with rho_bar = 1.0, also under the ablations that start from it.
    for preset in ("mujoco_default_authors", "mujoco_authors_code"):
        theirs = get_preset(preset, "Hopper-v5")
        for variant in ("bpo_traj_c1.0", "bpo_no_qhat"):
            r = apply_variant(theirs, variant).returns
            assert (r.traj, r.rho_bar, r.c_bar, r.advantage) == ("traj_shifted", 1.0, 1.0, "authors")
        assert apply_variant(theirs, "bpo_c1.0_rho1.5").returns.traj == "per_decision"


@pytest.mark.parametrize("changes,field", [
    ({"env": "HalfCheetah-v5", "backend": "jax"}, "env"),
    ({"env": "Humanoid-v5"}, "env"),
    ({"backend": "brax"}, "backend"),
    ({"vector_mode": "threads"}, "vector_mode"),
    ({"variant": "bpo_fast"}, "variant"),
])
def test_invalid_gymnasium_configs_name_the_field(changes, field):
    with pytest.raises(ConfigError) as err:
        validate(replace(get_preset("mujoco_default"), **changes))
    assert err.value.field_name == field


@pytest.mark.mujoco
def test_cli_trains_a_mujoco_preset_with_tensorboard(tmp_path):
    out = tmp_path / "run"
    assert main(["train", "mujoco_default", "--env", "Hopper-v5", "--variant", "bpo_c1.0_rho1.0", "--seeds", "2",
                 "--total-timesteps", "256", "--ppo.n-steps", "128", "--eval-every", "128", "--eval-episodes", "1",
                 "--bpo.n-qvf-epochs", "1", "--bpo.n-mu-epochs", "1", "--tensorboard", "--no-progress",
                 "--out", str(out)]) == 0
    from bpo.infra.results import read_curve, read_summary

    summary = read_summary(out)
    assert (summary["env"], summary["variant"], summary["seeds"], summary["total_timesteps"]) == (
        "Hopper-v5", "bpo_c1.0_rho1.0", 2, 256)
    assert summary["train_steps_per_s"] > 0 and summary["eval_time_s"] > 0
    assert sorted({int(r["step"]) for r in read_curve(out)}) == [0, 128, 256]
    assert list((out / "tb").glob("events.out.tfevents.*"))
    # Gymnasium steps on the host, the learner recomputes log mu in its jitted update: they agree.
    assert summary["diagnostics"]["logprob_mismatch_sq"] < 1e-10 and not summary["warnings"]


def test_cli_env_flag_applies_table_5_and_rejects_unknown_variants(capsys):
    assert main(["train", "mujoco_gsde", "--env", "Ant-v5", "--variant", "nope"]) == 2
    assert "error: variant:" in capsys.readouterr().err


@pytest.mark.parametrize("preset", ["mujoco_default", "mujoco_gsde"])
def test_no_bpo_on_a_mujoco_preset_is_the_ppo_row_not_the_presets_bpo_row(preset, capsys):
    """The MuJoCo presets carry the row BPO (1.0, 1.5); ``--no-bpo`` runs PPO alone, so the run's
    variant, its folder and its table row are PPO's (they read BPO (1.0, 1.5)): the same config as
    ``--variant ppo``. A2C alone is A2C's row, BPO on A2C keeps the preset's row, and a config whose
    variant names another kind of run is refused by name."""
    alone = _parse_train_args([preset, "--env", "Hopper-v5", "--no-bpo"]).config
    assert (alone.variant, alone.algo) == ("ppo", "ppo")
    assert alone == _parse_train_args([preset, "--env", "Hopper-v5", "--variant", "ppo"]).config
    a2c = _parse_train_args([preset, "--method", "a2c", "--no-bpo"]).config
    assert (a2c.variant, a2c.algo) == ("a2c", "a2c")
    bpo_a2c = _parse_train_args([preset, "--method", "a2c"]).config
    assert (bpo_a2c.variant, bpo_a2c.algo) == ("bpo_c1.0_rho1.5", "bpo")
    assert with_bpo_labelled(get_preset(preset), False) == apply_variant(get_preset(preset), "ppo")
    with pytest.raises(ConfigError, match=r"^variant: 'bpo_c1.0_rho1.5' names .* ppo alone; allowed: \['', 'ppo'\]"):
        validate(replace(get_preset(preset), bpo=None))
    with pytest.raises(ConfigError, match=r"^variant: 'ppo' names .* BPO on ppo; allowed: \[''"):
        validate(replace(get_preset(preset), variant="ppo"))
    # the method's row follows --method: an A2C run is not labelled PPO
    assert _parse_train_args([preset, "--variant", "ppo", "--method", "a2c"]).config.variant == "a2c"


def test_a_flag_over_a_variants_field_never_keeps_the_variants_name(tmp_path):
    """The variant names the run's row and folder, so it must not name values the run lacks: a
    flag over a field that ``--variant`` sets is refused by the field (as a sweep's --set is); over
    a preset's own variant it leaves the run without one (labelled by its algorithm); a recorded
    config.json whose variant names another kind of run is refused when replayed."""
    # parsed, not run: a regression would otherwise train 1.5M steps
    with pytest.raises(ConfigError, match=r"^returns.c_bar: is set by --variant bpo_c1.0_rho1.5 \(to 1.0\)"):
        _parse_train_args(["mujoco_default", "--variant", "bpo_c1.0_rho1.5", "--returns.c-bar", "1.5"])
    with pytest.raises(ConfigError, match=r"^bpo.use_q_hat: is set by --variant bpo_no_qhat \(to False\)"):
        _parse_train_args(["mujoco_default", "--variant", "bpo_no_qhat", "--bpo.use-q-hat"])
    own = _parse_train_args(["mujoco_default", "--returns.c-bar", "1.5"]).config
    assert (own.variant, own.algo, own.returns.c_bar) == ("", "bpo", 1.5)
    same = _parse_train_args(["mujoco_default", "--variant", "bpo_c1.0_rho1.5", "--returns.c-bar", "1.0"]).config
    assert same == get_preset("mujoco_default")
    recorded = tmp_path / "config.json"
    recorded.write_text(json.dumps({**to_dict(get_preset("mujoco_default")), "variant": "ppo"}))
    with pytest.raises(ConfigError, match=r"^variant: 'ppo' names another kind of run than this one, BPO on ppo"):
        _parse_train_args([str(recorded)])


@pytest.mark.mujoco
def test_background_and_inline_evaluation_agree():
    """Evaluation in a worker process returns exactly what evaluation in the training loop does,
    in the same order, while the training loop spends less time on it."""
    cfg = replace(apply_variant(get_preset("mujoco_default", "HalfCheetah-v5"), "ppo"), seeds=2,
                  total_timesteps=256, eval_every=128, eval_episodes=2, **{"ppo.n_steps": 128})
    inline = run(replace(cfg, eval_in_background=False))
    background = run(cfg)
    np.testing.assert_array_equal(inline.metrics["eval"]["eval_return"], background.metrics["eval"]["eval_return"])
    np.testing.assert_array_equal(inline.metrics["eval"]["eval_step"], background.metrics["eval"]["eval_step"])
    assert inline.metrics["eval"]["eval_return"].shape == (2, 3)
    assert inline.eval_time_s >= inline.eval_worker_time_s > 0 and background.eval_worker_time_s > 0


def test_async_vector_envs_give_the_same_run_as_sync_ones():
    cfg = probe_config("ppo", seeds=2, total_timesteps=128 * 2, eval_every=128, **{"ppo.n_epochs": 2})
    sync, async_ = run(cfg).metrics, run(replace(cfg, vector_mode="async")).metrics
    jax.tree.map(np.testing.assert_array_equal, sync, async_)


@pytest.mark.mujoco
def test_same_config_and_seed_give_identical_results_on_the_host():
    cfg = replace(apply_variant(get_preset("mujoco_default", "Hopper-v5"), "ppo"), total_timesteps=512,
                  eval_every=256, eval_episodes=2, **{"ppo.n_steps": 256})
    first, second = run(cfg).metrics, run(cfg).metrics
    jax.tree.map(np.testing.assert_array_equal, first, second)
    other = run(replace(cfg, seed=1)).metrics
    assert not np.array_equal(first["train"]["pg_loss"], other["train"]["pg_loss"])
