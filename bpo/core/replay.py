"""FIFO replay buffer D of the most recent transitions collected by mu, as a pytree."""

import jax
import jax.numpy as jnp
from flax import struct

from bpo.core.minibatch import whole_steps


@struct.dataclass
class Replay:
    """``data`` maps field name to an array ``[capacity, ...]``; ``ptr`` is the next write slot."""

    data: dict
    ptr: jnp.ndarray
    size: jnp.ndarray

    @property
    def capacity(self) -> int:
        return next(iter(self.data.values())).shape[0]


def init_replay(example: dict, capacity: int) -> Replay:
    """Empty buffer whose fields have the shapes and dtypes of one ``example`` transition."""
    data = {k: jnp.zeros((capacity,) + jnp.shape(v), jnp.asarray(v).dtype) for k, v in example.items()}
    return Replay(data=data, ptr=jnp.zeros((), jnp.int32), size=jnp.zeros((), jnp.int32))


def add(replay: Replay, batch: dict, valid) -> Replay:
    """Append the rows of ``batch`` (leading axis N) where ``valid`` is true, oldest first.

    When more than ``capacity`` rows are valid only the newest ``capacity`` are kept, so the
    scatter never writes two rows to one slot.
    """
    capacity = replay.capacity
    valid = valid.astype(bool)
    rank = jnp.cumsum(valid) - 1  # position of each valid row among the valid rows
    n_valid = jnp.sum(valid)
    keep = valid & (rank >= n_valid - capacity)
    slot = jnp.where(keep, (replay.ptr + rank) % capacity, capacity)  # capacity = dropped
    data = {k: replay.data[k].at[slot].set(batch[k], mode="drop") for k in replay.data}
    return Replay(
        data=data,
        ptr=((replay.ptr + n_valid) % capacity).astype(replay.ptr.dtype),
        size=jnp.minimum(replay.size + n_valid, capacity).astype(replay.size.dtype),
    )


def epoch_indices(key, replay: Replay, batch_size: int, group: int = 1):
    """Indices ``[capacity // batch_size, batch_size]`` for one epoch of minibatches.

    A random permutation of the filled slots, repeated to fill ``capacity`` rows: one exact pass
    over D when it is full, proportionally more passes over the data it has while it fills.
    ``group``: slots are drawn in consecutive blocks of ``group``, the rows one time step of
    ``group`` environments added (``bpo.core.minibatch.whole_steps``); needs ``capacity``,
    ``batch_size`` and every addition to be multiples of ``group``. 1 draws slots.
    """
    capacity = replay.capacity // group
    n_batches = replay.capacity // batch_size
    size = replay.size // group
    filled = jnp.arange(capacity) < size
    order = jnp.argsort(jnp.where(filled, jax.random.uniform(key, (capacity,)), 2.0))
    steps = jnp.arange(n_batches * (batch_size // group)) % jnp.maximum(size, 1)
    return whole_steps(order[steps].reshape(n_batches, batch_size // group), group)


def gather(replay: Replay, idx) -> dict:
    return {k: v[idx] for k, v in replay.data.items()}
