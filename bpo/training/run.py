"""Running a configuration: the one entry point from a config to a ``RunOutput``.

A config is validated once where it enters (``run``, or the command line and the sweep planner,
which then call ``run_validated``), and its traced hyperparameters are built here, once; then the
run goes to one of three drivers:

* JAX environments, no checkpoints: the whole run of all seeds is one compiled program;
* JAX environments with checkpoints: the same loop in compiled segments (``bpo.training.segments``);
* Gymnasium environments: the host runner, with every update one jitted call (``bpo.runners.host``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import jax
import numpy as np

from bpo import checkpoint as ckpt
from bpo.config import OnPolicyTrainConfig, traced_hyperparams
from bpo.runners.host import HostRunner
from bpo.runners.seeds import chunked_seed_map, seed_keys
from bpo.runners.stages import whole_run
from bpo.training.kinds import TrainConfig, kind_of
from bpo.training.run_output import RunOutput, chunk_size, default_seed_chunk
from bpo.training.segments import run_checkpointed
from bpo.validation import validate


def make_train(cfg: TrainConfig, progress: Callable | None = None) -> Callable:
    """The runner's ``train(key, hparams) -> metrics`` for one seed of ``cfg`` (PureJaxRL's shape)."""
    return whole_run(kind_of(cfg).make_stages(cfg, progress))


def run(cfg: TrainConfig, progress: Callable | None = None, seed_chunk: int | None = None, logger=None,
        checkpoint_dir: Path | None = None, checkpoint_every: int = 0) -> RunOutput:
    """Validate ``cfg`` (a ``ConfigError`` names the bad field before anything compiles) and run it
    with ``run_validated``."""
    return run_validated(validate(cfg), progress, seed_chunk, logger, checkpoint_dir, checkpoint_every)


def run_validated(cfg: TrainConfig, progress: Callable | None = None, seed_chunk: int | None = None, logger=None,
                  checkpoint_dir: Path | None = None, checkpoint_every: int = 0) -> RunOutput:
    """Train ``cfg.seeds`` independent runs: in one jitted call (JAX environments), or on the
    host runner with the seeds vmapped in every call (Gymnasium environments).

    Seeds are vmapped in chunks of ``seed_chunk`` that ``lax.map`` runs one after another inside
    the same program: on a CPU, chunks that fit in cache are faster than one huge vmap.
    ``seed_chunk = 0`` vmaps all seeds at once (best on a GPU); ``None`` picks by backend.
    The chunk size is part of what makes a run reproducible: on a GPU a different chunking
    changes floating-point reduction order, and a single flipped action sample changes a run.

    With ``checkpoint_dir`` and ``checkpoint_every = N > 0`` the run saves a checkpoint every N
    updates (on-policy) or N evaluation blocks (episodic), and continues from the checkpoint in
    ``checkpoint_dir`` when there is one: the result is bit-identical to an uninterrupted run with
    the same N. A loss or parameter that becomes NaN or infinite stops the run with a
    ``NonFiniteError`` naming it and the update; the last good checkpoint stays.
    The command line and sweeps validate their configs where they enter, before any output is
    created, and call this; library code calls ``run``.
    """
    hp = traced_hyperparams(cfg)
    if isinstance(cfg, OnPolicyTrainConfig) and cfg.backend == "gymnasium":
        return run_on_host(cfg, hp, progress, logger, checkpoint_dir, checkpoint_every)
    keys = seed_keys(cfg.seed, cfg.seeds)
    seed_chunk = default_seed_chunk() if seed_chunk is None else seed_chunk
    if checkpoint_dir is not None and checkpoint_every > 0:
        return run_checkpointed(cfg, hp, keys, progress, seed_chunk, Path(checkpoint_dir), checkpoint_every)
    return run_one_program(cfg, hp, keys, progress, seed_chunk)


def run_one_program(cfg: TrainConfig, hp, keys, progress: Callable | None, seed_chunk: int) -> RunOutput:
    """Every seed's whole run in one compiled program; compilation is timed apart."""
    start = time.perf_counter()
    train = make_train(cfg, progress=progress)
    chunk = chunk_size(seed_chunk, cfg.seeds)
    compiled = jax.jit(lambda keys, hp: chunked_seed_map(lambda k: train(k, hp), keys, chunk)).lower(keys, hp).compile()
    compiled_at = time.perf_counter()
    metrics = jax.tree.map(np.asarray, jax.block_until_ready(compiled(keys, hp)))
    end = time.perf_counter()
    ckpt.raise_if_non_finite(metrics["train"], 0, kind_of(cfg).unit)
    return RunOutput(config=cfg, metrics=metrics, compile_time_s=compiled_at - start, wall_time_s=end - start,
                     run_time_s=end - compiled_at, seed_chunk=seed_chunk, backend=jax.default_backend())


def run_on_host(cfg: OnPolicyTrainConfig, hp, progress: Callable | None, logger, checkpoint_dir: Path | None,
                checkpoint_every: int) -> RunOutput:
    """A Gymnasium run: environments step on the host, every update is one jitted call."""
    start = time.perf_counter()
    runner = HostRunner(cfg, hp, progress=progress, logger=logger, checkpoint_dir=checkpoint_dir,
                        checkpoint_every=checkpoint_every)
    metrics = runner.run()
    wall = time.perf_counter() - start
    return RunOutput(
        config=cfg, metrics=jax.tree.map(np.asarray, metrics), compile_time_s=runner.compile_time_s,
        wall_time_s=wall, run_time_s=wall - runner.compile_time_s, seed_chunk=cfg.seeds,
        backend=f"gymnasium-{cfg.vector_mode}+{jax.default_backend()}", eval_time_s=runner.eval_time_s,
        eval_worker_time_s=runner.eval_worker_time_s,
    )
