"""The ``bpo`` command.

    bpo train PRESET [--env ENV] [--variant NAME] [--method M] [--bpo | --no-bpo] [--seeds N] [--out DIR]
    bpo train RUN/config.json [--out DIR] [overrides]      (a recorded run again)
    bpo sweep SWEEP | --preset P ... [--backend local|slurm] [--dry-run]
    bpo plot RESULTS_DIR / bpo table RESULTS_DIR
    bpo reproduce SWEEP [--out DIR]          (bpo sweep SWEEP, then bpo plot and bpo table; probe steps)

Every config field is a flag (``--returns.c-bar 1.5``); ``--help`` after a subcommand lists them
with their documentation. Invalid values stop before anything is compiled.

The top layer (docs/design.md): it may import anything of ``bpo``, ``envs`` and ``experiments``, and
only the script's entry point imports it. The console script ``bpo`` is ``experiments.program:main``, which blocks the
stop signals and then runs ``main`` here; ``python -m experiments.cli`` does the same.
"""

from __future__ import annotations

import signal

if __name__ == "__main__":
    # The program itself: SIGINT and SIGTERM are blocked before the imports below start any thread
    # (NumPy's, XLA's), so that every thread inherits the mask and only the thread started by
    # ``receive_signals_on_a_thread`` takes them (bpo.infra.processes).
    signal.pthread_sigmask(signal.SIG_BLOCK, (signal.SIGINT, signal.SIGTERM))

import contextlib
import dataclasses
import importlib.metadata
import json
import os
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import tyro

from bpo.agents.methods import validate
from bpo.config.presets import (
    PRESETS,
    VARIANTS,
    apply_variant,
    get_preset,
    variant_changes,
    variant_field_changed,
    variant_problem,
    with_bpo_labelled,
)
from bpo.config.schema import (
    BPO_SECTIONS,
    METHOD_SECTIONS,
    ConfigError,
    EpisodicTrainConfig,
    OnPolicyTrainConfig,
    method_section,
    read_recorded_config,
    stale_fields,
    unknown_fields,
    with_bpo,
    with_method,
)
from bpo.infra import checkpoint as ckpt
from bpo.infra.checkpoint import NonFiniteError
from bpo.infra.locks import Lock
from bpo.infra.plugins import load_plugins
from bpo.infra.processes import Interrupted, receive_signals_on_a_thread
from bpo.infra.progress import EvalProgress
from bpo.infra.provenance import code_version
from bpo.infra.runtime import enable_compile_cache, report_crashes
from bpo.training import (
    checkpointable,
    default_checkpoint_every,
    progress_totals,
)
from bpo.training.job import (
    OUTPUT_OPTIONS,
    Job,
    check_outputs,
    publish,
    remove_made,
    resume_job,
    train,
)
from bpo.training.summary import final_return_text
from experiments import help_text, store
from experiments.arguments import parse
from experiments.sweep import sweep_names

