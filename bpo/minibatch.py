"""Epochs of minibatch steps, the loop shared by PPO's update (Listing 1, lines 3-5), FQE
(Algorithm 1, lines 10-11 and 13-14) and mu's fit (lines 15-16).

An epoch draws its minibatches' row indices from one key and gives every minibatch step its own
key from another (continuous FQE and mu sample actions; steps that draw nothing ignore it). PPO
permutes its whole rollout (``permuted_minibatches``); FQE and mu make random passes over the
filled part of the replay (``bpo.replay.epoch_indices``).
"""

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

Step = Callable[[Any, jax.Array, jax.Array], tuple[Any, Any]]
"""(carry, row indices [batch_size], key) -> (carry, metrics of the step)."""


def minibatch_epochs(key, carry, step: Step, *, n_epochs: int, indices: Callable[[jax.Array], jax.Array]):
    """``n_epochs`` passes; each is a scan of ``step`` over the minibatches of ``indices(k)``.

    Args:
        key: split into one key per epoch, and each of those into (index key, sample key).
        carry: the state the steps update (parameters and optimiser states).
        step: one minibatch step, ``(carry, idx, key) -> (carry, metrics)``.
        n_epochs: static number of passes.
        indices: index key -> ``[n_minibatches, batch_size]`` row indices of one epoch.
    Returns:
        The final carry and every metric averaged over all steps of all epochs."""

    def epoch(carry, k):
        k_idx, k_samples = jax.random.split(k)
        idx = indices(k_idx)
        return jax.lax.scan(lambda c, xs: step(c, *xs), carry, (idx, jax.random.split(k_samples, idx.shape[0])))

    carry, metrics = jax.lax.scan(epoch, carry, jax.random.split(key, n_epochs))
    return carry, jax.tree.map(jnp.mean, metrics)


def permuted_minibatches(key, n: int, batch_size: int) -> jax.Array:
    """One epoch of PPO minibatches over ``n`` rows: a random permutation cut into
    ``n // batch_size`` minibatches of ``batch_size``; the rows past the last whole minibatch sit
    this epoch out. When that is a single minibatch it is every row, in order: its loss is a mean,
    which the order cannot change, and no row sits out.

    Returns:
        ``[n_minibatches, batch_size]`` indices (``[1, n]`` for a single minibatch)."""
    n_minibatches = n // batch_size
    if n_minibatches == 1:
        return jnp.arange(n)[None]
    return jax.random.permutation(key, n)[: n_minibatches * batch_size].reshape(n_minibatches, batch_size)
