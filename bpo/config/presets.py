"""Named configurations. Presets named after the paper reproduce its tables exactly; the others
are sensible settings for environments the paper does not use.

* ``short_corridor``: Table 2 (Figure 2), REINFORCE and BPO-REINFORCE on ShortCorridor.
* ``cartpole_ppo``: the authors' CartPole-v1 settings for PPO and BPO-PPO (docs/choices.md), except
  the Q and Q-hat networks: ReLU here (theirs tanh) and LeCun-normal initialisation (theirs
  orthogonal with their ``ppo_bpo_zero*`` blocks; ``bpo.q_init = "orthogonal"`` gives it).
* ``cartpole_continuous_ppo``, ``acrobot_ppo``, ``pendulum_ppo``, ``mountaincar_continuous_ppo``,
  ``short_corridor_ppo``: classic control with PPO/BPO-PPO (rl-zoo-like PPO settings; the BPO part
  follows ``cartpole_ppo`` scaled to the rollout size).
* ``mujoco_default``: Table 4, Gymnasium MuJoCo v5, 1.5M steps.
* ``mujoco_default_authors``: the authors' public configuration of ``mujoco_default``: every switch
  this project offers set to their code's value (docs/authors_code.md, "The authors' preset").
* ``mujoco_authors_code``: ``mujoco_default_authors`` with the authors' code's bugs switched on
  (docs/authors_code.md, "Their code as it runs").
* ``mujoco_gsde``: Table 3 with the per-environment overrides of Table 5 (``ENV_OVERRIDES``), 2M steps.
* ``mujoco_gsde_authors``, ``mujoco_gsde_authors_code``: the same two for ``mujoco_gsde``, their
  configuration of the gSDE column (docs/authors_code.md, "The authors' gSDE preset").
* ``cartpole_a2c``, ``pendulum_a2c``, ``mujoco_a2c``: A2C and BPO-A2C (``method = 'a2c'``) with
  rl-baselines3-zoo's A2C settings (docs/a2c.md).

Every preset holds its BPO settings (a ``bpo`` section) and runs BPO on its method; without the
section (``--no-bpo``, or the variant named after the method) the method runs alone.

``VARIANTS`` are the algorithm rows of Table 1 and the ablations of Figures 4-5, applied on top
of a preset with ``apply_variant`` (``bpo train PRESET --variant NAME``).
"""

import re
from dataclasses import replace

from bpo.config.schema import (
    A2CConfig,
    ConfigError,
    EpisodicBehaviourConfig,
    EpisodicReturnConfig,
    EpisodicTrainConfig,
    OnPolicyBehaviourConfig,
    OnPolicyReturnConfig,
    OnPolicyTrainConfig,
    PPOConfig,
    ReinforceConfig,
    get_dotted,
    with_bpo,
)
from bpo.config.schema import replace as replace_dotted

# The authors' CartPole settings (8 envs x 32 steps, batch 256, 20 epochs, decayed lr and clip; tanh
# 64-unit actor and critic with LeCun-normal init; no observation normalisation). Not theirs: the Q
# and Q-hat networks below are ReLU (theirs tanh) with LeCun-normal init (theirs orthogonal under
# their ppo_bpo_zero* blocks); docs/choices.md, "The authors' CartPole settings".
_CARTPOLE_PPO = PPOConfig(
    learning_rate=1e-3, lr_schedule="linear", n_steps=32, n_envs=8, batch_size=256, n_epochs=20, gamma=0.98,
    gae_lambda=0.8, clip_range=0.2, clip_range_schedule="linear", ent_coef=0.0, vf_coef=0.5, max_grad_norm=0.5,
    normalize_advantage=True, normalize_observations=False, pi_hidden=(64, 64), vf_hidden=(64, 64),
    activation="tanh", ortho_init=False,
)
_CARTPOLE_RETURNS = OnPolicyReturnConfig(rho_bar=1.5, c_bar=1.5, traj="per_decision")
_CARTPOLE_BPO = OnPolicyBehaviourConfig(
    replay_size=1024, q_batch_size=256, mu_batch_size=128,
    n_qvf_epochs=10, n_mu_epochs=10, q_lr=1e-3, mu_lr=1e-3, q_max_grad_norm=0.5, mu_max_grad_norm=0.5,
    q_hidden=(64, 64), layer_norm=True, zero_init_head=True, symlog_targets=True,
    symlog_reg_coef=1.0, polyak_tau=0.02, weight_td=True, clip_targets=True, clip_actions=True, lr_schedule="linear",
)