_USAGE = """usage: bpo [--version] {{train,sweep,plot,table,reproduce,evaluate,probe,probe-summary,verify-variance,
                        report}} ...

  bpo train PRESET [--env ENV] [--variant NAME] [--method ppo|a2c|...] [--bpo | --no-bpo]
                   [--seeds N] [--total-timesteps N | --episodes N] [--out DIR] [--tensorboard] [overrides]
      (--tensorboard and --track: on-policy presets only)
      Train one configuration; N seeds run vmapped. --method picks the on-policy method (ppo, a2c,
      or one of BPO_PLUGINS: docs/methods.md). Presets run BPO on it; --no-bpo runs it alone.
      --env applies the preset's per-environment overrides (Table 5); --variant applies a Table 1
      row or ablation:
{}
      PRESET is one of these (`bpo train PRESET --help` lists every field), or a run's config.json,
      which replays that run:
{}
  bpo sweep SWEEP [--backend local|slurm] [--workers N] [--seeds N] [--out DIR] [--dry-run] [--set KEY=VALUE ...]
  bpo sweep --preset P [--envs ...] [--variants ...] [--grid KEY=V1,V2 ...] [--seeds N] [--name NAME]
      A grid of runs (a sweep file, experiments/sweeps/NAME.py, or a path), locally or as a Slurm job
      array; re-running resumes it. NAME is one of:
{}
      Results: OUT/RUN-ID/ + index.json; default OUT: runs/NAME (git-ignored).
  bpo plot RESULTS_DIR [--out DIR] [--metric COLUMN] [--per-seed] [--smooth N] [--x step|time]
      Learning curves (mean ± SE over seeds), one panel per environment and preset: PNG and PDF;
      any per-evaluation column (eval_return, BPO's diagnostics), each seed, a trailing mean;
      against environment steps or (--x time) seconds of training.
  bpo table RESULTS_DIR [--out DIR] [--baseline ppo] [--alternative greater|two-sided] [--alpha 0.05]
                       [--optimality-gap-gamma 1] [--bootstrap-reps N] [--allow-skipped]
      Table 1 (Markdown, LaTeX): Welch's t-test against the baseline; rliable's IQM, optimality
      gap, performance profiles and probability of improvement (figures, aggregates.json).
  bpo reproduce SWEEP [--out DIR] [--seeds N] [--workers N] [--backend local|slurm] [--set KEY=VALUE ...]
                      [--no-progress]
      `bpo sweep SWEEP` (the same runs, so the same numbers), then `bpo plot` and `bpo table` on its
      results; default OUT: runs/NAME. fig2: Figure 2 (100 runs each of REINFORCE and BPO-REINFORCE on
      ShortCorridor); classic: PPO vs BPO-PPO on cartpole_ppo and pendulum_ppo (10 seeds);
      mujoco_small: PPO vs BPO (c_bar 1.0, rho_bar 1.5), mujoco_default, HalfCheetah-v5 and Hopper-v5,
      3 seeds x 300k steps; table1_small; headline: PPO vs BPO (1.0, 1.5) on HalfCheetah-v5 at 1.5M
      steps, mujoco_default (15 seeds) and mujoco_default_authors (10 seeds); a2c: A2C vs BPO-A2C on
      CartPole, Pendulum and HalfCheetah (5 seeds); probe: BPO (1.0, 1.5) with and without Q-hat on
      HalfCheetah-v5 and Hopper-v5, 300k steps, then `bpo probe` on each run and `bpo probe-summary`;
      table1, ablations. The committed results are regenerated with an explicit --out results/NAME.
  bpo evaluate RUN [--episodes N] [--which pi|mu] [--stochastic] [--backend jax|mjx|threads] [--seed S]
                   [--out DIR] [--video FILE]
      Re-evaluate a run's saved policies (every seed); with the defaults the episodes of its final
      evaluation, so the same number (a Gymnasium-backend run saved no evaluation key: give --seed).
      Writes RUN/evaluations/*.json (or DIR/*.json); --video also renders episodes of one seed's
      policy to a .gif or .mp4.
  bpo probe RUN [--m 32] [--k 32] [--horizon 256] [--points ...] [--seeds ...] [--backend ...] [--yes]
      Probe a BPO-PPO run's return estimator at its kept policies (save_policies_every) and the end:
      Var and MSE of eq. (6) under mu over pi (docs/probe.md). Writes RUN/probe/probe.json and probe.png.
  bpo probe-summary FOLDER [--out DIR]
      The probes of a results folder's runs (FOLDER/*/probe/probe.json) side by side: a figure per
      environment, a Markdown table and JSON of the pooled ratios by row and point (probe_summary.*).
  bpo verify-variance [--out DIR] [--n-random 20] [--episodes N] [--seed S] [--checkpoints ...] [--no-train]
      Theorem 2 by exact DP and Monte Carlo on ShortCorridor and random MDPs; variance under
      BPO-REINFORCE's learned mu at training checkpoints. Default out: runs/variance.
  bpo report [--results results] [--root DIR] [--check]
      Rewrite the results blocks of README.md and docs/ (results, reproduction, backends, a2c) from
      the committed results (--check: only fail when one differs).
"""


