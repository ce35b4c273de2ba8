"""Bad input of every kind is rejected by the real entry points before anything is compiled or
written: ``experiments.cli.main`` returns 2 with one ``error: FIELD: ...`` line naming the field (or
argument) and what is allowed; ``bpo.agents.methods.validate`` raises ``ConfigError`` with that field.
"""

import json
import logging
import math
import os
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import jax
import pytest

import bpo.runners.host  # noqa: F401 - modules that build constant arrays when imported: not the run's compile
import bpo.runners.onpolicy  # noqa: F401
import envs  # noqa: F401
import experiments.commands  # noqa: F401
from bpo.agents.methods import validate
from bpo.config.presets import get_preset
from bpo.config.schema import ConfigError, EpisodicBehaviourConfig, read_recorded_config, replace, to_dict, with_bpo
from experiments.arguments import list_options, repeated_list_options
from experiments.cli import main
from experiments.commands import SweepArgs

# Validating a config builds its environment once to read its spec; gymnax turns a few constants
# into arrays then (tiny jits, cached per process). Done here, so a compile seen below is the run's.
for _name in ("cartpole_ppo", "pendulum_ppo", "short_corridor"):
    validate(get_preset(_name))

# (argv, field named by the error, text the rest of the message must contain)
REPO = Path(__file__).resolve().parent.parent
FINISHED_RUN = REPO / "results" / "a2c" / "Pendulum-v1-pendulum_a2c-a2c"
CLI_BAD_INPUTS = [
    # On-policy presets (PPO / BPO-PPO).
    (["train", "cartpole_ppo", "--ppo.learning-rate", "-1"], "ppo.learning_rate",
     "must be a finite number > 0, got -1.0"),
    (["train", "cartpole_ppo", "--ppo.gamma", "1.0"], "ppo.gamma", "must be in [0, 1), got 1.0"),
    (["train", "cartpole_ppo", "--ppo.gae-lambda", "1.5"], "ppo.gae_lambda", "must be in [0, 1], got 1.5"),
    (["train", "cartpole_ppo", "--ppo.batch-size", "100"], "ppo.batch_size",
     "must divide n_steps * n_envs = 256, got 100"),
    (["train", "pendulum_ppo", "--ppo.sde-sample-freq", "0"], "ppo.sde_sample_freq", "must be -1 (once per rollout)"),
    (["train", "cartpole_ppo", "--ppo.use-sde"], "ppo.use_sde", "needs continuous actions; CartPole-v1 has"),
    (["train", "cartpole_ppo", "--total-timesteps", "0"], "total_timesteps", "must be an integer >= 1, got 0"),
    (["train", "mujoco_default", "--env", "Hopper-v5", "--backend", "threads", "--physics-threads", "100000"],
     "physics_threads", "must be an integer from 0 (one per core) to 1024, got 100000"),  # a thread failed: hung
    (["train", "cartpole_ppo", "--bpo.replay-size", "64"], "bpo.replay_size", "must hold at least one batch"),
    (["train", "cartpole_ppo", "--returns.c-bar", "0"], "returns.c_bar", "must be a number > 0 (inf allowed), got 0.0"),
    (["train", "cartpole_ppo", "--returns.rho-bar", "-1"], "returns.rho_bar",
     "must be a number > 0 (inf allowed), got -1.0"),
    (["train", "cartpole_ppo", "--ppo.ent-coef", "inf"], "ppo.ent_coef", "must be a finite number >= 0, got inf"),
    (["train", "pendulum_ppo", "--ppo.log-std-init", "nan"], "ppo.log_std_init", "must be a finite number, got nan"),
    (["train", "pendulum_ppo", "--bpo.mu-loss", "reverse_kl"], "bpo.mu_loss", "chooses between the discrete losses"),
    (["train", "cartpole_ppo", "--no-bpo", "--returns.trust-region-delta", "0.1"], "returns.trust_region_delta",
     "is read by BPO runs only, and this run has no behaviour step (ppo alone); add --bpo"),
    (["train", "short_corridor", "--no-bpo", "--returns.c-bar", "0.5"], "returns.c_bar",
     "is read by BPO runs only, and this run has no behaviour step (reinforce alone); add --bpo"),
    (["train", "cartpole_ppo", "--seeds", "0"], "seeds", "must be an integer >= 1, got 0"),
    # Counts beyond 32 bits (the programs count in int32).
    (["train", "short_corridor", "--episodes", "2147483648"], "episodes", "must be an integer <= 2,147,483,647"),
    (["train", "cartpole_ppo", "--total-timesteps", "2147483647"], "total_timesteps", "rounded up to whole rollouts"),
    # BPO on or off: the bpo section, not the flag it replaced; none of its fields without it.
    (["train", "cartpole_ppo", "--algo", "ppo"], "--algo", "was replaced by the bpo section: --bpo runs BPO"),
    (["train", "cartpole_ppo", "--no-bpo", "--bpo.q-lr", "0.1"], "bpo.q_lr",
     "is read by BPO runs only, and this run has no behaviour step (ppo alone); add --bpo"),
    (["train", "cartpole_ppo", "--variant", "ppo", "--bpo"], "--bpo", "contradicts --variant ppo"),
    (["train", "cartpole_a2c", "--variant", "ppo"], "variant", "'ppo' runs ppo alone; preset 'cartpole_a2c' runs"),
    # A method reads its own section: another method's flags would change nothing.
    (["train", "cartpole_ppo", "--a2c.n-steps", "3"], "a2c.n_steps",
     "sets method a2c's section; method ppo reads ppo: give --ppo.* (or --method a2c)"),
    (["train", "cartpole_a2c", "--ppo.batch-size", "3"], "ppo.batch_size",
     "sets method ppo's section; method a2c reads a2c: give --a2c.* (or --method ppo)"),
    (["train", "cartpole_ppo", "--env", "Hopper-v5"], "env",
     "(a MuJoCo task: add --backend gymnasium, threads or mjx"),
    (["train", "cartpole_ppo", "--backend", "mjx"], "env", "must be one of ['Ant-v5', 'HalfCheetah-v5', 'Hopper-v5', "),
    (["train", "cartpole_ppo", "--checkpoint-every", "-1"], "checkpoint_every", "must be an integer >= 0, got -1"),
    (["train", "cartpole_ppo", "--seed-chunk", "-2"], "seed_chunk", "must be an integer >= 0, got -2"),
    (["train", "no_such_preset"], "preset", "unknown preset 'no_such_preset'; allowed: ["),
    (["train", "no_such_preset"], "preset", "(a plug-in's presets need its module in BPO_PLUGINS: docs/methods.md)"),
    (["train", "short_corridor", "--tensorboard"], "--tensorboard",
     "applies to on-policy presets only; preset 'short_corridor' is episodic"),
    (["train", "short_corridor", "--track"], "--track", "applies to on-policy presets only"),
    (["train"], "preset", "missing; allowed: ["),
    (["train", "mujoco_default", "--variant", "bpo_c9"], "variant", "unknown variant 'bpo_c9'; allowed: ['ppo', "),
    (["train", "--resume", "/nonexistent/run"], "resume", "no checkpoint in '/nonexistent/run/checkpoint'"),
    (["train", "--resume"], "resume", "give the run's folder, the OUT it was trained into: bpo train --resume OUT"),
    (["train", "--resume", "--no-progress"], "resume", "give the run's folder"),
    # a trailing slash, as shell completion writes it, names the same folder (not an extra argument)
    (["train", "--resume", "/nonexistent/run/"], "resume", "no checkpoint in '/nonexistent/run/checkpoint'"),
    (["train", "--resume", str(FINISHED_RUN)], "resume", "holds a finished run (its summary.json is written"),
    (["train", "--resume", "/nonexistent/run/", "--seeds", "2"], "resume",
     "only --no-progress may follow --resume DIR, got ['--seeds', '2']"),
    # Episodic presets (REINFORCE / BPO-REINFORCE).
    (["train", "short_corridor", "--reinforce.lr-start", "-0.1"], "reinforce.lr_start", "must be a finite number > 0"),
    (["train", "short_corridor", "--reinforce.gamma", "1.2"], "reinforce.gamma", "must be in [0, 1], got 1.2"),
    (["train", "short_corridor", "--bpo.q-lr", "0"], "bpo.q_lr", "must be a finite number > 0, got 0.0"),
    (["train", "short_corridor", "--returns.lam", "1.5"], "returns.lam", "must be in [0, 1], got 1.5"),
    (["train", "short_corridor", "--returns.lam", "-0.1"], "returns.lam", "must be in [0, 1], got -0.1"),
    (["train", "short_corridor", "--returns.rho-bar", "0"], "returns.rho_bar",
     "must be a number > 0 (inf allowed), got 0.0"),
    (["train", "short_corridor", "--returns.c-bar", "-1"], "returns.c_bar",
     "must be a number > 0 (inf allowed), got -1.0"),
    (["train", "short_corridor", "--bpo.replay-size", "128"], "bpo.replay_size", "must hold at least one batch"),
    (["train", "short_corridor", "--seeds", "0"], "seeds", "must be an integer >= 1, got 0"),
    (["train", "short_corridor", "--env", "CartPole-v9"], "env", "ShortCorridor-v0"),
    (["train", "short_corridor", "--eval-every", "7"], "eval_every", "must divide episodes"),
    (["train", "short_corridor", "--total-timesteps", "1000"], "total_timesteps",
     "preset 'short_corridor' is episodic; set --episodes instead"),
    # The other commands.
    (["sweep", "--preset", "cartpole_ppo", "--grid", "bpo.cbar=1,2"], "bpo.cbar", "no such field in bpo; allowed: ["),
    (["sweep", "--preset", "cartpole_ppo", "--set", "total_timesteps=many"], "total_timesteps",
     "must be of type int, got 'many'"),
    (["sweep", "table1", "--workers", "0"], "workers", "must be an integer >= 1, got 0"),
    # a sweep also takes 'bpo' (BPO on the preset's method with its own settings): the list says so
    (["sweep", "--preset", "cartpole_ppo", "--variants", "bpo_c1.0"], "variant",
     "unknown variant 'bpo_c1.0'; allowed: ['bpo', 'ppo', "),
    # The variant names the row: a --set of what it sets would label the run with a c-bar it did not use.
    (["sweep", "table1_small", "--set", "returns.c_bar=2.0"], "returns.c_bar",
     "is set by the variant 'bpo_c1.5_rho1.5' (to 1.5), whose name labels the run's row"),
    (["sweep", "--preset", "mujoco_default", "--variants", "bpo_no_qhat", "--set", "bpo.use_q_hat=true"],
     "bpo.use_q_hat", "is set by the variant 'bpo_no_qhat' (to False)"),
    (["sweep", "--preset", "cartpole_ppo", "--set", "bpo.q_lr=1" + "0" * 400], "bpo.q_lr",
     "must be a number within float range"),
    (["sweep", "table1", "--group-rows", "--backend", "slurm"], "group_rows", "allowed with --backend local"),
    (["sweep", "table9"], "sweep", "no sweep file"),
    # A name is a folder under runs/, not a path (an absolute one wrote the sweep there).
    (["sweep", "--preset", "short_corridor", "--name", "/tmp/elsewhere"], "name", "not a path"),
    (["sweep", "--preset", "short_corridor", "--name", "../../up"], "name", "not a path"),
    (["sweep", "--preset", "short_corridor", "--name", ""], "name", "not a path"),
    (["sweep", "fig2", "--backend", "slurm", "--slurm-timeout-min", "-5"], "slurm_timeout_min",
     "must be an integer >= 1"),
    (["sweep", str(REPO / "results" / "classic" / "sweep.json")], "sweep", "not a sweep file (a Python module, .py)"),
    # Runs labelled with values they did not use: a grid value overridden by --set, a field swept twice,
    # two spellings of one value, a BPO field swept over runs without BPO (one run under two labels).
    (["sweep", "--preset", "short_corridor", "--variants", "bpo", "--grid", "returns.c_bar=1.0,1.5", "--set",
      "returns.c_bar=2.0"], "returns.c_bar", "is swept by the grid and also given one value (--set)"),
    (["sweep", "--preset", "short_corridor", "--variants", "bpo", "--grid", "returns.c_bar=1.0,inf",
      "returns.c_bar=2.0"], "returns.c_bar", "is swept by two grids"),
    (["sweep", "--preset", "short_corridor", "--variants", "bpo", "--grid", "returns.c_bar=1,1.0"], "grids",
     "'ShortCorridor-v0-short_corridor-bpo-returns.c_bar=1' and "
     "'ShortCorridor-v0-short_corridor-bpo-returns.c_bar=1.0' have the same configuration"),
    (["sweep", "--preset", "cartpole_ppo", "--variants", "bpo", "ppo", "--grid", "returns.c_bar=1.0,1.5"],
     "returns.c_bar", "is read by BPO runs only, and the ppo runs of the grid have no behaviour step"),
    (["sweep", "--preset", "short_corridor", "--variants", "bpo", "reinforce", "--grid", "bpo.q_lr=0.1,0.2"],
     "bpo.q_lr", "is read by BPO runs only, and the reinforce runs of the grid"),
    (["train", "short_corridor", "--out", ""], "out", "an empty path; allowed: a folder or file path"),
    # An unset variable as the folder to analyse: the current folder, which got table1.* and the aggregates.
    (["table", ""], "results_dir", "an empty path; allowed: a folder or file path"),
    (["plot", "--out", "plots", ""], "results_dir", "an empty path; allowed: a folder or file path"),
    (["evaluate", ""], "run", "an empty path; allowed: a folder or file path"),
    # After a boolean flag or an --opt=value, an empty argument is still the positional path.
    (["table", "--alternative=greater", ""], "results_dir", "an empty path; allowed: a folder or file path"),
    (["table", "--allow-skipped", ""], "results_dir", "an empty path; allowed: a folder or file path"),
    (["plot", "--per-seed", ""], "results_dir", "an empty path; allowed: a folder or file path"),
    (["plot", "--smooth", "-1", ""], "results_dir", "an empty path; allowed: a folder or file path"),
    (["evaluate", "runs/x", "--video", ""], "video", "an empty path; allowed: a folder or file path"),
    (["report", "--root="], "root", "an empty path; allowed: a folder or file path"),
    (["sweep", "fig2", "--out", ""], "out", "an empty path; allowed: a folder or file path"),
    (["table", str(REPO / "results" / "classic"), "--bootstrap-reps", str(10**20)], "bootstrap_reps",
     "must be an integer in [100, 100,000], got 100000000000000000000"),
    # A metric the runs lack is found once the output folder is made: it is removed again.
    (["plot", str(REPO / "results" / "classic"), "--out", "plots", "--metric", "nosuch"], "metric",
     "no run's curve.csv has 'nosuch'"),
    (["table", "/nonexistent/results"], "results_dir", "'/nonexistent/results' is not a folder"),
    (["reproduce", "table9"], "sweep", "no sweep file"),
    (["reproduce", "fig2", "--seeds", "0"], "seeds", "must be an integer >= 1, got 0"),
    (["reproduce", "classic", "--workers", "0"], "workers", "must be an integer >= 1, got 0"),
    (["reproduce", "fig2", "--set", "bpo.cbar=1"], "bpo.cbar", "no such field in bpo; allowed: ["),
    (["verify-variance", "--n-random", "0"], "n_random", "must be an integer in [1, 10000], got 0"),
    # The training run's own limits, before the exact and Monte Carlo checks (they came after them, as a traceback).
    (["verify-variance", "--seed", "4294967296"], "seed", "must be an integer in [0, 4294967295]"),
    (["verify-variance", "--train-episodes", "3000000000", "--checkpoints", "10"], "train_episodes",
     "must be an integer <= 2,147,483,647"),
    (["frobnicate"], "command", "unknown 'frobnicate'; allowed: ["),
]

