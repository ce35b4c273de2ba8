"""Running a configuration: the one entry point from a config to a ``RunOutput``.

A config is validated once where it enters (``run``, or the command line and the sweep planner,
which then call ``run_validated``), and its traced hyperparameters are built here, once; then the
run goes to one of three drivers:

* JAX environments: one compiled loop iteration of all seeds, called once per iteration, with
  checkpoints between iterations when asked for (``bpo.training.segments``);
* Gymnasium environments: the host runner, with every update one jitted call (``bpo.runners.host``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import jax
import numpy as np

from bpo.config import OnPolicyTrainConfig, traced_hyperparams
from bpo.provenance import code_version
from bpo.runners.host import HostRunner
from bpo.runners.seeds import seed_keys
from bpo.runners.stages import whole_run
from bpo.training.kinds import TrainConfig, kind_of
from bpo.training.run_output import RunOutput, default_seed_chunk
from bpo.training.segments import run_iterations
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
    """Train ``cfg.seeds`` independent runs: JAX environments as one compiled loop iteration of all
    seeds, called once per iteration (``bpo.training.segments``); Gymnasium environments on the
    host runner, with the seeds vmapped in every call.

    Seeds are vmapped in chunks of ``seed_chunk`` that ``lax.map`` runs one after another inside
    the same program: on a CPU, chunks that fit in cache are faster than one huge vmap.
    ``seed_chunk = 0`` vmaps all seeds at once (best on a GPU); ``None`` picks by backend.
    The chunk size is part of what makes a run reproducible: on a GPU a different chunking
    changes floating-point reduction order, and a single flipped action sample changes a run.

    With ``checkpoint_dir`` and ``checkpoint_every = N > 0`` the run saves a checkpoint every N
    updates (on-policy) or N evaluation blocks (episodic), and continues from the checkpoint in
    ``checkpoint_dir`` when there is one: the result is bit-identical to an uninterrupted run, with
    or without checkpoints. A loss or parameter that becomes NaN or infinite stops the run with a
    ``NonFiniteError`` naming it and the update; the last good checkpoint stays.
    The command line and sweeps validate their configs where they enter, before any output is
    created, and call this; library code calls ``run``.
    """
    hp = traced_hyperparams(cfg)
    code_version()  # read now and kept (cached): the code that starts the run is the code that made it
    if isinstance(cfg, OnPolicyTrainConfig) and cfg.backend == "gymnasium":
        return run_on_host(cfg, hp, progress, logger, checkpoint_dir, checkpoint_every)
    keys = seed_keys(cfg.seed, cfg.seeds)
    seed_chunk = default_seed_chunk() if seed_chunk is None else seed_chunk
    directory = None if checkpoint_dir is None else Path(checkpoint_dir)
    return run_iterations(cfg, hp, keys, progress, seed_chunk, directory, checkpoint_every)


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
