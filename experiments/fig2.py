"""Figure 2: REINFORCE vs BPO-REINFORCE on ShortCorridor, 100 runs each (Table 2 settings).

Both use the same learning rate and update rule for pi; BPO collects its data with mu.
Writes ``reinforce/`` and ``bpo/`` run directories, ``summary.json`` and ``fig2.png`` to ``out``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bpo import results
from bpo.config import replace
from bpo.presets import get_preset
from bpo.progress import EvalProgress
from bpo.train import progress_totals, run, write
from envs.short_corridor import expected_return, optimal_right_probability

OPTIMAL_RETURN = float(expected_return(optimal_right_probability()))  # about -11.66
ALGOS = (("reinforce", "REINFORCE"), ("bpo", "BPO (REINFORCE)"))


def reproduce_fig2(out: Path, seeds: int = 100, show_progress: bool = True) -> dict:
    out = Path(out)
    base = replace(get_preset("short_corridor"), seeds=seeds)
    calls = len(ALGOS) * progress_totals(base)[0]
    summaries = {}
    with EvalProgress("fig2", calls, show_progress) as bar:
        for algo, _ in ALGOS:
            cfg = replace(base, algo=algo)
            summaries[algo] = write(run(cfg, progress=bar.update), out / algo)
    results.atomic_write_json(out / "summary.json", summaries)
    plot_fig2(out)
    print(format_table(summaries))
    return summaries


def format_table(summaries: dict) -> str:
    lines = [
        f"ShortCorridor, final evaluation return (optimum {OPTIMAL_RETURN:.2f})",
        f"{'algorithm':<18}{'mean ± SE':>18}{'seeds':>7}{'wall s':>9}{'compile s':>11}{'env steps/s':>13}",
    ]
    for algo, label in ALGOS:
        s = summaries[algo]
        lines.append(
            f"{label:<18}{s['final_mean']:>10.2f} ± {s['final_se']:<5.2f}{s['seeds']:>7}{s['wall_time_s']:>9.1f}"
            f"{s['compile_time_s']:>11.1f}{s['train_steps_per_s']:>13.0f}"
        )
    return "\n".join(lines)


def mean_se_by_step(rows: list[dict], column: str = "eval_return"):
    """Mean and standard error over seeds of ``column`` at each step of a curve."""
    steps = np.array(sorted({r["step"] for r in rows}))
    index = {s: i for i, s in enumerate(steps)}
    seeds = sorted({r["seed"] for r in rows})
    values = np.full((len(seeds), len(steps)), np.nan)
    seed_index = {s: i for i, s in enumerate(seeds)}
    for r in rows:
        values[seed_index[r["seed"]], index[r["step"]]] = r[column]
    mean = np.nanmean(values, axis=0)
    se = np.nanstd(values, axis=0, ddof=1) / np.sqrt(len(seeds)) if len(seeds) > 1 else np.zeros_like(mean)
    return steps, mean, se


def plot_fig2(out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for (algo, label), color in zip(ALGOS, ("tab:blue", "tab:orange")):
        steps, mean, se = mean_se_by_step(results.read_curve(out / algo))
        ax.plot(steps, mean, color=color, label=label)
        ax.fill_between(steps, mean - se, mean + se, color=color, alpha=0.25)
    ax.axhline(OPTIMAL_RETURN, color="k", linestyle="--", linewidth=1, label=f"optimum ({OPTIMAL_RETURN:.2f})")
    ax.set_xlabel("episodes")
    ax.set_ylabel("mean return (10 eval episodes)")
    ax.set_ylim(-90, -5)
    ax.set_title("ShortCorridor: mean ± SE over runs")
    ax.legend(loc="lower right")
    fig.tight_layout()
    path = out / "fig2.png"
    fig.savefig(path, dpi=150)
    plt.close(fig)
    return path
