"""Where a sweep stands: each run's state and progress, and the worker time spent and left.

``bpo sweep NAME --out DIR --dry-run`` prints this, so a campaign of many sessions (Table 1 at the
paper's budget) is followed by one command instead of by reading checkpoint files. Reading it
changes nothing: a run's lock is only looked at (``store.run_is_locked``, under the folder's lock
as the index does, whose file exists for that instant), and a checkpoint's progress is the one
saved with its state.

The remainder is an estimate from measured rates: each unfinished run's budget still to do, at the
worker wall time per unit of budget of the runs like it (same algorithm, budget unit and seeds),
the closest first (``_rate``): finished runs of its environment and preset; else its own progress
up to its checkpoint; else other runs' progress of its environment and preset, then of its preset
(a preset fixes the networks and the update's epochs, which set the cost: Table 1's gSDE updates
cost 5-25 times the default's); else any runs like it. Wall times depend on the machine and on
what else it ran, so the estimate is as good as the measured runs are alike.
With ``--group-rows`` a run's progress is its group's checkpoint's (counted once in the hours), and
a finished run of a group counts as its share of the group's wall time.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bpo.infra import checkpoint as ckpt
from bpo.training.rows import group_config
from bpo.training.run_output import default_seed_chunk
from experiments import launch, reader, store
from experiments.sweep import RunSpec


@dataclass(frozen=True)
class RunProgress:
    """One run of a sweep folder.

    state: finished | running (a process holds its lock) | queued (a Slurm job of an earlier
    submission will run it) | resumes (a checkpoint of this run is there, to continue from) |
    restarts (a checkpoint is there that cannot continue it: ``why``) | redo (its directory holds
    no finished run of this config) | new.
    done, total, iteration: the iterations done at the last checkpoint and the run's total (None
    without one); ``iteration``: what an iteration is (an update, a loop iteration of the program).
    wall_s: worker wall time, the whole run's when finished (a grouped run's share of its program's),
    else up to the last checkpoint.
    checkpoint: the folder the progress was read from; shared: how many runs train in one program
    with this one and share that checkpoint (``--group-rows``), else 1."""

    spec: RunSpec
    state: str
    done: int | None = None
    total: int | None = None
    iteration: str = "iteration"
    wall_s: float | None = None
    why: str = ""
    checkpoint: Path | None = None
    shared: int = 1

    @property
    def fraction_done(self) -> float:
        return 1.0 if self.state == "finished" else (self.done / self.total if self.done and self.total else 0.0)

    def detail(self) -> str:
        """What the dry run prints after the run's id and config."""
        if self.state == "finished":
            return f"{self.wall_s / 3600:.2f} h" if self.wall_s is not None else ""
        if self.why:
            return f"its checkpoint is not used: {self.why}"
        if self.done is None:
            return "no checkpoint yet" if self.state == "running" else ""
        whose = "its" if self.shared == 1 else f"its group's ({self.shared} runs in one program)"
        count = f"{self.done}/{self.total} {self.iteration}s" if self.total else f"{self.done} {self.iteration}s done"
        return (f"{count} at {whose} last checkpoint"
                + (f" ({self.wall_s / 3600:.2f} h)" if self.wall_s is not None else ""))


def budget(cfg) -> tuple[str, int]:
    """(unit, amount) of a run's budget: environment steps, or episodes for episodic presets."""
    return ("steps", cfg.total_timesteps) if hasattr(cfg, "total_timesteps") else ("episodes", cfg.episodes)


def _kind(spec: RunSpec) -> tuple[str, str, int, int]:
    """(algorithm, budget unit, budget, seeds)."""
    cfg = spec.config()
    return cfg.algo, *budget(cfg), cfg.seeds


def _checkpoint_progress(directory: Path, config) -> dict:
    """The fields of ``RunProgress`` that the checkpoint in ``directory`` of a run (or group of
    runs) of ``config`` gives, if there is one. Its state file is read once: a worker may replace
    or remove it meanwhile (a file gone by then is no checkpoint)."""
    if not ckpt.exists(directory):
        return {}
    try:
        info = ckpt.read_info(directory)
    except ckpt.UnreadableCheckpoint as e:
        return {"why": str(e)} if ckpt.exists(directory) else {}
    why = ckpt.info_mismatch(info, config, default_seed_chunk())
    if why:
        return {"why": why}
    # read_info has checked the progress: a count within the run's iterations, times that are numbers
    done, total, wall = info["iterations_done"], info.get("iterations"), (info.get("elapsed") or {})
    wall = wall.get("wall_time_s")
    return {"done": done, "total": total, "iteration": str(info.get("iteration_name", "iteration")),
            "checkpoint": directory, "wall_s": float(wall) if isinstance(wall, (int, float)) else None}


def _checkpoints(sweep_dir: Path, unfinished: list[RunSpec], group_rows: bool) -> dict[str, tuple[Path, object, int]]:
    """run id -> (the checkpoint folder its worker would continue from, the config that folder's
    checkpoint must hold, the runs sharing it): the run's own, or with ``group_rows`` its group's
    (``launch.group_checkpoint_dir``, holding ``group_config``)."""
    groups = launch.group_specs(unfinished) if group_rows else [[s] for s in unfinished]
    found = {}
    for group in groups:
        config = group_config([s.config() for s in group])
        for spec in group:
            found[spec.run_id] = (launch.group_checkpoint_dir(sweep_dir, group), config, len(group))
    return found


