"""``bpo sweep``, ``bpo plot``, ``bpo table`` and ``bpo reproduce``: argument parsing and checks
(before anything is started or compiled), then the work in experiments.launch, experiments.plotting
and experiments.table. ``bpo reproduce NAME`` is ``bpo sweep NAME`` followed by ``bpo plot`` and
``bpo table`` on its results (and, for a sweep with a ``probe`` plan, ``bpo probe`` on its BPO
runs and ``bpo probe-summary``: ``experiments.probe.probe_folder``).

Outputs go to ``runs/NAME`` (git-ignored) unless ``--out`` says otherwise: the committed results
under ``results/`` are only rewritten on request (``--out results/NAME``). Every command first
creates its output folder and proves it can write there (``bpo.infra.results.ensure_writable_dir``),
before anything is planned, compiled, launched or drawn.

``bpo plot`` and ``bpo table`` (and ``bpo reproduce``'s drawing step) read every run directory
through ``experiments.reader``: a run whose files cannot be used is listed on stderr, one line
each, the outputs are made from the other runs, and the exit code is 1 unless
``--allow-skipped`` (a damaged run must not vanish from a table with exit code 0). What cannot be
made at all (no usable run, a damaged ``sweep.json``, a table cell that would pool different
configurations) is an error with exit code 2 (1 in ``bpo reproduce``, whose runs are done)."""

from __future__ import annotations

import os
import re
import signal
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Literal

import tyro

from bpo.config.schema import ConfigError
from bpo.infra.publish import name_max
from bpo.infra.results import ensure_writable_dir, left_as_found
from bpo.infra.settings import validate_environment
from experiments import launch, progress, store
from experiments.arguments import parse
from experiments.plotting import DEFAULT_PLOT, PlotOptions, plot_results
from experiments.probe import probe_folder
from experiments.reader import BadFile, Run, Skipped, sweep_test
from experiments.sweep import Grid, RunSpec, Sweep, expand, load_sweep, parse_assignment
from experiments.table import MixedRuns, check_baseline, write_tables

RUNS_DIR = Path("runs")
"""Where sweeps and reproductions write by default: git-ignored, so the committed results/ stay as they are."""
MAX_BOOTSTRAP_REPS = 100_000
"""bpo table --bootstrap-reps at most: rliable resamples every run once per rep, so time and memory grow with it."""
HOW_TO_CONTINUE = "run the same command again: finished runs are kept, interrupted runs continue from their checkpoints"


@dataclass(frozen=True)
class SweepArgs:
    """Run a sweep: every (preset, env, variant, grid values) of a sweep file or of the flags below,
    each with all its seeds vmapped in one process. Finished runs are skipped, so running the same
    command again resumes an interrupted sweep."""

    sweep: Annotated[tyro.conf.Positional[str | None], tyro.conf.arg(metavar="SWEEP")] = None
    """Sweep file: a name in experiments/sweeps (fig2, classic, mujoco_small, table1_small, headline, table1, ablations,
    backend_check, probe, a2c, authors_code) or a path. Without it, the grid comes from --preset, --envs, --variants
    and --grid."""
    backend: Literal["local", "slurm"] = "local"
    """local: worker processes on this machine. slurm: a submitit job array, resources from the sweep
    file (and the --slurm-* flags)."""
    workers: int | None = None
    """local: runs at once; default one per available core."""
    out: Path | None = None
    """Results folder; default runs/NAME (git-ignored). The committed results: --out results/NAME."""
    dry_run: bool = False
    """Print the runs, one line each, with their state (finished, running, queued, resumes, restarts, redo, new) and
    progress, then the worker hours spent and an estimate of those left; change nothing, and exit."""
    wait: bool = True
    """slurm: follow the jobs until they end (--no-wait returns after submitting)."""
    progress: bool = True
    """Show the sweep's progress bar."""
    group_rows: bool = False
    """Train the runs that can share one compiled program (JAX, MJX or threads runs differing only in traced
    hyperparameters, e.g. Table 1's per-decision BPO rows of one column) as one program each, in
    this process, one program after another: for one accelerator. Each run still gets its own run
    directory; its results equal the run alone to float rounding, not bitwise. Local backend only;
    each program is checkpointed as a run is (MJX programs cannot be yet)."""
    preset: str | None = None
    """Without a sweep file: the preset."""
    envs: tuple[str, ...] = ()
    """Without a sweep file: environments (default: the preset's)."""
    variants: tuple[str, ...] = ()
    """Without a sweep file: Table 1 rows or ablations, bpo (the preset's own BPO settings) or a plug-in
    method's name (the method alone) for on-policy presets; reinforce/bpo for episodic presets."""
    grid: tuple[str, ...] = ()
    """Without a sweep file: swept fields, KEY=V1,V2 (or KEY=[V1, V2]), e.g. returns.c_bar=1.0,1.5."""
    set: tuple[str, ...] = ()
    """Fields fixed for every run, KEY=VALUE, e.g. total_timesteps=100000 or backend=mjx; also on top of
    a sweep file."""
    seeds: int | None = None
    """Seeds per run (overrides the sweep file's)."""
    only: tuple[str, ...] | None = None
    """Run only these runs of the sweep, by id as --dry-run prints them (e.g. one Table 1 cell); the others are
    left as they are, and the sweep's record (sweep.json) still lists them all."""
    name: str | None = None
    """Without a sweep file: the sweep's name (runs/NAME); default 'sweep-PRESET'."""
    slurm_partition: str | None = None
    """slurm: partition, overriding the sweep file's."""
    slurm_timeout_min: int | None = None
    """slurm: wall-clock limit per run in minutes, overriding the sweep file's."""


