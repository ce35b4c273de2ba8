"""Named configurations equal to the paper's hyperparameter tables.

* ``short_corridor``: Table 2 (Figure 2), REINFORCE and BPO-REINFORCE on ShortCorridor.
"""

from bpo.config import BehaviourConfig, ConfigError, EpisodicTrainConfig, ReinforceConfig

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
}


def get_preset(name: str) -> EpisodicTrainConfig:
    if name not in PRESETS:
        raise ConfigError("preset", f"unknown preset {name!r}; allowed: {sorted(PRESETS)}")
    return PRESETS[name]
