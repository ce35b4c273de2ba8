"""Running mean/variance observation normalisation (Stable-Baselines3 VecNormalize semantics):
statistics are updated with every vector step of training data, observations are standardised
and clipped to [-clip, clip], and evaluation uses the statistics frozen."""

from typing import NamedTuple

import jax.numpy as jnp


class RunningStats(NamedTuple):
    mean: jnp.ndarray
    var: jnp.ndarray
    count: jnp.ndarray


def init_stats(obs_dim: int) -> RunningStats:
    # count starts at a tiny epsilon like SB3's RunningMeanStd so the first merge is well defined.
    return RunningStats(jnp.zeros(obs_dim, jnp.float32), jnp.ones(obs_dim, jnp.float32), jnp.float32(1e-4))


def update_stats(stats: RunningStats, batch) -> RunningStats:
    """Merge the moments of ``batch`` ([N, obs_dim]) into ``stats`` (Chan et al. parallel update)."""
    n = jnp.float32(batch.shape[0])
    batch_mean = jnp.mean(batch, axis=0)
    batch_var = jnp.var(batch, axis=0)
    delta = batch_mean - stats.mean
    total = stats.count + n
    mean = stats.mean + delta * n / total
    m2 = stats.var * stats.count + batch_var * n + delta**2 * stats.count * n / total
    return RunningStats(mean, m2 / total, total)


def normalize(stats: RunningStats, obs, clip: float = 10.0, eps: float = 1e-8):
    return jnp.clip((obs - stats.mean) / jnp.sqrt(stats.var + eps), -clip, clip)