# Table 4 (MuJoCo, default): SB3's PPO defaults for MuJoCo with lr 3e-4, obs + advantage
# normalisation, 64-unit ReLU networks, initial log std -1, entropy 0.001, constant schedules.
_MUJOCO_DEFAULT_PPO = PPOConfig(
    learning_rate=3e-4, lr_schedule="constant", n_steps=2048, n_envs=1, batch_size=64, n_epochs=10, gamma=0.99,
    gae_lambda=0.95, clip_range=0.2, ent_coef=0.001, vf_coef=0.5, max_grad_norm=0.5, adam_eps=1e-5,
    normalize_advantage=True, normalize_observations=True, use_sde=False, log_std_init=-1.0, pi_hidden=(64, 64),
    vf_hidden=(64, 64), activation="relu", ortho_init=True,
)
_MUJOCO_RETURNS = OnPolicyReturnConfig(rho_bar=1.5, c_bar=1.0, traj="per_decision")
_MUJOCO_DEFAULT_BPO = OnPolicyBehaviourConfig(
    replay_size=8192, q_batch_size=256, mu_batch_size=128,
    n_qvf_epochs=20, n_mu_epochs=20, q_lr=3e-4, mu_lr=3e-4, q_max_grad_norm=0.5, mu_max_grad_norm=0.5,
    q_hidden=(64, 64), symlog_targets=True, symlog_reg_coef=1.0, polyak_tau=0.02,
    weight_td=True, clip_targets=True, clip_actions=True, zero_init_head=True, layer_norm=True,
)
# Table 3 (MuJoCo, gSDE): rl-zoo's gSDE settings, 16 envs x 512 steps, 256-unit networks, lr 3e-5.
_MUJOCO_GSDE_PPO = PPOConfig(
    learning_rate=3e-5, lr_schedule="constant", n_steps=512, n_envs=16, batch_size=128, n_epochs=20, gamma=0.99,
    gae_lambda=0.9, clip_range=0.4, ent_coef=0.0, vf_coef=0.5, max_grad_norm=0.5, adam_eps=1e-5,
    normalize_advantage=True, normalize_observations=True, use_sde=True, sde_sample_freq=4, log_std_init=-1.0,
    pi_hidden=(256, 256), vf_hidden=(256, 256), activation="relu", ortho_init=False,  # docs/choices.md, "PPO"
)
_MUJOCO_GSDE_BPO = replace(
    _MUJOCO_DEFAULT_BPO, q_batch_size=128, mu_batch_size=128, n_qvf_epochs=40, n_mu_epochs=40, q_lr=3e-5,
    mu_lr=3e-5, q_hidden=(256, 256), weight_td=False, clip_targets=False,
)

