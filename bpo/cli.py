"""The ``bpo`` command.

    bpo train PRESET [--env ENV] [--variant NAME] [--algo ppo|bpo|reinforce] [--seeds N] [--out DIR] [overrides]
    bpo sweep SWEEP | --preset P ... [--backend local|slurm] [--dry-run]
    bpo plot RESULTS_DIR / bpo table RESULTS_DIR
    bpo reproduce fig2|classic|mujoco-small [--out DIR]

Every config field is a flag (``--bpo.c-bar 1.5``); ``--help`` after a subcommand lists them
with their documentation. Invalid values stop before anything is compiled.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal

import tyro

from bpo.checkpoint import NonFiniteError
from bpo.config import ConfigError, EpisodicTrainConfig, OnPolicyTrainConfig
from bpo.validation import validate
from bpo.presets import PRESETS, VARIANTS, apply_variant, get_preset
from bpo.runtime import enable_compile_cache

USAGE = """usage: bpo {train,sweep,plot,table,reproduce,verify-variance} ...

  bpo train PRESET [--env ENV] [--variant NAME] [--algo ppo|bpo|reinforce] [--seeds N]
                   [--total-timesteps N | --episodes N] [--out DIR] [--tensorboard] [overrides]
      Train one configuration; N seeds run vmapped. --env applies the preset's per-environment
      overrides (Table 5); --variant applies a Table 1 row or ablation: %s.
      Presets: %s. `bpo train PRESET --help` lists every field.
  bpo sweep SWEEP [--backend local|slurm] [--workers N] [--out DIR] [--dry-run] [--set KEY=VALUE ...]
  bpo sweep --preset P [--envs ...] [--variants ...] [--grid KEY=V1,V2 ...] [--seeds N] [--name NAME]
      A grid of runs (sweep files: experiments/sweeps/{fig2,table1,table1_small,ablations}.py),
      locally or as a Slurm job array; re-running resumes it. Results: results/NAME/RUN-ID/ + index.json.
  bpo plot RESULTS_DIR [--out DIR]
      Learning curves (mean ± SE over seeds), one panel per environment and preset: PNG and PDF.
  bpo table RESULTS_DIR [--out DIR] [--baseline ppo] [--alpha 0.05]
      Table 1 (Markdown, LaTeX): Welch's t-test against the baseline; rliable IQM and probability
      of improvement.
  bpo reproduce fig2 [--out DIR]
      Figure 2: 100 runs each of REINFORCE and BPO-REINFORCE on ShortCorridor.
  bpo reproduce classic [--presets cartpole_ppo pendulum_ppo] [--seeds 10] [--out DIR]
      PPO vs BPO-PPO on classic-control presets: table of final returns and learning curves.
  bpo reproduce mujoco-small [--envs HalfCheetah-v5 Hopper-v5] [--seeds 3] [--total-timesteps 300000] [--out DIR]
      Scaled-down Table 1: PPO vs BPO (c_bar 1.0, rho_bar 1.5), mujoco_default, compared with the paper.
  bpo verify-variance [--out DIR] [--n-random 20] [--episodes N] [--seed S] [--checkpoints ...] [--no-train]
      Theorem 2 by exact DP and Monte Carlo on ShortCorridor and random MDPs; variance under
      BPO-REINFORCE's learned mu at training checkpoints. Default out: results/variance.
