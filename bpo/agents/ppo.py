"""PPO's update (paper Listing 1): n_epochs passes of minibatch steps on the clipped surrogate
(eq. 10) for the actor and the value loss (eq. 12) for the critic, with an entropy bonus.

The actor and the critic are separate networks with separate Adam optimisers (Tables 3-4 list a
pi optimiser and a V optimiser), each with its own global gradient-norm clip
(``bpo.core.optim.clipped_adam``). The same update serves BPO-PPO (Listing 4): the caller passes the
log-probabilities of the collecting policy (mu) as ``old_log_prob``, so the ratio is pi_theta/mu,
and truncated IS-TD(lambda) advantages.

An optional KL penalty beta KL(pi_theta || pi_old) joins the actor loss (``kl_coef`` = beta > 0),
estimated on the rollout's samples, which the behaviour policy drew (pi_old for PPO, mu for
BPO-PPO), in a form whose expected gradient is the KL's gradient (``bpo.core.kl.kl_penalty_loss``).
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from bpo.agents.target import Batch, UpdateContext
from bpo.config.schema import ConfigError, OnPolicyTrainConfig, PPOHyperparams
from bpo.config.validation import int_at_least, non_negative, positive
from bpo.core import distributions
from bpo.core.kl import KLEstimator, kl_penalty_loss
from bpo.core.minibatch import minibatch_epochs, permuted_minibatches


class PPOState(NamedTuple):
    actor_params: dict
    critic_params: dict
    actor_opt_state: optax.OptState
    critic_opt_state: optax.OptState


def linear_schedule(initial, progress_remaining, kind: str):
    """SB3's schedules: ``initial`` (constant) or ``initial * progress_remaining`` (linear)."""
    return initial * progress_remaining if kind == "linear" else initial


def clipped_surrogate_loss(log_prob, old_log_prob, advantages, clip_range):
    """Negative of eq. (10): -mean(min(r A, clip(r, 1 - eps, 1 + eps) A)), r = exp(log_prob - old_log_prob).

    Also returns the fraction of clipped ratios and the k3 estimate of KL(old || new)."""
    log_ratio = log_prob - old_log_prob
    ratio = jnp.exp(log_ratio)
    unclipped = ratio * advantages
    clipped = jnp.clip(ratio, 1.0 - clip_range, 1.0 + clip_range) * advantages
    loss = -jnp.mean(jnp.minimum(unclipped, clipped))
    clip_frac = jnp.mean(jnp.abs(ratio - 1.0) > clip_range)
    approx_kl = jnp.mean((ratio - 1.0) - log_ratio)
    return loss, clip_frac, approx_kl


def value_loss(values, returns):
    """Eq. (12): 0.5 mean((V(s) - G)^2)."""
    return 0.5 * jnp.mean((values - returns) ** 2)


def normalize_advantages(advantages):
    """Per-minibatch standardisation (A - mean) / (std + 1e-8), as SB3 and the authors' JAX code.

    The std is the population one (n in the denominator), as ``jnp.std`` in the authors' code and in
    PureJaxRL; SB3's torch ``std`` divides by n - 1 (docs/choices.md, "PPO"). A minibatch of one row
    is returned as it is, as both do, rather than standardised to 0."""
    if advantages.shape[0] < 2:
        return advantages
    return (advantages - jnp.mean(advantages)) / (jnp.std(advantages) + 1e-8)


def actor_loss(actor_params, actor_apply, batch, clip_range, ent_coef, discrete: bool, normalize: bool,
               kl_coef: float = 0.0, kl_estimator: KLEstimator = "k3"):
    """Clipped surrogate plus entropy bonus on one minibatch, plus the KL penalty when ``kl_coef > 0``.

    ``batch``: obs, action, old_log_prob (denominator of the ratio), advantage and adv_weight
    (1, or rho_t in the weight-on-advantage form, applied after normalisation); with the penalty
    also pi_old_log_prob (log pi_old(a|s), the KL's reference) and behaviour_log_prob (log of the
    policy that drew a). ``kl_coef`` is static: at 0 the penalty is not computed at all."""
    dist, _ = actor_apply(actor_params, batch["obs"])
    log_prob = distributions.log_prob(dist, batch["action"], discrete)
    advantages = normalize_advantages(batch["advantage"]) if normalize else batch["advantage"]
    advantages = advantages * batch["adv_weight"]
    pg_loss, clip_frac, approx_kl = clipped_surrogate_loss(log_prob, batch["old_log_prob"], advantages, clip_range)
    ent = jnp.mean(distributions.entropy(dist, discrete))
    loss = pg_loss - ent_coef * ent
    metrics = {"pg_loss": pg_loss, "entropy": ent, "clip_frac": clip_frac, "approx_kl": approx_kl}
    if kl_coef > 0:
        penalty = kl_coef * jnp.mean(kl_penalty_loss(log_prob, batch["pi_old_log_prob"], batch["behaviour_log_prob"],
                                                     kl_estimator))
        loss = loss + penalty
        metrics["kl_penalty"] = penalty
    return loss, metrics