EPISODIC, ON_POLICY = "short_corridor", "cartpole_ppo"
HUGE = 10**400  # an int beyond float range: no float field may take it
# (preset, changes to it, field named by the ConfigError, text the rest of the message must
# contain): fields and constraints that the command line above does not reach, and values of the
# wrong type, which its parser never produces, checked at the library's entry point. A renamed
# field makes its case fail (replace() rejects unknown fields), so no case can pass for the wrong
# reason.
VALIDATE_BAD_INPUTS = [
    # Found by tests/test_config_properties.py: the switch's divisibility check read a replay size of
    # None before the behaviour's own checks named it (a TypeError).
    (ON_POLICY, {"bpo.replay_size": None, "bpo.replay_epoch_filled_only": True}, "bpo.replay_size",
     "must be an integer >= 1, got None"),
    (EPISODIC, {"bpo": "reinforce"}, "bpo", "must be a EpisodicBehaviourConfig (BPO on reinforce) or None "
                                            "(reinforce alone), got str"),
    (EPISODIC, {"episodes": 0}, "episodes", "must be an integer >= 1, got 0"),
    (EPISODIC, {"eval_episodes": 0}, "eval_episodes", "must be an integer >= 1, got 0"),
    (EPISODIC, {"max_episode_steps": 0}, "max_episode_steps", "must be an integer >= 1, got 0"),
    (EPISODIC, {"reinforce.lr_end": math.nan}, "reinforce.lr_end", "must be a finite number > 0, got nan"),
    (EPISODIC, {"reinforce.optimizer": "rmsprop"}, "reinforce.optimizer", "must be one of ['adam', 'sgd']"),
    (EPISODIC, {"reinforce.init_right_prob": 1.0}, "reinforce.init_right_prob", "must be in (0, 1), got 1.0"),
    (EPISODIC, {"reinforce.gamma": 1.0}, "reinforce.gamma", "must be < 1 when bpo.clip_targets"),
    (EPISODIC, {"returns.traj": "trajectory"}, "returns.traj",
     "must be one of ['per_decision', 'traj', 'traj_shifted']"),
    (EPISODIC, {"bpo.q_batch_size": 0}, "bpo.q_batch_size", "must be an integer >= 1, got 0"),
    (EPISODIC, {"bpo.n_mu_epochs": 0}, "bpo.n_mu_epochs", "must be an integer >= 1, got 0"),
    # An epoch count or size past int32 passed and failed minutes later, tracing (adversarial audit).
    (EPISODIC, {"bpo.n_mu_epochs": 2**63 - 1}, "bpo.n_mu_epochs",
     "must be an integer <= 2,147,483,647 (the programs count in 32 bits), got 9223372036854775807"),
    (ON_POLICY, {"bpo.replay_size": 2**31}, "bpo.replay_size", "must be an integer <= 2,147,483,647"),
    (ON_POLICY, {"ppo.n_epochs": 2**40}, "ppo.n_epochs", "must be an integer <= 2,147,483,647"),
    (EPISODIC, {"bpo.mu_lr": math.inf}, "bpo.mu_lr", "must be a finite number > 0, got inf"),
    (EPISODIC, {"bpo.adam_eps": 0.0}, "bpo.adam_eps", "must be a finite number > 0, got 0.0"),
    (EPISODIC, {"bpo.q_max_grad_norm": -1.0}, "bpo.q_max_grad_norm", "must be a number > 0 (inf allowed), got -1.0"),
    (EPISODIC, {"bpo.q_hidden": ()}, "bpo.q_hidden", "must be a non-empty tuple of positive integers, got ()"),
    (EPISODIC, {"bpo.mu_hidden": (64, 0)}, "bpo.mu_hidden", "tuple of positive integers, got (64, 0)"),
    (EPISODIC, {"bpo.symlog_reg_coef": -1.0}, "bpo.symlog_reg_coef", "must be a finite number >= 0, got -1.0"),
    (EPISODIC, {"bpo.polyak_tau": 1.5}, "bpo.polyak_tau", "must be in (0, 1], got 1.5"),
    (EPISODIC, {"bpo.polyak_tau": 0.0}, "bpo.polyak_tau", "must be in (0, 1], got 0.0"),
    (EPISODIC, {"bpo.bootstrap_net": "offline"}, "bpo.bootstrap_net", "must be one of ['online', 'target']"),
    (EPISODIC, {"bpo.mu_loss": "kl"}, "bpo.mu_loss", "must be one of ['cross_entropy', 'reverse_kl'], got 'kl'"),
    (EPISODIC, {"bpo.q_hat_floor": 0.0}, "bpo.q_hat_floor", "must be a finite number > 0, got 0.0"),
    (ON_POLICY, {"seed": 2**32}, "seed", "must be an integer in [0, 4294967295]"),
    (EPISODIC, {"seed": -1}, "seed", "must be an integer in [0, 4294967295]"),
    (ON_POLICY, {"backend": "tpu"}, "backend", "must be one of ['jax', 'gymnasium', 'mjx', 'threads'], got 'tpu'"),
    (ON_POLICY, {"vector_mode": "threads"}, "vector_mode", "must be one of ['sync', 'async'], got 'threads'"),
    (ON_POLICY, {"bpo": EpisodicBehaviourConfig()}, "bpo", "must be a OnPolicyBehaviourConfig (BPO on ppo) or "
                                                           "None (ppo alone), got EpisodicBehaviourConfig"),
    (ON_POLICY, {"method": "nosuch"}, "method", "must be one of ['a2c', 'ppo'"),  # + plug-ins
    (ON_POLICY, {"eval_every": 0}, "eval_every", "must be an integer >= 1, got 0"),
    (ON_POLICY, {"env": "Pong-v0"}, "env", "must be one of ['Acrobot-v1', 'CartPole-v1',"),
    (ON_POLICY, {"ppo.n_steps": 0}, "ppo.n_steps", "must be an integer >= 1, got 0"),
    (ON_POLICY, {"ppo.n_epochs": 0}, "ppo.n_epochs", "must be an integer >= 1, got 0"),
    (ON_POLICY, {"ppo.batch_size": 0}, "ppo.batch_size", "must be an integer >= 1, got 0"),  # before its modulo
    (ON_POLICY, {"ppo.lr_schedule": "cosine"}, "ppo.lr_schedule", "must be one of ['constant', 'linear']"),
    (ON_POLICY, {"ppo.clip_range": 0.0}, "ppo.clip_range", "must be a finite number > 0, got 0.0"),
    (ON_POLICY, {"ppo.clip_range_schedule": "cosine"}, "ppo.clip_range_schedule",
     "must be one of ['constant', 'linear']"),
    (ON_POLICY, {"ppo.ent_coef": -0.01}, "ppo.ent_coef", "must be a finite number >= 0, got -0.01"),
    (ON_POLICY, {"ppo.vf_coef": True}, "ppo.vf_coef", "must be a finite number >= 0, got True"),
    (ON_POLICY, {"ppo.max_grad_norm": 0.0}, "ppo.max_grad_norm", "must be a number > 0 (inf allowed), got 0.0"),
    (ON_POLICY, {"ppo.adam_eps": math.nan}, "ppo.adam_eps", "must be a finite number > 0, got nan"),
    (ON_POLICY, {"ppo.activation": "gelu"}, "ppo.activation", "must be one of ['relu', 'tanh'], got 'gelu'"),
    (ON_POLICY, {"ppo.pi_hidden": ()}, "ppo.pi_hidden", "must be a non-empty tuple of positive integers, got ()"),
    (ON_POLICY, {"returns.advantage": "gae"}, "returns.advantage", "must be one of ['eq11', 'authors'], got 'gae'"),
    (ON_POLICY, {"bpo.lr_schedule": "cosine"}, "bpo.lr_schedule", "must be one of ['constant', 'linear']"),
    (ON_POLICY, {"returns.trust_region_delta": 0.0}, "returns.trust_region_delta",
     "must be a number > 0 (inf allowed)"),
    (ON_POLICY, {"returns.trust_region_criterion": "max_k3"}, "returns.trust_region_criterion",
     "must be one of ['max_abs_log_ratio', 'mean_k3']"),
    (ON_POLICY, {"bpo.ppo_ent_coef": -1.0}, "bpo.ppo_ent_coef",
     "must be a finite number >= 0 (or None: ppo.ent_coef), got -1.0"),
    # The authors' code's bugs apply where their code has them.
    (ON_POLICY, {"bpo.mu_q_hat_batch_min": True}, "bpo.mu_q_hat_batch_min",
     "applies to continuous actions; this run's actions are discrete"),
    (EPISODIC, {"bpo.mu_q_hat_unclipped_actions": True}, "bpo.mu_q_hat_unclipped_actions",
     "this run's actions are discrete"),
    ("mujoco_default", {"bpo.mu_q_hat_unclipped_actions": True, "bpo.clip_actions": False},
     "bpo.mu_q_hat_unclipped_actions", "has no effect with bpo.clip_actions False"),
    ("mujoco_default", {"bpo.fqe_unclipped_actions": True, "bpo.clip_actions": False},
     "bpo.fqe_unclipped_actions", "has no effect with bpo.clip_actions False"),
    (ON_POLICY, {"bpo.fqe_unclipped_actions": True}, "bpo.fqe_unclipped_actions", "applies to continuous actions"),
    (EPISODIC, {"bpo.replay_epoch_filled_only": True}, "bpo.replay_epoch_filled_only",
     "needs rollouts of a fixed length"),
    ("mujoco_default", {"bpo.replay_epoch_filled_only": True, "bpo.q_batch_size": 300},
     "bpo.replay_epoch_filled_only", "bpo.q_batch_size=300 must divide the rollout (2048)"),
    ("mujoco_gsde", {"ppo.whole_step_minibatches": True, "bpo.mu_batch_size": 100},
     "ppo.whole_step_minibatches", "bpo.mu_batch_size=100 must be a multiple of ppo.n_envs (16)"),
    ("mujoco_default", {"ppo.sde_features": "constant"}, "ppo.sde_features",
     "chooses gSDE's features; without ppo.use_sde every step draws afresh"),
    ("cartpole_a2c", {"a2c.whole_step_minibatches": True, "bpo": None}, "a2c.whole_step_minibatches",
     "a2c alone has none"),
    ("mujoco_gsde", {"ppo.whole_step_minibatches": True, "ppo.batch_size": 8},
     "ppo.whole_step_minibatches", "ppo.batch_size=8 must be a multiple of ppo.n_envs (16)"),
    (ON_POLICY, {"bpo.q_hat_reward": "reward"}, "bpo.q_hat_reward",
     "must be one of ['r_hat', 'last_q_batch_reward'], got 'reward'"),
    # Values of the wrong type, which the command line cannot express (its parser types them).
    (ON_POLICY, {"preset": None}, "preset", "(not a path), got None"),
    (ON_POLICY, {"variant": None}, "variant", "must be one of ['', 'ppo', "),
    (ON_POLICY, {"ppo.use_sde": 0}, "ppo.use_sde", "must be True or False, got 0"),
    (EPISODIC, {"bpo.clip_targets": "no"}, "bpo.clip_targets", "must be True or False, got 'no'"),
    (ON_POLICY, {"ppo.gamma": False}, "ppo.gamma", "must be in [0, 1), got False"),
    (EPISODIC, {"bpo.q_lr": HUGE}, "bpo.q_lr", "must be a finite number > 0, got 1000"),
    (ON_POLICY, {"ppo.kl_coef": HUGE}, "ppo.kl_coef", "must be a finite number >= 0 (0: no KL penalty), got 1000"),
    (ON_POLICY, {"ppo.vf_hidden": 64}, "ppo.vf_hidden", "must be a non-empty tuple of positive integers, got 64"),
    (EPISODIC, {"bpo.mu_hidden": (True,)}, "bpo.mu_hidden", "tuple of positive integers, got (True,)"),
]