def usage() -> str:
    """``bpo --help``, with the variant and preset names registered now (a plug-in's too, once
    loaded) and the sweep files there are, each list wrapped to the text's width."""
    return _USAGE.format(*(textwrap.fill(", ".join(names) + ".", width=100, initial_indent=" " * 8,
                                         subsequent_indent=" " * 8, break_on_hyphens=False)
                           for names in (VARIANTS, sorted(PRESETS), sweep_names())))


@dataclass(frozen=True)
class TrainArgs:
    """Train one configuration and write a run directory (config.json, curve.csv, train_metrics.csv,
    summary.json, policies.msgpack). Besides the options below: --bpo / --no-bpo (BPO-REINFORCE or
    REINFORCE alone) and `bpo train --resume OUT` (continue a stopped run from its checkpoint)."""

    config: Annotated[EpisodicTrainConfig, tyro.conf.arg(name="")] = field(default_factory=EpisodicTrainConfig)
    out: Path | None = None
    """Run directory to write; default runs/PRESET/ENV/ALGO."""
    total_timesteps: int | None = None
    """Training budget in environment steps, for step-based presets. Episodic presets (short_corridor)
    count episodes: use --episodes."""
    seed_chunk: int | None = None
    """Seeds vmapped together; chunks run one after another inside the same jitted call (0 = all
    at once). Default: 10 on a CPU, 0 on a GPU."""
    progress: bool = True
    """Show a progress bar with the latest evaluation return."""
    checkpoint_every: int | None = None
    """Save a checkpoint into OUT/checkpoint every N updates (on-policy presets) or N evaluation blocks (episodic
    presets); default about ten per run; 0: none. A run stopped by Ctrl-C, a crash or a preemption continues,
    bit-identically, with `bpo train --resume OUT` (or the same command again); the checkpoint is removed once the
    results are written."""


@dataclass(frozen=True)
class OnPolicyTrainArgs:
    """Train one configuration and write a run directory (config.json, curve.csv, train_metrics.csv,
    summary.json, policies.msgpack). Besides the options below: --bpo / --no-bpo (BPO on the method,
    or the method alone), --variant NAME (a Table 1 row or ablation, applied before the other
    options) and `bpo train --resume OUT` (continue a stopped run from its checkpoint)."""

    config: Annotated[OnPolicyTrainConfig, tyro.conf.arg(name="")] = field(default_factory=OnPolicyTrainConfig)
    out: Path | None = None
    """Run directory to write; default runs/PRESET/ENV/VARIANT (or ALGO without a variant)."""
    tensorboard: bool = False
    """Also write TensorBoard event files to OUT/tb (live for Gymnasium environments)."""
    track: bool = False
    """Also log the same scalars to Weights & Biases (pip install -e ".[track]"; WANDB_MODE=offline
    keeps them local), with the run's config; files in OUT/wandb."""
    wandb_project: str = "bpo"
    """--track: the W&B project."""
    wandb_entity: str | None = None
    """--track: the W&B entity (team or user); default yours."""
    per_seed_scalars: bool = False
    """--tensorboard, --track: also log each seed's scalars (NAME/seed0, NAME/seed1, ...) beside
    the mean over seeds."""
    seed_chunk: int | None = None
    """Seeds vmapped together; chunks run one after another inside the same jitted call (0 = all
    at once). Default: 10 on a CPU, 0 on a GPU."""
    progress: bool = True
    """Show a progress bar with the latest evaluation return and steps/s."""
    checkpoint_every: int | None = None
    """Save a checkpoint into OUT/checkpoint every N updates (on-policy presets) or N evaluation blocks (episodic
    presets); default about ten per run; 0: none. A run stopped by Ctrl-C, a crash or a preemption continues,
    bit-identically, with `bpo train --resume OUT` (or the same command again); the checkpoint is removed once the
    results are written."""


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def train_main(argv: list[str]) -> int:
    if argv and (argv[0] == "--resume" or argv[0].startswith("--resume=")):
        return resume_main(argv)
    if not argv or argv[0].startswith("-"):
        if argv and argv[0] in ("-h", "--help"):  # the fields and their values are a preset's: name one
            print(usage())
            print("`bpo train PRESET --help` lists every option of `bpo train` with that preset's values "
                  "(e.g. `bpo train cartpole_ppo --help`).")
            return 0
        return _fail(f"preset: missing; allowed: {sorted(PRESETS)}")
    try:
        args = _parse_train_args(argv)
        if isinstance(args, TrainArgs) and args.total_timesteps is not None:
            raise ConfigError("total_timesteps", f"preset {args.config.preset!r} is episodic; set --episodes instead")
        if args.seed_chunk is not None and args.seed_chunk < 0:
            raise ConfigError("seed_chunk", f"must be an integer >= 0, got {args.seed_chunk}")
        if args.checkpoint_every is not None and args.checkpoint_every < 0:
            raise ConfigError("checkpoint_every", f"must be an integer >= 0, got {args.checkpoint_every}")
        cfg = validate(args.config)
        if args.checkpoint_every and not checkpointable(cfg):
            raise ConfigError("checkpoint_every", "MJX runs cannot be checkpointed yet (flax cannot serialise "
                                                  "mujoco.mjx.Data); allowed: 0")
    except ConfigError as e:
        return _fail(str(e))

    label = getattr(cfg, "variant", "") or cfg.algo
    options = {k: getattr(args, k, default) for k, default in OUTPUT_OPTIONS.items()}
    every = default_checkpoint_every(cfg) if args.checkpoint_every is None else args.checkpoint_every
    job = Job(cfg, args.out or Path("runs") / cfg.preset / cfg.env / label, every, args.seed_chunk, options)
    return _train(job, args.progress)


