"""The lifecycle of a run, in one place for every command that runs one (``bpo train``, ``bpo train
--resume``, the sweep workers and Slurm jobs):

1. lock the output folder until the run is published, so that two commands never write one
   folder at once, and check the outputs before anything compiles (``check_outputs``): every
   folder the run writes is created and proven writable, and a new run may not start over another
   run's checkpoint;
2. continue the run's checkpoint or start over (``continue_or_restart``);
3. train (``train``: checkpoints, TensorBoard and W&B scalars);
4. publish the run directory whole and drop the checkpoint that served its purpose (``publish``).

The command line only parses arguments into a ``Job`` and reports what happened.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bpo.agents.methods import validate
from bpo.config.schema import ConfigError, from_dict, to_dict
from bpo.infra import checkpoint as ckpt
from bpo.infra.locks import Lock, acquire
from bpo.infra.processes import stop_requests
from bpo.infra.publish import check_publishable, lock_path_for, publish_run_dir, save_or_rescue
from bpo.infra.results import ensure_writable_dir
from bpo.infra.settings import validate_environment
from bpo.infra.tensorboard import Loggers, TensorBoardLogger, WandbLogger
from bpo.training.run import run_validated, runner_seed_chunk
from bpo.training.run_output import RunOutput
from bpo.training.summary import summarize, write

CHECKPOINT, TENSORBOARD, WANDB = "checkpoint", "tb", "wandb"
"""The folders ``bpo train`` may make in a run directory besides the run's files: its checkpoint,
TensorBoard's and W&B's (kept when the run is replaced, ``bpo.infra.publish``)."""
OUTPUT_OPTIONS = {"tensorboard": False, "track": False, "wandb_project": "bpo", "wandb_entity": None,
                  "per_seed_scalars": False}
"""What ``bpo train`` writes besides the run directory; kept with checkpoints for ``--resume``."""


@dataclass(frozen=True)
class Job:
    """One run to train into ``out_dir``: a validated config, how often it checkpoints (0: never)
    into ``out_dir/checkpoint``, its seed chunk and its output options. ``flag`` is the option that
    named the folder, for messages: ``--out`` for a new run, ``--resume`` for a stopped one."""

    cfg: object
    out_dir: Path
    checkpoint_every: int
    seed_chunk: int | None = None
    options: dict = field(default_factory=lambda: dict(OUTPUT_OPTIONS))
    flag: str = "--out"
    checkpoints: Path | None = None
    """Where the checkpoint goes when not in ``out_dir/checkpoint`` (a sweep keeps its runs'
    checkpoints in ``SWEEP/.checkpoints/RUN-ID``)."""

    def __post_init__(self):
        # A folder given as a symbolic link is the folder it points to: the run is staged beside
        # the target and renamed into it, so the link stays a link and no file moves out of it.
        out_dir = Path(self.out_dir)
        with contextlib.suppress(OSError):  # a name too long to stat: check_outputs refuses it by name
            # '.' or '..' names no folder to stage beside and rename: the folder it stands for does.
            if out_dir.is_symlink() or out_dir.name in ("", ".."):
                out_dir = out_dir.resolve()
        object.__setattr__(self, "out_dir", out_dir)

    @property
    def checkpoint_dir(self) -> Path | None:
        if self.checkpoint_every <= 0:
            return None
        return self.checkpoints if self.checkpoints is not None else self.out_dir / CHECKPOINT

    @property
    def label(self) -> str:
        """The run's name in progress bars and trackers: its variant, or its algorithm."""
        return getattr(self.cfg, "variant", "") or self.cfg.algo


def check_outputs(job: Job) -> tuple[list[Path], Lock]:
    """Every folder the run will write, created and proven writable before anything compiles; a
    ``ConfigError`` names the option that asked for the folder that cannot be. The output folder
    is locked first (``_lock_out_dir``), so that what is checked next is not another command's run
    under way; a new run (``--out``) may not start over another run's checkpoint
    (``check_no_unfinished_run``). Returns the folders it made, outermost first (``remove_made``),
    and the lock, to hold until the run is published; refused, it leaves nothing it made behind."""
    validate_environment()
    out_dir, options = job.out_dir, job.options
    check_publishable(out_dir, job.flag)  # first: a name the file system cannot hold fails every other check
    if options["track"]:
        check_tracking()  # before any folder is made
    made: list[Path] = []
    _ensure(out_dir.parent, job.flag, made)  # the lock's folder
    lock = _lock_out_dir(job, made)
    try:
        if job.flag == "--out":
            check_no_unfinished_run(job)
        elif not ckpt.exists(out_dir / CHECKPOINT):  # since resume_job read it, before the lock
            raise ConfigError("resume", f"{str(out_dir)!r} no longer holds the checkpoint to continue: the run "
                                        "finished or was removed meanwhile, by another command training there")
        _ensure(out_dir, job.flag, made)
        if options["tensorboard"]:
            _ensure(out_dir / TENSORBOARD, "--tensorboard", made)
        if options["track"]:
            _ensure(out_dir / WANDB, "--track", made)
        if job.checkpoint_every > 0:
            _ensure(out_dir / CHECKPOINT, "--checkpoint-every", made)
    except ConfigError:
        lock.release()  # first: its file is in a folder that may be one of those made
        remove_made(made)
        raise
    return made, lock