# Stable-Baselines3's A2C (``A2CConfig``'s defaults: stable_baselines3/a2c/a2c.py, ``A2C.__init__``),
# the base that rl-baselines3-zoo's hyperparams/a2c.yml changes per environment.
_SB3_A2C = A2CConfig()
# rl-zoo's 'Tuned' Pendulum-v1 entry and the settings its BipedalWalker, LunarLanderContinuous and
# PyBullet entries share: 8-step rollouts, GAE 0.9, vf 0.4, RMSprop, decayed lr, gSDE from log std -2.
_SB3_A2C_GSDE = replace(
    _SB3_A2C, n_steps=8, gae_lambda=0.9, vf_coef=0.4, lr_schedule="linear", use_sde=True, log_std_init=-2.0,
    ortho_init=False, normalize_observations=True,
)
# BPO-A2C's behaviour step: the PPO preset's of the same task with one epoch per update over a
# replay of 1024, because A2C updates after 5 to 64 transitions where PPO updates after 256 to 2048
# (docs/a2c.md, "The presets").
_A2C_BPO = replace(_CARTPOLE_BPO, replay_size=1024, n_qvf_epochs=1, n_mu_epochs=1, lr_schedule="constant")

PRESETS = {
    "short_corridor": EpisodicTrainConfig(
        preset="short_corridor",
        env="ShortCorridor-v0",
        episodes=300,
        eval_every=10,
        eval_episodes=10,
        reinforce=ReinforceConfig(lr_start=0.1, lr_end=0.01, gamma=0.99),
        returns=EpisodicReturnConfig(rho_bar=1.5, c_bar=1.0, lam=1.0, traj="per_decision"),
        bpo=EpisodicBehaviourConfig(
            replay_size=1024, q_batch_size=256,
            mu_batch_size=256, n_qvf_epochs=1, n_mu_epochs=1, q_lr=1e-3, mu_lr=1e-3, q_hidden=(64, 64),
            mu_hidden=(64, 64), symlog_targets=True, symlog_reg_coef=1.0, polyak_tau=0.02, weight_td=True,
            clip_targets=True, layer_norm=True, zero_init_head=True, mu_loss="cross_entropy",
        ),
    ),
    "cartpole_ppo": OnPolicyTrainConfig(
        preset="cartpole_ppo", env="CartPole-v1", total_timesteps=100_000, eval_every=8_192, eval_episodes=10,
        ppo=_CARTPOLE_PPO, returns=_CARTPOLE_RETURNS, bpo=_CARTPOLE_BPO,
    ),
    "cartpole_continuous_ppo": OnPolicyTrainConfig(
        preset="cartpole_continuous_ppo", env="ContinuousCartPole-v0", total_timesteps=100_000, eval_every=8_192,
        ppo=replace(_CARTPOLE_PPO, log_std_init=0.0), returns=_CARTPOLE_RETURNS, bpo=_CARTPOLE_BPO,
    ),
    "acrobot_ppo": OnPolicyTrainConfig(
        preset="acrobot_ppo", env="Acrobot-v1", total_timesteps=200_000, eval_every=10_240,
        ppo=PPOConfig(learning_rate=1e-3, lr_schedule="linear", n_steps=128, n_envs=8, batch_size=256, n_epochs=10,
                      gamma=0.99, gae_lambda=0.94, clip_range=0.2, ent_coef=0.0),
        returns=_CARTPOLE_RETURNS,
        bpo=replace(_CARTPOLE_BPO, replay_size=2048, n_qvf_epochs=5, n_mu_epochs=5),
    ),
    "pendulum_ppo": OnPolicyTrainConfig(
        preset="pendulum_ppo", env="Pendulum-v1", total_timesteps=100_000, eval_every=4_096,
        ppo=PPOConfig(learning_rate=1e-3, n_steps=1024, n_envs=4, batch_size=64, n_epochs=10, gamma=0.9,
                      gae_lambda=0.95, clip_range=0.2, ent_coef=0.0, use_sde=True, sde_sample_freq=4,
                      log_std_init=0.0, activation="tanh"),
        returns=_CARTPOLE_RETURNS,
        bpo=replace(_CARTPOLE_BPO, replay_size=4096, n_qvf_epochs=5, n_mu_epochs=5, lr_schedule="constant"),
    ),
    "mountaincar_continuous_ppo": OnPolicyTrainConfig(
        preset="mountaincar_continuous_ppo", env="MountainCarContinuous-v0", total_timesteps=50_000,
        eval_every=5_120,
        ppo=PPOConfig(learning_rate=7.77e-5, n_steps=64, n_envs=8, batch_size=256, n_epochs=10, gamma=0.9999,
                      gae_lambda=0.9, clip_range=0.1, ent_coef=0.00429, vf_coef=0.19, max_grad_norm=5.0,
                      use_sde=True, sde_sample_freq=-1, log_std_init=-3.29, ortho_init=False, activation="tanh"),
        returns=_CARTPOLE_RETURNS,
        bpo=replace(_CARTPOLE_BPO, replay_size=2048, n_qvf_epochs=5, n_mu_epochs=5, lr_schedule="constant"),
    ),
    "short_corridor_ppo": OnPolicyTrainConfig(
        preset="short_corridor_ppo", env="ShortCorridor-v0", total_timesteps=20_480, eval_every=2_048,
        ppo=PPOConfig(learning_rate=1e-3, n_steps=64, n_envs=8, batch_size=256, n_epochs=10, gamma=0.99,
                      gae_lambda=0.95, ent_coef=0.01, normalize_observations=False),
        returns=replace(_CARTPOLE_RETURNS, c_bar=1.0), bpo=replace(_CARTPOLE_BPO, lr_schedule="constant"),
    ),
    # A2C and BPO-A2C (docs/a2c.md): rl-baselines3-zoo's A2C settings (hyperparams/a2c.yml) for
    # CartPole-v1 (8 environments, 500k steps, SB3's defaults otherwise), Pendulum-v1 (its tuned
    # entry, 1M steps) and HalfCheetah (its MuJoCo entry: SB3's defaults with normalisation, 1M steps).
    "cartpole_a2c": OnPolicyTrainConfig(
        preset="cartpole_a2c", env="CartPole-v1", method="a2c", total_timesteps=500_000,
        eval_every=10_000, ppo=None, a2c=replace(_SB3_A2C, n_envs=8), returns=_CARTPOLE_RETURNS, bpo=_A2C_BPO,
    ),
    "pendulum_a2c": OnPolicyTrainConfig(
        preset="pendulum_a2c", env="Pendulum-v1", method="a2c", total_timesteps=1_000_000,
        eval_every=20_000, ppo=None, a2c=replace(_SB3_A2C_GSDE, n_envs=8, gamma=0.9), returns=_CARTPOLE_RETURNS,
        bpo=replace(_A2C_BPO, lr_schedule="linear"),
    ),
    "mujoco_a2c": OnPolicyTrainConfig(
        preset="mujoco_a2c", env="HalfCheetah-v5", backend="gymnasium", method="a2c",
        total_timesteps=1_000_000, eval_every=10_000, ppo=None, a2c=replace(_SB3_A2C, normalize_observations=True),
        returns=_MUJOCO_RETURNS,
        bpo=replace(_MUJOCO_DEFAULT_BPO, replay_size=1024, mu_batch_size=256, n_qvf_epochs=1, n_mu_epochs=1),
    ),
    "mujoco_default": OnPolicyTrainConfig(
        preset="mujoco_default", env="HalfCheetah-v5", backend="gymnasium", variant="bpo_c1.0_rho1.5",
        total_timesteps=1_500_000, eval_every=8_192, eval_episodes=10, ppo=_MUJOCO_DEFAULT_PPO,
        returns=_MUJOCO_RETURNS, bpo=_MUJOCO_DEFAULT_BPO,
    ),
    # The authors' public configuration of the same runs (their configs.yaml sections mujoco_ppo and
    # ppo_bpo_zero1.0_1.5 with their code's fixed choices): every switch this project offers set to
    # their value, field by field in docs/authors_code.md ("The authors' preset").
    "mujoco_default_authors": OnPolicyTrainConfig(
        preset="mujoco_default_authors", env="HalfCheetah-v5", backend="gymnasium", variant="bpo_c1.0_rho1.5",
        total_timesteps=1_500_000, eval_every=8_192, eval_episodes=10,
        ppo=replace(_MUJOCO_DEFAULT_PPO, normalize_observations=False, log_std_init=0.0, ortho_gains="unit",
                    vf_coef=1.0),
        returns=replace(_MUJOCO_RETURNS, advantage="authors"),
        bpo=replace(_MUJOCO_DEFAULT_BPO, ppo_ent_coef=0.0, mu_ent_coef=0.001, fqe_loss="authors",
                    q_hat_head="softplus", q_init="orthogonal", td_weight_clip=True),
    ),
    "mujoco_gsde": OnPolicyTrainConfig(
        preset="mujoco_gsde", env="HalfCheetah-v5", backend="gymnasium", variant="bpo_c1.0_rho1.5",
        total_timesteps=2_000_000, eval_every=8_192, eval_episodes=10, ppo=_MUJOCO_GSDE_PPO, returns=_MUJOCO_RETURNS,
        bpo=_MUJOCO_GSDE_BPO,
    ),
    # The authors' public configuration of the gSDE column (their configs.yaml sections mujoco_ppo_gsde
    # and ppo_bpo_zero1.0_1.5, merged leaf by leaf), field by field in docs/authors_code.md ("The
    # authors' gSDE preset"): their "gSDE" is a state-independent std whose draw is held 4 steps (row
    # 13), whole-time-step minibatches (row 26), log std -1.0 on every task (row 25: no ENV_OVERRIDES),
    # and mu's entropy weight is PPO's, 0 here.
    "mujoco_gsde_authors": OnPolicyTrainConfig(
        preset="mujoco_gsde_authors", env="HalfCheetah-v5", backend="gymnasium", variant="bpo_c1.0_rho1.5",
        total_timesteps=2_000_000, eval_every=8_192, eval_episodes=10,
        ppo=replace(_MUJOCO_GSDE_PPO, normalize_observations=False, sde_features="constant", vf_coef=1.0,
                    ortho_gains="unit", whole_step_minibatches=True),
        returns=replace(_MUJOCO_RETURNS, advantage="authors"),
        bpo=replace(_MUJOCO_GSDE_BPO, ppo_ent_coef=0.0, fqe_loss="authors", q_hat_head="softplus",
                    q_init="orthogonal", td_weight_clip=True),
    ),
}


