"""Training: a config in, a run directory out.

* ``run(cfg, ...) -> RunOutput`` (``bpo.training.run``): validate (``run_validated`` skips it), build the
  traced hyperparameters, pick the runner (``make_runner``) and drive it (``bpo.training.driver``);
* ``make_train(cfg) -> train(key, hparams)``: one seed of a JAX run as one program;
* ``write(out, run_dir) -> summary`` (``bpo.training.summary``): the run directory;
* ``run_rows(cfgs) -> [RunOutput]`` (``bpo.training.rows``): configs that differ only in traced
  hyperparameters, trained as one program.
"""

from bpo.config.schema import TrainConfig
from bpo.training.rows import check_rows, program_key, run_rows
from bpo.training.run import make_runner, make_train, run, run_validated
from bpo.training.run_output import RunOutput
from bpo.training.summary import summarize, write


def progress_totals(cfg: TrainConfig) -> tuple[int, float | None]:
    """(evaluation callbacks, environment steps) of a whole run over all seeds, for a progress
    bar; environment steps are None for episodic runs, whose episode lengths are not known ahead."""
    steps = cfg.env_steps_total
    return cfg.seeds * cfg.n_evaluations, None if steps is None else cfg.seeds * steps


def default_checkpoint_every(cfg: TrainConfig) -> int:
    """About ten checkpoints per run: every tenth of the loop's iterations. None for MJX runs, whose
    environment state (MJX's ``Data``) flax cannot serialise yet (``checkpointable``)."""
    return max(1, cfg.checkpoint_units // 10) if checkpointable(cfg) else 0


def checkpointable(cfg: TrainConfig) -> bool:
    """Whether a run of ``cfg`` can be checkpointed: not on the MJX backend (its state holds
    ``mujoco.mjx.Data`` objects, which flax's msgpack does not serialise; found when ``bpo train``
    began to checkpoint by default)."""
    return getattr(cfg, "backend", "jax") != "mjx"


__all__ = ["RunOutput", "check_rows", "checkpointable", "default_checkpoint_every", "make_runner", "make_train",
           "program_key",
           "progress_totals", "run", "run_rows", "run_validated", "summarize", "write"]
