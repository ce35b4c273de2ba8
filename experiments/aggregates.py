"""rliable's aggregates across tasks (Agarwal et al., 2021): the interquartile mean of per-task
normalised final returns with stratified-bootstrap 95% intervals, the optimality gap (the mean
shortfall of the normalised scores from a threshold gamma, Section 4 of the paper), performance
profiles (the fraction of runs whose normalised score is above each threshold tau, with bootstrap
bands), and the probability that a row improves on the baseline, with their plots.

A task is one (environment, preset) column; the caller passes the columns tested against one
baseline row, with finite final returns only (``experiments.table.aggregate_cells``). Scores are
normalised per task by min-max over every final return in that column (0 = the worst run of any
row, 1 = the best), which works for negative returns too and keeps tasks with large returns from
dominating. The probability of improvement does not depend on this choice: it compares runs
within a task. The optimality gap and the profiles do: with min-max scores, gamma = 1 is the best
run in the folder (of any row), not a known optimal return, so the gap says how far a row's runs
fall short of the best run seen, and a profile at tau how many of them get within 1 - tau of it.

With few runs per task the stratified bootstrap understates uncertainty, and can give an interval
of zero width: when each task's comparison is certain in the sample (every run of the row above
every run of the baseline on one task, below on another), every resample gives the same
probability of improvement (0.5 there), so the interval is [0.5, 0.5]. So the probability of
improvement is also given per task, each with Newcombe's score interval for P(X > Y) (which is
never zero-width), and its reported interval is the bootstrap's widened to the average of the
per-task intervals at a Bonferroni level; and every figure says in red when there are fewer than
``RELIABLE_RUNS`` runs per task. The axes span the whole score range, [0, 1], so they include the
baseline's IQM (marked) and the 0.5 of no improvement, and never start at a value that magnifies
small gaps.
"""

from __future__ import annotations

import json
import math
import textwrap
from collections.abc import Collection, Sequence
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure
from rliable import library as rly
from rliable import metrics
from scipy import optimize, stats

from bpo.infra import results
from experiments.common import row_label, save_figure, setting_label, sort_rows

TAUS = np.arange(101) / 100
"""Thresholds of the performance profiles: the normalised range [0, 1] in steps of 0.01, each an
exact decimal (k / 100), so a score equal to a threshold is not counted above it by rounding."""
GAMMA = 1.0
"""The optimality gap's threshold by default: the top of the normalised range (Agarwal et al.)."""
RELIABLE_RUNS = 10
"""Fewer runs per task than this and the figures carry a note that their intervals are unreliable."""
CONFIDENCE = 0.95
TASK_MARKERS = "os^Dv<>PXh*p"


def json_safe(obj):
    """``obj`` with every NaN or infinite float replaced by None (JSON null), in dicts, lists and
    tuples at any depth."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj


def strict_json(obj) -> str:
    """JSON text that strict parsers accept. Python's json writes a NaN as a bare ``NaN``, which is
    not JSON (JavaScript's JSON.parse, jq and most other languages' parsers refuse the whole file):
    the table's and the aggregates' files hold null there instead (``json_safe``), and the writer
    is told to refuse any that is left."""
    return json.dumps(json_safe(obj), indent=2, allow_nan=False) + "\n"


def normalised_runs(cells: dict, baseline: str, rows: list[str]) -> tuple[list, dict[str, list[np.ndarray]]]:
    """The tasks that have the baseline, and {row: [its min-max normalised scores on each task,
    every run]} for the rows present on all of them."""
    tasks = sorted(t for t, by_row in cells.items() if baseline in by_row)
    rows = [r for r in rows if all(r in cells[t] for t in tasks)]
    full = {}
    for row in rows:
        full[row] = []
        for t in tasks:
            everything = np.concatenate([np.asarray(v, float) for v in cells[t].values()])
            low, high = everything.min(), everything.max()
            full[row].append((np.asarray(cells[t][row], float) - low) / max(high - low, 1e-12))
    return tasks, full


def equal_runs(full: dict[str, list[np.ndarray]]) -> dict[str, np.ndarray]:
    """{row: (runs, tasks)} for rliable, which needs as many runs on every task: each row's first
    n runs (seeds 0 to n - 1) on each task, n its smallest task's count."""
    return {row: np.stack([v[:min(len(c) for c in per_task)] for v in per_task], axis=1)
            for row, per_task in full.items()}