def build_sweep(args: SweepArgs) -> Sweep:
    if args.sweep is not None:
        if args.preset or args.envs or args.variants or args.grid or args.name:
            raise ConfigError("sweep", "give a sweep file or --preset/--envs/--variants/--grid/--name, not both")
        sweep = load_sweep(args.sweep)
    else:
        if args.preset is None:
            raise ConfigError("preset", "give a sweep file (e.g. `bpo sweep table1_small`) or --preset")
        grid = Grid(preset=args.preset, envs=args.envs, variants=args.variants,
                    grid=tuple(parse_assignment(g, many=True) for g in args.grid), seeds=args.seeds or 1)
        sweep = Sweep(name=args.name or f"sweep-{args.preset}", grids=(grid,))
    fixed = tuple(parse_assignment(s, many=False) for s in args.set)
    grids = tuple(replace(g, set_values=g.set_values + fixed, seeds=args.seeds or g.seeds) for g in sweep.grids)
    slurm = sweep.slurm
    if args.slurm_partition is not None:
        slurm = replace(slurm, partition=args.slurm_partition)
    if args.slurm_timeout_min is not None:
        slurm = replace(slurm, timeout_min=args.slurm_timeout_min)
    return replace(sweep, grids=grids, slurm=slurm)


def sweep_main(argv: list[str]) -> int:
    return run_sweep(parse(SweepArgs, argv, prog="bpo sweep"))[0]


def run_sweep(args: SweepArgs) -> tuple[int, Path | None]:
    """``bpo sweep`` with parsed arguments: (exit code, the sweep's results folder or None when it
    stopped at a bad argument)."""
    planned = _plan_sweep(args)
    if planned is None:
        return 2, None
    sweep, sweep_dir, specs = planned
    chosen = [s for s in specs if s.run_id in args.only] if args.only is not None else specs
    if args.dry_run:
        # It asks JAX's backend for the seed chunk a checkpoint must match: beside programs using
        # the accelerator, without taking three quarters of its memory (a user's own setting kept).
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
        every = progress.sweep_progress(sweep_dir, specs, args.group_rows)  # all: the others price the chosen
        _print_dry_run([r for r in every if r.spec in chosen], sweep_dir, args.group_rows, every)
        return 0, sweep_dir
    # Staging leftovers of runs no process holds the lock of; Slurm jobs still queued may not have
    # taken theirs yet (and some cluster file systems keep locks per node), so not while they are.
    if not launch.slurm_in_flight(sweep_dir):
        store.clear_staging(sweep_dir)
    store.write_sweep_file(sweep_dir, sweep.name, specs, sweep.baseline, sweep.alternative)
    try:
        outcome = _launch(args, sweep, sweep_dir, chosen)
    except ConfigError as e:  # the Slurm cluster refused the jobs: nothing was submitted
        print(f"error: {e}", file=sys.stderr)
        return 2, None
    store.refresh_index(sweep_dir, outcome.failed)
    store.remove_empty_staging(sweep_dir)
    return _report_outcome(outcome, sweep_dir), sweep_dir