def _with_authors_bugs(authors: OnPolicyTrainConfig, name: str) -> OnPolicyTrainConfig:
    """The authors' public code as it runs, bugs included: their configuration ``authors`` with the
    five switches that reproduce what their code does where the paper says otherwise
    (docs/authors_code.md, rows 14, 15, 17, 21 and 22; each off elsewhere)."""
    return replace(authors, preset=name, bpo=replace(
        authors.bpo, q_hat_reward="last_q_batch_reward", mu_q_hat_batch_min=True, mu_q_hat_unclipped_actions=True,
        replay_epoch_filled_only=True, fqe_unclipped_actions=True))


PRESETS["mujoco_authors_code"] = _with_authors_bugs(PRESETS["mujoco_default_authors"], "mujoco_authors_code")
PRESETS["mujoco_gsde_authors_code"] = _with_authors_bugs(PRESETS["mujoco_gsde_authors"], "mujoco_gsde_authors_code")

# Table 5: per-environment changes to a preset, applied when the environment is chosen.
ENV_OVERRIDES = {
    "mujoco_gsde": {
        "Ant-v5": {"ppo.normalize_observations": False},  # "Normalize: advantages" only
        "HalfCheetah-v5": {"ppo.log_std_init": -2.0},
    },
}

# Table 1's rows: (c_bar, rho_bar) per decision, and trajectory-level truncation with c_bar = 1.
_ROWS = {
    "ppo": {"bpo": False},
    "bpo_c1.5_rho1.5": {"bpo": True, "returns.c_bar": 1.5, "returns.rho_bar": 1.5, "returns.traj": "per_decision"},
    "bpo_c1.0_rho1.0": {"bpo": True, "returns.c_bar": 1.0, "returns.rho_bar": 1.0, "returns.traj": "per_decision"},
    "bpo_c1.0_rho1.5": {"bpo": True, "returns.c_bar": 1.0, "returns.rho_bar": 1.5, "returns.traj": "per_decision"},
    # rho_bar does not enter 'traj' returns; it stays 1.5 for the diagnostics that report it.
    "bpo_traj_c1.0": {"bpo": True, "returns.c_bar": 1.0, "returns.rho_bar": 1.5, "returns.traj": "traj"},
}
TABLE1_ROWS = tuple(_ROWS)
# A row as a preset's source runs it, where that differs from the paper's: the authors' "traj" row
# (configs.yaml ppo_bpo_zero1.0_traj) is their shifted product with rho_bar = 1.0
# (docs/authors_code.md, row 23).
_AUTHORS_ROWS = {"bpo_traj_c1.0": {"returns.traj": "traj_shifted", "returns.rho_bar": 1.0}}
PRESET_ROWS = {name: _AUTHORS_ROWS for name in ("mujoco_default_authors", "mujoco_authors_code", "mujoco_gsde_authors",
                                                "mujoco_gsde_authors_code")}