def _parse_train_args(argv: list[str]):
    """``bpo train``'s arguments: the starting config (``starting_config``), BPO on or off
    (``--bpo``, ``--no-bpo``), then every field's flag (tyro)."""
    argv, bpo_on = _bpo_switch(argv)
    preset, section = starting_config(argv)
    if bpo_on is not None and _preparse(argv[1:], "--variant") and bpo_on != (preset.bpo is not None):
        raise ConfigError("--bpo" if bpo_on else "--no-bpo", f"contradicts --variant {preset.variant}, which "
                          f"{'runs the method alone' if bpo_on else 'runs BPO'}; give one of them")
    # tyro always fills the bpo section (its flags are listed whether BPO is on or off); a run
    # without BPO then drops it, unless a flag changed it.
    shown = with_bpo(preset, True, section)
    if isinstance(shown, OnPolicyTrainConfig):
        shown = _method_shown(argv, shown)
    args_cls = _SHOWING[method_section(shown.method)][1] if isinstance(shown, OnPolicyTrainConfig) else TrainArgs
    if args_cls is TrainArgs:
        _refuse_on_policy_only(argv)
    base = OnPolicyTrainArgs if issubclass(args_cls, OnPolicyTrainArgs) else TrainArgs  # its own docstring
    args = parse(args_cls, argv[1:], default=args_cls(config=shown), prog=f"bpo train {argv[0]}",
                 description=" ".join(base.__doc__.split()))  # help_text wraps it
    if isinstance(shown, OnPolicyTrainConfig):  # back to the classes the library knows
        args = OnPolicyTrainArgs(**{f.name: getattr(args, f.name) for f in dataclasses.fields(OnPolicyTrainArgs)
                                    if f.name != "config"}, config=_plain(args.config))
    on = preset.bpo is not None if bpo_on is None else bpo_on
    args = _without_unused_bpo(args, shown, on)
    _refuse_a_contradicted_variant(argv, args.config)
    return dataclasses.replace(args, config=with_bpo_labelled(args.config, on))


