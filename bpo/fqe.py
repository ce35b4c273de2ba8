"""Fitted Q-evaluation of q_pi (eq. 13) and q-hat_pi (eq. 14), r-hat (eq. 7), and the
stabilisers of Appendix C.2 (symlog targets, Polyak target network with symlog regulariser,
weighted TD, clipped targets). Discrete actions: the next-state expectation over pi is exact.

With symlog targets the regression fits mean(symlog(y)) rather than symlog(mean(y)); the two
agree when transitions are deterministic and differ by Jensen's gap otherwise (tests/test_fqe.py).
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from bpo.transforms import symexp, symlog


class QState(NamedTuple):
    params: dict
    target_params: dict
    opt_state: optax.OptState


class FQESettings(NamedTuple):
    """Static switches of one FQE problem (Q or Q-hat)."""

    symlog_targets: bool
    weight_td: bool
    clip_targets: bool
    bootstrap_from_target: bool
    loss_form: str = "paper"  # "paper" or "authors" (fqe_loss)


def r_hat(rewards, q_sa):
    """Eq. (7): r-hat(s, a) = 2 r(s, a) q_pi(s, a) - r(s, a)^2, with q_pi in real scale."""
    return 2.0 * rewards * q_sa - rewards**2


def bellman_targets(rewards, terminated, next_values, gamma):
    """One-step targets of eqs. (13)/(14): r + gamma (1 - terminated) E_{a'~pi} Q(s', a').

    Truncated transitions are not terminated, so they bootstrap from the real final observation.
    For Q-hat pass r-hat as ``rewards`` and gamma^2 as ``gamma``.
    """
    return rewards + gamma * (1.0 - terminated) * next_values


def expected_next_value(next_q, next_pi_probs):
    """E_{a'~pi(.|s')} Q(s', a') for discrete actions: exact sum over actions."""
    return jnp.sum(next_pi_probs * next_q, axis=-1)


def td_weights(log_pi, log_mu):
    """Weighted TD (Appendix C.2): clip(exp(clip(log pi - log mu, -10, 10)), 0.1, 10) / batch mean."""
    w = jnp.clip(jnp.exp(jnp.clip(log_pi - log_mu, -10.0, 10.0)), 0.1, 10.0)
    return w / jnp.mean(w)


def q_bounds(r_min, r_max, gamma):
    """Clip range of Q targets: [r_min, r_max] / (1 - gamma)."""
    return r_min / (1.0 - gamma), r_max / (1.0 - gamma)


def q_hat_bounds(r_hat_max, gamma):
    """Clip range of Q-hat targets: [0, r_hat_max / (1 - gamma^2)]; q-hat is a second moment (eq. 4)."""
    return jnp.zeros_like(r_hat_max), r_hat_max / (1.0 - gamma**2)


def to_real(outputs, symlog_targets: bool):
    """Network outputs in real scale (symexp when the network predicts symlog values)."""
    return symexp(outputs) if symlog_targets else outputs


def fqe_loss(pred, targets, weights, reg_target_pred, reg_coef, form: str = "paper"):
    """Eqs. (13)/(14) in network-output space, with the symlog regulariser towards the Polyak target
    network's output. ``form = 'paper'``: 0.5 mean(w (pred - y)^2) + reg_coef mean((pred - pred_target)^2);
    ``'authors'`` (their public code): mean(w (pred - y)^2) + reg_coef mean(w (pred - pred_target)^2).
    Returns (loss, TD term)."""
    if form == "authors":
        td = jnp.mean(weights * (pred - targets) ** 2)
        return td + reg_coef * jnp.mean(weights * (pred - reg_target_pred) ** 2), td
    td = 0.5 * jnp.mean(weights * (pred - targets) ** 2)
    return td + reg_coef * jnp.mean((pred - reg_target_pred) ** 2), td


def value_params(state: QState, net: str) -> dict:
    """The parameters whose values are read outside FQE: ``net = 'online'`` or ``'target'`` (Polyak)."""
    return state.target_params if net == "target" else state.params


def polyak_update(target_params, params, tau):
    return jax.tree.map(lambda t, p: (1.0 - tau) * t + tau * p, target_params, params)


def take_action(values, actions):
    return jnp.take_along_axis(values, actions[..., None], axis=-1)[..., 0]


def fqe_step(state: QState, batch, log_pi, *, predict, next_values, tx, gamma, bounds, tau, reg_coef,
             settings: FQESettings, target_pass=None):
    """One gradient step of FQE on a minibatch (one element of an FQE epoch, Algorithm 1 l.11/14).

    ``batch`` holds at least reward, terminated and log_mu. ``predict(params, batch)`` is the
    network output at (s, a) (symlog scale with symlog targets); ``next_values(params, batch)`` is
    E_{a'~pi} Q(s', a') in real scale (exact for discrete actions, one sample for continuous ones).
    ``log_pi`` is log pi(a|s) for the weighted-TD weights. ``target_pass(params, batch)``, if given,
    returns ``(next_values, predict)`` of the same parameters from one pass of the network over both
    inputs; it is used when the bootstrap and the symlog regulariser both read the target network
    (the same numbers, half the calls of small matrix products).
    """
    both_from_target = target_pass is not None and settings.bootstrap_from_target and settings.symlog_targets
    if both_from_target:
        next_v, reg_target = target_pass(state.target_params, batch)
    else:
        next_v = next_values(state.target_params if settings.bootstrap_from_target else state.params, batch)
    targets = bellman_targets(batch["reward"], batch["terminated"], next_v, gamma)
    if settings.clip_targets:
        clipped = jnp.clip(targets, bounds[0], bounds[1])
        clip_frac = jnp.mean(clipped != targets)
        targets = clipped
    else:
        clip_frac = jnp.zeros(())
    targets = jax.lax.stop_gradient(symlog(targets) if settings.symlog_targets else targets)
    weights = td_weights(log_pi, batch["log_mu"]) if settings.weight_td else jnp.ones_like(targets)
    if settings.symlog_targets:
        reg_target, coef = (reg_target if both_from_target else predict(state.target_params, batch)), reg_coef
    else:
        reg_target, coef = jnp.zeros_like(targets), 0.0

    def loss_fn(params):
        return fqe_loss(predict(params, batch), targets, weights, jax.lax.stop_gradient(reg_target), coef,
                        settings.loss_form)

    (loss, td), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    new_state = QState(params=params, target_params=polyak_update(state.target_params, params, tau),
                       opt_state=opt_state)
    return new_state, {"loss": loss, "td_loss": td, "clip_frac": clip_frac, "target_mean": jnp.mean(targets)}
