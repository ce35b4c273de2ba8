"""A method of one's own, in one file: VPG, the vanilla policy gradient with a learned baseline
(Williams 1992; Sutton et al. 2000), registered with a preset and a sweep (docs/methods.md). The
package does not change; ``BPO_PLUGINS`` names this file:

    export BPO_PLUGINS=$PWD/examples/vpg.py
    bpo train cartpole_vpg --no-bpo --out runs/vpg-alone   # the method alone
    bpo train cartpole_vpg --out runs/vpg-bpo              # BPO on it: mu collects, Q and Q-hat by FQE
    bpo sweep examples/vpg.py --out runs/vpg && bpo table runs/vpg --baseline vpg

One step per rollout of -mean(w_t A_t log pi_theta(a_t|s_t)) on the actor and of 0.5 mean((V - G)^2)
on the critic, each network with its own optimiser state. With BPO (data from mu) it weights each
step by w_t = min(rho_bar, pi_old/mu), as BPO-A2C does. The preset is small (1,024 steps) so that a
first try takes seconds after compiling; ``--total-timesteps`` sets a real budget.
``tests/test_method_plugin.py`` trains it, checks its update by hand and runs its sweep.
"""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from bpo.agents.a2c import behaviour_weights
from bpo.agents.methods import register_method
from bpo.config.presets import PRESETS, register_preset
from bpo.config.schema import ConfigError, OnPolicyTrainConfig
from bpo.core import distributions
from experiments.sweep import Grid, Sweep


class VPGState(NamedTuple):
    actor_params: dict
    critic_params: dict
    actor_opt_state: optax.OptState
    critic_opt_state: optax.OptState


def vpg_actor_loss(actor_params, actor_apply, batch, discrete: bool):
    """-mean(w_t A_t log pi_theta(a_t|s_t)); A_t and w_t (``adv_weight``) are constants."""
    dist, _ = actor_apply(actor_params, batch["obs"])
    return -jnp.mean(batch["adv_weight"] * batch["advantage"] * distributions.log_prob(dist, batch["action"], discrete))


class VPG:
    name = "vpg"
    label = "VPG"

    def validate(self, cfg: OnPolicyTrainConfig) -> None:
        if cfg.ppo.kl_coef > 0:
            raise ConfigError("ppo.kl_coef", "is PPO's KL penalty; method vpg has none (leave it 0)")
        if cfg.returns.weight_on_advantage:  # the batch would already carry min(rho_bar, pi_old/mu)
            raise ConfigError("returns.weight_on_advantage", "chooses the form of PPO's ratio; BPO on VPG "
                              "weights the advantage in behaviour_batch (leave it False)")

    def init(self, ctx, actor_params, critic_params, hp) -> VPGState:
        tx = ctx.optimizer(hp.learning_rate)
        return VPGState(actor_params, critic_params, tx.init(actor_params), tx.init(critic_params))

    def behaviour_batch(self, batch, hp):  # V-trace's weights, as BPO-A2C's: the package's own function
        return {**batch, "adv_weight": behaviour_weights(batch["adv_weight"], batch["pi_old_log_prob"],
                                                         batch["behaviour_log_prob"], hp.rho_bar)}

    def update(self, ctx, key, state: VPGState, batch, hp, progress_remaining):
        tx = ctx.scheduled_optimizer(hp, progress_remaining)
        pg_loss, actor_grads = jax.value_and_grad(vpg_actor_loss)(state.actor_params, ctx.actor_apply, batch,
                                                                   ctx.discrete)

        def critic_loss(params):
            return 0.5 * jnp.mean((ctx.critic_apply(params, batch["obs"]) - batch["return"]) ** 2)

        v_loss, critic_grads = jax.value_and_grad(critic_loss)(state.critic_params)
        a_updates, a_opt = tx.update(actor_grads, state.actor_opt_state, state.actor_params)
        c_updates, c_opt = tx.update(critic_grads, state.critic_opt_state, state.critic_params)
        new = VPGState(optax.apply_updates(state.actor_params, a_updates),
                       optax.apply_updates(state.critic_params, c_updates), a_opt, c_opt)
        return new, {"pg_loss": pg_loss, "value_loss": v_loss}


register_method(VPG())
register_preset(replace(
    PRESETS["cartpole_ppo"], preset="cartpole_vpg", method="vpg", total_timesteps=1024,
    eval_every=512, eval_episodes=2,
    ppo=replace(PRESETS["cartpole_ppo"].ppo, n_steps=32, n_envs=8, lr_schedule="constant"),
    bpo=replace(PRESETS["cartpole_ppo"].bpo, replay_size=512, q_batch_size=128, mu_batch_size=128, n_qvf_epochs=1,
                n_mu_epochs=1),
))
SWEEP = Sweep(
    name="vpg", description="VPG alone and BPO on VPG, CartPole-v1", baseline="vpg",
    grids=(Grid(preset="cartpole_vpg", variants=("vpg", "bpo"), seeds=2),),
)
