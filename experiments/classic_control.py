"""PPO vs BPO-PPO on classic-control presets: run directories, a table of final returns and
learning curves (mean ± standard error over seeds).

    bpo reproduce classic [--presets cartpole_ppo pendulum_ppo] [--seeds 10] [--out results/classic_control]

Writes ``OUT/PRESET/{ppo,bpo}/`` run directories, ``OUT/summary.md`` and ``OUT/curves.png``.
"""

from __future__ import annotations

from pathlib import Path

from bpo import results
from bpo.config import replace
from bpo.presets import get_preset
from bpo.progress import EvalProgress
from bpo.train import progress_totals, run, write
from experiments.plotting import plot_curve_panels

ALGOS = (("ppo", "PPO"), ("bpo", "BPO (PPO)"))


def reproduce_classic(out: Path, presets=("cartpole_ppo", "pendulum_ppo"), seeds: int = 10,
                      show_progress: bool = True) -> dict:
    out = Path(out)
    summaries: dict = {}
    for name in presets:
        for algo, _ in ALGOS:
            cfg = replace(get_preset(name), algo=algo, seeds=seeds)
            calls, steps = progress_totals(cfg)
            with EvalProgress(f"{name}/{algo}", calls, show_progress, steps) as bar:
                # No host callback without a bar, so the program can be kept in the compile cache.
                out_run = run(cfg, progress=bar.update if show_progress else None)
                summaries.setdefault(name, {})[algo] = write(out_run, out / name / algo)
    table = format_table(summaries)
    results.atomic_write_text(out / "summary.md", table + "\n")
    plot_curves(out, presets)
    print(table)
    return summaries


def format_table(summaries: dict) -> str:
    lines = ["| preset | env | algorithm | seeds | final return (mean ± SE) | per-seed final returns | wall s |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for name, by_algo in summaries.items():
        for algo, label in ALGOS:
            s = by_algo[algo]
            per_seed = ", ".join(f"{x:.1f}" for x in s["final_eval_returns"])
            lines.append(f"| {name} | {s['env']} | {label} | {s['seeds']} | {s['final_mean']:.1f} ± {s['final_se']:.1f} "
                         f"| {per_seed} | {s['wall_time_s']:.0f} |")
    return "\n".join(lines)


def plot_curves(out: Path, presets) -> Path:
    panels = [(name, [(label, Path(out) / name / algo) for algo, label in ALGOS]) for name in presets]
    return plot_curve_panels(Path(out) / "curves.png", panels)