# Fields that do not apply to a kind of run: on-policy mu has pi's architecture and BPO-PPO's lambda
# is ppo.gae_lambda; REINFORCE has no rollouts to mask. Rejected by name, never silently ignored.
NOT_APPLICABLE = [
    (ON_POLICY, "bpo.mu_hidden", (32,)),
    (ON_POLICY, "returns.lam", 0.5),
    (EPISODIC, "returns.trust_region_delta", 1.0),
    (EPISODIC, "bpo.clip_actions", False),
]


@pytest.mark.parametrize("preset,field,value", NOT_APPLICABLE, ids=[f"{p}:{f}" for p, f, _ in NOT_APPLICABLE])
def test_a_field_that_does_not_apply_is_rejected_by_name(preset, field, value):
    with pytest.raises(ConfigError) as err:
        replace(get_preset(preset), **{field: value})
    assert err.value.field_name == field and "does not apply" in str(err.value)


CLI_IDS = [" ".join(a[:3]).replace(f"{REPO}/", "") for a, _, _ in CLI_BAD_INPUTS]  # the same on every machine


@pytest.mark.parametrize("argv,field,text", CLI_BAD_INPUTS, ids=CLI_IDS)
def test_cli_names_the_field_before_anything_compiles(argv, field, text, capsys, caplog, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # every default output folder is relative: nothing may appear here
    with jax.log_compiles(True), caplog.at_level(logging.DEBUG):
        code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2, err
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and errors[0].startswith(f"error: {field}: "), err
    assert text in errors[0], err
    assert not [r for r in caplog.records if "Compiling" in r.getMessage()], "compiled before rejecting the input"
    assert not any(tmp_path.iterdir()), "wrote files before rejecting the input"
    assert "final eval return" not in out


@pytest.mark.parametrize("preset,changes,field,text", VALIDATE_BAD_INPUTS,
                         ids=[f"{p}:{next(iter(c))}" for p, c, _, _ in VALIDATE_BAD_INPUTS])
def test_validate_names_the_field(preset, changes, field, text, caplog):
    good = get_preset(preset)
    assert validate(good) is good  # the preset itself is valid: the change is what is rejected
    with jax.log_compiles(True), caplog.at_level(logging.DEBUG), pytest.raises(ConfigError) as err:
        validate(replace(good, **changes))
    assert err.value.field_name == field
    assert str(err.value).startswith(f"{field}: ") and text in str(err.value)
    assert not [r for r in caplog.records if "Compiling" in r.getMessage()]


@pytest.mark.parametrize("argv,field,text", [
    (["--seeds", "100000", "--episodes", "300000"], "seeds", "GiB of memory (100,000 seeds: state"),
    (["--episodes", "2000000000", "--eval-every", "1000", "--checkpoint-every", "5"], "episodes",
     "GiB of memory (1 seed: state"),
])
def test_a_run_that_cannot_fit_in_memory_is_refused_before_its_program_compiles(argv, field, text, capsys, caplog,
                                                                                tmp_path, monkeypatch):
    """Its iteration is traced (shapes only), measured against the memory available, and refused
    with the figure; the program is never lowered or compiled (only the seeds' keys are computed,
    tiny eager calls), and the folders made for the run are gone again."""
    monkeypatch.chdir(tmp_path)
    jax.clear_caches()  # so that the seeds' keys compile here again and show that compiles are logged
    with jax.log_compiles(True), caplog.at_level(logging.DEBUG):
        code = main(["train", "short_corridor", *argv, "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(f"error: {field}: the run needs about ") and text in err, err
    assert "this machine has" in err and "allowed: fewer seeds or a smaller budget (episodes)" in err
    compiled = [r.getMessage() for r in caplog.records if "Compiling" in r.getMessage()]
    assert compiled and not [m for m in compiled if "_iteration_all" in m or "_init_all" in m], compiled
    assert not any(tmp_path.iterdir()), "left folders behind"


@pytest.mark.mujoco
def test_a_gymnasium_run_that_cannot_fit_in_memory_is_refused_before_its_environments_start(capsys, caplog, tmp_path,
                                                                                             monkeypatch):
    """The host runner's state (traced shapes: its replay of 100,000 seeds is about 290 GiB), rollout
    and metrics are measured before any environment starts or its update compiles."""
    monkeypatch.chdir(tmp_path)
    with jax.log_compiles(True), caplog.at_level(logging.DEBUG):
        code = main(["train", "mujoco_default", "--seeds", "100000", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: seeds: the run needs about ") and "(100,000 seeds: state" in err, err
    compiled = [r.getMessage() for r in caplog.records if "Compiling" in r.getMessage()]
    assert not [m for m in compiled if "update" in m or "step" in m], compiled
    assert not any(tmp_path.iterdir()), "left folders behind"


def test_the_memory_estimate_is_the_state_and_every_output_twice_and_names_the_field_to_change():
    from bpo.infra.memory import check_run_fits

    cfg = replace(get_preset(EPISODIC), seeds=4)
    # 10 bytes of state, 3 per iteration x 5 iterations, kept and copied once: 10 + 2 * 15 = 40
    assert check_run_fits(cfg, 10, 3, 5, available=40) == 40
    with pytest.raises(ConfigError, match="about 0.0 MiB of memory") as e:
        check_run_fits(cfg, 10, 3, 5, available=39)
    assert e.value.field_name == "seeds"  # one seed's tenth would fit
    with pytest.raises(ConfigError) as e:
        check_run_fits(cfg, 10, 3, 5, available=9)
    assert e.value.field_name == "episodes"  # not even one seed fits: the budget
    # One seed's state alone, 100 / 4 = 25 bytes, is over 20: no budget and no seed count helps (it
    # said "fewer seeds or a smaller budget" of --bpo.q-hidden 200000 200000 with 1 seed, 1 episode).
    # The fields named are the run's own (it named num_envs and replay_size, which no config has).
    with pytest.raises(ConfigError, match=re.escape("allowed: smaller networks or buffers: bpo.replay_size 1024, "
                                                    "bpo.q_hidden (64, 64), bpo.mu_hidden (64, 64)")) as e:
        check_run_fits(with_bpo(cfg, True), 100, 3, 5, available=20)
    assert e.value.field_name == "bpo.replay_size"
    with pytest.raises(ConfigError, match=re.escape("allowed: smaller networks or buffers: ppo.n_steps 32, ppo.n_envs "
                                                    "8, ppo.pi_hidden (64, 64), ppo.vf_hidden (64, 64)")) as e:
        check_run_fits(replace(with_bpo(get_preset(ON_POLICY), False), seeds=4), 100, 3, 5, available=20)
    assert e.value.field_name == "ppo.n_steps"


def test_a_field_of_the_bpo_section_of_a_run_without_it_is_refused_by_name():
    alone = with_bpo(get_preset(ON_POLICY), False)
    with pytest.raises(ConfigError, match="sets the bpo section, which this run does not have") as e:
        replace(alone, **{"bpo.q_lr": 0.1})
    assert e.value.field_name == "bpo.q_lr"
    assert replace(with_bpo(alone, True), **{"bpo.q_lr": 0.1}).bpo.q_lr == 0.1


@pytest.mark.parametrize("argv,allowed", [
    (["train", "short_corridor", "--bpo.mu-loss", "kl_typo"], "cross_entropy"),
    (["train", "cartpole_ppo", "--ppo.n-steps", "many"], "int"),
    (["train", "cartpole_ppo", "--returns.lam", "0.5"], "Unrecognized options: --returns.lam"),
    (["train", "short_corridor", "--returns.trust-region-delta", "0.1"], "Unrecognized options: --returns.trust"),
    (["reproduce", "fig2", "--backend", "pbs"], "slurm"),
    # tyro would keep only the last of a repeated list option: refused instead, naming it.
    (["sweep", "--preset", "cartpole_ppo", "--grid", "returns.c_bar=1.0,2.0", "--grid", "returns.rho_bar=1.0,1.5",
      "--dry-run"], "--grid given more than once"),
    (["reproduce", "fig2", "--set", "episodes=20", "--set=eval_every=10"], "--set given more than once"),
    (["sweep", "fig2", "--set", "episodes=20", "--dry_run", "--set", "seed=3"], "--set given more than once"),
])
def test_bad_choice_or_type_is_rejected_by_the_parser(argv, allowed, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert allowed in capsys.readouterr().err
    assert not any(tmp_path.iterdir())



def test_the_list_options_are_the_variable_length_fields_in_both_spellings():
    options = list_options(SweepArgs)
    assert set(options.values()) == {"envs", "variants", "grid", "set", "only"}
    assert options["--variants"] == "variants" and "--dry-run" not in options and "--seeds" not in options
    assert repeated_list_options(SweepArgs, ["--grid", "a=1", "--set", "b=2", "--grid=c=3"]) == ["grid"]
    assert repeated_list_options(SweepArgs, ["--grid", "a=1", "c=3", "--set", "b=2"]) == []


def test_output_cut_off_by_its_reader_ends_quietly():
    """``bpo train PRESET --help | head -1``: a pipe of 4 KiB makes the help (32 KiB) block until
    the reader has gone, as with ``head``."""
    import fcntl

    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, 1031, 4096)  # F_SETPIPE_SZ
    proc = subprocess.Popen([sys.executable, "-m", "experiments.cli", "train", "mujoco_default", "--help"],
                            stdout=write_end, stderr=subprocess.PIPE, text=True)
    os.close(write_end)
    with os.fdopen(read_end) as reader:
        assert reader.readline().startswith("usage: bpo train mujoco_default")
    err = proc.communicate(timeout=120)[1]
    assert proc.returncode == 0 and "Traceback" not in err and "BrokenPipe" not in err, err


def test_version_names_the_package_and_the_code(capsys):
    assert main(["--version"]) == 0
    out = capsys.readouterr().out.strip()
    assert out.startswith("bpo 0.") and "(" in out  # the package version and the commit (or 'unknown')


def test_an_episodic_run_is_refused_by_evaluate_before_its_folder_is_made(tmp_path, capsys):
    """``bpo evaluate`` of a ShortCorridor run (evaluated exactly by verify-variance): one line, and
    no empty evaluations/ folder left in the run (it was made before the refusal)."""
    run = tmp_path / "sc"
    assert main(["train", "short_corridor", "--episodes", "10", "--eval-every", "10", "--out", str(run),
                 "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["evaluate", str(run), "--episodes", "1"]) == 2
    assert "error: run: episodic runs (ShortCorridor) are evaluated exactly by" in capsys.readouterr().err
    assert not (run / "evaluations").exists()


def test_evaluate_refuses_what_the_run_cannot_do_before_its_folder_is_made(tmp_path, capsys):
    """mu of a PPO run and CartPole on MJX were refused after RUN/evaluations was made; an edited
    config.json (eval_episodes 0) gave a mean of NaN over no episodes and exit 0."""
    run = tmp_path / "ppo"
    assert main(["train", "cartpole_ppo", "--no-bpo", "--total-timesteps", "1024", "--ppo.n-steps", "256",
                 "--eval-every", "1024", "--eval-episodes", "1", "--seeds", "1", "--out", str(run),
                 "--no-progress"]) == 0
    recorded = json.loads((run / "config.json").read_text())
    cases = [(["--which", "mu"], "which: not a BPO run: it has no mu; allowed: pi"),
             (["--backend", "mjx"], "backend: mjx does not have the run's task CartPole-v1; allowed: ['jax']")]
    for flags, error in cases:
        capsys.readouterr()
        assert main(["evaluate", str(run), *flags]) == 2
        assert capsys.readouterr().err.startswith(f"error: {error}") and not (run / "evaluations").exists()
    (run / "config.json").write_text(json.dumps({**recorded, "eval_episodes": 0}))
    assert main(["evaluate", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: eval_episodes: must be") and "config.json" in err, err
    assert not (run / "evaluations").exists()


def test_stochastic_evaluation_of_a_gsde_policy_is_refused_by_its_flag_before_any_folder(tmp_path, capsys):
    """gSDE's exploration matrices are not saved: --stochastic is refused naming it, before the
    output folder is made (it was refused naming 'deterministic', leaving an empty folder)."""
    run = tmp_path / "run"
    shutil.copytree(Path(__file__).resolve().parent.parent / "results/a2c/Pendulum-v1-pendulum_a2c-a2c", run)
    for out in ([], ["--out", str(tmp_path / "ev")]):
        assert main(["evaluate", str(run), "--stochastic", *out]) == 2
        assert capsys.readouterr().err.startswith("error: stochastic: stochastic actions of a gSDE policy")
        assert not (run / "evaluations").exists() and not (tmp_path / "ev").exists()


def test_a_run_is_replayed_from_its_own_config_json(tmp_path, capsys):
    """`bpo train RUN/config.json`: the recorded run again, the same numbers; flags still apply."""
    first, again = tmp_path / "first", tmp_path / "again"
    args = ["--episodes", "20", "--eval-every", "10", "--eval-episodes", "2", "--seeds", "2", "--no-progress"]
    assert main(["train", "short_corridor", "--bpo", *args, "--out", str(first)]) == 0
    assert main(["train", str(first / "config.json"), "--no-progress", "--out", str(again)]) == 0
    assert (again / "curve.csv").read_text() == (first / "curve.csv").read_text()
    assert main(["train", str(first / "config.json"), "--variant", "ppo", "--out", str(tmp_path / "x")]) == 2
    assert capsys.readouterr().err.startswith("error: --variant: not with a recorded config.json")
    (tmp_path / "bad.json").write_text("{")
    assert main(["train", str(tmp_path / "bad.json")]) == 2
    assert "error: config: " in capsys.readouterr().err
    # A key that no field has (misspelt, or edited in by hand) is refused, not silently dropped.
    recorded = json.loads((first / "config.json").read_text())
    for edit, name in (({"eval_episodez": 1000}, "eval_episodez"),
                       ({"reinforce": {**recorded["reinforce"], "lr_strat": 0.5}}, "reinforce.lr_strat")):
        (tmp_path / "edited.json").write_text(json.dumps({**recorded, **edit}))
        assert main(["train", str(tmp_path / "edited.json"), "--out", str(tmp_path / "y")]) == 2
        assert capsys.readouterr().err.startswith(f"error: {name}: in ") and not (tmp_path / "y").exists()


@pytest.mark.parametrize("change, field", [({"ppo": None}, "ppo"), ({"method": "a2c"}, "a2c")])
def test_a_recorded_config_whose_methods_section_is_null_is_refused(change, field, tmp_path):
    """The section of the file's method, null (a PPO run's file says "a2c": null): read, it would
    be that method's defaults, another run than the recorded one."""
    edited = tmp_path / "config.json"
    edited.write_text(json.dumps({**to_dict(get_preset("cartpole_ppo")), **change}))
    with pytest.raises(ConfigError, match=rf"^{field}: in '{re.escape(str(edited))}' is null, and the run's method"):
        read_recorded_config(edited)


def test_a_hand_edited_config_json_is_refused_not_replayed_with_defaults(tmp_path, capsys, monkeypatch):
    """A recorded config.json with a section that is not an object, a field deleted, a path for its
    preset or arrays nested past Python's recursion limit: each refused, naming the field, before
    any compile. They replayed with the defaults of the sections or fields (another run than the
    recorded one), wrote the run under the preset's path, or ended in a traceback."""
    monkeypatch.chdir(tmp_path)
    first = tmp_path / "first"
    assert main(["train", "short_corridor", "--bpo", "--episodes", "10", "--eval-every", "10", "--seeds", "1",
                 "--no-progress", "--out", str(first)]) == 0
    recorded = json.loads((first / "config.json").read_text())
    reinforce = dict(recorded["reinforce"])
    dropped = next(iter(reinforce))
    del reinforce[dropped]
    without_eval_every = {k: v for k, v in recorded.items() if k != "eval_every"}
    cases = [({**recorded, "reinforce": "x"}, "reinforce: must be an object (a section of the config), got str"),
             ({**recorded, "reinforce": None}, "reinforce: must be an object (a section of the config), got NoneType"),
             ({**recorded, "returns": [1]}, "returns: must be an object (a section of the config), got list"),
             ({**recorded, "bpo": "yes"}, "bpo: must be an object (a section of the config) or null, got str"),
             (without_eval_every, "eval_every: is missing from"),
             ({**recorded, "reinforce": reinforce}, f"reinforce.{dropped}: is missing from"),
             ({**recorded, "preset": str(tmp_path / "abs")}, "preset: must be a name of letters, digits"),
             ({**recorded, "algo": ["x"]}, "algo: in "), ({**recorded, "algo": "ppo"}, "algo: in "),
             ({**recorded, "algo": "bpo", "bpo": None}, "algo: in ")]
    for data, error in cases:
        (tmp_path / "edited.json").write_text(json.dumps(data))
        capsys.readouterr()
        assert main(["train", str(tmp_path / "edited.json"), "--no-progress", "--out", str(tmp_path / "y")]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: {error}") and not (tmp_path / "y").exists(), (error, err)
    # Without --out the default output path starts with the preset: a path there was where the run went.
    (tmp_path / "edited.json").write_text(json.dumps({**recorded, "preset": str(tmp_path / "abs")}))
    assert main(["train", str(tmp_path / "edited.json"), "--no-progress"]) == 2
    assert "error: preset: must be a name" in capsys.readouterr().err and not (tmp_path / "abs").exists()
    # Arrays past the JSON parser's limit, and an object within it but past the readers' (a traceback).
    levels = sys.getrecursionlimit() - 200  # the JSON parser takes a frame a level: it reads these
    deep_object = '{"a": ' * levels + "1" + "}" * levels
    for field, junk in (("junk", "[" * 100_000 + "]" * 100_000), ("eval_every", deep_object)):
        text = json.dumps({**recorded, field: 0}).replace(f'"{field}": 0', f'"{field}": {junk}')
        (tmp_path / "deep.json").write_text(text)
        assert main(["train", str(tmp_path / "deep.json"), "--out", str(tmp_path / "y")]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: config: ") and len(err.splitlines()) == 1, err[:800]
    # A wrongly typed value: one line naming it, no warning of tyro's about its default before it
    # (newcomer's walkthrough, session 62).
    for field, value in (("traj", "trajj"), ("c_bar", "1.5")):
        (tmp_path / "typed.json").write_text(json.dumps({**recorded, "returns": {**recorded["returns"], field: value}}))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert main(["train", str(tmp_path / "typed.json"), "--no-progress", "--out", str(tmp_path / "y")]) == 2
        assert not caught, [str(w.message) for w in caught]
        assert capsys.readouterr().err.startswith(f"error: returns.{field}: ")


@pytest.mark.parametrize("algo, method, allowed", [("BPO", None, "'ppo' or 'a2c'"), ("bop", None, "'ppo' or 'a2c'"),
                                                  (None, None, "'ppo' or 'a2c'"), ("a2c", "ppo", "'ppo'"),
                                                  ("BPO", "ppo", "'ppo'")])
def test_an_on_policy_config_json_whose_algo_is_misspelt_is_refused(tmp_path, algo, method, allowed):
    """``algo`` of an older file says whether the run had BPO ('bpo') or ran its method alone (its
    name: the file's ``method``, or before files had one PPO or A2C); any other value was read as
    the method alone, so a misspelt 'BPO' replayed PPO."""
    recorded = json.loads((REPO / "results" / "classic" / "CartPole-v1-cartpole_ppo-bpo" / "config.json").read_text())
    assert recorded["algo"] == "bpo" and "method" not in recorded  # a file of the version before ``method``
    edited = {**recorded, "algo": algo, **({"method": method} if method else {})}
    (tmp_path / "config.json").write_text(json.dumps(edited))
    with pytest.raises(ConfigError, match=re.escape(f"is {algo!r}; allowed: 'bpo' with a bpo section, or the "
                                                    f"method's name ({allowed}) for the method alone")):
        read_recorded_config(tmp_path / "config.json")


def test_progress_written_to_a_log_is_one_whole_line(tmp_path):
    """Written to a pipe, the bar's last frame is one line, not wrapped at 80 columns nor cut."""
    proc = subprocess.run([sys.executable, "-m", "experiments.cli", "train", "short_corridor", "--bpo",
                           "--episodes", "20", "--eval-every", "10", "--eval-episodes", "2", "--seeds", "2",
                           "--out", str(tmp_path / "run")], capture_output=True, text=True, timeout=300,
                          env={k: v for k, v in os.environ.items() if k != "COLUMNS"})
    assert proc.returncode == 0, proc.stderr
    lines = (proc.stdout + proc.stderr).splitlines()
    bar = [line for line in lines if "3/3 evaluations" in line]  # of 2 seeds each
    assert len(bar) == 1 and "eval return" in bar[0] and "…" not in bar[0], lines


def test_a_run_folder_given_as_the_preset_points_to_its_config_and_to_resume(tmp_path, capsys):
    """``bpo train runs/x`` said only "unknown preset 'runs/x'" (newcomer's walkthrough, session 62):
    a folder is named as such, with the ways to replay or continue it."""
    run = tmp_path / "run"
    run.mkdir()
    assert main(["train", str(run), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: preset: {str(run)!r} is a folder, not a preset") and "a recorded config.json" in err
    (run / "config.json").write_text("{}")
    assert main(["train", str(run), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"bpo train {run / 'config.json'} (replays the run)" in err and f"bpo train --resume {run}" in err