def _refuse_a_contradicted_variant(argv: list[str], cfg) -> None:
    """A flag that changes a field ``--variant`` sets is refused, as a sweep's ``--set`` is: the
    variant names the run's row and folder, and would name values the run does not have. (A
    preset's own variant, or a replayed run's, is dropped instead: ``with_bpo_labelled``.)"""
    if not _preparse(argv[1:], "--variant") or not isinstance(cfg, OnPolicyTrainConfig):
        return
    if (field := variant_field_changed(cfg)) is not None:
        value = variant_changes(cfg, cfg.variant)[field]
        raise ConfigError(field, f"is set by --variant {cfg.variant} (to {value!r}), "
                                 "whose name labels the run's row and folder; allowed: that value, or no --variant "
                                 f"(the run is then labelled {cfg.algo!r})")


def _refuse_on_policy_only(argv: list[str]) -> None:
    """An episodic preset given a flag only on-policy runs have (``--tensorboard``, ``--track``...)
    is refused by name, rather than by tyro's box of unrecognised options."""
    episodic = {f.name for f in dataclasses.fields(TrainArgs)}
    only = {"--" + f.name.replace("_", "-") for f in dataclasses.fields(OnPolicyTrainArgs) if f.name not in episodic}
    for arg in argv[1:]:
        if (flag := arg.split("=", 1)[0]) in only:
            raise ConfigError(flag, f"applies to on-policy presets only; preset {argv[0]!r} is episodic "
                                    "(bpo train PRESET --help lists its flags)")


def _showing(section: str) -> tuple[type, type]:
    """``OnPolicyTrainConfig`` and ``OnPolicyTrainArgs`` with every method section but ``section``
    hidden from tyro: ``--help`` lists the flags of the section the run reads, and another
    method's is refused by name (``_method_shown``) before tyro parses."""
    hidden = [(name, Annotated[cls | None, tyro.conf.Suppress], field(default=None))
              for name, cls in METHOD_SECTIONS.items() if name != section]
    config = dataclasses.make_dataclass(f"OnPolicyTrainConfig_{section}", hidden, bases=(OnPolicyTrainConfig,),
                                        frozen=True)
    args = dataclasses.make_dataclass(f"OnPolicyTrainArgs_{section}", [
        ("config", Annotated[config, tyro.conf.arg(name="")], field(default_factory=config))],
        bases=(OnPolicyTrainArgs,), frozen=True)
    return config, args


_SHOWING = {name: _showing(name) for name in METHOD_SECTIONS}
"""Per method section: (the config class, the arguments class) that show it alone."""


def _plain(cfg) -> OnPolicyTrainConfig:
    """An ``OnPolicyTrainConfig`` of the same fields as ``cfg`` (one of the classes ``_showing`` makes)."""
    return OnPolicyTrainConfig(**{f.name: getattr(cfg, f.name) for f in dataclasses.fields(OnPolicyTrainConfig)})


def _method_shown(argv: list[str], cfg: OnPolicyTrainConfig):
    """``cfg`` running the method that ``--method`` names (with its section: ``with_method``), as
    the class that shows that section only; a flag of another method's section is refused."""
    method = _preparse(argv[1:], "--method") or cfg.method
    own = method_section(method)
    for arg in argv[1:]:
        other = arg[2:].partition(".")[0] if arg.startswith("--") else ""
        if other in METHOD_SECTIONS and other != own:
            name = arg[2:].partition("=")[0].replace("-", "_")
            raise ConfigError(name, f"sets method {other}'s section; method {method} reads {own}: give --{own}.* "
                                    f"(or --method {other})")
    cfg = with_method(cfg, method)
    return _SHOWING[own][0](**{f.name: getattr(cfg, f.name) for f in dataclasses.fields(OnPolicyTrainConfig)})


