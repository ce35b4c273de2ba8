"""A JAX run as a host loop over its iterations: one compiled call per loop iteration (an update,
or a block of episodes with its evaluation), a checkpoint every ``checkpoint_every`` iterations.

Every JAX run goes through here, checkpointed or not, so the same config, seeds and seed chunk give
bit-identical results whichever command runs them (``bpo train`` with or without
``--checkpoint-every N``, for any N, ``bpo sweep``, ``bpo reproduce``) and whether or not the run
was interrupted and resumed: the same compiled iteration runs the same number of times. The
single-program form (``bpo.training.make_train``, PureJaxRL's ``train(key)``) compiles the loop as
one ``lax.scan``; XLA optimises that program differently, so its results agree to float rounding,
not bitwise.

On a CPU the seeds are split into shards of whole seed chunks, one per core (``bpo.runtime.cpu_threads``),
and the shards' iterations run side by side in threads (XLA releases the interpreter while a program
runs). Each seed's computations are the same whichever shard holds it, so the results do not depend
on the number of threads (``tests/test_segments.py``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import jax
import numpy as np

from bpo import checkpoint as ckpt
from bpo import processes, runtime
from bpo.config import ConfigError
from bpo.runners.seeds import chunked_seed_map
from bpo.training.kinds import TrainConfig, kind_of
from bpo.training.run_output import RunOutput, chunk_size


def shard_bounds(n_seeds: int, chunk: int, threads: int) -> list[tuple[int, int]]:
    """Seed ranges ``[start, stop)`` trained side by side, at most one per thread: whole chunks each,
    as even as they can be, the seeds after the last whole chunk in the last shard."""
    n_chunks = n_seeds // chunk
    k = max(1, min(threads, n_chunks))
    bounds, start = [], 0
    for i in range(k):
        stop = n_seeds if i == k - 1 else start + (n_chunks // k + (i < n_chunks % k)) * chunk
        bounds.append((start, stop))
        start = stop
    return bounds


def _seed_slice(tree, start: int, stop: int):
    return jax.tree.map(lambda x: x[start:stop], tree)


def _concat_seeds(trees):
    return trees[0] if len(trees) == 1 else jax.tree.map(lambda *xs: np.concatenate(xs, axis=0), *trees)


def _host_carry(carries):
    """The shards' carries as one host tree over all seeds."""
    return _concat_seeds([jax.tree.map(np.asarray, c) for c in carries])


def _serialised(progress: Callable | None) -> Callable | None:
    """``progress`` called by one thread at a time (the shards report from their own threads)."""
    if progress is None:
        return None
    lock = threading.Lock()

    def report(*args):
        with lock:
            progress(*args)

    return report


