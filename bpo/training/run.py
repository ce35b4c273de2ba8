"""Running a configuration: the one entry point from a config to a ``RunOutput``.

    run(cfg)                validate (a ``ConfigError`` names the bad field before anything compiles)
    run_validated(cfg)      traced hyperparameters, once; the runner for the config; ``drive`` it
    make_runner(cfg, hp)    the dispatch, in one place:
        REINFORCE / BPO-REINFORCE                  -> JaxRunner(EpisodicProgram)
        PPO / BPO-PPO, backend jax, mjx or threads -> JaxRunner(OnPolicyProgram)
        PPO / BPO-PPO, backend gymnasium           -> HostRunner
    make_train(cfg)         PureJaxRL's ``train(key, hparams)`` for one seed of a JAX run
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from bpo.agents.methods import validate
from bpo.config.schema import EpisodicTrainConfig, OnPolicyTrainConfig, TrainConfig, traced_hyperparams
from bpo.infra.provenance import code_version
from bpo.runners import episodic, onpolicy
from bpo.runners.host import HostRunner
from bpo.runners.jax_runner import JaxRunner
from bpo.runners.program import Program, whole_run
from bpo.runners.seeds import seed_keys
from bpo.training.driver import Runner, drive
from bpo.training.run_output import RunOutput, default_seed_chunk


def make_program(cfg: TrainConfig) -> Program:
    """The JAX program of ``cfg``: episodic (REINFORCE, BPO-REINFORCE) or on-policy (PPO, BPO-PPO)."""
    if isinstance(cfg, EpisodicTrainConfig):
        return episodic.make_program(cfg)
    return onpolicy.make_program(cfg)


def make_train(cfg: TrainConfig) -> Callable:
    """``train(key, hparams) -> metrics`` for one seed of ``cfg``, the whole run one program
    (PureJaxRL's shape: ``jax.jit(jax.vmap(make_train(cfg), in_axes=(0, None)))(keys, hp)``
    trains many seeds; ``hp``'s leaves are scalars, so they are not mapped)."""
    return whole_run(make_program(cfg))


def make_runner(cfg: TrainConfig, hp, progress: Callable | None = None, logger=None,
                seed_chunk: int | None = None) -> Runner:
    """The runner of ``cfg``: the host runner for Gymnasium environments, else the JAX runner."""
    if (seed_chunk := runner_seed_chunk(cfg, seed_chunk)) is None:
        return HostRunner(cfg, hp, progress=progress, logger=logger)
    return JaxRunner(cfg, make_program(cfg), hp, seed_keys(cfg.seed, cfg.seeds), seed_chunk, progress)


def runner_seed_chunk(cfg: TrainConfig, seed_chunk: int | None) -> int | None:
    """The seed chunk ``cfg``'s runner compiles for (``seed_chunk``, or the default of this machine
    when None), or None for the host runner of Gymnasium environments, which has none."""
    if isinstance(cfg, OnPolicyTrainConfig) and cfg.backend == "gymnasium":
        return None
    return default_seed_chunk() if seed_chunk is None else seed_chunk


def run(cfg: TrainConfig, progress: Callable | None = None, seed_chunk: int | None = None, logger=None,
        checkpoint_dir: Path | None = None, checkpoint_every: int = 0) -> RunOutput:
    """Validate ``cfg`` and run it with ``run_validated``."""
    return run_validated(validate(cfg), progress, seed_chunk, logger, checkpoint_dir, checkpoint_every)


def run_validated(cfg: TrainConfig, progress: Callable | None = None, seed_chunk: int | None = None, logger=None,
                  checkpoint_dir: Path | None = None, checkpoint_every: int = 0,
                  options: dict | None = None, on_resume: Callable[[int], None] | None = None) -> RunOutput:
    """Train ``cfg.seeds`` independent runs of a validated config.

    Seeds of a JAX run are vmapped in chunks of ``seed_chunk`` that run one after another inside
    the same program: on a CPU, chunks that fit in cache are faster than one huge vmap.
    ``seed_chunk = 0`` vmaps all seeds at once (best on a GPU); ``None`` picks by backend. The
    chunk size is part of what makes a run reproducible: on a GPU a different chunking changes
    floating-point reduction order, and a single flipped action sample changes a run.

    With ``checkpoint_dir`` and ``checkpoint_every = N > 0`` the run saves a checkpoint every N
    updates (on-policy) or N evaluation blocks (episodic), and continues from the checkpoint in
    ``checkpoint_dir`` when there is one (``bpo.training.driver``); ``options`` (the command's output
    options) are saved with the checkpoints, and ``on_resume(calls)`` hears how many evaluation
    callbacks the run had made before (a progress bar's start). The command line and sweeps
    validate their configs where they enter, before any output is created, and call this; library
    code calls ``run``.
    """
    hp = traced_hyperparams(cfg)
    code_version()  # read now and kept (cached): the code that starts the run is the code that made it
    runner = make_runner(cfg, hp, progress, logger, seed_chunk)
    return drive(runner, cfg, checkpoint_dir, checkpoint_every, options, on_resume)