def _bpo_switch(argv: list[str]) -> tuple[list[str], bool | None]:
    """``argv`` without ``--bpo`` / ``--no-bpo``, and which was given last (None: neither). The
    flag ``--algo`` that they replace is refused with the two that do its work."""
    on = None
    for arg in argv:
        if arg == "--algo" or arg.startswith("--algo="):
            raise ConfigError("--algo", "was replaced by the bpo section: --bpo runs BPO on the method (was --algo "
                                        "bpo), --no-bpo the method alone (was --algo METHOD or --algo reinforce)")
        if arg in ("--bpo", "--no-bpo"):
            on = arg == "--bpo"
    return [a for a in argv if a not in ("--bpo", "--no-bpo")], on


def _without_unused_bpo(args, shown, bpo_on: bool):
    """``args`` of a run without BPO, its bpo section dropped; a ``--bpo.FIELD`` or ``--returns.FIELD``
    flag that changed what ``shown`` (the starting config) has would be silently unused (the returns
    section is BPO's off-policy estimator, eq. (6)), so it is refused."""
    if bpo_on:
        return args
    for section in BPO_SECTIONS:
        given, default = getattr(args.config, section), getattr(shown, section)
        changed = [f.name for f in dataclasses.fields(default) if getattr(given, f.name) != getattr(default, f.name)]
        if changed:
            raise ConfigError(f"{section}.{changed[0]}", "is read by BPO runs only, and this run has no behaviour "
                              f"step ({args.config.method} alone); add --bpo, or leave it out")
    return dataclasses.replace(args, config=with_bpo(args.config, False))


def starting_config(argv: list[str]):
    """The config the flags apply to, and the bpo section that ``--bpo`` gives it when it has none:
    a preset (with ``--env``'s per-environment overrides and ``--variant``'s values as its
    defaults; flags given explicitly still win), or a run's recorded ``config.json``, which
    replays that run (``bpo train runs/x/config.json --out runs/y``)."""
    env, variant = _preparse(argv[1:], "--env"), _preparse(argv[1:], "--variant")
    if argv[0].endswith(".json"):
        if env or variant:
            raise ConfigError("--env" if env else "--variant", "not with a recorded config.json, whose settings "
                                                               "already include them; set single fields instead")
        data, cfg = read_recorded_config(argv[0])
        if unknown := unknown_fields(data):  # from_dict dropped them: a misspelt field would not count
            raise ConfigError(unknown[0], f"in {argv[0]!r} is no field of today's config (nor of an older "
                                          f"one's); allowed: the fields `bpo train {data.get('preset', 'PRESET')} "
                                          "--help` lists" + (f" ({len(unknown)} such keys: {unknown})"
                                                             if len(unknown) > 1 else ""))
        if stale := stale_fields(data):  # its default is not the run's
            raise ConfigError(stale[0], f"is missing from {argv[0]!r}: replayed with today's default, the run "
                                        "would not be the one recorded; allowed: a config.json as `bpo train` wrote it"
                                        + (f" ({len(stale)} such fields: {stale})" if len(stale) > 1 else ""))
        if isinstance(cfg, OnPolicyTrainConfig) and (problem := variant_problem(cfg)) is not None:
            raise ConfigError("variant", f"{problem} (in {argv[0]!r})")
        # --bpo on a run of the method alone: its preset's behaviour step, as `bpo train PRESET --bpo`
        return cfg, (get_preset(cfg.preset, cfg.env).bpo if cfg.preset in PRESETS else None)
    if (folder := Path(argv[0])).is_dir() and argv[0] not in PRESETS:  # a run's folder, not a preset's name
        hint = (f"bpo train {folder / 'config.json'} (replays the run)" if (folder / "config.json").is_file() else
                "a recorded config.json")
        raise ConfigError("preset", f"{argv[0]!r} is a folder, not a preset; allowed: a preset "
                                    f"({sorted(PRESETS)}), {hint}, or bpo train --resume {argv[0]} (continues it)")
    preset = get_preset(argv[0], env)
    return (apply_variant(preset, variant) if variant else preset), preset.bpo


