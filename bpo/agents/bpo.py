"""BPO's behaviour step (Algorithm 1, lines 9-16), shared by BPO-REINFORCE and BPO-PPO:

    for n_qvf_epochs: optimise Q with FQE            (eq. 13)           ``fqe_epochs``
    r-hat on D with the trained Q, and gamma^2       (eqs. 7, 8)        ``second_moment_problem``
    for n_qvf_epochs: optimise Q-hat with FQE        (eq. 14)           ``fqe_epochs``
    for n_mu_epochs:  optimise mu towards pi sqrt(Q-hat)  (eq. 15 discrete, eq. 16 continuous)  ``mu_epochs``

``behaviour_step`` runs the four in order. The target policy pi is fixed during the step.
Discrete actions: Q(s, .) has one output per action and the next-state expectation over pi is
exact. Continuous actions: Q(s, a) takes the action as input (clipped to the action bounds with
``clip_actions``) and the next-state value is Q(s', a') at one sample a' ~ pi(.|s').

The static half (settings, action space, networks) is a ``Behaviour``; the traced hyperparameters
``hp`` (q_lr, mu_lr, polyak_tau, symlog_reg_coef, gamma: ``Hyperparams`` or ``PPOHyperparams``)
are passed to every call, so they can be vmapped like seeds. The replay's observations must
already be in the networks' input space (normalised by the caller when the run normalises
observations).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from bpo.config.schema import BehaviourConfig
from bpo.core import distributions
from bpo.core import replay as rb
from bpo.core.behaviour import behaviour_target_log_probs, continuous_mu_loss, discrete_mu_loss, floored_q_hat
from bpo.core.distributions import Dist
from bpo.core.fqe import (
    FQESettings,
    QState,
    expected_next_value,
    fqe_step,
    q_bounds,
    q_hat_bounds,
    second_moment_problem,
    take_action,
    to_real,
    value_params,
)
from bpo.core.minibatch import last_minibatch, minibatch_epochs
from bpo.core.networks import MLP
from bpo.core.optim import clipped_adam

Params = dict
DistFn = Callable[[jax.Array], Dist]
"""obs -> the policy's action distribution there."""
MuApply = Callable[[Params, jax.Array], Dist]
"""(mu's parameters, obs) -> mu's action distribution."""


Q_HAT_SOFTPLUS_EPS = 1e-6  # the authors' code: Q-hat = softplus(output) + 1e-6


class BehaviourState(NamedTuple):
    q: QState
    q_hat: QState
    mu_params: dict
    mu_opt_state: optax.OptState
    r_min: jnp.ndarray
    r_max: jnp.ndarray
    r_hat_max: jnp.ndarray


