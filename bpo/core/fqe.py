"""Fitted Q-evaluation of q_pi (eq. 13) and q-hat_pi (eq. 14), the second-moment problem of
eqs. (7)/(8), and the stabilisers of Appendix C.2 (symlog targets, Polyak target network with
symlog regulariser, weighted TD, clipped targets). Discrete actions: the next-state expectation
over pi is exact.

With symlog targets the regression fits mean(symlog(y)) rather than symlog(mean(y)); the two
agree when transitions are deterministic and differ by Jensen's gap otherwise (tests/test_fqe.py).
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from bpo.core.transforms import symexp, symlog


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
    td_weight_clip: bool = False  # the authors' clipped TD weights (td_weights)


def second_moment_problem(rewards, q_sa, gamma):
    """The reward and discount that turn FQE of q_pi (eq. 13) into FQE of q-hat_pi (eq. 14).

    Eq. (7): r-hat(s, a) = 2 r(s, a) q_pi(s, a) - r(s, a)^2. Eq. (8) (Theorem 3): the second
    moment of the return, q-hat_pi(s, a) = E[G^2 | s, a], is the action value of r-hat under pi
    with discount gamma^2; eq. (14) is therefore eq. (13) with r-hat for r and gamma^2 for gamma.

    Args:
        rewards: r(s, a) of the transitions.
        q_sa: q_pi(s, a) of the same transitions, in real scale (the Q trained by eq. 13).
        gamma: the return's discount.
    Returns:
        ``(r_hat, gamma**2)``."""
    return 2.0 * rewards * q_sa - rewards**2, gamma**2


def bellman_targets(rewards, terminated, next_values, gamma):
    """One-step targets of eqs. (13)/(14): r + gamma (1 - terminated) E_{a'~pi} Q(s', a').

    Truncated transitions are not terminated, so they bootstrap from the real final observation.
    For Q-hat, ``rewards`` and ``gamma`` are r-hat and gamma^2 (``second_moment_problem``)."""
    return rewards + gamma * (1.0 - terminated) * next_values


def expected_next_value(next_q, next_pi_probs):
    """E_{a'~pi(.|s')} Q(s', a') for discrete actions: exact sum over actions."""
    return jnp.sum(next_pi_probs * next_q, axis=-1)


def td_weights(log_pi, log_mu, *, clip: bool):
    """Weighted TD (Appendix C.2): each sample's IS ratio pi/mu, normalised to batch mean 1.

    Unclipped (the paper's text) the normalised ratios are n softmax(log pi - log mu), which no
    log-ratio can overflow. ``clip`` (the authors' code): clip(exp(clip(log pi - log mu, -10, 10)),
    0.1, 10), then divided by its batch mean.

    Returns:
        The weights, of batch mean 1."""
    log_ratio = log_pi - log_mu
    if not clip:
        return log_ratio.shape[0] * jax.nn.softmax(log_ratio)
    w = jnp.clip(jnp.exp(jnp.clip(log_ratio, -10.0, 10.0)), 0.1, 10.0)
    return w / jnp.mean(w)


def q_bounds(r_min, r_max, gamma, *, lower: bool):
    """Clip range of Q targets (Appendix C.2): at most r_max / (1 - gamma); with ``lower`` (the
    authors' code) at least r_min / (1 - gamma), else unbounded below."""
    low = r_min / (1.0 - gamma) if lower else jnp.full_like(r_min, -jnp.inf)
    return low, r_max / (1.0 - gamma)


def q_hat_bounds(r_hat_max, gamma, *, lower: bool):
    """Clip range of Q-hat targets (Appendix C.2): at most r_hat_max / (1 - gamma^2); with
    ``lower`` (the authors' code) at least 0, as q-hat is a second moment (eq. 4)."""
    low = jnp.zeros_like(r_hat_max) if lower else jnp.full_like(r_hat_max, -jnp.inf)
    return low, r_hat_max / (1.0 - gamma**2)


def clip_targets(targets, bounds, clip: bool):
    """Appendix C.2's clipped targets: ``targets`` clipped to ``bounds`` when ``clip``.

    Returns:
        The targets and the fraction of them the clip changed (0 without clipping)."""
    if not clip:
        return targets, jnp.zeros(())
    clipped = jnp.clip(targets, bounds[0], bounds[1])
    return clipped, jnp.mean(clipped != targets)


def to_real(outputs, symlog_targets: bool):
    """Network outputs in real scale (symexp when the network predicts symlog values)."""
    return symexp(outputs) if symlog_targets else outputs


def fqe_loss(pred, targets, weights, reg_target_pred, reg_coef, *, symlog_targets: bool, form: str = "paper"):
    """The regression of eqs. (13)/(14) with Appendix C.2's symlog regulariser.

    The network output p at (s, a) regresses onto the Bellman targets y: onto symlog(y) with
    symlog targets (Section 5.2; p is then symlog Q), and Appendix C.2 adds a pull of p towards
    the Polyak target network's output p_target, in the same symlog space. Without symlog targets
    there is no regulariser. Targets and p_target are constants of the gradient. With
    c = ``reg_coef`` and w = ``weights`` (``BehaviourConfig.fqe_loss``):

        'paper':    0.5 mean(w (p - y)^2) + c mean((p - p_target)^2)
        'authors':  mean(w (p - y)^2) + c mean(w (p - p_target)^2)   (their public code)

    Args:
        pred: p, the network output at (s, a).
        targets: y in real scale, already clipped (``bellman_targets``, ``clip_targets``).
        weights: the TD weights (``td_weights``, or ones).
        reg_target_pred: p_target; not read without symlog targets (None is fine there).
        reg_coef: c (``symlog_reg_coef``).
        symlog_targets: whether the network predicts symlog values.
        form: 'paper' or 'authors'.
    Returns:
        ``(loss, TD term)``."""
    y = jax.lax.stop_gradient(symlog(targets) if symlog_targets else targets)
    authors = form == "authors"
    td = jnp.mean(weights * (pred - y) ** 2) if authors else 0.5 * jnp.mean(weights * (pred - y) ** 2)
    if not symlog_targets:
        return td, td
    pull = (pred - jax.lax.stop_gradient(reg_target_pred)) ** 2
    return td + reg_coef * jnp.mean(weights * pull if authors else pull), td


def value_params(state: QState, net: str) -> dict:
    """The parameters whose values are read outside FQE: ``net = 'online'`` or ``'target'`` (Polyak)."""
    return state.target_params if net == "target" else state.params


def polyak_update(target_params, params, tau):
    """Appendix C.2's Polyak target network: target <- (1 - tau) target + tau params."""
    return jax.tree.map(lambda t, p: (1.0 - tau) * t + tau * p, target_params, params)


def take_action(values, actions):
    return jnp.take_along_axis(values, actions[..., None], axis=-1)[..., 0]


def fqe_step(state: QState, batch, log_pi, *, predict, next_values, tx, gamma, bounds, tau, reg_coef,
             settings: FQESettings):
    """One gradient step of FQE on a minibatch (one element of an FQE epoch, Algorithm 1 l.11/14).

    Args:
        state: the online and Polyak target parameters and the optimiser state.
        batch: at least reward, terminated and log_mu (and what ``predict``/``next_values`` read).
        log_pi: log pi(a|s) of the batch, for the weighted-TD weights.
        predict: ``(params, batch) ->`` the network output at (s, a) (symlog scale with symlog
            targets).
        next_values: ``(params, batch) ->`` E_{a'~pi} Q(s', a') in real scale (exact for discrete
            actions, one sample for continuous ones).
        tx: the optimiser; gamma, bounds: the discount and the target clip range; tau: the Polyak
            rate; reg_coef: the symlog regulariser's weight; settings: the static switches.
    Returns:
        The new state and the step's metrics (loss, TD term, fraction of targets clipped, mean
        real-scale target)."""
    boot = state.target_params if settings.bootstrap_from_target else state.params
    targets = bellman_targets(batch["reward"], batch["terminated"], next_values(boot, batch), gamma)
    targets, clip_frac = clip_targets(targets, bounds, settings.clip_targets)
    weights = (td_weights(log_pi, batch["log_mu"], clip=settings.td_weight_clip) if settings.weight_td
               else jnp.ones_like(targets))
    reg_target = predict(state.target_params, batch) if settings.symlog_targets else None

    def loss_fn(params):
        return fqe_loss(predict(params, batch), targets, weights, reg_target, reg_coef,
                        symlog_targets=settings.symlog_targets, form=settings.loss_form)

    (loss, td), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    new_state = QState(params=params, target_params=polyak_update(state.target_params, params, tau),
                       opt_state=opt_state)
    return new_state, {"loss": loss, "td_loss": td, "clip_frac": clip_frac, "target_mean": jnp.mean(targets)}