def run_iterations(cfg: TrainConfig, hp, keys, progress: Callable | None, seed_chunk: int,
                   directory: Path | None = None, checkpoint_every: int = 0, hp_per_seed: bool = False) -> RunOutput:
    """Run every loop iteration of ``cfg`` for all seeds; with ``directory`` and ``checkpoint_every
    = N > 0``, save a checkpoint after every N iterations and at the end, and continue from the
    checkpoint in ``directory`` when there is one. A non-finite loss or parameter stops the run with
    the last good checkpoint kept. With ``hp_per_seed`` every leaf of ``hp`` has the seed axis too
    (rows of hyperparameters vmapped like seeds, ``bpo.training.rows``). On a CPU, seed shards run
    side by side in ``bpo.runtime.cpu_threads()`` threads (module docstring)."""
    start = time.perf_counter()
    saving = directory is not None and checkpoint_every > 0
    if saving and ckpt.exists(directory) and (why := ckpt.mismatch(directory, cfg, seed_chunk)):
        raise ConfigError("resume", why)
    kind = kind_of(cfg)
    chunk = chunk_size(seed_chunk, cfg.seeds)
    on_cpu = jax.default_backend() == "cpu"
    shards = shard_bounds(cfg.seeds, chunk, runtime.cpu_threads() if on_cpu else 1)
    stages = kind.make_stages(cfg, _serialised(progress) if len(shards) > 1 else progress)
    if hp_per_seed:
        def init_all(keys, hp):
            return chunked_seed_map(lambda kh: stages.init(*kh), (keys, hp), chunk)

        def iteration_all(carry, hp, idx):
            return chunked_seed_map(lambda ch: stages.segment(ch[0], ch[1], idx), (carry, hp), chunk)
    else:
        def init_all(keys, hp):
            return chunked_seed_map(lambda k: stages.init(k, hp), keys, chunk)

        def iteration_all(carry, hp, idx):
            return chunked_seed_map(lambda c: stages.segment(c, hp, idx), carry, chunk)
    init_all = jax.jit(init_all)
    finish_all = jax.jit(lambda carry, outputs: chunked_seed_map(lambda co: stages.finish(*co), (carry, outputs),
                                                                 chunk))
    shard_hp = [_seed_slice(hp, a, b) if hp_per_seed else hp for a, b in shards]
    carry_shapes = [jax.eval_shape(init_all, keys[a:b], h) for (a, b), h in zip(shards, shard_hp, strict=True)]
    index = np.zeros(1, np.int32)
    iteration_fn = jax.jit(iteration_all)
    programs = {}
    for (a, b), shape, h in zip(shards, carry_shapes, shard_hp, strict=True):
        if b - a not in programs:
            programs[b - a] = iteration_fn.lower(shape, h, index).compile()
    compile_time = time.perf_counter() - start
    done, pieces = 0, []
    if saving and ckpt.exists(directory):
        full_shape = jax.eval_shape(init_all, keys, hp)
        outputs_shape = jax.eval_shape(iteration_fn, full_shape, hp, index)[1]
        saved, _, info = ckpt.load(directory, {"carry": full_shape, "outputs": outputs_shape})
        carries = [_seed_slice(saved["carry"], a, b) for a, b in shards]
        done = info["iterations_done"]
        pieces.append(saved["outputs"])
    else:
        carries = [init_all(keys[a:b], h) for (a, b), h in zip(shards, shard_hp, strict=True)]

    def iterate(i: int):
        a, b = shards[i]
        new_carry, outputs = programs[b - a](carries[i], shard_hp[i], index + done)
        return new_carry, jax.tree.map(np.asarray, outputs)

    with ThreadPoolExecutor(len(shards)) as pool:
        while done < stages.n_iterations:
            results = list(pool.map(iterate, range(len(shards)))) if len(shards) > 1 else [iterate(0)]
            carries = [carry for carry, _ in results]
            outputs = _concat_seeds([out for _, out in results])
            ckpt.raise_if_non_finite(kind.segment_metrics(outputs[1], done), kind.first_unit(cfg, done), kind.unit,
                                     directory if saving else None)
            pieces.append(outputs)
            done += 1
            stop = processes.requested() if done < stages.n_iterations else None
            if saving and (done % checkpoint_every == 0 or done == stages.n_iterations or stop):
                carry = _host_carry(carries)
                # Parameters are checked where they are saved: a checkpoint never holds a NaN.
                ckpt.raise_if_non_finite({}, 0, kind.unit, directory, carry, state_at=kind.first_unit(cfg, done))
                pieces = [jax.tree.map(lambda *xs: np.concatenate(xs, axis=1), *pieces)]
                ckpt.save(directory, {"carry": carry, "outputs": pieces[0]}, {},
                          {"iterations_done": done, "iterations": stages.n_iterations,
                           "checkpoint_every": checkpoint_every, "seed_chunk": seed_chunk, "unit": kind.unit}, cfg)
            if stop is not None:
                raise processes.Interrupted(stop, f"after loop iteration {done} of {stages.n_iterations}",
                                            directory if saving else None)
    outputs = jax.tree.map(lambda *xs: np.concatenate(xs, axis=1), *pieces)
    carry = carries[0] if len(carries) == 1 else _host_carry(carries)
    metrics = jax.block_until_ready(finish_all(carry, outputs))
    end = time.perf_counter()
    return RunOutput(config=cfg, metrics=jax.tree.map(np.asarray, metrics), compile_time_s=compile_time,
                     wall_time_s=end - start, run_time_s=end - start - compile_time, seed_chunk=seed_chunk,
                     backend=jax.default_backend(), threads=len(shards))
