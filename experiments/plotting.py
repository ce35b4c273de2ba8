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


REFERENCE_LINES = {"ShortCorridor-v0": ("optimum", -11.66)}  # experiments.fig2.OPTIMAL_RETURN, rounded
STEP_LABELS = {"env_step": "environment steps", "episode": "episodes"}


def plot_results(results_dir: Path, out: Path) -> list[Path]:
    """Learning curves of every finished run under ``results_dir``: one panel per (environment,
    preset), one line per row (variant and grid values) with the same colour in every panel;
    ``OUT/curves.png`` and ``OUT/curves.pdf``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from experiments.store import finished_runs
    from experiments.table import row_label, setting_label, sort_rows, sort_settings

    runs = finished_runs(results_dir)
    by_setting: dict = {}
    for r in runs:
        by_setting.setdefault((r["env"], r["preset"]), []).append(r)
    settings = sort_settings(by_setting)
    colours = {row: f"C{i}" for i, row in enumerate(sort_rows(r["row"] for r in runs))}
    ncols = min(len(settings), 3)
    nrows = -(-len(settings) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.2 * ncols, 3.8 * nrows), squeeze=False)
    for ax, setting in zip(axes.flat, settings):
        for r in sorted(by_setting[setting], key=lambda r: sort_rows(colours).index(r["row"])):
            steps, mean, se = mean_se_by_step(results.read_curve(Path(results_dir) / r["run_id"]))
            ax.plot(steps, mean, color=colours[r["row"]], label=f"{row_label(r['row'])} ({r['seeds']} seeds)")
            ax.fill_between(steps, mean - se, mean + se, color=colours[r["row"]], alpha=0.2)
        if setting[0] in REFERENCE_LINES:
            name, value = REFERENCE_LINES[setting[0]]
            ax.axhline(value, color="k", linestyle="--", linewidth=1, label=f"{name} ({value})")
        ax.set_title(setting_label(setting))
        ax.set_xlabel(STEP_LABELS.get(by_setting[setting][0]["step_unit"], "steps"))
        ax.set_ylabel("evaluation return (mean ± SE)")
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(settings):]:
        ax.set_visible(False)
    fig.tight_layout()
    return save_figure(fig, Path(out), "curves", dpi=130)


def save_figure(fig, out: Path, stem: str, **savefig_kwargs) -> list[Path]:
    """``OUT/STEM.png`` and ``OUT/STEM.pdf``, each written to a temporary name and renamed; closes ``fig``."""
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{stem}.png", out / f"{stem}.pdf"]
    for p in paths:
        tmp = p.with_name(f".{p.name}.tmp{p.suffix}")
        fig.savefig(tmp, **savefig_kwargs)
        tmp.replace(p)
    plt.close(fig)
    return paths