def runs_used_note(cells: dict, rows: list[str], tasks, full: dict[str, list[np.ndarray]],
                   ran: dict | None = None, untested: Collection = ()) -> str | None:
    """Which runs and rows of ``cells`` the cross-task aggregates leave out and why; ``tasks`` and
    ``full``: ``normalised_runs(cells, baseline, rows)`` (a row must be on every task that has the
    baseline, with as many runs on each); ``ran``: {task: the rows with runs there, finite or not},
    to tell a cell not run yet (a campaign part-way) from one without a finite final return;
    ``untested``: the (task, row) cells left out for another budget or evaluation than their
    baseline's (``experiments.table.incomparable``). None when every run is in them."""
    notes = []
    parts = []
    for row, per_task in full.items():
        counts = [len(v) for v in per_task]
        if len(set(counts)) > 1:
            by_task = ", ".join(f"{t[0]} {t[1]}: {c}" for t, c in zip(tasks, counts, strict=True))
            parts.append(f"{row} uses the first {min(counts)} runs of each task ({by_task})")
    if parts:
        notes.append("rliable's IQM and overall probability of improvement need equal runs per task: "
                     + "; ".join(parts) + ". Each task's own probability of improvement uses every run.")
    lacking = {}  # the tasks a row lacks, by reason -> the rows lacking just those
    for row in (r for r in rows if r not in full):
        if 0 < len(ts := [t for t in tasks if row not in cells[t]]) < len(tasks):
            lacking.setdefault(_why_lacking(row, ts, ran, untested), []).append(row)
    missing = [f"{', '.join(rs)} (" + "; ".join(f"{why} on {', '.join(on)}" for why, on in reasons) + ")"
               for reasons, rs in lacking.items()]
    if missing:
        notes.append(f"Left out of the cross-task aggregates, which need every row on all {len(tasks)} tasks that "
                     f"have the baseline: {'; '.join(missing)}.")
    return " ".join(notes) or None


def _why_lacking(row: str, tasks: list, ran: dict | None, untested: Collection) -> tuple:
    """((reason, the tasks it holds for), ...) for the tasks ``row`` lacks in the aggregates: its
    cell there measured at another budget or evaluation than the baseline's, not run yet, or
    without a finite final return."""
    label = lambda t: f"{t[0]} {t[1]}"  # noqa: E731
    other = tuple(label(t) for t in tasks if (t, row) in untested)
    not_run = tuple(label(t) for t in tasks if (t, row) not in untested and ran is not None
                    and row not in ran.get(t, ()))
    nan = tuple(label(t) for t in tasks if label(t) not in other + not_run)
    return tuple((why, on) for why, on in (("another budget or evaluation than the baseline's", other),
                                           ("no run yet", not_run), ("no finite final return", nan)) if on)


def normalised_scores(cells: dict, baseline: str, rows: list[str]) -> tuple[list, dict[str, np.ndarray]]:
    """The tasks that have the baseline, and {row: (runs, tasks) min-max normalised scores} for the
    rows present on all of them, with equal runs per task (``equal_runs``)."""
    tasks, full = normalised_runs(cells, baseline, rows)
    return tasks, equal_runs(full)


