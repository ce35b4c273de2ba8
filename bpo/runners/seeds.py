"""Seeds as a vmapped axis: every run of a config gets its own key, and functions map over seeds."""

import jax
import jax.numpy as jnp


def seed_keys(seed: int, n: int):
    """Run i gets fold_in(PRNGKey(seed), i): adding seeds never changes the existing runs."""
    base = jax.random.PRNGKey(seed)
    return jax.vmap(lambda i: jax.random.fold_in(base, i))(jnp.arange(n))


def chunked_seed_map(fn, xs, chunk: int):
    """``fn`` over the leading (seed) axis of ``xs``, vmapped in chunks of ``chunk`` that a scan
    runs one after another, the seeds left over vmapped after it; a chunk of 1 is a plain loop,
    because a size-1 vmap turns every matrix product into a batched one, slower on a CPU.

    The same program as ``jax.lax.map(fn, xs, batch_size=chunk)``, whose reshapes fail on the
    empty arrays an MJX state holds (a reshape to -1 of a size-0 array divides by zero)."""
    if chunk == 1:
        return jax.lax.map(fn, xs)
    n = jax.tree.leaves(xs)[0].shape[0]
    n_chunks, left = divmod(n, chunk)
    scanned = n_chunks * chunk
    chunks = jax.tree.map(lambda x: x[:scanned].reshape(n_chunks, chunk, *x.shape[1:]), xs)
    ys = None
    if n_chunks:
        _, ys = jax.lax.scan(lambda _, x: ((), jax.vmap(fn)(x)), (), chunks)
        ys = jax.tree.map(lambda y: y.reshape(y.shape[0] * y.shape[1], *y.shape[2:]), ys)
    if left:
        rest = jax.vmap(fn)(jax.tree.map(lambda x: x[scanned:], xs))
        ys = rest if ys is None else jax.tree.map(lambda y, r: jax.lax.concatenate([y, r], dimension=0), ys, rest)
    return ys


def seed_map(fn, n_seeds: int, in_axes=0):
    """``jax.vmap(fn, in_axes)`` over the seed axis; for one seed, ``fn`` on the squeezed arguments
    with the axis added back to the outputs: a size-1 vmap turns every matrix product into a
    batched one, which XLA runs about twice as slowly on a CPU (BPO's update: 1.5 s vs 0.75 s)."""
    if n_seeds > 1:
        return jax.vmap(fn, in_axes=in_axes)

    def single(*args):
        axes = in_axes if isinstance(in_axes, tuple) else (in_axes,) * len(args)
        args = [a if ax is None else jax.tree.map(lambda x: x[0], a) for a, ax in zip(args, axes, strict=True)]
        return jax.tree.map(lambda x: x[None], fn(*args))

    return single
