"""BPO's behaviour step (Algorithm 1, lines 9-16), shared by BPO-REINFORCE and BPO-PPO:

    for n_qvf_epochs: optimise Q with FQE            (eq. 13)
    compute r-hat on D with the trained Q            (eq. 7)
    for n_qvf_epochs: optimise Q-hat with FQE        (eq. 14, gamma^2)
    for n_mu_epochs:  optimise mu towards pi sqrt(Q-hat)  (eq. 15)

Discrete actions. The target policy pi is fixed during the step.
"""

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax

from bpo import replay as rb
from bpo.behaviour import behaviour_target_log_probs, discrete_mu_loss, floored_q_hat
from bpo.config import BehaviourConfig
from bpo.fqe import FQESettings, QState, fqe_step, q_bounds, q_hat_bounds, r_hat, take_action, to_real
from bpo.networks import MLP


class BehaviourState(NamedTuple):
    q: QState
    q_hat: QState
    mu_params: dict
    mu_opt_state: optax.OptState
    r_min: jnp.ndarray
    r_max: jnp.ndarray
    r_hat_max: jnp.ndarray


class Behaviour(NamedTuple):
    """The networks and optimisers of the behaviour step, and its two functions."""

    init: Callable
    step: Callable
    mu_apply: Callable


def _adam(lr, eps, max_grad_norm):
    clip = [] if max_grad_norm == float("inf") else [optax.clip_by_global_norm(max_grad_norm)]
    return optax.chain(*clip, optax.adam(lr, eps=eps))


def make_behaviour(cfg: BehaviourConfig, n_actions: int, pi_init_logits, hp) -> Behaviour:
    """Build the behaviour step. ``hp`` holds the traced q_lr, mu_lr, polyak_tau, symlog_reg_coef."""
    q_net = MLP(cfg.q_hidden, n_actions, layer_norm=cfg.layer_norm, zero_head=cfg.zero_init_head)
    mu_net = MLP(cfg.mu_hidden, n_actions, zero_head=True, head_bias=tuple(pi_init_logits))
    q_tx = _adam(hp.q_lr, cfg.adam_eps, cfg.q_max_grad_norm)
    mu_tx = _adam(hp.mu_lr, cfg.adam_eps, cfg.mu_max_grad_norm)
    settings = FQESettings(cfg.symlog_targets, cfg.weight_td, cfg.clip_targets, cfg.bootstrap_net == "target")

    def init(key, obs_example):
        k_q, k_qh, k_mu = jax.random.split(key, 3)

        def q_state(k):
            params = q_net.init(k, obs_example)
            return QState(params=params, target_params=params, opt_state=q_tx.init(params))

        mu_params = mu_net.init(k_mu, obs_example)
        zero = jnp.zeros((), jnp.float32)
        return BehaviourState(q_state(k_q), q_state(k_qh), mu_params, mu_tx.init(mu_params), zero, zero, zero)

    def run_fqe(key, q_state, replay, rewards_field, gamma, bounds, pi_probs_next, log_pi):
        def minibatch(state, idx):
            batch = rb.gather(replay, idx)
            batch["reward"] = batch[rewards_field]
            return fqe_step(
                state, batch, pi_probs_next[idx], log_pi[idx], apply_fn=q_net.apply, tx=q_tx, gamma=gamma,
                bounds=bounds, tau=hp.polyak_tau, reg_coef=hp.symlog_reg_coef, settings=settings,
            )

        def epoch(state, k):
            return jax.lax.scan(minibatch, state, rb.epoch_indices(k, replay, cfg.q_batch_size))

        q_state, metrics = jax.lax.scan(epoch, q_state, jax.random.split(key, cfg.n_qvf_epochs))
        return q_state, jax.tree.map(jnp.mean, metrics)

    def step(key, state: BehaviourState, replay: rb.Replay, pi_logits_fn, gamma):
        k_q, k_qh, k_mu = jax.random.split(key, 3)
        data = replay.data
        filled = jnp.arange(replay.capacity) < replay.size
        # pi is fixed during the behaviour step: evaluate it once on the whole buffer.
        pi_probs_next = jax.nn.softmax(pi_logits_fn(data["next_obs"]), axis=-1)
        pi_log_probs = jax.nn.log_softmax(pi_logits_fn(data["obs"]), axis=-1)
        log_pi = take_action(pi_log_probs, data["action"])

        r_min = jnp.minimum(state.r_min, jnp.min(jnp.where(filled, data["reward"], jnp.inf)))
        r_max = jnp.maximum(state.r_max, jnp.max(jnp.where(filled, data["reward"], -jnp.inf)))
        q, q_metrics = run_fqe(
            k_q, state.q, replay, "reward", gamma, q_bounds(r_min, r_max, gamma), pi_probs_next, log_pi
        )

        q_sa = to_real(take_action(q_net.apply(q.params, data["obs"]), data["action"]), cfg.symlog_targets)
        if cfg.clip_targets:
            q_sa = jnp.clip(q_sa, *q_bounds(r_min, r_max, gamma))
        replay = replay.replace(data={**data, "r_hat": r_hat(data["reward"], q_sa)})
        r_hat_max = jnp.maximum(state.r_hat_max, jnp.max(jnp.where(filled, replay.data["r_hat"], -jnp.inf)))
        hat_bounds = q_hat_bounds(r_hat_max, gamma)
        q_hat, q_hat_metrics = run_fqe(k_qh, state.q_hat, replay, "r_hat", gamma**2, hat_bounds, pi_probs_next, log_pi)

        def mu_minibatch(carry, idx):
            params, opt_state = carry
            obs = data["obs"][idx]
            if cfg.use_q_hat:
                q_hat_values = to_real(q_net.apply(q_hat.params, obs), cfg.symlog_targets)
                cap = hat_bounds[1] if cfg.clip_targets else None
                q_hat_values = floored_q_hat(q_hat_values, cfg.q_hat_floor, cap)
            else:
                q_hat_values = jnp.ones(obs.shape[:-1] + (n_actions,))
            target = behaviour_target_log_probs(pi_log_probs[idx], q_hat_values)
            loss, grads = jax.value_and_grad(lambda p: discrete_mu_loss(mu_net.apply(p, obs), target, cfg.mu_loss))(params)
            updates, opt_state = mu_tx.update(grads, opt_state, params)
            return (optax.apply_updates(params, updates), opt_state), loss

        def mu_epoch(carry, k):
            return jax.lax.scan(mu_minibatch, carry, rb.epoch_indices(k, replay, cfg.mu_batch_size))

        (mu_params, mu_opt_state), mu_losses = jax.lax.scan(
            mu_epoch, (state.mu_params, state.mu_opt_state), jax.random.split(k_mu, cfg.n_mu_epochs)
        )
        new_state = BehaviourState(q, q_hat, mu_params, mu_opt_state, r_min, r_max, r_hat_max)
        metrics = {
            "q_loss": q_metrics["loss"],
            "q_clip_frac": q_metrics["clip_frac"],
            "q_hat_loss": q_hat_metrics["loss"],
            "q_hat_clip_frac": q_hat_metrics["clip_frac"],
            "mu_loss": jnp.mean(mu_losses),
        }
        return new_state, metrics

    return Behaviour(init=init, step=step, mu_apply=mu_net.apply)
