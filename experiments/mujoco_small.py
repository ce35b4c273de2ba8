"""Table 1 scaled down to one small machine: PPO vs BPO (c_bar 1.0, rho_bar 1.5) with the
``mujoco_default`` preset (Table 4) on Gymnasium MuJoCo, a few seeds and a shorter budget.

    bpo reproduce mujoco-small [--envs HalfCheetah-v5 Hopper-v5] [--seeds 3] [--total-timesteps 300000]

Writes ``OUT/ENV/VARIANT/`` run directories, ``OUT/summary.md`` (our final returns beside the
paper's Table 1 entries, with Welch's t-test of BPO against PPO) and ``OUT/curves.png``.
Finished runs (a ``summary.json`` with the same config) are not redone, so an interrupted
reproduction picks up where it stopped, and several processes can share the work by each taking
some environments.
"""

from __future__ import annotations

import json
from pathlib import Path

from bpo import results
from bpo.config import replace, to_dict
from bpo.presets import PAPER_TABLE1, apply_variant, get_preset
from bpo.progress import EvalProgress
from bpo.train import progress_totals, run, write
from experiments.plotting import plot_curve_panels
from experiments.table import welch_p

PRESET = "mujoco_default"
VARIANTS = (("ppo", "PPO"), ("bpo_c1.0_rho1.5", "BPO (c̄ = 1.0, ρ̄ = 1.5)"))


def config_for(env: str, variant: str, seeds: int, total_timesteps: int):
    return replace(apply_variant(get_preset(PRESET, env), variant), seeds=seeds, total_timesteps=total_timesteps)


def _finished(run_dir: Path, cfg) -> bool:
    """A complete run directory (summary.json is written last) of the same configuration."""
    from experiments.store import same_result_config

    try:
        stored = json.loads((run_dir / "config.json").read_text())
        return same_result_config(stored, json.loads(json.dumps(to_dict(cfg)))) and (run_dir / "summary.json").exists()
    except (OSError, ValueError):
        return False


def reproduce_mujoco_small(out: Path, envs=("HalfCheetah-v5", "Hopper-v5"), seeds: int = 3,
                           total_timesteps: int = 300_000, show_progress: bool = True) -> dict:
    out = Path(out)
    for env in envs:
        for variant, _ in VARIANTS:
            cfg = config_for(env, variant, seeds, total_timesteps)
            run_dir = out / env / variant
            if _finished(run_dir, cfg):
                continue
            calls, steps = progress_totals(cfg)
            with EvalProgress(f"{env}/{variant}", calls, show_progress, steps) as bar:
                write(run(cfg, progress=bar.update if show_progress else None), run_dir)
    done = sorted(p.parent.parent.name for p in out.glob("*/ppo/summary.json")
                  if (p.parent.parent / VARIANTS[1][0] / "summary.json").exists())
    table = format_table(out, done)
    results.atomic_write_text(out / "summary.md", table + "\n")
    plot_curves(out, done)
    print(table)
    return {"envs": done}


def format_table(out: Path, envs) -> str:
    lines = ["| env | algorithm | ours: final return (mean ± SE) | seeds | steps | per-seed | Welch p vs PPO "
             "| paper (1.5M steps, 10 seeds) | train steps/s | wall s |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for env in envs:
        ppo = results.read_summary(out / env / "ppo")
        for variant, label in VARIANTS:
            s = results.read_summary(out / env / variant)
            p = "" if variant == "ppo" else \
                f"{welch_p(s['final_eval_returns'], ppo['final_eval_returns'], 'two-sided'):.2f}"
            paper = PAPER_TABLE1.get((env, PRESET), {}).get(variant)
            per_seed = ", ".join(f"{x:.0f}" for x in s["final_eval_returns"])
            lines.append(
                f"| {env} | {label} | {s['final_mean']:.0f} ± {s['final_se']:.0f} | {s['seeds']} "
                f"| {s['total_timesteps']:.0f} | {per_seed} | {p} | {'' if paper is None else f'{paper[0]} ± {paper[1]}'} "
                f"| {s['train_steps_per_s']:.0f} | {s['wall_time_s']:.0f} |")
    return "\n".join(lines)


def plot_curves(out: Path, envs) -> Path | None:
    if not envs:
        return None
    panels = [(f"{env} ({PRESET})", [(label, out / env / variant) for variant, label in VARIANTS]) for env in envs]
    return plot_curve_panels(out / "curves.png", panels)
