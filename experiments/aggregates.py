"""rliable's aggregates across tasks (Agarwal et al., 2021): the interquartile mean of per-task
normalised final returns with stratified-bootstrap 95% intervals, and the probability that a row
improves on the baseline, with their plots.

A task is one (environment, preset) column. Scores are normalised per task by min-max over every
final return in that column (0 = the worst run of any row, 1 = the best), which works for negative
returns too and keeps tasks with large returns from dominating. The probability of improvement
does not depend on this choice: it compares runs within a task.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.figure import Figure
from rliable import library as rly
from rliable import metrics

from bpo import results
from experiments.common import row_label, save_figure, sort_rows


def normalised_scores(cells: dict, baseline: str, rows: list[str]) -> tuple[list, dict[str, np.ndarray]]:
    """The tasks that have the baseline, and {row: (runs, tasks) min-max normalised scores} for the
    rows present on all of them; each row keeps as many runs per task as its smallest task has."""
    tasks = sorted(t for t, by_row in cells.items() if baseline in by_row)
    rows = [r for r in rows if all(r in cells[t] for t in tasks)]
    scores = {}
    for row in rows:
        n = min(len(cells[t][row]) for t in tasks)
        columns = []
        for t in tasks:
            everything = np.concatenate([np.asarray(v, float) for v in cells[t].values()])
            low, high = everything.min(), everything.max()
            columns.append((np.asarray(cells[t][row][:n], float) - low) / max(high - low, 1e-12))
        scores[row] = np.stack(columns, axis=1)
    return tasks, scores


def write_aggregates(cells: dict, baseline: str, out: Path, reps: int = 2000, seed: int = 0) -> list[Path]:
    """aggregates.json, iqm.{png,pdf} and probability_of_improvement.{png,pdf} in ``out``."""
    tasks, scores = normalised_scores(cells, baseline, sort_rows({r for by_row in cells.values() for r in by_row}))
    if not tasks:
        return []
    rows = list(scores)
    np.random.seed(seed)  # rliable's bootstrap draws from numpy's global generator
    iqm = lambda x: np.array([metrics.aggregate_iqm(x)])  # noqa: E731
    point, interval = rly.get_interval_estimates(scores, iqm, reps=reps)
    others = [r for r in rows if r != baseline]
    pairs = {}
    for r in others:
        n = min(len(scores[r]), len(scores[baseline]))
        pairs[f"{r},{baseline}"] = (scores[r][:n], scores[baseline][:n])
    poi_point, poi_interval = rly.get_interval_estimates(pairs, metrics.probability_of_improvement, reps=reps) \
        if pairs else ({}, {})
    summary = {
        "tasks": [list(t) for t in tasks], "normalisation": "per-task min-max over all final returns",
        "bootstrap_reps": reps, "confidence": 0.95,
        "iqm": {r: {"point": float(point[r][0]), "low": float(interval[r][0, 0]), "high": float(interval[r][1, 0])}
                for r in rows},
        "probability_of_improvement": {
            r: {"over": baseline, "point": float(poi_point[f"{r},{baseline}"]),
                "low": float(np.ravel(poi_interval[f"{r},{baseline}"])[0]),
                "high": float(np.ravel(poi_interval[f"{r},{baseline}"])[1])} for r in others},
    }
    out = Path(out)
    results.atomic_write_json(out / "aggregates.json", summary)
    paths = [out / "aggregates.json"]
    paths += _plot_iqm(summary, out)
    if others:
        paths += _plot_improvement(summary, others, baseline, out)
    return paths


def _save(fig: Figure, out: Path, stem: str) -> list[Path]:
    return save_figure(fig, out, stem, dpi=150, bbox_inches="tight")


def _interval_plot(entries: list[tuple[str, float, float, float]], xlabel: str, title: str, reference=None,
                   colours: list[str] | None = None):
    """Horizontal 95% intervals with the point estimate marked; ``colours`` match the curves' rows."""
    fig = Figure(figsize=(7, 0.55 * len(entries) + 1.2))
    ax = fig.subplots()
    for i, (_, point, low, high) in enumerate(entries):
        ax.barh(i, high - low, left=low, height=0.6, alpha=0.5, color=colours[i] if colours else f"C{i}")
        ax.plot([point, point], [i - 0.3, i + 0.3], color="k", linewidth=2)
    ax.set_yticks(range(len(entries)), [e[0] for e in entries])
    ax.invert_yaxis()
    if reference is not None:
        ax.axvline(reference, color="gray", linestyle="--", linewidth=1)
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    fig.tight_layout()
    return fig


def _plot_iqm(summary: dict, out: Path) -> list[Path]:
    entries = [(row_label(r), v["point"], v["low"], v["high"]) for r, v in summary["iqm"].items()]
    fig = _interval_plot(entries, "IQM of min-max normalised final return",
                         f"IQM over {len(summary['tasks'])} tasks, 95% stratified-bootstrap CI")
    return _save(fig, out, "iqm")


def _plot_improvement(summary: dict, others, baseline: str, out: Path) -> list[Path]:
    poi = summary["probability_of_improvement"]
    entries = [(row_label(r), poi[r]["point"], poi[r]["low"], poi[r]["high"]) for r in others]
    rows = list(summary["iqm"])  # every row, in the curves' order: colours match the learning curves
    fig = _interval_plot(entries, f"P(row > {row_label(baseline)})",
                         "Probability of improvement, 95% stratified-bootstrap CI", reference=0.5,
                         colours=[f"C{rows.index(r)}" for r in others])
    return _save(fig, out, "probability_of_improvement")