def _lock_out_dir(job: Job, made: list[Path]) -> Lock:
    """An exclusive lock on the run's output folder, held until the run is published: the file
    ``.NAME.lock`` beside it (``bpo.infra.publish.lock_path_for``; removed on release, and a killed
    run's by the next run there). Another command training into the folder holds it: a
    ``ConfigError`` naming ``job.flag`` (after ``made`` is removed), or the two runs' checkpoints
    and results would overwrite each other, one run lost without a word."""
    path = lock_path_for(job.out_dir)
    try:
        lock = acquire(path, blocking=False)
    except OSError as e:
        remove_made(made)
        raise ConfigError(job.flag, f"cannot lock {str(job.out_dir)!r} ({e.strerror}: {str(path)!r})") from None
    if lock is None:
        remove_made(made)
        raise ConfigError(job.flag, f"{str(job.out_dir)!r} is in use: another bpo train is writing its run there "
                                    f"(it holds {str(path)!r}); wait for it to end, or choose another folder")
    return lock


def _ensure(path: Path, field: str, made: list[Path]) -> None:
    missing = [p for p in (path, *path.parents) if not p.exists()]
    ensure_writable_dir(path, field)
    made.extend(reversed(missing))


def remove_made(made: list[Path]) -> None:
    """The folders ``check_outputs`` made, removed where still empty: a run refused after that
    check (its memory estimate, another run's checkpoint) leaves nothing behind."""
    for path in reversed(made):
        with contextlib.suppress(OSError):
            path.rmdir()


def check_tracking() -> None:
    """``--track``: W&B is installed and can log in without asking (an API key from ``wandb
    login`` or ``WANDB_API_KEY``, or ``WANDB_MODE`` offline or disabled), checked without the
    network; else a ``ConfigError`` saying how, instead of a traceback when the run starts."""
    try:
        import wandb  # an optional extra
    except ImportError:
        raise ConfigError("--track", "needs the wandb package: pip install -e \".[track]\"") from None
    if os.environ.get("WANDB_MODE", "").lower() in ("offline", "disabled", "dryrun"):
        return
    try:
        wandb.login(verify=False)  # prompts only where it can (a terminal); never reaches the server
    except Exception as e:  # noqa: BLE001 -- wandb's UsageError, or whatever its login raises
        raise ConfigError("--track", f"W&B cannot log in ({e}); run `wandb login`, set WANDB_API_KEY, or "
                                     "WANDB_MODE=offline") from None


def check_no_unfinished_run(job: Job) -> None:
    """A new run in a folder that holds another run's checkpoint: refused, so that a later
    ``--resume`` never replaces this run's results with the other's. The same run's checkpoint
    (same config, checkpointing on) is continued, as ``drive`` does."""
    directory = job.out_dir / CHECKPOINT
    if not ckpt.exists(directory):
        return
    # The seed chunk is part of the compiled program: a checkpoint of another chunk is refused here,
    # not by the driver after the compile.
    why = ("this run does not checkpoint" if job.checkpoint_every == 0
           else ckpt.mismatch(directory, job.cfg, runner_seed_chunk(job.cfg, job.seed_chunk)))
    if why:
        raise ConfigError("--out", f"{str(job.out_dir)!r} holds the checkpoint of an unfinished run ({why}): "
                                   f"continue it with `bpo train --resume {job.out_dir}`, or remove "
                                   f"{str(directory)!r} to start a new run there")


def continue_or_restart(directory: Path, cfg, seed_chunk: int | None) -> str | None:
    """A sweep's run: its checkpoint in ``directory`` is continued when it is this run's, else
    removed (the spec, the code or the backend changed since). Returns what was done, for the log,
    or None when there is no checkpoint."""
    if not ckpt.exists(directory):
        return None
    try:
        why = ckpt.mismatch(directory, cfg, seed_chunk)
    except ckpt.UnreadableCheckpoint as e:
        why = str(e)
    if why:
        ckpt.remove(directory)
        return f"{why} ({directory}): starting over"
    return f"continuing from checkpoint {directory}"


