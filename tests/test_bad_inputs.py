"""Bad input of every kind stops with a message that names the field (or argument) and what is
allowed, with exit code 2, before anything is compiled or written."""

import logging

import jax
import pytest

import bpo.runners.host  # noqa: F401 - modules that build constant arrays when imported: not the run's compile
import bpo.runners.onpolicy  # noqa: F401
import envs  # noqa: F401
import experiments.commands  # noqa: F401
from bpo.cli import main
from bpo.validation import validate
from bpo.presets import get_preset

# Validating a config builds its environment once to read its spec; gymnax turns a few constants
# into arrays then (tiny jits, cached per process). Done here, so a compile seen below is the run's.
for _name in ("cartpole_ppo", "pendulum_ppo", "short_corridor"):
    validate(get_preset(_name))

# (argv, expected text of the error message)
BAD_INPUTS = [
    (["train", "cartpole_ppo", "--ppo.learning-rate", "-1"], "ppo.learning_rate: must be a finite number > 0, got -1.0"),
    (["train", "cartpole_ppo", "--ppo.gamma", "1.0"], "ppo.gamma: must be in [0, 1), got 1.0"),
    (["train", "cartpole_ppo", "--ppo.gae-lambda", "1.5"], "ppo.gae_lambda: must be in [0, 1], got 1.5"),
    (["train", "cartpole_ppo", "--ppo.batch-size", "100"], "ppo.batch_size: must divide n_steps * n_envs = 256, got 100"),
    (["train", "cartpole_ppo", "--bpo.replay-size", "64"], "bpo.replay_size: must hold at least one batch"),
    (["train", "cartpole_ppo", "--seeds", "0"], "seeds: must be an integer >= 1, got 0"),
    (["train", "cartpole_ppo", "--bpo.c-bar", "0"], "bpo.c_bar: must be a number > 0 (inf allowed), got 0.0"),
    (["train", "cartpole_ppo", "--ppo.sde-sample-freq", "0"], "ppo.sde_sample_freq: must be -1 (once per rollout)"),
    (["train", "cartpole_ppo", "--ppo.use-sde"], "ppo.use_sde: needs continuous actions; CartPole-v1 has"),
    (["train", "pendulum_ppo", "--bpo.mu-loss", "reverse_kl"], "bpo.mu_loss: chooses between the discrete losses"),
    (["train", "cartpole_ppo", "--env", "Hopper-v5"], "(a MuJoCo task: add --backend gymnasium, or --backend mjx"),
    (["train", "cartpole_ppo", "--backend", "mjx"], "env: must be one of ['Ant-v5', 'HalfCheetah-v5', 'Hopper-v5', "),
    (["train", "no_such_preset"], "preset: unknown preset 'no_such_preset'; allowed: ["),
    (["train", "mujoco_default", "--variant", "bpo_c9"], "variant: unknown variant 'bpo_c9'; allowed: ['ppo', "),
    (["train", "short_corridor", "--eval-every", "7"], "eval_every: must divide"),
    (["train", "short_corridor", "--total-timesteps", "1000"], "total_timesteps: preset 'short_corridor' is episodic"),
    (["train", "short_corridor", "--bpo.trust-region-delta", "0.1"], "bpo.trust_region_delta: Trust Region Masking "
                                                                       "is a BPO-PPO option"),
    (["train", "cartpole_ppo", "--algo", "ppo", "--bpo.trust-region-delta", "0.1"],
     "bpo.trust_region_delta: masks segments by pi/mu"),
    (["train", "cartpole_ppo", "--checkpoint-every", "-1"], "checkpoint_every: must be an integer >= 0, got -1"),
    (["train", "cartpole_ppo", "--seed-chunk", "-2"], "seed_chunk: must be an integer >= 0, got -2"),
    (["train", "--resume", "/nonexistent/run"], "resume: no checkpoint in '/nonexistent/run/checkpoint'"),
    (["sweep", "--preset", "cartpole_ppo", "--grid", "bpo.cbar=1,2"], "bpo.cbar: no such field in bpo; allowed: ["),
    (["sweep", "--preset", "cartpole_ppo", "--set", "total_timesteps=many"],
     "total_timesteps: must be of type int, got 'many'"),
    (["sweep", "table1", "--workers", "0"], "workers: must be an integer >= 1, got 0"),
    (["sweep", "table9"], "sweep: no sweep file"),
    (["table", "/nonexistent/results"], "results_dir: '/nonexistent/results' is not a folder"),
    (["reproduce", "mujoco-small", "--envs", "CartPole-v1"], "envs: 'CartPole-v1' is not a MuJoCo environment"),
    (["verify-variance", "--n-random", "0"], "n_random: must be an integer in [1, 10000], got 0"),
    (["frobnicate"], "command: unknown 'frobnicate'; allowed: ["),
]


@pytest.mark.parametrize("argv,message", BAD_INPUTS, ids=[" ".join(a[:3]) for a, _ in BAD_INPUTS])
def test_bad_input_is_named_before_anything_compiles(argv, message, capsys, caplog, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # nothing may be written: the folder stays empty
    with jax.log_compiles(True), caplog.at_level(logging.DEBUG):
        code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"error: {message}" in err or message in err, err
    assert not [r for r in caplog.records if "Compiling" in r.getMessage()]
    assert not any(tmp_path.iterdir())


def test_there_are_at_least_fifteen_kinds():
    assert len({m.split(":")[0] for _, m in BAD_INPUTS}) >= 15
