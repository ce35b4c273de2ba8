"""A2C's update (synchronous advantage actor-critic; Mnih et al., "Asynchronous Methods for Deep
Reinforcement Learning", ICML 2016, Algorithm S3, run synchronously): one gradient step per rollout,
on the whole rollout, of the policy-gradient loss, the value loss and an entropy bonus, in the form
of Stable-Baselines3's ``A2C.train`` (the reference implementation whose settings the A2C presets
take from rl-baselines3-zoo).

The actor and the critic are separate networks, but, as in SB3, one loss and one optimiser
(RMSprop by default, ``bpo.core.optim.clipped``) over both, with one global gradient-norm clip.

BPO-A2C (the paper's conclusion names A2C as the first extension; Algorithm 1 adds the behaviour
step after the target update) collects with mu. At A2C's single step pi_theta is still pi_old, so
PPO's ratio pi_theta/mu of eq. (10) is the constant pi_old/mu: BPO-A2C weights each step's term by
rho_t = min(rho_bar, pi_old(a_t|s_t)/mu(a_t|s_t)), the truncated importance-sampled policy gradient
of V-trace (Espeholt et al., "IMPALA", ICML 2018, Section 4.2), with the advantages of eq. (11)
from the truncated IS-TD(lambda) returns of eq. (6). The caller puts rho_t in the batch's
``adv_weight`` (1 for A2C), so this module has one loss for both.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from bpo.agents.ppo import normalize_advantages
from bpo.agents.target import Batch, UpdateContext
from bpo.config.schema import ConfigError, OnPolicyTrainConfig, PPOHyperparams
from bpo.core import distributions


class A2CState(NamedTuple):
    actor_params: dict
    critic_params: dict
    opt_state: optax.OptState  # of the pair {"actor": ..., "critic": ...}: one optimiser over both


def joint_params(state: A2CState) -> dict:
    """The one parameter tree A2C's optimiser updates."""
    return {"actor": state.actor_params, "critic": state.critic_params}


def policy_gradient_loss(log_prob, advantages, weights):
    """-mean(w_t A_t log pi_theta(a_t|s_t)): A2C's policy loss (w_t = 1; Mnih et al. 2016) and
    BPO-A2C's (w_t = min(rho_bar, pi_old/mu), V-trace's truncated IS weight), whose gradient is
    -mean(w_t A_t grad log pi_theta(a_t|s_t)). ``advantages`` and ``weights`` are constants."""
    return -jnp.mean(weights * advantages * log_prob)


def mse_value_loss(values, returns):
    """mean((G_t - V(s_t))^2): SB3's A2C value loss (``F.mse_loss``, without eq. (12)'s one-half)."""
    return jnp.mean((returns - values) ** 2)


def a2c_loss(params: dict, batch: dict, *, actor_apply, critic_apply, ent_coef, vf_coef, discrete: bool,
             normalize_advantage: bool):
    """policy loss - ent_coef * mean entropy + vf_coef * value loss on the whole rollout (SB3's
    ``A2C.train``).

    Args:
        params: ``{"actor": ..., "critic": ...}``.
        batch: obs, action, advantage, return and adv_weight (w_t above) of every step.
        normalize_advantage: standardise the advantages before weighting them (SB3's option, off
            in A2C's reference settings).
    Returns:
        The loss and its parts (pg_loss, entropy, value_loss)."""
    dist, _ = actor_apply(params["actor"], batch["obs"])
    log_prob = distributions.log_prob(dist, batch["action"], discrete)
    advantages = normalize_advantages(batch["advantage"]) if normalize_advantage else batch["advantage"]
    pg_loss = policy_gradient_loss(log_prob, advantages, batch["adv_weight"])
    entropy = jnp.mean(distributions.entropy(dist, discrete))
    v_loss = mse_value_loss(critic_apply(params["critic"], batch["obs"]), batch["return"])
    loss = pg_loss - ent_coef * entropy + vf_coef * v_loss
    return loss, {"pg_loss": pg_loss, "entropy": entropy, "value_loss": v_loss}


def a2c_update(state: A2CState, batch: dict, *, actor_apply, critic_apply, tx: optax.GradientTransformation,
               ent_coef, vf_coef, discrete: bool, normalize_advantage: bool) -> tuple[A2CState, dict]:
    """One A2C step on the flattened rollout ``batch``: the gradient of ``a2c_loss`` through
    ``tx`` (global norm clip, then RMSprop or Adam at this update's learning rate).

    Returns:
        The new state and the loss's parts."""
    params = joint_params(state)
    (_, metrics), grads = jax.value_and_grad(a2c_loss, has_aux=True)(
        params, batch, actor_apply=actor_apply, critic_apply=critic_apply, ent_coef=ent_coef, vf_coef=vf_coef,
        discrete=discrete, normalize_advantage=normalize_advantage)
    updates, opt_state = tx.update(grads, state.opt_state, params)
    new = optax.apply_updates(params, updates)
    return A2CState(new["actor"], new["critic"], opt_state), metrics


def behaviour_weights(adv_weight, pi_old_log_prob, behaviour_log_prob, rho_bar):
    """BPO-A2C's correction: ``adv_weight`` (1, or a Trust Region Mask) times
    rho_t = min(rho_bar, pi_old(a_t|s_t) / mu(a_t|s_t)), the ratio of eq. (10) at A2C's single step
    truncated at rho_bar: V-trace's policy gradient with the authors' advantage; eq. (11)'s, whose
    first TD error carries rho_t too, counts it twice, as BPO-PPO's eq. (10) does (docs/a2c.md)."""
    return adv_weight * jnp.minimum(rho_bar, jnp.exp(pi_old_log_prob - behaviour_log_prob))


class A2C:
    """A2C as the target update of Algorithm 1 (``bpo.agents.target.TargetUpdate``): one step per
    rollout at this point of the learning-rate schedule; with BPO, V-trace's weights."""

    name = "a2c"
    label = "A2C"

    def validate(self, cfg: OnPolicyTrainConfig) -> None:
        if cfg.returns.weight_on_advantage:
            raise ConfigError("returns.weight_on_advantage", "chooses the form of PPO's ratio; BPO-A2C always "
                              "weights the advantage by min(rho_bar, pi_old/mu) (leave it False)")

    def init(self, ctx: UpdateContext, actor_params, critic_params, hp: PPOHyperparams) -> A2CState:
        tx = ctx.optimizer(hp.learning_rate)  # the state does not depend on the rate
        return A2CState(actor_params, critic_params, tx.init({"actor": actor_params, "critic": critic_params}))

    def behaviour_batch(self, batch: Batch, hp: PPOHyperparams) -> Batch:
        return {**batch, "adv_weight": behaviour_weights(batch["adv_weight"], batch["pi_old_log_prob"],
                                                         batch["behaviour_log_prob"], hp.rho_bar)}

    def update(self, ctx: UpdateContext, key, state: A2CState, batch: Batch, hp: PPOHyperparams,
               progress_remaining) -> tuple[A2CState, dict]:
        p = ctx.cfg.a2c
        return a2c_update(state, batch, actor_apply=ctx.actor_apply, critic_apply=ctx.critic_apply,
                          tx=ctx.scheduled_optimizer(hp, progress_remaining),
                          ent_coef=hp.ent_coef, vf_coef=hp.vf_coef, discrete=ctx.discrete,
                          normalize_advantage=p.normalize_advantage)
