"""Behaviour-policy losses: the one-step variance-optimal target (eq. 5) and the losses that fit
mu to it, eq. (15) for discrete and eq. (16) for continuous actions."""

import jax
import jax.numpy as jnp


def floored_q_hat(q_hat, floor, cap=None):
    """Q-hat made safe for log/sqrt: floored at ``floor`` and optionally capped at ``cap``."""
    q_hat = jnp.maximum(q_hat, floor)
    return q_hat if cap is None else jnp.minimum(q_hat, jnp.maximum(cap, floor))


def behaviour_target_log_probs(pi_logits, q_hat):
    """log q(a|s) with q(a|s) ∝ pi(a|s) sqrt(Q-hat(s, a)), eq. (5); no gradient flows through it."""
    log_target = jax.nn.log_softmax(pi_logits, axis=-1) + 0.5 * jnp.log(q_hat)
    return jax.lax.stop_gradient(jax.nn.log_softmax(log_target, axis=-1))


def discrete_mu_loss(mu_logits, target_log_probs, kind: str = "cross_entropy"):
    """Eq. (15). ``cross_entropy``: mean_s -sum_a q(a|s) ln mu(a|s) (the authors' argument order).
    ``reverse_kl``: mean_s KL(mu(.|s) || q(.|s)). Both are minimised exactly at mu = q."""
    log_mu = jax.nn.log_softmax(mu_logits, axis=-1)
    if kind == "cross_entropy":
        per_state = -jnp.sum(jnp.exp(target_log_probs) * log_mu, axis=-1)
    elif kind == "reverse_kl":
        per_state = jnp.sum(jnp.exp(log_mu) * (log_mu - target_log_probs), axis=-1)
    else:
        raise ValueError(f"mu_loss must be 'cross_entropy' or 'reverse_kl', got {kind!r}")
    return jnp.mean(per_state)


def continuous_mu_loss(log_mu, log_pi, q_hat):
    """Eq. (16) on reparameterised samples a ~ mu(.|s): mean(ln mu(a|s) - ln pi(a|s) - 0.5 ln Q-hat(s, a)).

    Theorem 4: minimised at mu ∝ pi sqrt(Q-hat). Pass ``q_hat = 1`` for the no-Q-hat ablation.
    """
    return jnp.mean(log_mu - log_pi - 0.5 * jnp.log(q_hat))