def resume_main(argv: list[str]) -> int:
    """``bpo train --resume DIR [--no-progress]``: continue the run whose checkpoint is in DIR/checkpoint,
    with the output options it was started with (``--tensorboard``, ``--track``)."""
    given = _preparse(argv, "--resume")
    if not given or given.startswith("-"):
        return _fail("resume: give the run's folder, the OUT it was trained into: bpo train --resume OUT")
    # the folder as typed: `DIR/`, as shell completion writes it, is the same folder as DIR
    rest = [a for a in argv if a not in ("--resume", given) and not a.startswith("--resume=")]
    if rest not in ([], ["--no-progress"], ["--progress"]):
        return _fail(f"resume: only --no-progress may follow --resume DIR, got {rest}")
    try:
        job = resume_job(Path(given))
    except ConfigError as e:
        return _fail(str(e))
    return _train(job, rest != ["--no-progress"])


def _finished_run(run_dir: Path) -> str:
    """What the finished run in ``run_dir`` was, from its summary, as far as it can be read."""
    try:
        old = json.loads((run_dir / "summary.json").read_text())
        return f"{old['algo']} on {old['env']}, {old['seeds']} seed(s)"
    except (OSError, ValueError, KeyError, TypeError):
        return "its summary.json cannot be read"


def _train(job: Job, show_progress: bool) -> int:
    """The run's lifecycle (``bpo.training.job``), reported on the terminal; the exit code. A run
    folder of a sweep is also locked as the sweep locks it (``store.lock_as_sweep_run``)."""
    try:
        sweep_dir, sweep_lock = store.lock_as_sweep_run(job.out_dir)
    except OSError as e:
        return _fail(f"{job.flag}: cannot lock {str(job.out_dir)!r} as a run of the sweep beside it ({e.strerror})")
    if sweep_dir is not None and sweep_lock is None:
        return _fail(f"{job.flag}: {str(job.out_dir)!r} is a run of the sweep in {str(sweep_dir)!r}, and a sweep "
                     f"process is training it (it holds {str(store.run_lock_path(sweep_dir, job.out_dir.name))!r}); "
                     "wait for it to end, or choose another folder")
    with sweep_lock or contextlib.nullcontext():
        try:
            made, lock = check_outputs(job)
        except ConfigError as e:
            return _fail(str(e))
        with lock:
            return _train_locked(job, made, lock, show_progress)


def _train_locked(job: Job, made: list[Path], lock: Lock, show_progress: bool) -> int:
    """``_train`` once the output folder is checked and ``lock`` taken."""
    cfg = job.cfg
    if job.flag == "--out" and ckpt.exists(job.checkpoint_dir):  # the same run, interrupted (check_outputs): go on
        print(f"continuing the interrupted run from its checkpoint in {str(job.checkpoint_dir)!r}", file=sys.stderr)
    elif (job.out_dir / "summary.json").is_file():  # a sweep would skip it; a train means to redo it
        print(f"replacing the finished run in {str(job.out_dir)!r} ({_finished_run(job.out_dir)}) when this one is "
              "written", file=sys.stderr)
    calls, steps = progress_totals(cfg)
    try:
        with EvalProgress(f"{cfg.preset}/{cfg.env}/{job.label}", calls, show_progress, steps, cfg.seeds) as bar:
            out = train(job, progress=bar.update if show_progress else None, on_resume=bar.resume)
    except (NonFiniteError, ConfigError) as e:  # ConfigError: a checkpoint of another run in the way, memory
        if not ckpt.exists(job.checkpoint_dir):
            lock.release()  # first: its file may be in a folder made for the run, to be removed too
            remove_made(made)
        return _fail(str(e))
    except Interrupted as e:
        how = (f"; continue it with `bpo train --resume {job.out_dir}`" if e.checkpoint is not None
               else " (with --checkpoint-every N a stopped run can be continued)")
        print(f"{e}{how}", file=sys.stderr)
        return e.exit_code
    summary, rescued = publish(job, out)
    if rescued is not None or summary is None:
        if ckpt.exists(job.checkpoint_dir):
            print(f"error: {job.flag}: the checkpoint is kept in {str(job.checkpoint_dir)!r}", file=sys.stderr)
        return 1
    for warning in summary.get("warnings", []):
        print(f"warning: {warning}", file=sys.stderr)
    print(f"{cfg.algo} on {cfg.env}: final eval return {final_return_text(summary)}; "
          f"wall {summary['wall_time_s']:.1f}s (compile {summary['compile_time_s']:.1f}s); "
          f"{summary['train_steps_per_s']:.0f} training env steps/s (wall less compile and evaluation) "
          f"-> {job.out_dir}")
    return 0


