"""``bpo evaluate RUN``: re-evaluate a run's saved policies (``bpo.training.evaluate``) and write
the result beside the run, in ``RUN/evaluations/`` (replaced with the run when it is redone), or
with ``--out DIR`` into DIR, leaving the run's folder as it is."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

import tyro

from bpo.config.schema import ConfigError
from bpo.config.validation import MAX_COUNT
from bpo.infra.processes import end_at_once
from bpo.infra.publish import save_or_rescue
from bpo.infra.results import atomic_write_json, ensure_writable_dir, read_summary
from bpo.infra.settings import validate_environment
from bpo.training.evaluate import EvalRequest, check_evaluable, evaluate_saved
from bpo.training.policies import load_policies
from experiments.arguments import parse
from experiments.reader import BadFile, digest_problem
from experiments.video import check_video, record_video


@dataclass(frozen=True)
class EvaluateArgs:
    """Re-evaluate the trained policies of a run directory, every seed, and write the returns,
    episode lengths and their mean, SD and SE over seeds to RUN/evaluations/. With the defaults
    (pi, deterministic, the run's episodes, backend and evaluation key) the episodes are those of
    the run's final evaluation, and the mean repeats its recorded final return."""

    run: Annotated[tyro.conf.Positional[Path], tyro.conf.arg(metavar="RUN")]
    """A run directory with policies.msgpack (every run written since policies are saved)."""
    episodes: int | None = None
    """Episodes per seed; default the run's eval_episodes."""
    which: Literal["pi", "mu"] = "pi"
    """The target policy pi, or BPO's behaviour policy mu."""
    stochastic: bool = False
    """Sample actions instead of taking the mode (the run's evaluations are deterministic)."""
    backend: Literal["jax", "mjx", "threads"] | None = None
    """Where the episodes run; default the run's own (threads for a Gymnasium-backend MuJoCo run)."""
    seed: int | None = None
    """New episodes from this seed; default the run's final-evaluation key (a Gymnasium-backend run
    saved none: give one)."""
    out: Path | None = None
    """The folder the evaluation's JSON goes to; default RUN/evaluations (a committed run's folder
    stays as it is with --out elsewhere)."""
    video: Path | None = None
    """Also render episodes of one seed's policy headless to this file (.gif, or .mp4 with the
    video extra), in Gymnasium from reset seeds 0, 1, ..."""
    video_policy_seed: int = 0
    """--video: which trained seed's policy."""
    video_episodes: int = 1
    """--video: episodes to render."""
    video_frames: int = 1000
    """--video: at most this many frames in all."""


def output_name(args: EvaluateArgs) -> str:
    mode = "stochastic" if args.stochastic else "deterministic"
    key = "runkey" if args.seed is None else f"seed{args.seed}"
    return f"{args.which}-{mode}-{args.episodes or 'run'}ep-{args.backend or 'run'}-{key}.json"


def check_args(args: EvaluateArgs) -> Path:
    """Everything checked before any work; the folder the evaluation goes to."""
    if args.episodes is not None and not 1 <= args.episodes <= MAX_COUNT:  # as a run's eval_episodes
        raise ConfigError("episodes", f"must be an integer in [1, {MAX_COUNT:,}] (counted in 32 bits), "
                                      f"got {args.episodes}")
    if args.seed is not None and not 0 <= args.seed < 2**32:
        raise ConfigError("seed", f"must be in [0, 2**32 - 1], got {args.seed}")
    saved = load_policies(args.run)  # refuses a folder without policies before anything compiles
    check_evaluable(saved, args.which, args.backend, deterministic=not args.stochastic)
    if args.video is not None:
        check_video(args.video, saved.config.env, args.video_episodes, args.video_frames)
        if not 0 <= args.video_policy_seed < saved.seeds:
            raise ConfigError("video_policy_seed", f"must be in [0, {saved.seeds - 1}], "
                                                   f"got {args.video_policy_seed}")
        ensure_writable_dir(args.video.absolute().parent, "video")
    return ensure_writable_dir(args.out, "out") if args.out is not None else ensure_writable_dir(
        args.run / "evaluations", "run")


def _recorded(args: EvaluateArgs) -> float | None:
    """With the defaults the episodes are those of the run's final evaluation: the mean return it
    recorded then (summary.json), to set beside; None for other episodes or an unreadable summary."""
    if (args.episodes, args.backend, args.seed, args.stochastic, args.which) != (None, None, None, False, "pi"):
        return None
    try:
        summary = read_summary(args.run)
        if (problem := digest_problem(summary, args.run)) is not None:  # another run's mean beside this one's
            print(f"warning: {Path(args.run) / 'summary.json'}: {problem} Its recorded mean is not shown.",
                  file=sys.stderr)
            return None
        return float(summary["final_mean"])
    except (OSError, ValueError, KeyError, TypeError, BadFile):
        return None


def evaluate_main(argv: list[str]) -> int:
    args = parse(EvaluateArgs, argv, prog="bpo evaluate")
    try:
        validate_environment()  # the write after the work reads BPO_WRITE_*: checked first
        out_dir = check_args(args)
        print(f"evaluating {args.which} of {args.run} (Ctrl-C stops it; nothing is written until it ends)",
              flush=True)
        with end_at_once("nothing written (the evaluation had not finished)"):
            result = evaluate_saved(args.run, EvalRequest(args.episodes, args.which, not args.stochastic, args.backend,
                                                          args.seed))
    except (ConfigError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    path = out_dir / output_name(args)
    _, rescued = save_or_rescue(out_dir, lambda folder: atomic_write_json(folder / path.name, result),
                                "out" if args.out is not None else "run",
                                last_resort=lambda: json.dumps({k: result[k] for k in ("mean", "sd", "se")}))
    spread = "" if result["se"] is None else f" ± {result['se']:.2f} (SE over {len(result['per_seed_mean'])} seeds)"
    print(f"{args.which} on {result['backend']}: mean return {result['mean']:.2f}{spread}, "
          f"{result['episodes_per_seed']} episodes per seed, mean length {result['mean_length']:.1f} -> "
          f"{path if rescued is None else rescued / path.name}")
    if (recorded := _recorded(args)) is not None:
        print(f"the run's final evaluation, the same episodes, recorded {recorded:.2f} (docs/runs.md: the last digits "
              "can differ on another machine)")
    if args.video is not None:
        made = record_video(args.run, args.video, seed=args.video_policy_seed, which=args.which,
                            deterministic=not args.stochastic, episodes=args.video_episodes,
                            max_frames=args.video_frames)
        print(f"video: {made['frames']} frames of episodes with returns {[round(r, 1) for r in made['returns']]}, "
              f"{made['bytes'] / 1e6:.2f} MB, rendered in {made['render_s']:.1f} s -> {args.video}")
    return 0 if rescued is None else 1
