"""A JAX run in checkpointed segments: ``every`` loop iterations per compiled call, saved after each.

The result is bit-identical whether or not the run was interrupted and resumed (the same segments
run either way); it is not bitwise equal to the single-program run, whose XLA program differs.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import jax
import numpy as np

from bpo import checkpoint as ckpt
from bpo.config import ConfigError, to_dict
from bpo.runners.seeds import chunked_seed_map
from bpo.training.kinds import TrainConfig, kind_of
from bpo.training.run_output import RunOutput, chunk_size


def run_checkpointed(cfg: TrainConfig, hp, keys, progress: Callable | None, seed_chunk: int, directory: Path,
                     every: int) -> RunOutput:
    """Run ``cfg`` in segments of ``every`` loop iterations, continuing from the checkpoint in
    ``directory`` when there is one; a non-finite loss or parameter stops it with the last good
    checkpoint kept."""
    start = time.perf_counter()
    kind = kind_of(cfg)
    stages = kind.make_stages(cfg, progress)
    chunk = chunk_size(seed_chunk, cfg.seeds)

    init_all = jax.jit(lambda keys, hp: chunked_seed_map(lambda k: stages.init(k, hp), keys, chunk))
    segment_all = jax.jit(lambda carry, hp, idx: chunked_seed_map(lambda c: stages.segment(c, hp, idx), carry,
                                                                  chunk))
    finish_all = jax.jit(lambda carry, outputs: chunked_seed_map(lambda co: stages.finish(*co), (carry, outputs),
                                                                 chunk))
    carry_shape = jax.eval_shape(init_all, keys, hp)
    indices = np.arange(every)
    outputs_shape = jax.eval_shape(segment_all, carry_shape, hp, indices)[1]
    done, pieces = 0, []
    if ckpt.exists(directory):
        saved, _, info = ckpt.load(directory, {"carry": carry_shape, "outputs": outputs_shape})
        check_resumable(cfg, info, every, seed_chunk)
        carry, done = saved["carry"], info["iterations_done"]
        pieces.append(saved["outputs"])
    else:
        carry = init_all(keys, hp)
    compile_time = 0.0
    while done < stages.n_iterations:
        t0 = time.perf_counter()
        carry, outputs = jax.block_until_ready(segment_all(carry, hp, indices + done))
        if compile_time == 0.0:
            compile_time = time.perf_counter() - t0  # the first call compiles (an upper bound)
        outputs = jax.tree.map(np.asarray, outputs)
        ckpt.raise_if_non_finite(kind.segment_metrics(outputs[1], done), kind.first_unit(cfg, done), kind.unit,
                                 directory, jax.tree.map(np.asarray, carry))
        pieces.append(outputs)
        done += every
        joined = jax.tree.map(lambda *xs: np.concatenate(xs, axis=1), *pieces)
        pieces = [joined]
        ckpt.save(directory, {"carry": carry, "outputs": joined}, {},
                  {"iterations_done": done, "iterations": stages.n_iterations, "checkpoint_every": every,
                   "seed_chunk": seed_chunk, "unit": kind.unit}, cfg)
    outputs = jax.tree.map(lambda x: x[:, : stages.n_iterations], pieces[0])
    metrics = jax.block_until_ready(finish_all(carry, outputs))
    end = time.perf_counter()
    return RunOutput(config=cfg, metrics=jax.tree.map(np.asarray, metrics), compile_time_s=compile_time,
                     wall_time_s=end - start, run_time_s=end - start - compile_time, seed_chunk=seed_chunk,
                     backend=jax.default_backend())


def check_resumable(cfg: TrainConfig, info: dict, every: int, seed_chunk: int) -> None:
    """A checkpoint continues only the run that wrote it, cut the same way."""
    stored = json.loads(json.dumps(info["config"]))
    if stored != json.loads(json.dumps(to_dict(cfg))):
        raise ConfigError("resume", "the checkpoint was written by a different configuration")
    if info["checkpoint_every"] != every or info["seed_chunk"] != seed_chunk:
        raise ConfigError("resume", f"the checkpoint was written with checkpoint_every={info['checkpoint_every']} "
                          f"and seed_chunk={info['seed_chunk']}; resume with the same values")
