"""A JAX run as a host loop over its iterations: one compiled call per loop iteration (an update,
or a block of episodes with its evaluation), a checkpoint every ``checkpoint_every`` iterations.

Every JAX run goes through here, checkpointed or not, so the same config, seeds and seed chunk give
bit-identical results whichever command runs them (``bpo train`` with or without
``--checkpoint-every N``, for any N, ``bpo sweep``, ``bpo reproduce``) and whether or not the run
was interrupted and resumed: the same compiled iteration runs the same number of times. The
single-program form (``bpo.training.make_train``, PureJaxRL's ``train(key)``) compiles the loop as
one ``lax.scan``; XLA optimises that program differently, so its results agree to float rounding,
not bitwise.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import jax
import numpy as np

from bpo import checkpoint as ckpt
from bpo import processes
from bpo.config import ConfigError
from bpo.runners.seeds import chunked_seed_map
from bpo.training.kinds import TrainConfig, kind_of
from bpo.training.run_output import RunOutput, chunk_size


def run_iterations(cfg: TrainConfig, hp, keys, progress: Callable | None, seed_chunk: int,
                   directory: Path | None = None, checkpoint_every: int = 0, hp_per_seed: bool = False) -> RunOutput:
    """Run every loop iteration of ``cfg`` for all seeds; with ``directory`` and ``checkpoint_every
    = N > 0``, save a checkpoint after every N iterations and at the end, and continue from the
    checkpoint in ``directory`` when there is one. A non-finite loss or parameter stops the run with
    the last good checkpoint kept. With ``hp_per_seed`` every leaf of ``hp`` has the seed axis too
    (rows of hyperparameters vmapped like seeds, ``bpo.training.rows``)."""
    start = time.perf_counter()
    saving = directory is not None and checkpoint_every > 0
    if saving and ckpt.exists(directory) and (why := ckpt.mismatch(directory, cfg, seed_chunk)):
        raise ConfigError("resume", why)
    kind = kind_of(cfg)
    stages = kind.make_stages(cfg, progress)
    chunk = chunk_size(seed_chunk, cfg.seeds)
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
    carry_shape = jax.eval_shape(init_all, keys, hp)
    index = np.zeros(1, np.int32)
    iteration_fn = jax.jit(iteration_all)
    iteration = iteration_fn.lower(carry_shape, hp, index).compile()
    compile_time = time.perf_counter() - start
    done, pieces = 0, []
    if saving and ckpt.exists(directory):
        outputs_shape = jax.eval_shape(iteration_fn, carry_shape, hp, index)[1]
        saved, _, info = ckpt.load(directory, {"carry": carry_shape, "outputs": outputs_shape})
        carry, done = saved["carry"], info["iterations_done"]
        pieces.append(saved["outputs"])
    else:
        carry = init_all(keys, hp)
    while done < stages.n_iterations:
        carry, outputs = iteration(carry, hp, index + done)
        outputs = jax.tree.map(np.asarray, outputs)
        ckpt.raise_if_non_finite(kind.segment_metrics(outputs[1], done), kind.first_unit(cfg, done), kind.unit,
                                 directory if saving else None)
        pieces.append(outputs)
        done += 1
        stop = processes.requested() if done < stages.n_iterations else None
        if saving and (done % checkpoint_every == 0 or done == stages.n_iterations or stop):
            # Parameters are checked where they are saved: a checkpoint never holds a NaN.
            ckpt.raise_if_non_finite({}, 0, kind.unit, directory, jax.tree.map(np.asarray, carry),
                                     state_at=kind.first_unit(cfg, done))
            pieces = [jax.tree.map(lambda *xs: np.concatenate(xs, axis=1), *pieces)]
            ckpt.save(directory, {"carry": carry, "outputs": pieces[0]}, {},
                      {"iterations_done": done, "iterations": stages.n_iterations, "checkpoint_every": checkpoint_every,
                       "seed_chunk": seed_chunk, "unit": kind.unit}, cfg)
        if stop is not None:
            raise processes.Interrupted(stop, f"after loop iteration {done} of {stages.n_iterations}",
                                        directory if saving else None)
    outputs = jax.tree.map(lambda *xs: np.concatenate(xs, axis=1), *pieces)
    metrics = jax.block_until_ready(finish_all(carry, outputs))
    end = time.perf_counter()
    return RunOutput(config=cfg, metrics=jax.tree.map(np.asarray, metrics), compile_time_s=compile_time,
                     wall_time_s=end - start, run_time_s=end - start - compile_time, seed_chunk=seed_chunk,
                     backend=jax.default_backend())