""" % (", ".join(VARIANTS), ", ".join(sorted(PRESETS)))


@dataclass(frozen=True)
class TrainArgs:
    """Train one configuration and write a run directory (config.json, curve.csv, summary.json)."""

    config: Annotated[EpisodicTrainConfig, tyro.conf.arg(name="")] = field(default_factory=EpisodicTrainConfig)
    out: Path | None = None
    """Run directory to write; default runs/PRESET/ALGO."""
    total_timesteps: int | None = None
    """Training budget in environment steps, for step-based presets. Episodic presets (short_corridor)
    count episodes: use --episodes."""
    seed_chunk: int | None = None
    """Seeds vmapped together; chunks run one after another inside the same jitted call (0 = all
    at once). Default: 20 on a CPU, 0 on a GPU."""
    progress: bool = True
    """Show a progress bar with the latest evaluation return."""
    checkpoint_every: int = 0
    """Save a checkpoint into OUT/checkpoint every N updates (on-policy presets) or N evaluation blocks
    (episodic presets); 0: none. A run stopped after a checkpoint continues, bit-identically, with
    `bpo train --resume OUT`."""


@dataclass(frozen=True)
class OnPolicyTrainArgs:
    """Train one configuration and write a run directory (config.json, curve.csv, train_metrics.csv,
    summary.json)."""

    config: Annotated[OnPolicyTrainConfig, tyro.conf.arg(name="")] = field(default_factory=OnPolicyTrainConfig)
    out: Path | None = None
    """Run directory to write; default runs/PRESET/ENV/VARIANT (or ALGO without a variant)."""
    tensorboard: bool = False
    """Also write TensorBoard event files to OUT/tb (live for Gymnasium environments)."""
    seed_chunk: int | None = None
    """Seeds vmapped together; chunks run one after another inside the same jitted call (0 = all
    at once). Default: 20 on a CPU, 0 on a GPU."""
    progress: bool = True
    """Show a progress bar with the latest evaluation return and steps/s."""
    checkpoint_every: int = 0
    """Save a checkpoint into OUT/checkpoint every N updates (on-policy presets) or N evaluation blocks
    (episodic presets); 0: none. A run stopped after a checkpoint continues, bit-identically, with
    `bpo train --resume OUT`."""


@dataclass(frozen=True)
class ReproduceArgs:
    """Reproduce a figure of the paper."""

    figure: tyro.conf.Positional[Literal["fig2", "classic", "mujoco-small"]]
    """fig2: ShortCorridor, REINFORCE vs BPO-REINFORCE (Figure 2). classic: PPO vs BPO-PPO on
    classic-control presets (final-return table and learning curves). mujoco-small: Table 1
    scaled down to this machine (PPO vs BPO (1.0, 1.5), mujoco_default)."""
    out: Path | None = None
    """Output directory; default results/short_corridor (fig2), results/classic_control (classic)
    or results/mujoco_small (mujoco-small)."""
    seeds: int | None = None
    """Independent runs per algorithm; default 100 for fig2 (as in the paper), 10 for classic,
    3 for mujoco-small."""
    presets: tuple[str, ...] = ("cartpole_ppo", "pendulum_ppo")
    """classic only: the on-policy presets to run."""
    envs: tuple[str, ...] = ("HalfCheetah-v5", "Hopper-v5")
    """mujoco-small only: the MuJoCo environments."""
    total_timesteps: int = 300_000
    """mujoco-small only: training budget per run in environment steps."""
    progress: bool = True
    """Show a progress bar."""


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def train_main(argv: list[str]) -> int:
    if argv and (argv[0] == "--resume" or argv[0].startswith("--resume=")):
        return resume_main(argv)
    if not argv or argv[0].startswith("-"):
        if argv and argv[0] in ("-h", "--help"):
            print(USAGE)
            tyro.cli(OnPolicyTrainArgs, args=["--help"], prog="bpo train PRESET")
            return 0
        return _fail(f"preset: missing; allowed: {sorted(PRESETS)}")
    try:
        env, variant = _preparse(argv[1:], "--env"), _preparse(argv[1:], "--variant")
        preset = get_preset(argv[0], env)
        if variant:
            # The variant's values become the defaults; flags given explicitly still win.
            preset = apply_variant(preset, variant)
    except ConfigError as e:
        return _fail(str(e))
    on_policy = isinstance(preset, OnPolicyTrainConfig)
    args_cls = OnPolicyTrainArgs if on_policy else TrainArgs
    args = tyro.cli(args_cls, default=args_cls(config=preset), args=argv[1:], prog=f"bpo train {argv[0]}")
    try:
        if not on_policy and args.total_timesteps is not None:
            raise ConfigError("total_timesteps", f"preset {preset.preset!r} is episodic; set --episodes instead")
        if args.seed_chunk is not None and args.seed_chunk < 0:
            raise ConfigError("seed_chunk", f"must be an integer >= 0, got {args.seed_chunk}")
        if args.checkpoint_every < 0:
            raise ConfigError("checkpoint_every", f"must be an integer >= 0, got {args.checkpoint_every}")
        cfg = validate(args.config)
    except ConfigError as e:
        return _fail(str(e))

    label = getattr(cfg, "variant", "") or cfg.algo
    out_dir = args.out or Path("runs") / cfg.preset / cfg.env / label
    return _train(cfg, out_dir, args.progress, args.seed_chunk, getattr(args, "tensorboard", False),
                  args.checkpoint_every)


def resume_main(argv: list[str]) -> int:
    """``bpo train --resume DIR [--no-progress]``: continue the run whose checkpoint is in DIR/checkpoint."""
    from bpo import checkpoint as ckpt
    from bpo.config import from_dict

    directory = Path(_preparse(argv, "--resume") or "")
    rest = [a for a in argv if a not in ("--resume", str(directory)) and not a.startswith("--resume=")]
    if rest not in ([], ["--no-progress"], ["--progress"]):
        return _fail(f"resume: only --no-progress may follow --resume DIR, got {rest}")
    if not ckpt.exists(directory / "checkpoint"):
        return _fail(f"resume: no checkpoint in {str(directory / 'checkpoint')!r}; allowed: the OUT folder of a "
                     "`bpo train ... --checkpoint-every N` run")
    info = json.loads((directory / "checkpoint" / ckpt.INFO_FILE).read_text())
    try:
        cfg = validate(from_dict(info["config"]))
    except (ConfigError, TypeError) as e:
        return _fail(f"resume: the checkpoint's config is not valid for this version: {e}")
    return _train(cfg, directory, rest != ["--no-progress"], info.get("seed_chunk"), False, info["checkpoint_every"])


def _train(cfg, out_dir: Path, show_progress: bool, seed_chunk, tensorboard: bool, checkpoint_every: int) -> int:
    from bpo.progress import EvalProgress
    from bpo.train import progress_totals, run, write

    label = getattr(cfg, "variant", "") or cfg.algo
    calls, steps = progress_totals(cfg)
    logger = None
    if tensorboard:
        from bpo.tensorboard import TensorBoardLogger

        logger = TensorBoardLogger(out_dir / "tb")
    checkpoint_dir = out_dir / "checkpoint" if checkpoint_every > 0 else None
    try:
        with EvalProgress(f"{cfg.preset}/{cfg.env}/{label}", calls, show_progress, steps) as bar:
            # Without a progress bar the program has no host callback, so it can be kept in the compile cache.
            out = run(cfg, progress=bar.update if show_progress else None, seed_chunk=seed_chunk, logger=logger,
                      checkpoint_dir=checkpoint_dir, checkpoint_every=checkpoint_every)
    except NonFiniteError as e:
        return _fail(str(e))
    if logger is not None:
        if cfg.backend != "gymnasium":
            logger.log_run(out.metrics, cfg.ppo.n_steps * cfg.ppo.n_envs)
        logger.close()
    summary = write(out, out_dir)
    if checkpoint_dir is not None:  # the results are written: the checkpoint has served its purpose
        from bpo import checkpoint as ckpt

        ckpt.remove(checkpoint_dir)
    for warning in summary.get("warnings", []):
        print(f"warning: {warning}", file=sys.stderr)
    print(
        f"{cfg.algo} on {cfg.env}: final eval return {summary['final_mean']:.2f} ± {summary['final_se']:.2f} (SE, "
        f"{cfg.seeds} seeds); wall {summary['wall_time_s']:.1f}s (compile {summary['compile_time_s']:.1f}s); "
        f"{summary['train_steps_per_s']:.0f} env steps/s -> {out_dir}"
    )
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


def reproduce_main(argv: list[str]) -> int:
    args = tyro.cli(ReproduceArgs, args=argv, prog="bpo reproduce")
    if args.seeds is not None and args.seeds < 1:
        return _fail(f"seeds: must be an integer >= 1, got {args.seeds}")
    if args.figure == "mujoco-small":
        from envs.gymnasium_envs import MUJOCO_ENVS
        from experiments.mujoco_small import reproduce_mujoco_small

        bad = [e for e in args.envs if e not in MUJOCO_ENVS]
        if bad:
            return _fail(f"envs: {bad[0]!r} is not a MuJoCo environment; allowed: {list(MUJOCO_ENVS)}")
        if args.total_timesteps < 1:
            return _fail(f"total_timesteps: must be an integer >= 1, got {args.total_timesteps}")
        reproduce_mujoco_small(args.out or Path("results/mujoco_small"), envs=args.envs, seeds=args.seeds or 3,
                               total_timesteps=args.total_timesteps, show_progress=args.progress)
        return 0
    if args.figure == "fig2":
        from experiments.fig2 import reproduce_fig2

        reproduce_fig2(args.out or Path("results/short_corridor"), seeds=args.seeds or 100,
                       show_progress=args.progress)
        return 0
    for name in args.presets:
        if not isinstance(PRESETS.get(name), OnPolicyTrainConfig):
            on_policy = sorted(n for n, c in PRESETS.items() if isinstance(c, OnPolicyTrainConfig))
            return _fail(f"presets: {name!r} is not an on-policy preset; allowed: {on_policy}")
    from experiments.classic_control import reproduce_classic

    reproduce_classic(args.out or Path("results/classic_control"), presets=args.presets, seeds=args.seeds or 10,
                      show_progress=args.progress)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in ("train", "reproduce", "verify-variance"):
        enable_compile_cache()  # sweeps turn it on in each worker
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command == "train":
        return train_main(rest)
    if command == "reproduce":
        return reproduce_main(rest)
    if command in ("sweep", "plot", "table"):
        from experiments import commands

        return {"sweep": commands.sweep_main, "plot": commands.plot_main, "table": commands.table_main}[command](rest)
    if command == "verify-variance":
        from experiments.verify_variance import verify_variance_main

        return verify_variance_main(rest)
    return _fail(f"command: unknown {command!r}; allowed: ['plot', 'reproduce', 'sweep', 'table', 'train', "
                 "'verify-variance']")


if __name__ == "__main__":
    sys.exit(main())