def _own_wall_time(run_dir: Path) -> float:
    """A finished run's worker wall time: its share of its program's when it was trained in a group
    of runs (``--group-rows``: every run of the group records the group's)."""
    summary = reader.read_summary(run_dir)
    shared = summary.get("configs_in_program", 1)
    return summary["wall_time_s"] / (shared if isinstance(shared, int) and shared > 0 else 1)


def sweep_progress(sweep_dir: Path, specs: list[RunSpec], group_rows: bool = False) -> list[RunProgress]:
    """Every run's ``RunProgress``, in the order of ``specs`` (``group_rows``: as ``bpo sweep
    --group-rows`` would run them). The locks are read under the folder's lock: a sweep starting a
    run at that moment would otherwise find its lock held for an instant and leave the run to a
    holder that does not exist (``store.try_lock_run``)."""
    sweep_dir = Path(sweep_dir)
    if not sweep_dir.is_dir():
        return [RunProgress(s, "new") for s in specs]
    with store.folder_lock(sweep_dir):
        locked = {s.run_id: store.run_is_locked(sweep_dir, s.run_id) for s in specs}
    finished = {s.run_id: RunProgress(s, "finished", wall_s=_own_wall_time(sweep_dir / s.run_id))
                for s in specs if store.is_finished(sweep_dir, s)}
    queued = launch.slurm_in_flight(sweep_dir)
    checkpoints = _checkpoints(sweep_dir, [s for s in specs if s.run_id not in finished], group_rows)
    runs = []
    for spec in specs:
        if spec.run_id in finished:
            runs.append(finished[spec.run_id])
            continue
        folder, config, shared = checkpoints[spec.run_id]
        found = _checkpoint_progress(folder, config)
        state = ("running" if locked[spec.run_id] else "queued" if spec.run_id in queued else
                 "restarts" if "why" in found else "resumes" if found else
                 "redo" if (sweep_dir / spec.run_id).exists() else "new")
        runs.append(RunProgress(spec, state, shared=shared, **found))
    return runs


def _rate(run: RunProgress, measured: list[RunProgress], kinds: dict[str, tuple]) -> tuple[float | None, bool]:
    """Worker seconds per unit of budget of the measured runs closest to ``run`` (module docstring),
    and whether they are of another preset (other networks, other budget per update: the price may
    be far off); ``measured``: the runs with a wall time, finished or up to their checkpoints."""
    algo, unit, _, seeds = kinds[run.spec.run_id]
    like = [m for m in measured if kinds[m.spec.run_id][:2] == (algo, unit) and kinds[m.spec.run_id][3] == seeds]
    setting = (run.spec.env, run.spec.preset)
    tiers = ([m for m in like if m.state == "finished" and (m.spec.env, m.spec.preset) == setting],
             [m for m in like if m is run],
             [m for m in like if (m.spec.env, m.spec.preset) == setting],
             [m for m in like if m.spec.preset == run.spec.preset],
             like)
    basis = next((tier for tier in tiers if tier), None)
    if basis is None:
        return None, False
    rate = sum(m.wall_s / m.shared for m in basis) / sum(kinds[m.spec.run_id][2] * m.fraction_done for m in basis)
    return rate, basis is tiers[-1]  # reached only when no run of its preset is measured


def time_line(runs: list[RunProgress], priced_from: list[RunProgress] | None = None) -> str:
    """Worker hours spent (finished runs, and unfinished runs up to their checkpoints) and left;
    ``priced_from``: the runs whose measured rates price those left (default ``runs``; the whole
    sweep when only some of its runs are shown, ``bpo sweep --only``)."""
    priced_from = runs if priced_from is None else priced_from
    kinds = {r.spec.run_id: _kind(r.spec) for r in (*priced_from, *runs)}
    finished = [r for r in runs if r.state == "finished"]
    left = [r for r in runs if r.state != "finished"]
    spent = sum(r.wall_s or 0.0 for r in finished)
    partial = sum({r.checkpoint: r.wall_s or 0.0 for r in left if r.done is not None}.values())  # a group's once
    measured = [r for r in priced_from if r.wall_s is not None and r.fraction_done > 0]
    priced_by = {r.spec.run_id: _rate(r, measured, kinds) for r in left}
    rates = {k: rate for k, (rate, _) in priced_by.items()}
    estimate = sum(rates[r.spec.run_id] * kinds[r.spec.run_id][2] * (1 - r.fraction_done)
                   for r in left if rates[r.spec.run_id] is not None)
    unmeasured = sum(v is None for v in rates.values())
    by_other = sum(other for _, other in priced_by.values())
    line = f"worker time: {spent / 3600:.2f} h in the finished runs, {partial / 3600:.2f} h in the unfinished " \
           f"ones' checkpoints"
    priced = len(left) - unmeasured
    if priced:
        line += f"; left, at the measured rates of the runs most like them: about {estimate / 3600:.1f} h"
        line += f" for {priced} runs, and {unmeasured} without a measured run like them to price them by" \
            if unmeasured else ""
        line += f" ({by_other} of them priced by runs of another preset, which may be far off)" if by_other else ""
    elif left:
        line += f"; left: {len(left)} runs, none with a measured run like it to price it by"
    return line