@dataclass(frozen=True, eq=False)
class Behaviour:
    """The static half of the behaviour step: its settings, the action space and the networks.

    ``mu_apply`` is mu's network (the architecture of pi); ``n_actions`` is the number of actions
    (discrete) or the action dimension (continuous). Build it with ``make_behaviour``."""

    cfg: BehaviourConfig
    discrete: bool
    n_actions: int
    q_net: MLP
    mu_apply: MuApply
    action_low: np.ndarray | None = None
    action_high: np.ndarray | None = None
    clip_actions: bool = True
    step_rows: int = 1  # rows of D drawn together (``OnPolicyTrainConfig.minibatch_group``)

    def q_tx(self, hp, lr_scale=1.0) -> optax.GradientTransformation:
        return clipped_adam(hp.q_lr * lr_scale, self.cfg.adam_eps, self.cfg.q_max_grad_norm)

    def mu_tx(self, hp, lr_scale=1.0) -> optax.GradientTransformation:
        return clipped_adam(hp.mu_lr * lr_scale, self.cfg.adam_eps, self.cfg.mu_max_grad_norm)

    def fqe_settings(self) -> FQESettings:
        c = self.cfg
        return FQESettings(c.symlog_targets, c.weight_td, c.clip_targets, c.bootstrap_net == "target", c.fqe_loss,
                           c.td_weight_clip)

    def head(self, outputs, hat: bool):
        """The output layer: linear, or for Q-hat with ``q_hat_head = 'softplus'`` softplus + 1e-6."""
        if hat and self.cfg.q_hat_head == "softplus":
            return jax.nn.softplus(outputs) + Q_HAT_SOFTPLUS_EPS
        return outputs

    def q_output(self, params, obs, action, hat: bool = False, clip: bool = True):
        """Network output at (s, a) of Q (or Q-hat with ``hat``): symlog(Q) with symlog targets, Q
        otherwise. ``clip = False`` reads a continuous action as given even with ``clip_actions``."""
        if self.discrete:
            return take_action(self.head(self.q_net.apply(params, obs), hat), action)
        if self.clip_actions and clip:  # Q reads the action the environment executed
            action = distributions.clip_action(action, self.action_low, self.action_high)
        x = jnp.concatenate([obs, action], axis=-1)
        return self.head(self.q_net.apply(params, x), hat)[..., 0]

    @property
    def fqe_clip(self) -> bool:
        """Whether the FQE regressions clip the actions they read (``bpo.fqe_unclipped_actions`` off)."""
        return not self.cfg.fqe_unclipped_actions

    def q_value(self, params, obs, action, hat: bool = False, clip: bool = True):
        return to_real(self.q_output(params, obs, action, hat, clip), self.cfg.symlog_targets)

    def next_values(self, pi_next: Dist, params, batch, hat: bool = False):
        """E_{a'~pi(.|s')} Q(s', a') on a minibatch (rows ``batch['idx']`` of the buffer)."""
        dist = jax.tree.map(lambda x: x[batch["idx"]], pi_next)
        if self.discrete:
            next_q = to_real(self.head(self.q_net.apply(params, batch["next_obs"]), hat), self.cfg.symlog_targets)
            return expected_next_value(next_q, jax.nn.softmax(dist.loc, axis=-1))
        next_action = distributions.sample(batch["key"], dist, discrete=False)
        return self.q_value(params, batch["next_obs"], next_action, hat, clip=self.fqe_clip)

    def discrete_q_hat(self, q_hat_params, obs, hat_cap):
        """Q-hat(s, a) for every action, made safe for the log in eq. (5); ones without Q-hat."""
        if not self.cfg.use_q_hat:
            return jnp.ones(obs.shape[:-1] + (self.n_actions,))
        values = to_real(self.head(self.q_net.apply(q_hat_params, obs), True), self.cfg.symlog_targets)
        return floored_q_hat(values, self.cfg.q_hat_floor, hat_cap if self.cfg.clip_targets else None)

    def init(self, key, obs_example, action_example, mu_params, hp) -> BehaviourState:
        """Q and Q-hat fresh, from the two halves of ``jax.random.split(key)``; mu from the given
        parameters (the caller starts mu equal to pi)."""
        k_q, k_qh = jax.random.split(key)
        ex = obs_example if self.discrete else jnp.concatenate([obs_example, jnp.asarray(action_example, jnp.float32)])
        # Adam's state does not depend on the learning rate, so the optimisers of later steps,
        # each with its own scaled rate, share this state.
        q_tx, mu_tx = self.q_tx(hp), self.mu_tx(hp)

        def q_state(k):
            params = self.q_net.init(k, ex)
            return QState(params=params, target_params=params, opt_state=q_tx.init(params))

        zero = jnp.zeros((), jnp.float32)
        return BehaviourState(q_state(k_q), q_state(k_qh), mu_params, mu_tx.init(mu_params), zero, zero, zero)

    def step(self, key, state: BehaviourState, replay: rb.Replay, pi_dist_fn: DistFn, hp, lr_scale=1.0):
        """``behaviour_step`` with these settings."""
        return behaviour_step(key, state, replay, pi_dist_fn, hp, lr_scale, beh=self)


