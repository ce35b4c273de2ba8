"""BPO's behaviour step (Algorithm 1, lines 9-16), shared by BPO-REINFORCE and BPO-PPO:

    for n_qvf_epochs: optimise Q with FQE            (eq. 13)
    compute r-hat on D with the trained Q            (eq. 7)
    for n_qvf_epochs: optimise Q-hat with FQE        (eq. 14, gamma^2)
    for n_mu_epochs:  optimise mu towards pi sqrt(Q-hat)  (eq. 15 discrete, eq. 16 continuous)

The target policy pi is fixed during the step. Discrete actions: Q(s, .) has one output per
action and the next-state expectation over pi is exact. Continuous actions: Q(s, a) takes the
action as input (clipped to the action bounds with ``clip_actions``) and the next-state value is
Q(s', a') at one sample a' ~ pi(.|s').

The replay's observations must already be in the networks' input space (normalised by the
caller when the run normalises observations).
"""

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax

from bpo import distributions as D
from bpo import replay as rb
from bpo.behaviour import behaviour_target_log_probs, continuous_mu_loss, discrete_mu_loss, floored_q_hat
from bpo.config import BehaviourConfig
from bpo.fqe import (
    FQESettings, QState, expected_next_value, fqe_step, q_bounds, q_hat_bounds, r_hat, take_action, to_real,
)
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
    """The networks and optimisers of the behaviour step, and its functions."""

    init: Callable  # (key, obs_example, action_example, mu_params) -> BehaviourState
    step: Callable  # (key, state, replay, pi_dist_fn, gamma) -> (state, metrics)
    mu_apply: Callable  # (mu_params, obs) -> Dist


def adam(lr, eps, max_grad_norm):
    clip = [] if max_grad_norm == float("inf") else [optax.clip_by_global_norm(max_grad_norm)]
    return optax.chain(*clip, optax.adam(lr, eps=eps))