def _check_sweep_flags(args: SweepArgs) -> None:
    """The flags no sweep file can make valid, checked before the sweep file is even read."""
    if args.workers is not None and args.workers < 1:
        raise ConfigError("workers", f"must be an integer >= 1, got {args.workers}")
    if args.seeds is not None and args.seeds < 1:
        raise ConfigError("seeds", f"must be an integer >= 1, got {args.seeds}")
    if args.group_rows and args.backend != "local":
        raise ConfigError("group_rows", "runs a sweep's programs in this process; allowed with --backend local")
    if args.name is not None and not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.=-]*", args.name):
        raise ConfigError("name", f"names the folder runs/NAME: letters, digits, '_', '.', '=' and '-' (not a path; "
                                  f"--out gives the folder), got {args.name!r}")
    if args.slurm_timeout_min is not None and args.slurm_timeout_min < 1:
        raise ConfigError("slurm_timeout_min", f"must be an integer >= 1 (minutes), got {args.slurm_timeout_min}")


def _check_only(only: tuple[str, ...] | None, specs: list[RunSpec], name: str) -> None:
    """``--only``: at least one id (``--only $UNSET`` gave none, and ran the whole sweep), every id
    given names a run of the sweep, each once."""
    if only is None:
        return
    ids = [s.run_id for s in specs]
    if not only:
        raise ConfigError("only", f"no run id given; allowed: one or more of sweep {name}'s run ids, as `--dry-run` "
                                  f"lists them ({len(ids)}: {', '.join(ids)})")
    for run_id in only:
        if run_id not in ids:
            raise ConfigError("only", f"{run_id!r} is not a run of sweep {name}; allowed: its run ids, "
                                      f"as `--dry-run` lists them ({len(ids)}: {', '.join(ids)})")
    if len(set(only)) < len(only):
        raise ConfigError("only", f"a run id is given twice: {list(only)}")


def _check_run_names(specs: list[RunSpec], sweep_dir: Path) -> None:
    """Every run id, and the names of its lock and log made from it, fit the file system's name
    limit: a long grid value made an id that passed the dry run and failed at its lock, after
    sweep.json was written (adversarial audit, session 62)."""
    limit = name_max(sweep_dir)
    for spec in specs:
        names = (spec.run_id, store.run_lock_path(sweep_dir, spec.run_id).name, launch.run_log_name(spec.run_id))
        if max(len(n.encode()) for n in names) > limit:
            raise ConfigError("grid", f"run id {spec.run_id[:60]!r}... is {len(spec.run_id.encode())} bytes: with its "
                                      f"files' endings over the {limit} the file system holds; allowed: shorter "
                                      "swept values, or the setting in a preset or sweep file of its own")


def _plan_sweep(args: SweepArgs) -> tuple[Sweep, Path, list[RunSpec]] | None:
    """Check the arguments, prove the results folder writable and expand the sweep into its runs:
    (sweep, results folder, runs), or None after printing the error of a bad argument. Nothing is
    started or compiled here, so a bad argument costs nothing but the message."""
    try:
        _check_sweep_flags(args)
        validate_environment()
        sweep = build_sweep(args)
        sweep_dir = args.out or RUNS_DIR / sweep.name
        with left_as_found(sweep_dir):
            if not args.dry_run:  # a dry run writes nothing
                ensure_writable_dir(sweep_dir, "--out")
            launch.check_sweep_folders(sweep_dir)
            launch.recorded_jobs(sweep_dir)  # a damaged record of earlier Slurm jobs: refused here, by name
            specs = expand(sweep)
            _check_only(args.only, specs, sweep.name)
            _check_run_names(specs, sweep_dir)
            launch.check_run_paths(sweep_dir, specs)
            launch.check_workers_know(specs, args.sweep)
            return sweep, sweep_dir, specs
    except (ConfigError, BadFile) as e:
        print(f"error: {e}", file=sys.stderr)
        return None


def _programs_line(specs: list[RunSpec]) -> str:
    groups = launch.group_specs(specs)
    shared = sum(len(g) > 1 for g in groups)
    return (f"--group-rows: {len(specs)} runs in {len(groups)} programs ({shared} of them shared by rows that "
            "differ only in traced hyperparameters)")