def make_behaviour(cfg: BehaviourConfig, discrete: bool, n_actions: int, mu_apply: MuApply,
                   action_low=None, action_high=None, clip_actions: bool = True, step_rows: int = 1) -> Behaviour:
    """The behaviour step's networks: Q and Q-hat share one MLP architecture (Appendix C.2: layer
    norm, zero-initialised head), with one output per action (discrete) or (s, a) as input.
    ``step_rows``: the FQE and mu minibatches draw D's rows in blocks of this many (one time step
    of every environment, ``whole_step_minibatches``)."""
    q_net = MLP(cfg.q_hidden, n_actions if discrete else 1, layer_norm=cfg.layer_norm, zero_head=cfg.zero_init_head,
                orthogonal=cfg.q_init == "orthogonal")
    return Behaviour(cfg, discrete, n_actions, q_net, mu_apply, action_low, action_high, clip_actions, step_rows)


def fqe_epochs(key, q_state: QState, replay: rb.Replay, rewards_field: str, gamma, bounds, pi_next: Dist, log_pi,
               *, beh: Behaviour, tx: optax.GradientTransformation, hp, fixed_rewards=None) -> tuple[QState, dict]:
    """Algorithm 1 lines 10-11 (Q, eq. 13: ``rewards_field = 'reward'``) or 13-14 (Q-hat, eq. 14:
    ``'r_hat'`` and gamma^2, from ``second_moment_problem``): ``n_qvf_epochs`` random passes over
    the filled part of D in minibatches of ``q_batch_size``, one ``fqe_step`` each, with targets
    clipped to ``bounds``.

    ``pi_next``: pi(.|s') and ``log_pi``: log pi(a|s) on every row of the buffer (pi is fixed).
    ``fixed_rewards``: None, or ``q_batch_size`` rewards given to every minibatch in place of its
    rows' own (``bpo.q_hat_reward = 'last_q_batch_reward'``, the authors' code's Q-hat).
    Returns the new state and the metrics of ``fqe_step`` averaged over all steps."""
    settings = beh.fqe_settings()
    hat = rewards_field == "r_hat"

    def step(state, idx, k):
        batch = rb.gather(replay, idx)
        batch.update(reward=batch[rewards_field] if fixed_rewards is None else fixed_rewards, idx=idx, key=k)
        return fqe_step(
            state, batch, log_pi[idx],
            predict=lambda p, b: beh.q_output(p, b["obs"], b["action"], hat, clip=beh.fqe_clip),
            next_values=lambda p, b: beh.next_values(pi_next, p, b, hat), tx=tx, gamma=gamma, bounds=bounds,
            tau=hp.polyak_tau, reg_coef=hp.symlog_reg_coef, settings=settings,
        )

    return minibatch_epochs(key, q_state, step, **fqe_schedule(beh, replay))


def fqe_schedule(beh: Behaviour, replay: rb.Replay) -> dict:
    """The minibatch schedule of an FQE problem (``minibatch_epochs``'s keyword arguments)."""
    cfg = beh.cfg
    return dict(n_epochs=cfg.n_qvf_epochs,
                indices=lambda k: rb.epoch_indices(k, replay, cfg.q_batch_size, beh.step_rows),
                n_active=filled_minibatches(beh, replay, cfg.q_batch_size))