def make_behaviour(cfg: BehaviourConfig, discrete: bool, n_actions: int, mu_apply: Callable, hp,
                   action_low=None, action_high=None, clip_actions: bool = True) -> Behaviour:
    """Build the behaviour step. ``mu_apply(params, obs) -> Dist`` is mu's network (same
    architecture as pi). ``hp`` holds the traced q_lr, mu_lr, polyak_tau, symlog_reg_coef.
    ``n_actions`` is the number of actions (discrete) or the action dimension (continuous)."""
    q_net = MLP(cfg.q_hidden, n_actions if discrete else 1, layer_norm=cfg.layer_norm, zero_head=cfg.zero_init_head)
    # The learning rates may be scaled per call of ``step`` (a decay schedule); Adam's state does
    # not depend on the rate, so optimisers built with different rates share one state.
    q_tx = adam(hp.q_lr, cfg.adam_eps, cfg.q_max_grad_norm)
    mu_tx = adam(hp.mu_lr, cfg.adam_eps, cfg.mu_max_grad_norm)
    settings = FQESettings(cfg.symlog_targets, cfg.weight_td, cfg.clip_targets, cfg.bootstrap_net == "target")

    def env_action(action):
        if discrete or not clip_actions:
            return action
        return jnp.clip(action, jnp.asarray(action_low), jnp.asarray(action_high))

    def q_output(params, obs, action):
        """Network output at (s, a): symlog(Q) with symlog targets, Q otherwise."""
        if discrete:
            return take_action(q_net.apply(params, obs), action)
        return q_net.apply(params, jnp.concatenate([obs, env_action(action)], axis=-1))[..., 0]

    def q_value(params, obs, action):
        return to_real(q_output(params, obs, action), cfg.symlog_targets)

    def init(key, obs_example, action_example, mu_params):
        k_q, k_qh, _ = jax.random.split(key, 3)  # the third key was mu's before mu_params came from outside
        q_input = obs_example if discrete else jnp.concatenate([obs_example, jnp.asarray(action_example, jnp.float32)])

        def q_state(k):
            params = q_net.init(k, q_input)
            return QState(params=params, target_params=params, opt_state=q_tx.init(params))

        zero = jnp.zeros((), jnp.float32)
        return BehaviourState(q_state(k_q), q_state(k_qh), mu_params, mu_tx.init(mu_params), zero, zero, zero)

    def split_epoch_key(k):
        # Discrete steps draw no action samples; their minibatch order uses the epoch key itself.
        return (k, k) if discrete else tuple(jax.random.split(k))

    def next_value_fn(pi_next: D.Dist):
        """E_{a'~pi(.|s')} Q(s', a') on a minibatch (rows ``batch['idx']`` of the buffer)."""

        def next_values(params, batch):
            dist = jax.tree.map(lambda x: x[batch["idx"]], pi_next)
            if discrete:
                next_q = to_real(q_net.apply(params, batch["next_obs"]), cfg.symlog_targets)
                return expected_next_value(next_q, jax.nn.softmax(dist.loc, axis=-1))
            next_action = D.sample(batch["key"], dist, discrete=False)
            return q_value(params, batch["next_obs"], next_action)

        return next_values

    def run_fqe(key, q_state, replay, rewards_field, gamma, bounds, pi_next, log_pi, q_tx):
        next_values = next_value_fn(pi_next)

        def minibatch(state, xs):
            idx, k = xs
            batch = rb.gather(replay, idx)
            batch.update(reward=batch[rewards_field], idx=idx, key=k)
            return fqe_step(
                state, batch, log_pi[idx], predict=lambda p, b: q_output(p, b["obs"], b["action"]),
                next_values=next_values, tx=q_tx, gamma=gamma, bounds=bounds, tau=hp.polyak_tau,
                reg_coef=hp.symlog_reg_coef, settings=settings,
            )

        def epoch(state, k):
            k_idx, k_samples = split_epoch_key(k)
            idx = rb.epoch_indices(k_idx, replay, cfg.q_batch_size)
            return jax.lax.scan(minibatch, state, (idx, jax.random.split(k_samples, idx.shape[0])))

        q_state, metrics = jax.lax.scan(epoch, q_state, jax.random.split(key, cfg.n_qvf_epochs))
        return q_state, jax.tree.map(jnp.mean, metrics)

    def mu_loss_fn(params, key, obs, pi_dist: D.Dist, q_hat_params, hat_cap, q_hat_all_actions):
        """Eq. (15) or (16) on a minibatch of replay states. ``q_hat_all_actions``: discrete only,
        Q-hat(s, .) precomputed once per behaviour step (Q-hat is fixed while mu trains)."""
        mu_dist = mu_apply(params, obs)
        if discrete:
            target = behaviour_target_log_probs(pi_dist.loc, q_hat_all_actions)
            return discrete_mu_loss(mu_dist.loc, target, cfg.mu_loss)
        action = D.sample(key, mu_dist, discrete=False)  # reparameterised: gradients flow through a
        log_mu = D.log_prob(mu_dist, action, discrete=False)
        log_pi = D.log_prob(pi_dist, action, discrete=False)
        if cfg.use_q_hat:
            cap = hat_cap if cfg.clip_targets else None
            q_hat = floored_q_hat(q_value(q_hat_params, obs, action), cfg.q_hat_floor, cap)
        else:
            q_hat = jnp.ones_like(log_mu)
        return continuous_mu_loss(log_mu, log_pi, q_hat)

    def discrete_q_hat(q_hat_params, obs, hat_cap):
        """Q-hat(s, a) for every action, made safe for the log in eq. (5); ones without Q-hat."""
        if not cfg.use_q_hat:
            return jnp.ones(obs.shape[:-1] + (n_actions,))
        values = to_real(q_net.apply(q_hat_params, obs), cfg.symlog_targets)
        return floored_q_hat(values, cfg.q_hat_floor, hat_cap if cfg.clip_targets else None)

    def step(key, state: BehaviourState, replay: rb.Replay, pi_dist_fn: Callable, gamma, lr_scale=1.0):
        """One behaviour step on D; ``lr_scale`` multiplies the Q, Q-hat and mu learning rates."""
        k_q, k_qh, k_mu = jax.random.split(key, 3)
        q_tx = adam(hp.q_lr * lr_scale, cfg.adam_eps, cfg.q_max_grad_norm)
        mu_tx = adam(hp.mu_lr * lr_scale, cfg.adam_eps, cfg.mu_max_grad_norm)
        data = replay.data
        filled = jnp.arange(replay.capacity) < replay.size
        # pi is fixed during the behaviour step: evaluate it once on the whole buffer.
        pi_next = pi_dist_fn(data["next_obs"])
        pi_here = pi_dist_fn(data["obs"])
        log_pi = D.log_prob(pi_here, data["action"], discrete)

        r_min = jnp.minimum(state.r_min, jnp.min(jnp.where(filled, data["reward"], jnp.inf)))
        r_max = jnp.maximum(state.r_max, jnp.max(jnp.where(filled, data["reward"], -jnp.inf)))
        bounds = q_bounds(r_min, r_max, gamma)
        q, q_metrics = run_fqe(k_q, state.q, replay, "reward", gamma, bounds, pi_next, log_pi, q_tx)

        q_sa = q_value(q.params, data["obs"], data["action"])
        if cfg.clip_targets:
            q_sa = jnp.clip(q_sa, *bounds)
        replay = replay.replace(data={**data, "r_hat": r_hat(data["reward"], q_sa)})
        r_hat_max = jnp.maximum(state.r_hat_max, jnp.max(jnp.where(filled, replay.data["r_hat"], -jnp.inf)))
        hat_bounds = q_hat_bounds(r_hat_max, gamma)
        q_hat, q_hat_metrics = run_fqe(k_qh, state.q_hat, replay, "r_hat", gamma**2, hat_bounds, pi_next, log_pi,
                                       q_tx)

        q_hat_all = discrete_q_hat(q_hat.params, data["obs"], hat_bounds[1]) if discrete else None

        def mu_minibatch(carry, xs):
            params, opt_state = carry
            idx, k = xs
            pi_dist = jax.tree.map(lambda x: x[idx], pi_here)
            loss, grads = jax.value_and_grad(mu_loss_fn)(params, k, data["obs"][idx], pi_dist, q_hat.params,
                                                         hat_bounds[1], None if q_hat_all is None else q_hat_all[idx])
            updates, opt_state = mu_tx.update(grads, opt_state, params)
            return (optax.apply_updates(params, updates), opt_state), loss

        def mu_epoch(carry, k):
            k_idx, k_samples = split_epoch_key(k)
            idx = rb.epoch_indices(k_idx, replay, cfg.mu_batch_size)
            return jax.lax.scan(mu_minibatch, carry, (idx, jax.random.split(k_samples, idx.shape[0])))

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

    return Behaviour(init=init, step=step, mu_apply=mu_apply)