# The method alone for presets whose method is not PPO (the "ppo" row runs PPO alone); the BPO rows
# run BPO on the preset's method. "bpo": whether the run keeps its behaviour step (``with_bpo``).
METHOD_ROWS = {"a2c": {"bpo": False}}
ABLATIONS = {
    "bpo_no_qhat": {"bpo.use_q_hat": False},
    "bpo_no_symlog": {"bpo.symlog_targets": False},
    # The authors' form of the same ablation: without symlog, their code bootstraps, computes r-hat
    # and feeds mu's Q-hat from the Polyak target networks.
    "bpo_no_symlog_target": {"bpo.symlog_targets": False, "bpo.bootstrap_net": "target", "bpo.value_net": "target"},
}
VARIANTS = TABLE1_ROWS + tuple(METHOD_ROWS) + tuple(ABLATIONS)

# The paper's Table 1 (mean ± SD over 10 runs, 10 evaluation episodes after training; the paper
# does not label its ±, its marks show it is the SD: docs/choices.md), by (environment, preset) and
# row; used to pick the ablations' base and to compare reproductions.
PAPER_TABLE1 = {
    ("Ant-v5", "mujoco_gsde"): {"ppo": (1106, 111), "bpo_c1.5_rho1.5": (1287, 148), "bpo_c1.0_rho1.0": (1592, 126),
                                "bpo_c1.0_rho1.5": (1690, 125), "bpo_traj_c1.0": (1400, 122)},
    ("HalfCheetah-v5", "mujoco_gsde"): {"ppo": (3425, 468), "bpo_c1.5_rho1.5": (3742, 408),
                                        "bpo_c1.0_rho1.0": (3674, 321), "bpo_c1.0_rho1.5": (3431, 431),
                                        "bpo_traj_c1.0": (3477, 356)},
    ("HalfCheetah-v5", "mujoco_default"): {"ppo": (3527, 670), "bpo_c1.5_rho1.5": (3999, 320),
                                           "bpo_c1.0_rho1.0": (3449, 550), "bpo_c1.0_rho1.5": (4749, 419),
                                           "bpo_traj_c1.0": (3656, 588)},
    ("Hopper-v5", "mujoco_default"): {"ppo": (2126, 492), "bpo_c1.5_rho1.5": (2143, 422),
                                      "bpo_c1.0_rho1.0": (2373, 377), "bpo_c1.0_rho1.5": (2316, 326),
                                      "bpo_traj_c1.0": (2770, 296)},
    ("Walker2d-v5", "mujoco_default"): {"ppo": (2091, 408), "bpo_c1.5_rho1.5": (2782, 456),
                                        "bpo_c1.0_rho1.0": (2805, 470), "bpo_c1.0_rho1.5": (2898, 513),
                                        "bpo_traj_c1.0": (3044, 332)},
}
DEFAULT_ABLATION_BASE = "bpo_c1.0_rho1.5"
# Presets that run a column of Table 1 with other settings: the paper's numbers for that column apply.
PAPER_COLUMNS = {"mujoco_default_authors": "mujoco_default", "mujoco_authors_code": "mujoco_default",
                 "mujoco_gsde_authors": "mujoco_gsde", "mujoco_gsde_authors_code": "mujoco_gsde"}


