"""The one run loop of every backend: checkpoint, resume, stop on a signal, the non-finite check.

A runner (``bpo.runners.jax_runner.JaxRunner`` for JAX and MJX environments,
``bpo.runners.host.HostRunner`` for Gymnasium ones) supplies only what differs between backends:
compile, initialise, run one loop iteration, snapshot and restore its state, finish. ``drive``
does the rest, the same way for both:

    compile; restore from the checkpoint in ``directory`` if there is one, else initialise
    for each remaining iteration:
        run it, timed (the loop clock); stop with the quantity named if a training metric is not finite
        every ``checkpoint_every`` iterations, at the end and when a stop was requested:
            snapshot; refuse to save non-finite state; save atomically
        stop (``processes.Interrupted``) when SIGINT/SIGTERM arrived
    finish, and time it all

Checkpoints never change results: a run stopped and resumed any number of times equals the
uninterrupted run bit for bit (``tests/test_checkpoint.py``).

The loop clock (``RunOutput.loop_clock_s``) is the training time after each number of iterations,
measured here on the host around each iteration's call: compilation, initialisation and
checkpoint writes are left out, and a resumed run's clock goes on from its checkpoint's. The
summary turns it into the time of each evaluation (``bpo plot --x time``).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple, Protocol

import jax
import numpy as np

from bpo.agents.learner import migrate_state_dict
from bpo.config.schema import ConfigError
from bpo.infra import checkpoint as ckpt
from bpo.infra import processes
from bpo.infra.stall import stall_guard
from bpo.training.policies import plain_tree
from bpo.training.run_output import RunOutput, TrainConfig


class Runner(Protocol):
    """What a backend supplies to ``drive``.

    ``unit`` (``cfg.unit``) names a row of the training metrics; ``iteration_name`` what an iteration
    is called in messages; ``checkpoint_info`` settings a checkpoint must have been written with
    (the seed chunk of a JAX run); ``backend``, ``threads`` and the times are reported in the
    summary. ``iterate(done)`` runs iteration ``done`` and returns its training metrics
    ``{name: [seeds, units]}`` with the index of its first unit; ``snapshot(done)`` returns (state,
    extra, the part of the state to check for non-finite values) for ``bpo.infra.checkpoint.save``;
    ``restore(state, extra)`` takes them back, ``state`` shaped like ``template(done)`` (the state
    after ``done`` iterations) and ``extra`` first checked by ``extra_problem(extra, done)`` (what in
    it does not fit ``done`` iterations, if anything);
    ``evaluations_done(done)``: the evaluations of each seed already reported after ``done``
    iterations (where a resumed run's progress bar starts)."""

    unit: str
    iteration_name: str
    n_iterations: int
    checkpoint_info: dict
    backend: str
    threads: int
    seed_chunk: int
    compile_time_s: float
    eval_time_s: float
    eval_worker_time_s: float

    def compile(self) -> None: ...

    def init(self) -> None: ...

    def template(self, done: int): ...

    def extra_problem(self, extra: dict, done: int) -> str | None: ...

    def restore(self, state, extra: dict) -> None: ...

    def iterate(self, done: int) -> tuple[dict, int]: ...

    def snapshot(self, done: int) -> tuple[object, dict, object]: ...

    def finish(self) -> dict: ...

    def policies(self) -> dict: ...

    def evaluations_done(self, done: int) -> int: ...

    def close(self) -> None: ...


POINTS = "policy_points"
"""The policies kept every ``save_policies_every`` iterations, by iteration: in checkpoints and in
the run's metrics (as ``during``), then in ``policies.msgpack``."""
CLOCK = "loop_clock_s"
"""The loop clock so far (module docstring), in checkpoints; a checkpoint written before it was
kept has none, and the run resumed from it has no clock (its summary no evaluation times)."""
TIMES = ("wall_time_s", "compile_time_s", "eval_time_s", "eval_worker_time_s")
"""The times a run reports, summed over its segments: a resumed run's checkpoint carries those of
the segments before it (the work between its last checkpoint and a stop is redone, so not counted)."""


class Resumed(NamedTuple):
    """Where a run starts: the iterations done, the times of the segments before (``TIMES``), the
    policies kept so far (``save_policies_every``) and the loop clock (``CLOCK``; None if unknown)."""

    done: int
    before: dict[str, float]
    points: dict
    clock: list[float] | None


def resume_point(runner: Runner, cfg: TrainConfig, directory: Path | None) -> Resumed:
    """Restore ``runner`` from the checkpoint in ``directory`` and say where it stopped, or
    initialise it and start from nothing. A checkpoint of another configuration is refused."""
    if not ckpt.exists(directory):
        runner.init()
        return Resumed(0, dict.fromkeys(TIMES, 0.0), {}, [0.0])
    if why := ckpt.mismatch(directory, cfg, runner.checkpoint_info.get("seed_chunk")):
        raise ConfigError("resume", why)
    state, extra, info = ckpt.load(directory, runner.template, migrate_state_dict)
    done = int(info["iterations_done"])
    if why := runner.extra_problem(extra, done):
        raise ckpt.UnreadableCheckpoint(directory / ckpt.STATE_FILE, why)
    runner.restore(state, extra)
    before = info.get("elapsed") or {}
    return Resumed(done, {k: float(before.get(k, 0.0)) for k in TIMES}, extra.get(POINTS, {}),
                   _saved_clock(extra, done))


def _saved_clock(extra: dict, done: int) -> list[float] | None:
    """The loop clock a checkpoint kept after ``done`` iterations; None when it kept none (written
    before the clock was kept) or not one time per iteration boundary."""
    clock = np.asarray(extra.get(CLOCK, []))
    if clock.dtype.kind != "f" or clock.shape != (done + 1,):
        return None
    return [float(t) for t in clock]


def elapsed(runner: Runner, before: dict[str, float], segment_wall_s: float) -> dict[str, float]:
    """The run's times so far: the segments before plus this one."""
    now = {"wall_time_s": segment_wall_s, "compile_time_s": runner.compile_time_s,
           "eval_time_s": runner.eval_time_s, "eval_worker_time_s": runner.eval_worker_time_s}
    return {k: before[k] + now[k] for k in TIMES}


def save(runner: Runner, cfg: TrainConfig, directory: Path, done: int, checkpoint_every: int,
         extra_info: dict | None = None, points: dict | None = None, clock: list[float] | None = None) -> None:
    """A checkpoint after ``done`` iterations; ``extra_info`` (times, the command's output options)
    is kept in its info, and ``points`` (the policies kept so far) and ``clock`` (the loop clock)
    with the state, for the next segment."""
    state, extra, check = runner.snapshot(done)
    # Parameters are checked where they are saved: a checkpoint never holds a NaN.
    ckpt.raise_if_non_finite({}, 0, runner.unit, directory if ckpt.exists(directory) else None, check,
                             state_at=done)
    info = {"iterations_done": done, "iterations": runner.n_iterations, "checkpoint_every": checkpoint_every,
            "unit": runner.unit, "iteration_name": runner.iteration_name, **runner.checkpoint_info,
            **(extra_info or {})}
    try:
        kept = {POINTS: points or {}, **({CLOCK: np.asarray(clock, np.float64)} if clock is not None else {})}
        ckpt.save(directory, state, {**extra, **kept}, info, cfg)
    except ckpt.CheckpointWriteError as e:
        # A full disk or a size limit must not cost the run: it goes on, its results stay in memory
        # and are written (or rescued, bpo.infra.publish) at the end; the previous checkpoint, if any, is whole.
        old = f"; the one before is kept in {directory}" if ckpt.exists(directory) else ""
        print(f"warning: checkpoint after {runner.unit} {done} not written ({e}){old}; training goes on",
              file=sys.stderr, flush=True)


def _stall_advice(directory: Path | None) -> str:
    if directory is None:
        return "The run was not checkpointing: run it again (with --checkpoint-every N it keeps its progress)."
    if ckpt.exists(directory):
        return (f"Its last checkpoint, {directory}, is intact: running the same sweep again, or `bpo train --resume` "
                "on the run's directory, continues from it.")
    return "It had not written a checkpoint yet: run it again."


def drive(runner: Runner, cfg: TrainConfig, directory: Path | None = None, checkpoint_every: int = 0,
          options: dict | None = None, on_resume: Callable[[int], None] | None = None) -> RunOutput:
    """Run every remaining loop iteration of ``runner`` (module docstring) and return the run's
    output. With ``directory`` and ``checkpoint_every = N > 0`` a checkpoint is saved every N
    iterations, at the end and when stopped, and the run continues from the checkpoint in
    ``directory`` when there is one; ``options`` (the command's output options, e.g. TensorBoard)
    are saved with it, for ``bpo train --resume``. ``on_resume(calls)`` is told, when the run
    continues, how many evaluation callbacks (seeds x evaluations) the segments before made, so a
    progress bar can start there. Times count every segment of the run."""
    start = time.perf_counter()
    saving = directory is not None and checkpoint_every > 0
    directory = Path(directory) if saving else None
    try:
        with stall_guard(lambda: _stall_advice(directory), cpu=jax.default_backend() == "cpu"):
            runner.compile()
            at = resume_point(runner, cfg, directory)
            if at.done and on_resume is not None:
                on_resume(runner.evaluations_done(at.done) * cfg.seeds)
            _loop(runner, cfg, directory, checkpoint_every, options, at, start)
        # Outside the guard: the host runner may wait here, idle, for its evaluation worker process.
        metrics = {**jax.tree.map(np.asarray, runner.finish()), **({"during": at.points} if at.points else {})}
    finally:
        runner.close()
    t = elapsed(runner, at.before, time.perf_counter() - start)
    return RunOutput(config=cfg, metrics=metrics, compile_time_s=t["compile_time_s"], wall_time_s=t["wall_time_s"],
                     run_time_s=t["wall_time_s"] - t["compile_time_s"], seed_chunk=runner.seed_chunk,
                     backend=runner.backend, eval_time_s=t["eval_time_s"], eval_worker_time_s=t["eval_worker_time_s"],
                     threads=runner.threads, loop_clock_s=None if at.clock is None else np.asarray(at.clock))


def _loop(runner: Runner, cfg: TrainConfig, directory: Path | None, checkpoint_every: int, options: dict | None,
          at: Resumed, start: float) -> None:
    """The iterations from ``at.done`` on (``drive``); ``at.points`` and ``at.clock`` grow in place."""
    done, n, every = at.done, runner.n_iterations, cfg.save_policies_every
    while done < n:
        began = time.perf_counter()
        metrics, first_unit = runner.iterate(done)
        if at.clock is not None:
            at.clock.append(at.clock[-1] + time.perf_counter() - began)
        ckpt.raise_if_non_finite(metrics, first_unit, runner.unit, directory if ckpt.exists(directory) else None)
        done += 1
        if every and done % every == 0 and done < n:  # the final ones are kept anyway
            at.points[str(done)] = plain_tree(runner.policies())
        stop = processes.requested() if done < n else None
        if directory is not None and (done % checkpoint_every == 0 or done == n or stop):
            times = elapsed(runner, at.before, time.perf_counter() - start)
            save(runner, cfg, directory, done, checkpoint_every, {"elapsed": times, "options": options or {}},
                 at.points, at.clock)
        if stop is not None:
            raise processes.Interrupted(stop, f"after {runner.iteration_name} {done} of {n}", directory)