def resume_job(directory: Path) -> Job:
    """The job of the stopped run whose checkpoint is in ``directory/checkpoint``, with the output
    options it was started with; a ``ConfigError`` naming ``resume`` when there is none to continue."""
    where = directory / CHECKPOINT
    if not ckpt.exists(where) and (directory / "summary.json").exists():
        raise ConfigError("resume", f"{str(directory)!r} holds a finished run (its summary.json is written and its "
                                    "checkpoint removed): there is nothing to continue")
    if not ckpt.exists(where):
        raise ConfigError("resume", f"no checkpoint in {str(where)!r}; allowed: the OUT folder of a `bpo train` "
                                    "run that was stopped before it finished")
    try:
        info = ckpt.read_info(where)
    except ckpt.UnreadableCheckpoint as e:
        raise ConfigError("resume", str(e)) from None
    if not isinstance(info.get("checkpoint_every"), int) or info["checkpoint_every"] < 1:
        raise ConfigError("resume", f"{str(where)!r} does not say how often it checkpoints (checkpoint_every); "
                                    "remove it to start the run again")
    if not isinstance(info.get("config"), dict):
        raise ConfigError("resume", f"{str(where)!r} holds no config of the run (an object); remove it to start "
                                    "the run again")
    try:
        cfg = validate(from_dict(info["config"]))
    except (ConfigError, TypeError, AttributeError) as e:
        raise ConfigError("resume", f"the checkpoint's config is not valid for this version: {e}") from None
    saved, seed_chunk = info.get("options") or {}, info.get("seed_chunk")  # older checkpoints: no options
    if not isinstance(saved, dict) or not (seed_chunk is None or type(seed_chunk) is int and seed_chunk >= 0):
        raise ConfigError("resume", f"{str(where)!r}: its output options (an object) or seed chunk (a count) are "
                                    "not what `bpo train` writes; remove it to start the run again")
    return Job(cfg, directory, info["checkpoint_every"], seed_chunk,
               {k: saved.get(k, default) for k, default in OUTPUT_OPTIONS.items()}, "--resume")


def make_loggers(job: Job) -> Loggers | None:
    """The scalar sinks the options ask for: TensorBoard in OUT/tb, W&B with files in OUT/wandb."""
    cfg, options = job.cfg, job.options
    sinks = [TensorBoardLogger(job.out_dir / TENSORBOARD)] if options["tensorboard"] else []
    if options["track"]:
        name = f"{cfg.preset}/{cfg.env}/{job.label}"
        sinks.append(WandbLogger(options["wandb_project"], name, to_dict(cfg), job.out_dir, options["wandb_entity"]))
    return Loggers(sinks, per_seed=options["per_seed_scalars"]) if sinks else None


def train(job: Job, progress: Callable | None = None, on_resume: Callable | None = None,
          take_stop_signals: bool = True) -> RunOutput:
    """Train the job's run, checkpointing as it says and logging the scalars its options ask for.
    SIGINT and SIGTERM stop it at the end of a loop iteration (``bpo.infra.processes.Interrupted``, with
    the checkpoint written when it checkpoints); ``take_stop_signals=False`` for a caller that
    holds ``stop_requests`` itself (a sweep worker, through the publication too)."""
    logger = make_loggers(job)
    try:
        with stop_requests() if take_stop_signals else contextlib.nullcontext():
            out = run_validated(job.cfg, progress=progress, seed_chunk=job.seed_chunk, logger=logger,
                                checkpoint_dir=job.checkpoint_dir, checkpoint_every=job.checkpoint_every,
                                options=job.options, on_resume=on_resume)
        if logger is not None and job.cfg.backend != "gymnasium":
            logger.log_run(out.metrics, job.cfg.rollout_size)
    finally:
        if logger is not None:
            logger.close()
    return out


def publish(job: Job, out: RunOutput) -> tuple[dict | None, Path | None]:
    """Write the run directory whole (``bpo.infra.publish``: rescued elsewhere if it cannot be), then drop
    the checkpoint that has served its purpose. Returns the summary (None when nothing could be
    written) and the rescue folder (None when the results are where they belong); the checkpoint
    is kept unless they are."""
    summary, rescued = save_or_rescue(job.out_dir, lambda folder: publish_run_dir(folder, lambda d: write(out, d)),
                                      job.flag, last_resort=lambda: final_returns_line(out))
    if rescued is None and summary is not None and job.checkpoint_dir is not None:
        ckpt.remove(job.checkpoint_dir)
    return summary, rescued


def final_returns_line(out: RunOutput) -> str:
    """What a run found, on one line, for when no file could hold it."""
    summary = summarize(out)
    return json.dumps({k: summary[k] for k in ("preset", "env", "algo", "seeds", "final_eval_returns", "final_mean",
                                               "final_se")})