def paper_setting(env: str, preset: str) -> tuple[str, str]:
    """The (environment, preset) key of the paper's Table 1 column that a run of ``preset`` on
    ``env`` is compared with."""
    return env, PAPER_COLUMNS.get(preset, preset)


def best_bpo_row(env: str, preset: str) -> str:
    """The best BPO row of Table 1 for (env, preset): the base of the ablations ("we simply
    picked the best performing configuration of BPO", Appendix B). Settings outside Table 1
    use ``DEFAULT_ABLATION_BASE``."""
    rows = PAPER_TABLE1.get(paper_setting(env, preset))
    if rows is None:
        return DEFAULT_ABLATION_BASE
    return max((r for r in rows if r != "ppo"), key=lambda r: rows[r][0])


def variant_changes(cfg: OnPolicyTrainConfig, name: str) -> dict:
    """What the named variant changes in ``cfg``: {"bpo": whether it keeps the behaviour step,
    dotted field: value}; a Table 1 row's own, or the best BPO row's with an ablation's on top."""
    if name not in VARIANTS:
        raise ConfigError("variant", f"unknown variant {name!r}; allowed: {list(VARIANTS)}")
    if not isinstance(cfg, OnPolicyTrainConfig):
        raise ConfigError("variant", f"applies to PPO presets only; preset {cfg.preset!r} is episodic")
    if name in ABLATIONS:
        return {**_row(cfg, best_bpo_row(cfg.env, cfg.preset)), **ABLATIONS[name]}
    return _row(cfg, name)