def filled_minibatches(beh: Behaviour, replay: rb.Replay, batch_size: int):
    """With ``bpo.replay_epoch_filled_only``, the minibatches of one pass over the rows D holds
    (the authors' code's epochs while D fills); else None (every epoch is |D| rows)."""
    if not beh.cfg.replay_epoch_filled_only:
        return None
    return jnp.maximum((replay.size + batch_size - 1) // batch_size, 1)


def mu_loss(params, key, obs, pi_dist: Dist, q_hat_params, hat_cap, q_hat_all_actions, *, beh: Behaviour,
            noise=None):
    """Eq. (15) (discrete) or eq. (16) (continuous) on a minibatch of replay states.

    Discrete: ``q_hat_all_actions`` is Q-hat(s, .) (``Behaviour.discrete_q_hat``, computed once
    per behaviour step since Q-hat is fixed while mu trains) and the target is
    q(a|s) ∝ pi(a|s) sqrt(Q-hat(s, a)), eq. (5). Continuous: one reparameterised a ~ mu(.|s) per
    state, Q-hat(s, a) from ``q_hat_params``, floored and (with clip_targets) capped at ``hat_cap``.
    With ``mu_ent_coef > 0`` (the authors' code), minus that times mu's mean entropy. ``noise``:
    the standard normal draws of the continuous samples, given instead of drawn from ``key`` (the
    differential harness gives the authors' code's draws, benchmarks/authors_differential.py)."""
    mu_dist = beh.mu_apply(params, obs)
    loss = fit_to_target(key, mu_dist, obs, pi_dist, q_hat_params, hat_cap, q_hat_all_actions, beh, noise)
    if beh.cfg.mu_ent_coef > 0:
        loss = loss - beh.cfg.mu_ent_coef * jnp.mean(distributions.entropy(mu_dist, beh.discrete))
    return loss


def fit_to_target(key, mu_dist: Dist, obs, pi_dist: Dist, q_hat_params, hat_cap, q_hat_all_actions,
                  beh: Behaviour, noise=None):
    """The fit of eq. (15) or (16) alone (``mu_loss``)."""
    cfg = beh.cfg
    if beh.discrete:
        target = behaviour_target_log_probs(pi_dist.loc, q_hat_all_actions)
        return discrete_mu_loss(mu_dist.loc, target, cfg.mu_loss)
    # reparameterised: gradients flow through a
    action = (distributions.sample(key, mu_dist, discrete=False) if noise is None
              else distributions.reparameterised(mu_dist, noise))
    log_mu = distributions.log_prob(mu_dist, action, discrete=False)
    log_pi = distributions.log_prob(pi_dist, action, discrete=False)
    if cfg.use_q_hat:
        cap = hat_cap if cfg.clip_targets else None
        q_hat = floored_q_hat(beh.q_value(q_hat_params, obs, action, hat=True, clip=not cfg.mu_q_hat_unclipped_actions),
                              cfg.q_hat_floor, cap)
        if cfg.mu_q_hat_batch_min:  # the authors' code: one scalar for the whole minibatch
            q_hat = jnp.broadcast_to(jnp.min(q_hat), q_hat.shape)
    else:
        q_hat = jnp.ones_like(log_mu)
    return continuous_mu_loss(log_mu, log_pi, q_hat)


def mu_epochs(key, mu_params, mu_opt_state, replay: rb.Replay, pi_here: Dist, q_hat_params, hat_cap,
              q_hat_all_actions, *, beh: Behaviour, tx: optax.GradientTransformation):
    """Algorithm 1 lines 15-16: ``n_mu_epochs`` random passes over the filled part of D in
    minibatches of ``mu_batch_size``, one step of ``mu_loss`` (eq. 15 or 16) each.

    ``pi_here``: pi(.|s) on every row of the buffer; ``q_hat_all_actions``: Q-hat(s, .) on every
    row (discrete; None for continuous actions). Returns (params, optimiser state, mean loss)."""
    obs = replay.data["obs"]

    def step(carry, idx, k):
        params, opt_state = carry
        pi_dist = jax.tree.map(lambda x: x[idx], pi_here)
        loss, grads = jax.value_and_grad(mu_loss)(
            params, k, obs[idx], pi_dist, q_hat_params, hat_cap,
            None if q_hat_all_actions is None else q_hat_all_actions[idx], beh=beh)
        updates, opt_state = tx.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), loss

    (mu_params, mu_opt_state), mean_loss = minibatch_epochs(
        key, (mu_params, mu_opt_state), step, n_epochs=beh.cfg.n_mu_epochs,
        indices=lambda k: rb.epoch_indices(k, replay, beh.cfg.mu_batch_size, beh.step_rows),
        n_active=filled_minibatches(beh, replay, beh.cfg.mu_batch_size))
    return mu_params, mu_opt_state, mean_loss


