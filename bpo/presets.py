"""Named configurations. Presets named after the paper reproduce its tables exactly; the others
are sensible settings for environments the paper does not use.

* ``short_corridor``: Table 2 (Figure 2), REINFORCE and BPO-REINFORCE on ShortCorridor.
* ``cartpole_ppo``: the authors' CartPole-v1 settings for PPO and BPO-PPO (BPO_NOTES).
* ``cartpole_continuous_ppo``, ``acrobot_ppo``, ``pendulum_ppo``, ``mountaincar_continuous_ppo``,
  ``short_corridor_ppo``: classic control with PPO/BPO-PPO (rl-zoo-like PPO settings; the BPO part
  follows ``cartpole_ppo`` scaled to the rollout size).
"""

from dataclasses import replace

from bpo.config import (
    BehaviourConfig, ConfigError, EpisodicTrainConfig, OnPolicyTrainConfig, PPOConfig, ReinforceConfig,
)

# The authors' CartPole settings (8 envs x 32 steps, batch 256, 20 epochs, decayed lr and clip; tanh
# 64-unit actor and critic with LeCun-normal init; no observation normalisation).
_CARTPOLE_PPO = PPOConfig(
    learning_rate=1e-3, lr_schedule="linear", n_steps=32, n_envs=8, batch_size=256, n_epochs=20, gamma=0.98,
    gae_lambda=0.8, clip_range=0.2, clip_range_schedule="linear", ent_coef=0.0, vf_coef=0.5, max_grad_norm=0.5,
    normalize_advantage=True, normalize_observations=False, pi_hidden=(64, 64), vf_hidden=(64, 64),
    activation="tanh", ortho_init=False,
)
_CARTPOLE_BPO = BehaviourConfig(
    rho_bar=1.5, c_bar=1.5, traj="per_decision", replay_size=1024, q_batch_size=256, mu_batch_size=128,
    n_qvf_epochs=10, n_mu_epochs=10, q_lr=1e-3, mu_lr=1e-3, q_max_grad_norm=0.5, mu_max_grad_norm=0.5,
    q_hidden=(64, 64), mu_hidden=(64, 64), layer_norm=True, zero_init_head=True, symlog_targets=True,
    symlog_reg_coef=1.0, polyak_tau=0.02, weight_td=True, clip_targets=True, clip_actions=True, lr_schedule="linear",
)

PRESETS = {
    "short_corridor": EpisodicTrainConfig(
        preset="short_corridor",
        env="ShortCorridor-v0",
        episodes=300,
        eval_every=10,
        eval_episodes=10,
        reinforce=ReinforceConfig(lr_start=0.1, lr_end=0.01, gamma=0.99),
        bpo=BehaviourConfig(
            rho_bar=1.5, c_bar=1.0, lam=1.0, traj="per_decision", replay_size=1024, q_batch_size=256,
            mu_batch_size=256, n_qvf_epochs=1, n_mu_epochs=1, q_lr=1e-3, mu_lr=1e-3, q_hidden=(64, 64),
            mu_hidden=(64, 64), symlog_targets=True, symlog_reg_coef=1.0, polyak_tau=0.02, weight_td=True,
            clip_targets=True, layer_norm=True, zero_init_head=True, mu_loss="cross_entropy",
        ),
    ),
    "cartpole_ppo": OnPolicyTrainConfig(
        preset="cartpole_ppo", env="CartPole-v1", total_timesteps=100_000, eval_every=8_192, eval_episodes=10,
        ppo=_CARTPOLE_PPO, bpo=_CARTPOLE_BPO,
    ),
    "cartpole_continuous_ppo": OnPolicyTrainConfig(
        preset="cartpole_continuous_ppo", env="ContinuousCartPole-v0", total_timesteps=100_000, eval_every=8_192,
        ppo=replace(_CARTPOLE_PPO, log_std_init=0.0), bpo=_CARTPOLE_BPO,
    ),
    "acrobot_ppo": OnPolicyTrainConfig(
        preset="acrobot_ppo", env="Acrobot-v1", total_timesteps=200_000, eval_every=10_240,
        ppo=PPOConfig(learning_rate=1e-3, lr_schedule="linear", n_steps=128, n_envs=8, batch_size=256, n_epochs=10,
                      gamma=0.99, gae_lambda=0.94, clip_range=0.2, ent_coef=0.0),
        bpo=replace(_CARTPOLE_BPO, replay_size=2048, n_qvf_epochs=5, n_mu_epochs=5),
    ),
    "pendulum_ppo": OnPolicyTrainConfig(
        preset="pendulum_ppo", env="Pendulum-v1", total_timesteps=100_000, eval_every=4_096,
        ppo=PPOConfig(learning_rate=1e-3, n_steps=1024, n_envs=4, batch_size=64, n_epochs=10, gamma=0.9,
                      gae_lambda=0.95, clip_range=0.2, ent_coef=0.0, use_sde=True, sde_sample_freq=4,
                      log_std_init=0.0, activation="tanh"),
        bpo=replace(_CARTPOLE_BPO, replay_size=4096, n_qvf_epochs=5, n_mu_epochs=5, lr_schedule="constant"),
    ),
    "mountaincar_continuous_ppo": OnPolicyTrainConfig(
        preset="mountaincar_continuous_ppo", env="MountainCarContinuous-v0", total_timesteps=50_000,
        eval_every=5_120,
        ppo=PPOConfig(learning_rate=7.77e-5, n_steps=64, n_envs=8, batch_size=256, n_epochs=10, gamma=0.9999,
                      gae_lambda=0.9, clip_range=0.1, ent_coef=0.00429, vf_coef=0.19, max_grad_norm=5.0,
                      use_sde=True, sde_sample_freq=-1, log_std_init=-3.29, ortho_init=False, activation="tanh"),
        bpo=replace(_CARTPOLE_BPO, replay_size=2048, n_qvf_epochs=5, n_mu_epochs=5, lr_schedule="constant"),
    ),
    "short_corridor_ppo": OnPolicyTrainConfig(
        preset="short_corridor_ppo", env="ShortCorridor-v0", total_timesteps=20_480, eval_every=2_048,
        ppo=PPOConfig(learning_rate=1e-3, n_steps=64, n_envs=8, batch_size=256, n_epochs=10, gamma=0.99,
                      gae_lambda=0.95, ent_coef=0.01, normalize_observations=False),
        bpo=replace(_CARTPOLE_BPO, c_bar=1.0, lr_schedule="constant"),
    ),
}


def get_preset(name: str):
    if name not in PRESETS:
        raise ConfigError("preset", f"unknown preset {name!r}; allowed: {sorted(PRESETS)}")
    return PRESETS[name]