def _row(cfg: OnPolicyTrainConfig, name: str) -> dict:
    """A Table 1 row or a method's row, as ``cfg``'s preset runs it (``PRESET_ROWS``)."""
    return {**(_ROWS.get(name) or METHOD_ROWS[name]), **PRESET_ROWS.get(cfg.preset, {}).get(name, {})}


def apply_variant(cfg: OnPolicyTrainConfig, name: str) -> OnPolicyTrainConfig:
    """``cfg`` with the named variant: a Table 1 row, or an ablation of the best BPO row for the
    config's environment and preset."""
    changes = variant_changes(cfg, name)
    if not changes["bpo"] and name != cfg.method:
        raise ConfigError("variant", f"{name!r} runs {name} alone; preset {cfg.preset!r} runs method {cfg.method!r}: "
                                     f"use variant {cfg.method!r} for it alone")
    return replace_dotted(with_bpo(cfg, changes.pop("bpo")), variant=name, **changes)


def variant_problem(cfg: OnPolicyTrainConfig) -> str | None:
    """Why ``cfg``'s variant (a known one) does not name the kind of run (None: it does, or there
    is none). The variant is the run's row in tables and its folder: a Table 1 row of BPO on a run
    of the method alone, or a method-alone row on another method or with BPO, would mislabel it.
    (A field the variant sets may differ: a sweep's grid value over a row names itself in the row.)"""
    if not cfg.variant:
        return None
    keeps_bpo = variant_changes(cfg, cfg.variant)["bpo"]
    if keeps_bpo == (cfg.bpo is not None) and (keeps_bpo or cfg.variant == cfg.method):
        return None
    run = f"BPO on {cfg.method}" if cfg.bpo is not None else f"{cfg.method} alone"
    allowed = [""] + [v for v in VARIANTS if variant_changes(cfg, v)["bpo"] == (cfg.bpo is not None)
                      and (cfg.bpo is not None or v == cfg.method)]
    return f"{cfg.variant!r} names another kind of run than this one, {run}; allowed: {allowed}"