def behaviour_step(key, state: BehaviourState, replay: rb.Replay, pi_dist_fn: DistFn, hp, lr_scale=1.0, *,
                   beh: Behaviour) -> tuple[BehaviourState, dict]:
    """One behaviour step on D (Algorithm 1 lines 9-16): FQE of Q (eq. 13), r-hat (eq. 7), FQE of
    Q-hat with gamma^2 (eq. 14), then mu (eq. 15 or 16). ``pi_dist_fn`` is the target policy
    after this phase's update; ``lr_scale`` multiplies the Q, Q-hat and mu learning rates. The
    target bounds of Appendix C.2 grow with the rewards seen so far (kept in the state)."""
    gamma, cfg = hp.gamma, beh.cfg
    k_q, k_qh, k_mu = jax.random.split(key, 3)
    q_tx, mu_tx = beh.q_tx(hp, lr_scale), beh.mu_tx(hp, lr_scale)
    data = replay.data
    filled = jnp.arange(replay.capacity) < replay.size
    # pi is fixed during the behaviour step: evaluate it once on the whole buffer.
    pi_next, pi_here = pi_dist_fn(data["next_obs"]), pi_dist_fn(data["obs"])
    log_pi = distributions.log_prob(pi_here, data["action"], beh.discrete)
    fqe = functools.partial(fqe_epochs, pi_next=pi_next, log_pi=log_pi, beh=beh, tx=q_tx, hp=hp)

    r_min = jnp.minimum(state.r_min, jnp.min(jnp.where(filled, data["reward"], jnp.inf)))
    r_max = jnp.maximum(state.r_max, jnp.max(jnp.where(filled, data["reward"], -jnp.inf)))
    bounds = q_bounds(r_min, r_max, gamma, lower=cfg.clip_lower_bounds)
    q, q_metrics = fqe(k_q, state.q, replay, "reward", gamma, bounds)

    q_sa = beh.q_value(value_params(q, cfg.value_net), data["obs"], data["action"])
    q_sa = jnp.clip(q_sa, *bounds) if cfg.clip_targets else q_sa
    r_hat, gamma_hat = second_moment_problem(data["reward"], q_sa, gamma)
    r_hat_max = jnp.maximum(state.r_hat_max, jnp.max(jnp.where(filled, r_hat, -jnp.inf)))
    hat_bounds = q_hat_bounds(r_hat_max, gamma, lower=cfg.clip_lower_bounds)
    replay = replay.replace(data={**data, "r_hat": r_hat})
    stale = None
    if cfg.q_hat_reward == "last_q_batch_reward":  # the authors' code: Q's last minibatch's raw rewards
        stale = data["reward"][last_minibatch(k_q, **fqe_schedule(beh, replay))]
    q_hat, q_hat_metrics = fqe(k_qh, state.q_hat, replay, "r_hat", gamma_hat, hat_bounds, fixed_rewards=stale)

    q_hat_params = value_params(q_hat, cfg.value_net)
    q_hat_all = beh.discrete_q_hat(q_hat_params, data["obs"], hat_bounds[1]) if beh.discrete else None
    mu_params, mu_opt_state, mu_loss_mean = mu_epochs(k_mu, state.mu_params, state.mu_opt_state, replay, pi_here,
                                                      q_hat_params, hat_bounds[1], q_hat_all, beh=beh, tx=mu_tx)
    new_state = BehaviourState(q, q_hat, mu_params, mu_opt_state, r_min, r_max, r_hat_max)
    metrics = {
        "q_loss": q_metrics["loss"],
        "q_clip_frac": q_metrics["clip_frac"],
        "q_hat_loss": q_hat_metrics["loss"],
        "q_hat_clip_frac": q_hat_metrics["clip_frac"],
        "mu_loss": mu_loss_mean,
    }
    return new_state, metrics
