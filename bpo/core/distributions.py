"""Action distributions of the policies: categorical (discrete), diagonal Gaussian with a
state-independent log std, and generalised state-dependent exploration (gSDE, Raffin et al.
2022) with Stable-Baselines3 semantics.

A policy's output is a ``Dist(loc, scale)``: ``loc`` holds the logits (discrete) or the mean
(continuous), ``scale`` the per-dimension standard deviation (unused for discrete actions).
With gSDE the per-state distribution is still a diagonal Gaussian, with
``scale = sqrt(latent^2 @ exp(log_std)^2)``; what gSDE changes is how the noise is drawn during
rollouts: ``noise = latent @ E`` with an exploration matrix ``E ~ N(0, exp(log_std)^2)`` held
fixed for ``sde_sample_freq`` steps, so actions are smooth in time.
"""

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

LOG_2PI = math.log(2.0 * math.pi)  # a Python float: a jnp constant here would start XLA on import
SDE_EPS = 1e-6  # added to the gSDE variance, as SB3 does


class Dist(NamedTuple):
    loc: jnp.ndarray
    scale: jnp.ndarray


def logits_dist(logits) -> Dist:
    return Dist(logits, jnp.zeros_like(logits))


def log_prob(dist: Dist, action, discrete: bool):
    if discrete:
        log_p = jax.nn.log_softmax(dist.loc, axis=-1)
        return jnp.take_along_axis(log_p, action[..., None].astype(jnp.int32), axis=-1)[..., 0]
    z = (action - dist.loc) / dist.scale
    return jnp.sum(-0.5 * z**2 - jnp.log(dist.scale) - 0.5 * LOG_2PI, axis=-1)


def entropy(dist: Dist, discrete: bool):
    if discrete:
        log_p = jax.nn.log_softmax(dist.loc, axis=-1)
        return -jnp.sum(jnp.exp(log_p) * log_p, axis=-1)
    return jnp.sum(0.5 + 0.5 * LOG_2PI + jnp.log(dist.scale), axis=-1)


def sample(key, dist: Dist, discrete: bool):
    """A sample; for continuous actions it is reparameterised (differentiable in loc and scale)."""
    if discrete:
        return jax.random.categorical(key, dist.loc, axis=-1)
    return reparameterised(dist, jax.random.normal(key, dist.loc.shape))


def reparameterised(dist: Dist, noise):
    """The continuous sample loc + scale * noise for standard normal ``noise`` of loc's shape."""
    return dist.loc + dist.scale * noise


def clip_action(action, low, high):
    """The action the environment executes: ``action`` clipped to ``[low, high]`` per dimension;
    ``action`` itself when ``low`` is None (discrete actions, or clipping turned off). The
    policies' Gaussians are unbounded, so a sample can leave the bounds."""
    if low is None:
        return action
    return jnp.clip(action, jnp.asarray(low), jnp.asarray(high))


def mode(dist: Dist, discrete: bool):
    """The deterministic action used in evaluation: argmax or the Gaussian mean."""
    return jnp.argmax(dist.loc, axis=-1) if discrete else dist.loc


def sde_scale(latent, log_std):
    """Per-state std of gSDE actions: sqrt(latent^2 @ exp(log_std)^2 + eps); ``log_std`` is
    [latent_dim, action_dim] (SB3's full_std). The latent features are not trained through the
    noise (SB3's learn_features=False)."""
    latent = jax.lax.stop_gradient(latent)
    return jnp.sqrt(latent**2 @ jnp.exp(log_std) ** 2 + SDE_EPS)


def sample_exploration_matrices(key, log_std, n: int):
    """``n`` exploration matrices E ~ N(0, exp(log_std)^2), one per environment: [n, latent, action]."""
    return jnp.exp(log_std) * jax.random.normal(key, (n,) + log_std.shape)


def sde_noise(latent, matrices):
    """gSDE action noise latent @ E, per environment: latent [n, latent_dim], E [n, latent_dim, action_dim]."""
    return jnp.einsum("nl,nla->na", jax.lax.stop_gradient(latent), matrices)


def resample_due(step_in_rollout, sde_sample_freq: int):
    """SB3's rule: new exploration matrices at the start of each rollout and, when
    sde_sample_freq > 0, every sde_sample_freq steps within it."""
    if sde_sample_freq > 0:
        return step_in_rollout % sde_sample_freq == 0
    return step_in_rollout == 0


def gsde_action(key, dist: Dist, latent, matrices, log_std, step_in_rollout, sde_sample_freq: int):
    """One rollout step of gSDE for ``n`` environments: resample the exploration matrices when
    due, then act ``mean + latent @ E``. Returns ``(action, matrices)``."""
    fresh = sample_exploration_matrices(key, log_std, latent.shape[0])
    matrices = jnp.where(resample_due(step_in_rollout, sde_sample_freq), fresh, matrices)
    return dist.loc + sde_noise(latent, matrices), matrices