def variant_field_changed(cfg: OnPolicyTrainConfig) -> str | None:
    """The first field that ``cfg``'s variant sets and ``cfg`` holds otherwise (None: none does):
    ``bpo train``'s flags over its ``--variant``, which would label values the run does not have."""
    changes = variant_changes(cfg, cfg.variant) if cfg.variant else {}
    return next((name for name, value in changes.items() if name != "bpo" and get_dotted(cfg, name) != value), None)


def labelled(cfg):
    """``cfg`` with a variant that still names the run (``variant_problem``): a Table 1 row of BPO
    becomes the method's own row once BPO is off (so ``--no-bpo`` on the MuJoCo presets, which carry
    BPO (1.0, 1.5), is ``--variant ppo``), or none where the method has no row; a row whose fields
    the run changed (c̄ = 1.5 under ``bpo_c1.0_rho1.5``), or a method-alone row with BPO, becomes none."""
    if not isinstance(cfg, OnPolicyTrainConfig) or not cfg.variant:
        return cfg
    if variant_problem(cfg) is None and variant_field_changed(cfg) is None:
        return cfg
    own_row = cfg.method in VARIANTS and not variant_changes(cfg, cfg.method)["bpo"]
    return replace(cfg, variant=cfg.method if own_row and cfg.bpo is None else "")


def with_bpo_labelled(cfg, on: bool, section=None):
    """``cfg`` with BPO on or off (``with_bpo``) and a variant that still names the run (``labelled``)."""
    return labelled(with_bpo(cfg, on, section))


def get_preset(name: str, env: str | None = None):
    """The preset ``name``, on ``env`` when given (with the preset's Table 5 overrides for it)."""
    if name not in PRESETS:
        raise ConfigError("preset", f"unknown preset {name!r}; allowed: {sorted(PRESETS)} (a plug-in's presets "
                                    "need its module in BPO_PLUGINS: docs/methods.md)")
    cfg = PRESETS[name]
    if env is None or env == cfg.env:
        overrides = ENV_OVERRIDES.get(name, {}).get(cfg.env, {})
    else:
        cfg = replace(cfg, env=env)
        overrides = ENV_OVERRIDES.get(name, {}).get(env, {})
    return replace_dotted(cfg, **overrides)


BUILT_IN = frozenset(PRESETS)
"""The presets this module defines (``PRESETS`` also holds those plug-ins register)."""

def check_preset_name(name) -> None:
    """A preset names a folder of the default output path (runs/PRESET/ENV/...) and a table's
    column: a name, not a path (a hand-edited config.json's "/tmp/x" wrote the run there). The
    same rule for a plug-in's preset when it registers and for a run's config when it is validated."""
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", name):
        raise ConfigError("preset", f"must be a name of letters, digits, '_', '.' and '-' (not a path), got {name!r}")


def register_preset(cfg, env_overrides: dict | None = None):
    """Add ``cfg`` as the preset ``cfg.preset`` (a plug-in's presets: ``docs/methods.md``), with
    per-environment overrides ``{env: {dotted field: value}}`` as ``ENV_OVERRIDES`` holds for the
    built-in ones. Registering an equal preset again is a no-op; another under a taken name is
    refused. Returns ``cfg``."""
    name = cfg.preset
    check_preset_name(name)
    if name in PRESETS and (PRESETS[name] != cfg or ENV_OVERRIDES.get(name, {}) != (env_overrides or {})):
        raise ConfigError("preset", f"{name!r} is taken by another preset")
    PRESETS[name] = cfg
    if env_overrides:
        ENV_OVERRIDES[name] = dict(env_overrides)
    return cfg