def ppo_step(state: PPOState, mb: dict, *, actor_apply, critic_apply, tx, clip_range, ent_coef, vf_coef,
             discrete: bool, normalize_advantage: bool, kl_coef: float = 0.0, kl_estimator: KLEstimator = "k3"):
    """Listing 1, line 5, on one minibatch: one step of ``tx`` on the actor loss (eq. 10, entropy
    bonus, optional KL penalty) and one on ``vf_coef`` times the value loss (eq. 12), each network
    with its own optimiser state. Returns the new state and the step's metrics."""
    (_, actor_metrics), actor_grads = jax.value_and_grad(actor_loss, has_aux=True)(
        state.actor_params, actor_apply, mb, clip_range, ent_coef, discrete, normalize_advantage, kl_coef,
        kl_estimator,
    )

    def critic_loss(params):
        loss = value_loss(critic_apply(params, mb["obs"]), mb["return"])
        return vf_coef * loss, loss

    (_, v_loss), critic_grads = jax.value_and_grad(critic_loss, has_aux=True)(state.critic_params)
    a_updates, a_opt = tx.update(actor_grads, state.actor_opt_state, state.actor_params)
    c_updates, c_opt = tx.update(critic_grads, state.critic_opt_state, state.critic_params)
    new_state = PPOState(optax.apply_updates(state.actor_params, a_updates),
                         optax.apply_updates(state.critic_params, c_updates), a_opt, c_opt)
    return new_state, {**actor_metrics, "value_loss": v_loss}


def ppo_update(key, state: PPOState, batch: dict, *, actor_apply, critic_apply, tx, n_epochs: int,
               batch_size: int, clip_range, ent_coef, vf_coef, discrete: bool, normalize_advantage: bool,
               kl_coef: float = 0.0, kl_estimator: KLEstimator = "k3", group: int = 1):
    """Listing 1, lines 3-5: ``n_epochs`` random passes over the flattened rollout ``batch`` in
    minibatches of ``batch_size`` (``permuted_minibatches``), one ``ppo_step`` each.

    ``tx`` is the optimiser with this update's learning rate (``bpo.core.optim.clipped_adam``).
    ``kl_coef`` and ``kl_estimator`` (static) add the KL penalty to the actor loss. ``group``: rows
    drawn together (``OnPolicyTrainConfig.minibatch_group``). Returns the new state and the steps'
    metrics averaged."""
    n = batch["obs"].shape[0]
    whole = n // batch_size == 1  # permuted_minibatches then takes every row in order

    def step(state, idx, _key):
        mb = batch if whole else jax.tree.map(lambda x: x[idx], batch)
        return ppo_step(state, mb, actor_apply=actor_apply, critic_apply=critic_apply, tx=tx, clip_range=clip_range,
                        ent_coef=ent_coef, vf_coef=vf_coef, discrete=discrete, normalize_advantage=normalize_advantage,
                        kl_coef=kl_coef, kl_estimator=kl_estimator)

    return minibatch_epochs(key, state, step, n_epochs=n_epochs,
                            indices=lambda k: permuted_minibatches(k, n, batch_size, group))


class PPO:
    """PPO as the target update of Algorithm 1 (``bpo.agents.target.TargetUpdate``): Listing 1's
    epochs at this point of the run's learning-rate and clip-range schedules."""

    name = "ppo"
    label = "PPO"

    def validate(self, cfg: OnPolicyTrainConfig) -> None:
        p, rollout = cfg.ppo, cfg.rollout_size
        for field in ("batch_size", "n_epochs"):
            int_at_least(f"ppo.{field}", getattr(p, field), 1)
        positive("ppo.clip_range", p.clip_range)
        non_negative("ppo.kl_coef", p.kl_coef, note=" (0: no KL penalty)")
        if rollout % cfg.ppo.batch_size:
            raise ConfigError("ppo.batch_size", f"must divide n_steps * n_envs = {rollout}, got {cfg.ppo.batch_size}")

    def init(self, ctx: UpdateContext, actor_params, critic_params, hp: PPOHyperparams) -> PPOState:
        tx = ctx.optimizer(hp.learning_rate)  # the state does not depend on the rate
        return PPOState(actor_params, critic_params, tx.init(actor_params), tx.init(critic_params))

    def behaviour_batch(self, batch: Batch, hp: PPOHyperparams) -> Batch:
        return batch  # the ratio pi_theta / mu of eq. (10) corrects for mu

    def update(self, ctx: UpdateContext, key, state: PPOState, batch: Batch, hp: PPOHyperparams,
               progress_remaining) -> tuple[PPOState, dict]:
        p = ctx.cfg.ppo
        return ppo_update(
            key, state, batch, actor_apply=ctx.actor_apply, critic_apply=ctx.critic_apply,
            tx=ctx.scheduled_optimizer(hp, progress_remaining),
            n_epochs=p.n_epochs, batch_size=p.batch_size,
            clip_range=linear_schedule(hp.clip_range, progress_remaining, p.clip_range_schedule),
            ent_coef=hp.ent_coef, vf_coef=hp.vf_coef, discrete=ctx.discrete,
            normalize_advantage=p.normalize_advantage, kl_coef=p.kl_coef, kl_estimator=p.kl_estimator,
            group=ctx.cfg.minibatch_group,
        )