def _preparse(argv: list[str], flag: str) -> str | None:
    """The value of ``flag`` (``--flag V`` or ``--flag=V``) before tyro parses the rest: the
    environment and the variant choose the defaults the other flags apply to."""
    value = None
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith(flag + "="):
            value = arg.split("=", 1)[1]
    return value


def main(argv: list[str] | None = None) -> int:
    """``bpo``; output cut off by its reader (``bpo ... --help | head -1``) ends it quietly. As the
    program itself (no ``argv``: the ``bpo`` script, ``python -m experiments.cli``) it first takes
    SIGINT and SIGTERM on a thread of their own (``bpo.infra.processes``) and reports native crashes
    (``bpo.infra.runtime.report_crashes``); called with ``argv`` (in another Python program, a test) it
    leaves that program's signal handling as it is (docs/runtime.md)."""
    if argv is None:
        report_crashes()
        receive_signals_on_a_thread()
    try:
        return _dispatch(sys.argv[1:] if argv is None else list(argv))
    except BrokenPipeError:
        # Python would report the pipe again when it flushes stdout at exit; send the rest nowhere.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _dispatch(argv: list[str]) -> int:
    help_text.install()  # every subcommand's --help: paragraphs, not the source's line breaks
    if argv and argv[0] in ("train", "verify-variance"):
        enable_compile_cache()  # sweeps (and so reproductions) turn it on in each worker
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0 if argv else 2
    if argv[0] in ("-V", "--version"):
        print(f"bpo {importlib.metadata.version('bpo')} ({code_version()})")
        return 0
    command, rest = argv[0], argv[1:]
    try:
        load_plugins()  # methods and presets of one's own, before any name is looked up
    except ConfigError as e:
        return _fail(str(e))
    if command == "train":
        return train_main(rest)
    command_main = _analysis_command(command)
    if command_main is not None:
        try:
            return command_main(rest)
        except ConfigError as e:  # one its own checks did not catch, such as an empty path (experiments.arguments)
            return _fail(str(e))
    return _fail(f"command: unknown {command!r}; allowed: ['evaluate', 'plot', 'probe', 'probe-summary', "
                 "'report', 'reproduce', 'sweep', 'table', 'train', 'verify-variance']")


def _analysis_command(command: str):
    """The main function of a command other than ``train``, or None for an unknown one.

    The experiments commands are imported when they run, not at the top, only for start-up time (there
    is no cycle to avoid: nothing imports this module). Their modules load matplotlib, scipy and rliable
    (plots, tables, tests), which `bpo train` does not need: at the top they would take
    `bpo train PRESET --help` from about 0.8 s to about 2 s."""
    if command in ("sweep", "plot", "table", "reproduce"):
        from experiments import commands

        return {"sweep": commands.sweep_main, "plot": commands.plot_main, "table": commands.table_main,
                "reproduce": commands.reproduce_main}[command]
    if command == "verify-variance":
        from experiments.verify_variance import verify_variance_main

        return verify_variance_main
    if command == "evaluate":
        from experiments.evaluate import evaluate_main

        return evaluate_main
    if command == "probe":
        from experiments.probe import probe_main

        return probe_main
    if command == "probe-summary":
        from experiments.probe_summary import probe_summary_main

        return probe_summary_main
    if command == "report":
        from experiments.report import report_main

        return report_main
    return None


if __name__ == "__main__":
    sys.exit(main())