def _print_dry_run(runs: list[progress.RunProgress], sweep_dir: Path, group_rows: bool,
                   priced_from: list[progress.RunProgress]) -> None:
    """``--dry-run``: one line per run (state, id, algorithm, seeds, budget, overrides, progress), a
    total, the worker time spent and left (``experiments.progress``) and with ``--group-rows`` the
    number of programs."""
    for run in runs:
        cfg = run.spec.config()
        unit, amount = progress.budget(cfg)
        overrides = " ".join(f"{k}={v}" for k, v in dict(run.spec.overrides).items())  # the value that counts
        line = f"{run.state:>8}  {run.spec.run_id}  [{cfg.algo}, {cfg.seeds} seeds, {amount} {unit}] {overrides}"
        print(line.rstrip() + (f"  {run.detail()}" if run.detail() else ""))
    counts = {state: sum(r.state == state for r in runs) for state in ("finished", "running", "resumes")}
    print(f"{len(runs)} runs, {counts['finished']} finished, {counts['running']} running, {counts['resumes']} to "
          f"resume from a checkpoint -> {sweep_dir}")
    print(progress.time_line(runs, priced_from))
    if group_rows:
        print(_programs_line([r.spec for r in runs]))


def _launch(args: SweepArgs, sweep: Sweep, sweep_dir: Path, specs: list[RunSpec]) -> launch.Outcome:
    """Run the sweep's unfinished runs on the chosen backend; what became of them."""
    todo = [s for s in specs if not store.is_finished(sweep_dir, s)]
    if args.backend == "slurm":  # a job of an earlier submission still queued or running will do its run
        in_flight = launch.slurm_in_flight(sweep_dir)
        todo = [s for s in todo if s.run_id not in in_flight]
        if in_flight:
            print(f"{len(in_flight)} runs still queued or running from an earlier submission: not resubmitted")
    runs = f"{len(specs)} runs chosen by --only" if args.only else f"{len(specs)} runs"
    print(f"sweep {sweep.name}: {runs}, {len(specs) - len(todo)} finished or in flight, "
          f"{len(todo)} to run -> {sweep_dir}")
    if not todo:
        return launch.Outcome()
    if args.group_rows:
        print(_programs_line(todo))
        return launch.run_groups(sweep_dir, todo, args.progress)
    if args.backend == "local":
        return launch.run_local(sweep_dir, todo, min(args.workers or launch.default_workers(), len(todo)),
                                args.progress)
    return launch.run_slurm(sweep_dir, todo, sweep.slurm, args.wait, args.progress)


def _report_outcome(outcome: launch.Outcome, sweep_dir: Path) -> int:
    """Tell what did not finish and how to continue; the exit code: 128 + the signal that stopped the
    sweep (one that came when every run had finished stopped nothing: not counted), 1 when a run
    failed, else 0."""
    if outcome.elsewhere:
        print(f"{len(outcome.elsewhere)} runs left to another process that is running them: "
              f"{sorted(outcome.elsewhere)}; it adds them to {sweep_dir} (and to its index.json) as they finish")
    if outcome.signal is not None and not (outcome.interrupted or outcome.not_started):
        print(f"{signal.Signals(outcome.signal).name} arrived when every run had finished: nothing was stopped",
              file=sys.stderr)
    elif outcome.signal is not None:
        name = signal.Signals(outcome.signal).name
        stopped = f" ({len(outcome.interrupted)} interrupted: {sorted(outcome.interrupted)})" if outcome.interrupted \
            else ""
        print(f"stopped by {name}{stopped}; {HOW_TO_CONTINUE}", file=sys.stderr)
        return 128 + outcome.signal
    if outcome.failed:
        print(f"{len(outcome.failed)} runs failed: {sorted(outcome.failed)}; their logs are in {sweep_dir / 'logs'} "
              "(run the command again to retry them)", file=sys.stderr)
        return 1
    return 0


