"""Epochs of minibatch steps, the loop shared by PPO's update (Listing 1, lines 3-5), FQE
(Algorithm 1, lines 10-11 and 13-14) and mu's fit (lines 15-16).

An epoch draws its minibatches' row indices from one key and gives every minibatch step its own
key from another (continuous FQE and mu sample actions; steps that draw nothing ignore it). PPO
permutes its whole rollout (``permuted_minibatches``); FQE and mu make random passes over the
filled part of the replay (``bpo.core.replay.epoch_indices``).
"""

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from bpo.core.branches import step_or_skip

Step = Callable[[Any, jax.Array, jax.Array], tuple[Any, Any]]
"""(carry, row indices [batch_size], key) -> (carry, metrics of the step)."""


def minibatch_epochs(key, carry, step: Step, *, n_epochs: int, indices: Callable[[jax.Array], jax.Array],
                     n_active=None):
    """``n_epochs`` passes; each is a scan of ``step`` over the minibatches of ``indices(k)``.

    Args:
        key: split into one key per epoch, and each of those into (index key, sample key).
        carry: the state the steps update (parameters and optimiser states).
        step: one minibatch step, ``(carry, idx, key) -> (carry, metrics)``.
        n_epochs: static number of passes.
        indices: index key -> ``[n_minibatches, batch_size]`` row indices of one epoch.
        n_active: None, or a (traced) count: only the first ``n_active`` minibatches of each epoch
            step; the others leave the carry as it is and are left out of the metrics' means
            (``bpo.replay_epoch_filled_only``: an epoch of a filling replay is one pass over the
            rows it holds, as in the authors' code, not a pass padded to its capacity).
    Returns:
        The final carry and every metric averaged over all steps of all epochs."""
    guarded = step if n_active is None else _skipped_past(step, n_active)

    def epoch(carry, k):
        k_idx, k_samples = jax.random.split(k)
        idx = indices(k_idx)
        xs = (idx, jax.random.split(k_samples, idx.shape[0]))
        if n_active is not None:
            xs = (jnp.arange(idx.shape[0]), *xs)
        return jax.lax.scan(lambda c, x: guarded(c, *x), carry, xs)

    carry, metrics = jax.lax.scan(epoch, carry, jax.random.split(key, n_epochs))
    if n_active is None:
        return carry, jax.tree.map(jnp.mean, metrics)
    # skipped steps contribute zeros; divide by the steps that ran
    return carry, jax.tree.map(lambda m: jnp.sum(m) / (n_epochs * n_active), metrics)


def _skipped_past(step: Step, n_active):
    """``step`` at minibatch positions below ``n_active``; the carry unchanged and zero metrics above."""

    def guarded(carry, position, idx, k):
        return step_or_skip(position < n_active, step, carry, idx, k)

    return guarded


def last_minibatch(key, *, n_epochs: int, indices: Callable[[jax.Array], jax.Array], n_active=None) -> jax.Array:
    """The row indices of the last minibatch that ``minibatch_epochs`` steps on with these arguments
    (the same key splits), without running it: the authors' Q-hat reads that minibatch's rewards
    (``bpo.q_hat_reward = 'last_q_batch_reward'``)."""
    k_idx, _ = jax.random.split(jax.random.split(key, n_epochs)[-1])
    idx = indices(k_idx)
    return idx[-1] if n_active is None else idx[n_active - 1]


def permuted_minibatches(key, n: int, batch_size: int, group: int = 1) -> jax.Array:
    """One epoch of PPO minibatches over ``n`` rows: a random permutation cut into
    ``n // batch_size`` minibatches of ``batch_size``; the rows past the last whole minibatch sit
    this epoch out. When that is a single minibatch it is every row, in order: its loss is a mean,
    which the order cannot change, and no row sits out.

    ``group``: rows are permuted in consecutive blocks of ``group`` (``whole_steps``), so that a
    minibatch is ``batch_size / group`` whole time steps of a time-major rollout of ``group``
    environments; 1 permutes rows (the same draws as before blocks existed).

    Returns:
        ``[n_minibatches, batch_size]`` indices (``[1, n]`` for a single minibatch)."""
    n_minibatches = n // batch_size
    if n_minibatches == 1:
        return jnp.arange(n)[None]
    steps = jax.random.permutation(key, n // group)[: n_minibatches * (batch_size // group)]
    return whole_steps(steps.reshape(n_minibatches, batch_size // group), group)


def whole_steps(steps: jax.Array, group: int) -> jax.Array:
    """Time-step indices ``[..., k]`` to the row indices ``[..., k * group]`` of those steps' rows
    in a time-major layout (row ``t * group + e`` is environment ``e`` at step ``t``)."""
    if group == 1:
        return steps
    rows = steps[..., None] * group + jnp.arange(group, dtype=steps.dtype)
    return rows.reshape(*steps.shape[:-1], steps.shape[-1] * group)
