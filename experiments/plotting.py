"""Learning-curve figures: one panel per environment or preset, one line per algorithm, the mean
over seeds with a standard-error band (the style of the paper's Figures 2-5)."""

from __future__ import annotations

from pathlib import Path

from bpo import results
from experiments.fig2 import mean_se_by_step


def plot_curve_panels(path: Path, panels: list[tuple[str, list[tuple[str, Path]]]]) -> Path:
    """``panels``: (title, [(line label, run directory), ...]) each; writes ``path`` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.6), squeeze=False)
    for ax, (title, lines) in zip(axes[0], panels):
        for label, run_dir in lines:
            steps, mean, se = mean_se_by_step(results.read_curve(run_dir))
            ax.plot(steps, mean, label=label)
            ax.fill_between(steps, mean - se, mean + se, alpha=0.25)
        ax.set_title(title)
        ax.set_xlabel("environment steps")
        ax.set_ylabel("evaluation return")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)