@dataclass(frozen=True)
class ReproduceArgs:
    """Reproduce a result: run the sweep file NAME (as `bpo sweep NAME` does: same configs, seeds and
    seed chunks, so the same numbers), then `bpo plot` and `bpo table` on its results folder, and
    for a sweep with a probe step (probe) `bpo probe` on its BPO runs and `bpo probe-summary`.
    Finished runs and probes are kept, so running it again resumes it (or only redraws the outputs)."""

    name: Annotated[tyro.conf.Positional[str], tyro.conf.arg(metavar="NAME")]
    """Sweep file: a name in experiments/sweeps (fig2: Figure 2, 100 runs each of REINFORCE and BPO-REINFORCE on
    ShortCorridor; classic: PPO vs BPO-PPO on CartPole and Pendulum; mujoco_small: PPO vs BPO (1.0, 1.5) on HalfCheetah
    and Hopper, 300k steps; table1_small; headline: the paper's headline cell, HalfCheetah PPO vs BPO (1.0, 1.5) at 1.5M
    steps in two settings; authors_code: our BPO with the authors' code's bugs in the headline cell, 10 seeds; a2c: A2C
    vs BPO-A2C on CartPole, Pendulum and HalfCheetah; probe: the return-estimator probe of BPO (1.0, 1.5) with and
    without Q-hat on HalfCheetah and Hopper, 300k steps; backend_check: the threads backend against the Gymnasium host
    runner; table1, ablations) or a path to one."""
    out: Path | None = None
    """Results folder; default runs/NAME (git-ignored). The committed results: --out results/NAME."""
    seeds: int | None = None
    """Seeds per run (overrides the sweep file's). Not a quick exact check of committed numbers: the
    seed count sets the seed chunk, and the numbers equal the committed ones only at the sweep's own
    count, on the CPU model the runs record."""
    workers: int | None = None
    """local: runs at once; default one per available core."""
    backend: Literal["local", "slurm"] = "local"
    """local: worker processes on this machine. slurm: a submitit job array (waits for it to end)."""
    set: tuple[str, ...] = ()
    """Fields fixed for every run, KEY=VALUE, e.g. total_timesteps=100000 or episodes=50."""
    progress: bool = True
    """Show the sweep's progress bar."""
    bootstrap_reps: int = 2000
    """Stratified-bootstrap resamples for the table's rliable intervals (as bpo table's; fewer for a
    quick look: they take most of the analysis time on a small machine)."""
    allow_skipped: bool = False
    """Exit with 0 even when the plot or the table skipped a run directory whose files could not be
    used (each is listed on stderr all the same)."""


ANALYSIS_ERRORS = (ConfigError, FileNotFoundError, BadFile, MixedRuns)
"""What stops ``bpo plot`` or ``bpo table`` with a one-line message: a bad argument, no usable run,
a damaged sweep.json, a table cell that would pool different configurations."""


def _print_skipped(command: str, skipped: list[Skipped]) -> None:
    for s in skipped:
        print(f"{command}: skipped {s.line()}", file=sys.stderr)


def _load_runs(results_dir: Path, command: str) -> tuple[list[Run], list[Skipped]]:
    """The usable runs of a results folder (``store.load_runs``), each run directory skipped listed
    on stderr, one line each (also when no run is left to use)."""
    try:
        runs, skipped = store.load_runs(results_dir)
    except store.NoRuns as e:
        _print_skipped(command, e.skipped)
        raise
    _print_skipped(command, skipped)
    return runs, skipped


def _skipped_exit(command: str, skipped: list[Skipped], allow: bool) -> int:
    """0, or 1 when run directories were skipped and ``--allow-skipped`` was not given; says which."""
    if not skipped:
        return 0
    n = len(skipped)
    print(f"{command}: {n} run director{'y' if n == 1 else 'ies'} skipped (listed above); the outputs are made from "
          "the other runs" + ("" if allow else "; exit code 1 (--allow-skipped: 0)"), file=sys.stderr)
    return 0 if allow else 1


def _plot(runs: list[Run], results_dir: Path, out: Path, command: str,
          options: PlotOptions = DEFAULT_PLOT) -> tuple[list[Path], list[Skipped]]:
    """``plot_results``, its skipped runs listed; a ``FileNotFoundError`` when no curve could be used."""
    paths, skipped = plot_results(runs, out, options)
    _print_skipped(command, skipped)
    if not paths:
        raise FileNotFoundError(f"no run under {results_dir} has a curve.csv that can be used")
    return paths, skipped


