"""``bpo plot``: learning curves of a results folder, one panel per (environment, preset), one line
per row with the mean over seeds and a standard-error band (the style of the paper's Figures 2-5),
and a dashed reference line where the environment's optimal return is known. Like ``bpo table``, it
warns (on stderr) when the runs come from different code or MuJoCo versions
(``experiments.common.provenance_notes``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from bpo import results
from experiments.common import (
    OPTIMAL_RETURNS,
    report_provenance,
    row_label,
    save_figure,
    setting_label,
    sort_rows,
    sort_settings,
)
from experiments.store import finished_runs

STEP_LABELS = {"env_step": "environment steps", "episode": "episodes"}


def mean_se_by_step(rows: list[dict], column: str = "eval_return"):
    """Mean and standard error over seeds of ``column`` at each step of a curve (``bpo.results.read_curve``)."""
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


def plot_results(results_dir: Path, out: Path) -> list[Path]:
    """Learning curves of every finished run under ``results_dir``: one panel per (environment,
    preset), one line per row (variant and grid values) with the same colour in every panel;
    ``OUT/curves.png`` and ``OUT/curves.pdf``."""
    runs = finished_runs(results_dir)
    report_provenance([results.read_summary(Path(results_dir) / r["run_id"]) for r in runs], "bpo plot")
    by_setting: dict = {}
    for r in runs:
        by_setting.setdefault((r["env"], r["preset"]), []).append(r)
    settings = sort_settings(by_setting)
    order = sort_rows(r["row"] for r in runs)
    colours = {row: f"C{i}" for i, row in enumerate(order)}
    ncols = min(len(settings), 3)
    nrows = -(-len(settings) // ncols)
    fig = Figure(figsize=(5.2 * ncols, 3.8 * nrows))
    axes = fig.subplots(nrows, ncols, squeeze=False)
    for ax, setting in zip(axes.flat, settings, strict=False):  # the last row may have spare axes
        for r in sorted(by_setting[setting], key=lambda r: order.index(r["row"])):
            steps, mean, se = mean_se_by_step(results.read_curve(Path(results_dir) / r["run_id"]))
            ax.plot(steps, mean, color=colours[r["row"]], label=f"{row_label(r['row'])} ({r['seeds']} seeds)")
            ax.fill_between(steps, mean - se, mean + se, color=colours[r["row"]], alpha=0.2)
        if setting[0] in OPTIMAL_RETURNS:
            value = OPTIMAL_RETURNS[setting[0]]
            ax.axhline(value, color="k", linestyle="--", linewidth=1, label=f"optimum ({value:.2f})")
        ax.set_title(setting_label(setting))
        ax.set_xlabel(STEP_LABELS.get(by_setting[setting][0]["step_unit"], "steps"))
        ax.set_ylabel("evaluation return (mean ± SE)")
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(settings):]:
        ax.set_visible(False)
    fig.tight_layout()
    return save_figure(fig, Path(out), "curves", dpi=130)
