"""KL(p_theta || ref) penalties in the forms whose gradients are right (the k1, k2, k3 estimators
and the note "Different KL Estimators and their correctness for Reinforcement Learning").

``log_p`` is log p_theta(x) (differentiable), ``log_ref`` the reference's log-probability, and
``log_sample`` the log-probability of whatever drew x (the behaviour policy; p_theta itself when
on-policy). Value-unbiased is not gradient-correct:

| use | correct | wrong |
| --- | --- | --- |
| detached reward penalty | ``k1_reward`` | k3 as a reward (adds a forward-KL term) |
| loss, on-policy, plain backprop | ``k2_loss`` | k1 (zero expected gradient), k3 (forward KL) |
| loss, off-policy / explicit rho | ``sg_rho_k2_loss``, ``rho_k3_loss`` | rho * k2 with rho differentiated |

Each function returns per-sample values; average them (and, for ``k1_reward``, subtract beta times
it from the rewards). The PPO actor loss uses ``kl_penalty_loss`` (``PPOConfig.kl_coef``).
"""

from typing import Literal

import jax
import jax.numpy as jnp

KLEstimator = Literal["k2", "k3"]

sg = jax.lax.stop_gradient


def k1(log_p, log_ref):
    return log_p - log_ref


def k2(log_p, log_ref):
    return 0.5 * (log_p - log_ref) ** 2


def k3(log_p, log_ref):
    """ref/p - 1 - log(ref/p): non-negative, unbiased for KL(p || ref) under x ~ p."""
    return jnp.exp(log_ref - log_p) - 1.0 - (log_ref - log_p)


def k1_reward(log_p, log_ref):
    """The per-sample KL penalty for the reward, detached: through the policy gradient
    E[score * k1] it contributes exactly grad KL(p || ref)."""
    return sg(k1(log_p, log_ref))


def k2_loss(log_p, log_ref):
    """On-policy loss: E_{x~p}[grad k2] = E_p[score * k1] = grad KL(p || ref)."""
    return k2(log_p, log_ref)


def _rho(log_p, log_sample):
    """p/sample with the gradient of p kept: numerically 1 on-policy, but its gradient is the score."""
    return jnp.exp(log_p - sg(log_sample))


def sg_rho_k2_loss(log_p, log_ref, log_sample):
    """Off-policy: sg(rho) * k2, rho = p / sample."""
    return sg(_rho(log_p, log_sample)) * k2(log_p, log_ref)


def rho_k3_loss(log_p, log_ref, log_sample):
    """Off-policy: rho * k3 with rho differentiated; per sample the same gradient as sg(rho) * k2."""
    return _rho(log_p, log_sample) * k3(log_p, log_ref)


def kl_penalty_loss(log_p, log_ref, log_sample, estimator: KLEstimator = "k3"):
    """Per-sample loss whose expectation under x ~ sample has the gradient of KL(p_theta || ref):
    ``"k2"`` is sg(rho) * k2, ``"k3"`` is rho * k3 (rho = p / sample). Both have the same gradient
    per sample; the mean of ``"k3"`` is also an unbiased, non-negative estimate of the KL itself."""
    if estimator == "k2":
        return sg_rho_k2_loss(log_p, log_ref, log_sample)
    if estimator == "k3":
        return rho_k3_loss(log_p, log_ref, log_sample)
    raise ValueError(f"kl_estimator must be 'k2' or 'k3', got {estimator!r}")