def check_bootstrap_reps(reps: int) -> None:
    """Each resample resamples every run: time and memory."""
    if not 100 <= reps <= MAX_BOOTSTRAP_REPS:
        raise ConfigError("bootstrap_reps", f"must be an integer in [100, {MAX_BOOTSTRAP_REPS:,}], got {reps}")


def reproduce_main(argv: list[str]) -> int:
    args = parse(ReproduceArgs, argv, prog="bpo reproduce")
    try:  # before the sweep's runs
        check_bootstrap_reps(args.bootstrap_reps)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    code, sweep_dir = run_sweep(SweepArgs(sweep=args.name, backend=args.backend, workers=args.workers,
                                          out=args.out, progress=args.progress, set=args.set, seeds=args.seeds))
    if code != 0:
        return code
    sweep = load_sweep(args.name)
    try:  # the runs are there whatever goes wrong here: exit code 1
        runs, skipped = _load_runs(sweep_dir, "bpo reproduce")
        paths, no_curve = _plot(runs, sweep_dir, sweep_dir, "bpo reproduce")
        paths += write_tables(runs, sweep_dir, baseline=sweep.baseline, alternative=sweep.alternative,
                              reps=args.bootstrap_reps, skipped=skipped)
    except ANALYSIS_ERRORS as e:
        print(f"error: {e}; see `bpo table --help`", file=sys.stderr)
        return 1
    print((sweep_dir / "table1.md").read_text())
    if sweep.probe is not None:  # after the tables, which stand whether or not the probes go through
        try:
            paths += probe_folder(sweep_dir, sweep.probe, ["bpo", "reproduce", *argv], sweep.baseline)
        except (ConfigError, BadFile, ValueError) as e:
            print(f"error: the probe step: {e}", file=sys.stderr)
            return 1
    print("wrote " + ", ".join(str(p) for p in paths))
    return _skipped_exit("bpo reproduce", skipped + no_curve, args.allow_skipped)


@dataclass(frozen=True)
class AnalysisArgs:
    results_dir: tyro.conf.Positional[Path]
    """A sweep's results folder (or any folder of run directories)."""
    out: Path | None = None
    """Output folder; default RESULTS_DIR."""
    allow_skipped: bool = False
    """Exit with 0 even when run directories were skipped because a file in them could not be used (a damaged or foreign
    summary.json, config.json, spec.json or curve.csv). Each is listed on stderr either way, and the outputs are made
    from the other runs; without it the exit code is 1."""


@dataclass(frozen=True)
class TableArgs(AnalysisArgs):
    """Table 1: mean ± SE of the final evaluation over seeds, each row tested against the baseline row
    (Welch's t-test, each cell's own and unadjusted: bold = higher mean at p < alpha, italic = higher
    mean at p >= alpha, † = lower mean at p < alpha; how many stay significant after Holm's adjustment
    is said under the table), as Markdown and LaTeX; with rliable's aggregates across tasks: IQM,
    optimality gap, performance profiles and probability of improvement (figures and
    aggregates.json)."""

    baseline: str | None = None
    """The row the others are compared with; default: the one the folder's sweep names (its
    sweep.json), else each column's PPO row (or A2C, or REINFORCE for episodic sweeps)."""
    alpha: float = 0.05
    """Significance level of the test."""
    alternative: Literal["greater", "two-sided"] | None = None
    """greater: one-sided test of the improvement (row mean > baseline mean); two-sided: p of the
    two-sided test. Either way bold and italic mark only a higher mean, and † a lower mean that
    the test for a lower one finds significant. Default: the folder's sweep's (its sweep.json),
    else greater."""
    bootstrap_reps: int = 2000
    """Stratified-bootstrap resamples for the rliable intervals."""
    optimality_gap_gamma: float = 1.0
    """The optimality gap's threshold gamma, in (0, 1]: the gap is the mean over runs and tasks of
    max(0, gamma - score), scores min-max normalised per task (1: the best run on the task)."""