def newcombe_interval(p_hat: float, m: int, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Newcombe's (2006, method 5) score interval for theta = P(X > Y) estimated from m runs of X
    and n of Y: the thetas with (p_hat - theta)^2 <= z^2 V(theta), where V is the Hanley-McNeil
    variance of the estimate with both sample sizes set to N = (m + n) / 2,
    V(theta) = theta (1 - theta) / (m n) * [1 + (N - 1)(1 - theta)/(2 - theta) + (N - 1) theta/(1 + theta)].
    Like Wilson's interval for a proportion it is never zero-width: p_hat = 1 from 3 runs against 3
    gives about [0.50, 1]."""
    z = stats.norm.isf((1 - confidence) / 2)
    big_n = (m + n) / 2

    def excess(theta):  # <= 0 inside the interval
        var = theta * (1 - theta) / (m * n) * (1 + (big_n - 1) * (1 - theta) / (2 - theta)
                                               + (big_n - 1) * theta / (1 + theta))
        return (p_hat - theta) ** 2 - z ** 2 * var

    grid = np.linspace(0.0, 1.0, 2001)
    inside = np.flatnonzero([excess(t) <= 0 for t in grid])
    if len(inside) == 0:  # cannot happen for p_hat in [0, 1]; be safe
        return p_hat, p_hat
    i, j = inside[0], inside[-1]
    low = 0.0 if i == 0 else optimize.brentq(excess, grid[i - 1], grid[i])
    high = 1.0 if j == len(grid) - 1 else optimize.brentq(excess, grid[j], grid[j + 1])
    return float(min(low, p_hat)), float(max(high, p_hat))


def per_task_improvement(x: list[np.ndarray], y: list[np.ndarray], tasks, confidence: float) -> list[dict]:
    """P(X > Y) on each task from every run of that task (rliable's estimate: the share of run
    pairs with x > y, ties half) with Newcombe's interval at ``confidence``. ``x``, ``y``: each
    task's runs."""
    out = []
    for task, xs, ys in zip(tasks, x, y, strict=True):
        p = float(metrics.probability_of_improvement(xs[:, None], ys[:, None]))
        low, high = newcombe_interval(p, len(xs), len(ys), confidence)
        out.append({"task": list(task), "point": p, "low": low, "high": high, "runs": [len(xs), len(ys)]})
    return out


def runs_per_task_note(runs: list[int]) -> str | None:
    """'n = K runs per task: intervals unreliable' when a row has fewer than ``RELIABLE_RUNS``."""
    low, high = min(runs), max(runs)
    if low >= RELIABLE_RUNS:
        return None
    count = str(low) if low == high else f"{low} to {high}"
    return f"n = {count} runs per task: intervals unreliable (fewer than {RELIABLE_RUNS})"


def optimality_gap(scores: np.ndarray, gamma: float = GAMMA) -> float:
    """Agarwal et al. (2021), Section 4: the mean over every run of every task of
    max(0, gamma - score), how far the runs fall short of ``gamma`` (a score above it counts as
    gamma); lower is better. ``scores``: (runs, tasks) normalised scores."""
    return float(np.mean(np.maximum(0.0, gamma - np.asarray(scores, float))))


def performance_profile(scores: np.ndarray, taus: np.ndarray = TAUS) -> np.ndarray:
    """The run-score distribution of Agarwal et al. (2021), Section 4: at each tau, the fraction of
    all runs of all tasks (equally many per task, ``equal_runs``) whose normalised score is above
    tau, strictly. ``scores``: (runs, tasks)."""
    scores = np.asarray(scores, float)
    return np.array([np.mean(scores > tau) for tau in taus])


def bootstrap_estimates(scores: dict[str, np.ndarray], statistic, reps: int, seed: int) -> dict[str, dict]:
    """{row: {"point", "low", "high"}} of ``statistic`` (an array from a (runs, tasks) matrix) with
    rliable's stratified-bootstrap 95% intervals (runs resampled within each task). numpy's global
    generator (which rliable draws from; arch deprecates passing one) is seeded with ``seed`` first,
    so one estimate does not move another's."""
    np.random.seed(seed)
    point, interval = rly.get_interval_estimates(scores, statistic, reps=reps, confidence_interval_size=CONFIDENCE)
    return {r: {"point": np.ravel(point[r]).tolist(), "low": np.ravel(interval[r][0]).tolist(),
                "high": np.ravel(interval[r][1]).tolist()} for r in scores}


def gap_and_profiles(scores: dict[str, np.ndarray], reps: int, seed: int, gamma: float) -> dict:
    """The optimality gap at ``gamma`` and the performance profiles at ``TAUS`` of every row, each
    with its stratified-bootstrap interval, as aggregates.json holds them."""
    gaps = bootstrap_estimates(scores, lambda x: np.array([optimality_gap(x, gamma)]), reps, seed)
    profiles = bootstrap_estimates(scores, performance_profile, reps, seed)
    return {
        "optimality_gap": {r: {k: v[0] for k, v in est.items()} for r, est in gaps.items()},
        "optimality_gap_gamma": gamma,
        "optimality_gap_definition": (
            "mean over runs and tasks of max(0, gamma - score), scores min-max normalised per task (gamma = 1: the "
            "best run of any row on that task, not a known optimum); lower is better"),
        "performance_profile": {"tau": TAUS.tolist(), "rows": profiles,
                                "definition": "fraction of runs (all tasks, equal runs per task) whose normalised "
                                              "score is above tau; band: 95% stratified-bootstrap interval"},
    }


def write_aggregates(cells: dict, baseline: str, out: Path, reps: int = 2000, seed: int = 0,
                     gamma: float = GAMMA, ran: dict | None = None, untested: Collection = ()) -> list[Path]:
    """aggregates.json, iqm.{png,pdf}, optimality_gap.{png,pdf}, performance_profile.{png,pdf} and
    probability_of_improvement.{png,pdf} in ``out``; ``gamma``: the optimality gap's threshold;
    ``ran`` and ``untested``: as for ``runs_used_note``."""
    rows = sort_rows({r for by_row in cells.values() for r in by_row})
    tasks, full = normalised_runs(cells, baseline, rows)
    if not tasks:
        return []
    used = runs_used_note(cells, rows, tasks, full, ran, untested)
    summary = aggregate_summary(tasks, full, baseline, reps, seed, gamma, used)
    out = Path(out)
    results.atomic_write_text(out / "aggregates.json", strict_json(summary))
    paths = [out / "aggregates.json"]
    paths += _save(iqm_figure(summary, baseline), out, "iqm")
    paths += _save(optimality_gap_figure(summary, baseline), out, "optimality_gap")
    paths += _save(profile_figure(summary), out, "performance_profile")
    if summary["probability_of_improvement"]:
        paths += _save(improvement_figure(summary, baseline), out, "probability_of_improvement")
    return paths


def aggregate_summary(tasks, full: dict[str, list[np.ndarray]], baseline: str, reps: int, seed: int,
                      gamma: float, used: str | None) -> dict:
    """What aggregates.json holds, from the normalised runs ``full`` (``normalised_runs``);
    ``used``: ``runs_used_note``."""
    scores = equal_runs(full)
    rows = list(scores)
    np.random.seed(seed)  # rliable's bootstrap draws from numpy's global generator: the IQM, then P(improvement)
    iqm = lambda x: np.array([metrics.aggregate_iqm(x)])  # noqa: E731
    point, interval = rly.get_interval_estimates(scores, iqm, reps=reps, confidence_interval_size=CONFIDENCE)
    improvement = improvement_estimates(scores, full, tasks, baseline, reps)
    runs = {r: int(scores[r].shape[0]) for r in rows}
    notes = [n for n in (runs_per_task_note(list(runs.values())), used) if n]
    return {
        "tasks": [list(t) for t in tasks], "normalisation": "per-task min-max over all final returns",
        "bootstrap_reps": reps, "confidence": CONFIDENCE, "runs_per_task": runs,
        "runs_by_task": {r: [len(v) for v in full[r]] for r in rows},
        "notes": notes,
        "iqm": {r: {"point": float(point[r][0]), "low": float(interval[r][0, 0]), "high": float(interval[r][1, 0])}
                for r in rows},
        "probability_of_improvement_interval": (
            "the wider of rliable's stratified-bootstrap interval and the average over tasks of Newcombe's score "
            f"intervals for P(X > Y), each at level 1 - {1 - CONFIDENCE:.2f} / {len(tasks)} tasks (Bonferroni)"),
        "probability_of_improvement": improvement,
        **gap_and_profiles(scores, reps, seed, gamma),
    }


def improvement_estimates(scores: dict[str, np.ndarray], full: dict[str, list[np.ndarray]], tasks, baseline: str,
                          reps: int) -> dict:
    """P(row > baseline) of every other row: rliable's estimate over tasks with its bootstrap
    interval (from numpy's global generator), widened to the average of the per-task intervals."""
    others = [r for r in scores if r != baseline]
    pairs = {}
    for r in others:
        n = min(len(scores[r]), len(scores[baseline]))
        pairs[r] = (scores[r][:n], scores[baseline][:n])
    poi_point, poi_interval = rly.get_interval_estimates(
        {f"{r},{baseline}": pair for r, pair in pairs.items()}, metrics.probability_of_improvement, reps=reps,
        confidence_interval_size=CONFIDENCE) if pairs else ({}, {})
    per_task_level = 1 - (1 - CONFIDENCE) / len(tasks)  # Bonferroni: every task's interval covers with >= 95%
    improvement = {}
    for r in others:
        boot_low, boot_high = np.ravel(poi_interval[f"{r},{baseline}"])[:2]
        by_task = per_task_improvement(full[r], full[baseline], tasks, per_task_level)
        avg_low, avg_high = np.mean([t["low"] for t in by_task]), np.mean([t["high"] for t in by_task])
        improvement[r] = {"over": baseline, "point": float(poi_point[f"{r},{baseline}"]),
                          "low": float(min(boot_low, avg_low)), "high": float(max(boot_high, avg_high)),
                          "bootstrap_low": float(boot_low), "bootstrap_high": float(boot_high),
                          "runs": len(pairs[r][0]), "per_task": by_task}
    return improvement


def _save(fig: Figure, out: Path, stem: str) -> list[Path]:
    return save_figure(fig, out, stem, dpi=150, bbox_inches="tight")


def _notes_under(fig: Figure, notes: Sequence[str]) -> None:
    """aggregates.json's ``notes`` in red under the figure's axes, each wrapped so that a long one
    (the rows a campaign part-way leaves out) keeps the figure its width."""
    if notes:
        fig.supxlabel("\n".join(textwrap.fill(n, 120) for n in notes), color="firebrick", fontsize=9)


def _interval_plot(entries: list[tuple[str, float, float, float]], xlabel: str, title: str, reference=None,
                   reference_label: str | None = None, colours: list[str] | None = None, notes: Sequence[str] = ()):
    """Horizontal 95% intervals with the point estimate marked, on an x axis from 0 to 1 (the range
    of the normalised scores and of probabilities), with a dashed line at ``reference``; ``notes``
    in red under the axis; ``colours`` match the curves' rows."""
    fig = Figure(figsize=(7.5, 0.55 * len(entries) + 1.6), layout="constrained")
    ax = fig.subplots()
    for i, (_, point, low, high) in enumerate(entries):
        ax.barh(i, max(high - low, 0.004), left=low if high - low >= 0.004 else point - 0.002, height=0.6, alpha=0.5,
                color=colours[i] if colours else f"C{i}")
        ax.plot([point, point], [i - 0.3, i + 0.3], color="k", linewidth=2)
    ax.set_yticks(range(len(entries)), [e[0] for e in entries])
    ax.set_ylim(len(entries) - 0.5, -0.5)  # first entry on top
    ax.set_xlim(0.0, 1.0)
    if reference is not None:
        ax.axvline(reference, color="gray", linestyle="--", linewidth=1, label=reference_label)
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    _notes_under(fig, notes)
    return fig, ax


def iqm_figure(summary: dict, baseline: str) -> Figure:
    """IQM intervals of every row, the baseline's IQM marked across them."""
    entries = [(row_label(r), v["point"], v["low"], v["high"]) for r, v in summary["iqm"].items()]
    notes, tasks = summary.get("notes") or [], len(summary["tasks"])
    fig, ax = _interval_plot(entries, "IQM of min-max normalised final return (0 = worst run, 1 = best run)",
                             f"IQM over {tasks} task{'' if tasks == 1 else 's'}, 95% stratified-bootstrap CI",
                             reference=summary["iqm"].get(baseline, {}).get("point"),
                             reference_label=f"{row_label(baseline)} IQM", notes=notes)
    fig.legend(fontsize=8, loc="outside right upper")
    return fig


def improvement_figure(summary: dict, baseline: str) -> Figure:
    """P(row > baseline) per row: the interval (bootstrap widened to the per-task score intervals),
    the point, and each task's own probability as a marker."""
    poi = summary["probability_of_improvement"]
    others = list(poi)
    entries = [(row_label(r), poi[r]["point"], poi[r]["low"], poi[r]["high"]) for r in others]
    rows = list(summary["iqm"])  # every row, in the curves' order: colours match the learning curves
    notes = summary.get("notes") or []
    fig, ax = _interval_plot(entries, f"P(row > {row_label(baseline)}) across tasks\n(bar: 95% CI, the stratified "
                             "bootstrap's widened to per-task score intervals; markers: each task alone)",
                             f"Probability of improvement over {row_label(baseline)}",
                             reference=0.5, reference_label="0.5: no improvement",
                             colours=[f"C{rows.index(r)}" for r in others], notes=notes)
    tasks = [tuple(t) for t in summary["tasks"]]
    for k, task in enumerate(tasks):
        points = [poi[r]["per_task"][k]["point"] for r in others]
        ax.scatter(points, range(len(others)), marker=TASK_MARKERS[k % len(TASK_MARKERS)], facecolors="white",
                   edgecolors="k", s=28, zorder=3, clip_on=False, label=setting_label(task))
    fig.legend(fontsize=7, loc="outside right upper")
    return fig


def optimality_gap_figure(summary: dict, baseline: str) -> Figure:
    """Optimality-gap intervals of every row (lower is better), the baseline's gap marked across them."""
    gaps, gamma = summary["optimality_gap"], summary["optimality_gap_gamma"]
    entries = [(row_label(r), v["point"], v["low"], v["high"]) for r, v in gaps.items()]
    notes, tasks = summary.get("notes") or [], len(summary["tasks"])
    fig, _ = _interval_plot(entries, f"Optimality gap: mean of max(0, {gamma:g} - min-max normalised final return)\n"
                            "(1 = best run on the task; lower is better)",
                            f"Optimality gap over {tasks} task{'' if tasks == 1 else 's'}, 95% stratified-bootstrap CI",
                            reference=gaps.get(baseline, {}).get("point"),
                            reference_label=f"{row_label(baseline)} gap", notes=notes)
    fig.legend(fontsize=8, loc="outside right upper")
    return fig


def profile_figure(summary: dict) -> Figure:
    """Performance profiles: for each row, the fraction of runs whose normalised score is above
    tau, against tau in [0, 1], a step line with its 95% bootstrap band; colours match the curves'."""
    profile, tasks = summary["performance_profile"], len(summary["tasks"])
    taus = np.asarray(profile["tau"])
    fig = Figure(figsize=(7.5, 4.6), layout="constrained")
    ax = fig.subplots()
    for i, (row, est) in enumerate(profile["rows"].items()):
        ax.plot(taus, est["point"], drawstyle="steps-post", color=f"C{i}", label=row_label(row))
        ax.fill_between(taus, est["low"], est["high"], step="post", color=f"C{i}", alpha=0.15, linewidth=0)
    ax.set_xlim(0.0, 1.0)
    ax.set_ylim(0.0, 1.02)
    ax.set_xlabel("tau: min-max normalised final return (0 = worst run, 1 = best run on the task)")
    ax.set_ylabel("fraction of runs with score > tau")
    ax.set_title(f"Performance profiles over {tasks} task{'' if tasks == 1 else 's'} (run-score distributions), "
                 "95% stratified-bootstrap bands", fontsize=10)
    ax.legend(fontsize=8)
    _notes_under(fig, summary.get("notes") or [])
    return fig