@dataclass(frozen=True)
class PlotArgs(AnalysisArgs):
    """Learning curves: mean ± SE over seeds of the evaluation return (or another metric recorded per
    evaluation), one panel per environment and preset, one line per row (variant and grid values);
    PNG and PDF."""

    metric: str = "eval_return"
    """A column of the runs' curve.csv: eval_return, or a diagnostic of BPO runs (ess_frac,
    kl_pi_mu_k3, is_ratio_max, rho_truncated_frac, ...); an unknown one lists those there are."""
    per_seed: bool = False
    """Also draw every seed's curve, thin."""
    smooth: int = 1
    """Average each seed's curve over this many consecutive evaluations first (1: none)."""
    x: Literal["step", "time"] = "step"
    """The x axis. step: environment steps (episodes for episodic presets). time: seconds of
    training at each evaluation (compilation excluded; recorded in summary.json as
    evaluation_clock by runs since it was added; an older run is named and refused); written as
    curves-time.png/pdf. Wall-clock times differ across machines and with the machine's load."""


def _check_results_dir(path: Path) -> None:
    if not path.is_dir():
        raise ConfigError("results_dir", f"{str(path)!r} is not a folder")


def _the_sweeps_test(args: TableArgs) -> tuple[str | None, str]:
    """``bpo table``'s baseline and alternative: those given, else those the folder's sweep asks
    for (``reader.sweep_test``; said on stderr, since they change the marks), else each column's
    PPO row and the one-sided test. Without it a committed folder's table could not be remade by
    ``bpo table``: results/a2c, tested two-sided by its sweep, came out one-sided with another
    verdict after Holm's adjustment."""
    recorded = sweep_test(args.results_dir)
    baseline = args.baseline if args.baseline is not None or recorded is None else recorded[0]
    alternative = args.alternative or (recorded[1] if recorded is not None else "greater")
    if (baseline, alternative) != (args.baseline, args.alternative or "greater"):
        against = repr(baseline) if baseline is not None else "each column's own (PPO, else A2C, else REINFORCE)"
        print(f"bpo table: tested as sweep {recorded[2]!r} asks (its sweep.json): baseline {against}, "
              f"{alternative}; --baseline and --alternative choose otherwise", file=sys.stderr)
    return baseline, alternative


def table_main(argv: list[str]) -> int:
    args = parse(TableArgs, argv, prog="bpo table")
    try:
        _check_results_dir(args.results_dir)
        if not 0 < args.alpha < 1:
            raise ConfigError("alpha", f"must be in (0, 1), got {args.alpha}")
        check_bootstrap_reps(args.bootstrap_reps)
        if not 0 < args.optimality_gap_gamma <= 1:
            raise ConfigError("optimality_gap_gamma", f"must be in (0, 1] (scores are min-max normalised to [0, 1]), "
                                                      f"got {args.optimality_gap_gamma}")
        baseline, alternative = _the_sweeps_test(args)
        runs, skipped = _load_runs(args.results_dir, "bpo table")
        check_baseline(runs, baseline)  # a typo fails before --out is made
        with left_as_found(args.out or args.results_dir):
            ensure_writable_dir(args.out or args.results_dir, "--out")
            paths = write_tables(runs, args.out or args.results_dir, baseline=baseline, alpha=args.alpha,
                                 alternative=alternative, reps=args.bootstrap_reps, skipped=skipped,
                                 gamma=args.optimality_gap_gamma)
    except ANALYSIS_ERRORS as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print((args.out or args.results_dir).joinpath("table1.md").read_text())
    print("wrote " + ", ".join(str(p) for p in paths))
    return _skipped_exit("bpo table", skipped, args.allow_skipped)


def plot_main(argv: list[str]) -> int:
    args = parse(PlotArgs, argv, prog="bpo plot")
    try:
        if args.smooth < 1:  # before anything is made or read
            raise ConfigError("smooth", f"must be an integer >= 1, got {args.smooth}")
        _check_results_dir(args.results_dir)
        runs, skipped = _load_runs(args.results_dir, "bpo plot")
        with left_as_found(args.out or args.results_dir):  # a metric the runs lack is found in _plot
            ensure_writable_dir(args.out or args.results_dir, "--out")
            paths, no_curve = _plot(runs, args.results_dir, args.out or args.results_dir, "bpo plot",
                                    PlotOptions(args.metric, args.per_seed, args.smooth, args.x))
    except ANALYSIS_ERRORS as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print("wrote " + ", ".join(str(p) for p in paths))
    return _skipped_exit("bpo plot", skipped + no_curve, args.allow_skipped)
