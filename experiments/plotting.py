"""``bpo plot``: learning curves of a results folder, one panel per (environment, preset), one line
per row with the mean over seeds and a standard-error band (the style of the paper's Figures 2-5),
and a dashed reference line where the environment's optimal return is known. Like ``bpo table``, it
warns (on stderr) when the runs come from different code or MuJoCo versions
(``experiments.common.provenance_notes``).

The x axis is the curve's step (environment steps, or episodes for episodic presets) or, with
``x="time"`` (``bpo plot --x time``), the training seconds at each evaluation that the summary
records (``evaluation_clock``: the loop's time on the host, compilation left out). Wall-clock
times depend on the machine and on what else ran on it: stderr says so when the runs were timed
on different devices. A run whose summary has no evaluation times (written before runs recorded
them) stops ``--x time`` with one line naming it.

Each run's ``curve.csv`` is read and checked by ``experiments.reader.read_curve``: a run whose
curve is damaged (cut off, a row of NaNs, not a CSV) is left out and returned as skipped. A NaN
evaluation return is data (a seed that diverged): the mean and SE at that step are over the other
seeds, the run's legend entry counts its NaN evaluations, and a note on stderr says so."""

from __future__ import annotations

import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from bpo.config.schema import ConfigError
from experiments.common import (
    OPTIMAL_RETURNS,
    report_provenance,
    row_label,
    save_figure,
    setting_label,
    sort_rows,
    sort_settings,
)
from experiments.reader import BadFile, Run, Skipped, read_curve, read_evaluation_clock
from experiments.table import check_cells

STEP_LABELS = {"env_step": "environment steps", "episode": "episodes"}
X_AXES = ("step", "time")
TIME_LABEL = "training time (s, compilation excluded)"


@dataclass(frozen=True)
class PlotOptions:
    metric: str = "eval_return"
    """A column of the runs' curve.csv: the evaluation return, or a diagnostic recorded per
    evaluation (BPO runs: ess_frac, kl_pi_mu_k3, is_ratio_max, ...; docs/diagnostics.md)."""
    per_seed: bool = False
    """Also draw each seed's curve, thin, in its row's colour."""
    smooth: int = 1
    """Average each seed's curve over this many consecutive evaluations (a trailing window; 1: none)
    before the mean and SE over seeds."""
    x: str = "step"
    """The x axis (``X_AXES``): the curve's step, or "time", the training seconds at each evaluation."""


def seed_matrix(rows: list[dict], column: str = "eval_return") -> tuple[np.ndarray, np.ndarray]:
    """(steps, values [seeds, steps]) of ``column`` in a curve (``read_curve``); NaN where a seed
    has no value at a step."""
    steps = np.array(sorted({r["step"] for r in rows}))
    index = {s: i for i, s in enumerate(steps)}
    seeds = sorted({r["seed"] for r in rows})
    values = np.full((len(seeds), len(steps)), np.nan)
    seed_index = {s: i for i, s in enumerate(seeds)}
    for r in rows:
        values[seed_index[r["seed"]], index[r["step"]]] = r.get(column, np.nan)
    return steps, values


def trailing_mean(values: np.ndarray, window: int) -> np.ndarray:
    """Each entry replaced by the mean of the finite values among it and the ``window - 1`` before it,
    along the last axis (fewer at the start); NaN where there are none."""
    if window <= 1:
        return values
    ok = np.isfinite(values)
    sums = np.cumsum(np.where(ok, values, 0.0), axis=-1)
    counts = np.cumsum(ok, axis=-1)
    sums[..., window:] -= sums[..., :-window].copy()
    counts[..., window:] -= counts[..., :-window].copy()
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / counts, np.nan)


def mean_se_by_step(rows: list[dict], column: str = "eval_return", smooth: int = 1):
    """Mean and standard error over seeds of ``column`` at each step of a curve (``read_curve``),
    each seed's curve first smoothed (``trailing_mean``), over the seeds whose value there is
    finite: a NaN evaluation of a diverged seed is left out rather than making the whole step NaN.
    SE = SD / sqrt(k) with k those seeds; 0 where k < 2, NaN mean where k = 0 (a gap in the line)."""
    steps, values = seed_matrix(rows, column)
    values = trailing_mean(values, smooth)
    ok = np.isfinite(values)
    k = ok.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(ok, values, 0.0).sum(axis=0) / k
        var = (np.where(ok, values - mean, 0.0) ** 2).sum(axis=0) / (k - 1)
        se = np.where(k > 1, np.sqrt(var / k), 0.0)
    return steps, mean, se


def read_curves(runs: list[Run]) -> tuple[dict[str, list[dict]], list[Skipped]]:
    """{run id: its curve} for the runs whose ``curve.csv`` passes ``read_curve`` (checked against
    the run's seeds), and the others as skipped, each with the reason."""
    curves, skipped = {}, []
    for r in runs:
        try:
            curves[r.run_id] = read_curve(r.path, r.seeds)
        except BadFile as e:
            skipped.append(r.skipped(e))
    return curves, skipped


def _label(cell: list[Run], curve: list[dict]) -> str:
    """The legend entry of a cell (its runs pooled): its row and seeds, and its NaN evaluations if
    it has any (also said on stderr)."""
    lost, seeds = sum(not np.isfinite(r["eval_return"]) for r in curve), sum(r.seeds for r in cell)
    if lost:
        where = ", ".join(str(r.path / "curve.csv") for r in cell)
        print(f"bpo plot: {where}: {lost} of {len(curve)} evaluation returns are NaN or infinite; "
              "the mean and SE at those steps are over the other seeds", file=sys.stderr)
    return f"{row_label(cell[0].row)} ({seeds} seed{'s' if seeds != 1 else ''}" + (
        f", {lost} NaN evaluations)" if lost else ")")


def pooled_curve(cell: list[Run], curves: dict[str, list[dict]]) -> list[dict]:
    """The curves of a cell's runs as one (``experiments.table.check_cells``: one configuration,
    each seed once): each run's seed indices shifted past the runs before it, so that its seeds
    are seeds of their own in the mean and SE, as the table pools their final returns."""
    pooled, offset = [], 0
    for r in cell:
        pooled += [{**row, "seed": row["seed"] + offset} for row in curves[r.run_id]]
        offset += r.seeds
    return pooled


def pooled_clock(cell: list[Run], clocks: dict[str, dict]) -> dict | None:
    """For ``--x time``: {step: the mean over the cell's runs of their training seconds there}
    (runs pooled in a cell trained the same steps, each on its own clock); None for ``--x step``."""
    if not clocks:
        return None
    steps = {s for r in cell for s in clocks[r.run_id]}
    return {s: float(np.nanmean([clocks[r.run_id].get(s, np.nan) for r in cell])) for s in steps}


def read_clocks(runs: list[Run], curves: dict[str, list[dict]]) -> tuple[dict[str, dict], list[Skipped]]:
    """{run id: {step: training seconds}} for ``--x time`` (``read_evaluation_clock``), and the
    runs whose clock is damaged as skipped. Runs with no clock at all are a ``ConfigError`` naming
    the first: their times were never recorded, so the plot cannot be what was asked for."""
    clocks, skipped, missing = {}, [], []
    for r in runs:
        try:
            clocks[r.run_id] = read_evaluation_clock(r, curves[r.run_id])
        except BadFile as e:
            skipped.append(r.skipped(e))
        if clocks.get(r.run_id, {}) is None:
            missing.append(r)
    if missing:
        more = len(missing) - 1
        more = f" (and {more} more run{'s' if more > 1 else ''})" if more else ""
        raise ConfigError("x", f"{missing[0].path}{more}: summary.json has no evaluation times (evaluation_clock; "
                               "written before runs recorded them), so no wall-clock axis; allowed: --x step, or "
                               "train the run again")
    return {k: v for k, v in clocks.items() if v is not None}, skipped


def device_note(runs: list[Run]) -> str | None:
    """For ``--x time``: a warning when the runs were timed on different devices (or some on an
    unknown one), whose seconds need not be comparable."""
    devices = Counter((r.summary.get("provenance") or {}).get("device") or "unknown device" for r in runs)
    if len(devices) < 2:
        return None
    listed = ", ".join(f"{d} ({n} run{'s' if n > 1 else ''})" for d, n in sorted(devices.items()))
    return (f"Warning: --x time: the runs were timed on different devices: {listed}; wall-clock times differ "
            "across machines and with load")


def _draw_cell(ax, cell: list[Run], curves: dict[str, list[dict]], colour: str, options: PlotOptions,
               clock: dict | None) -> None:
    """A cell's mean ± SE over the seeds of its runs (and each seed's curve) against its steps, or
    against ``clock``'s seconds."""
    curve = pooled_curve(cell, curves)
    if options.metric not in curve[0]:  # e.g. a BPO diagnostic in a PPO run: no line, no legend entry
        return
    steps, mean, se = mean_se_by_step(curve, options.metric, options.smooth)
    xs = steps if clock is None else np.array([clock.get(s, np.nan) for s in steps])
    keep = np.isfinite(xs)  # a time recorded as null: the point is left out
    seeds = sum(r.seeds for r in cell)
    label = (_label(cell, curve) if options.metric == "eval_return" else
             f"{row_label(cell[0].row)} ({seeds} seed{'s' if seeds != 1 else ''})")
    ax.plot(xs[keep], mean[keep], color=colour, label=label)
    if (lone := _isolated(mean[keep])).any():
        ax.plot(xs[keep][lone], mean[keep][lone], "o", color=colour, markersize=3)
    ax.fill_between(xs[keep], (mean - se)[keep], (mean + se)[keep], color=colour, alpha=0.2)
    if options.per_seed:
        for seed_curve in trailing_mean(seed_matrix(curve, options.metric)[1], options.smooth):
            ax.plot(xs[keep], seed_curve[keep], color=colour, linewidth=0.6, alpha=0.35)


def _isolated(values: np.ndarray) -> np.ndarray:
    """Which finite values have no finite neighbour: a line draws nothing there (a one-evaluation
    curve, a diagnostic that is NaN at step 0 of a two-evaluation run), so they get a marker."""
    finite = np.isfinite(values)
    before = np.concatenate([[False], finite[:-1]])
    after = np.concatenate([finite[1:], [False]])
    return finite & ~before & ~after


def check_metric(curves: dict[str, list[dict]], metric: str) -> None:
    """A metric some run records; otherwise a ``ConfigError`` listing the columns there are."""
    columns = sorted({k for curve in curves.values() for row in curve[:1] for k in row} - {"step", "seed"})
    if metric not in columns:
        raise ConfigError("metric", f"no run's curve.csv has {metric!r}; allowed: {columns}")


DEFAULT_PLOT = PlotOptions()


def plot_results(runs: list[Run], out: Path, options: PlotOptions = DEFAULT_PLOT) -> tuple[list[Path], list[Skipped]]:
    """Learning curves of ``runs`` (``experiments.store.load_runs``): one panel per (environment,
    preset), one line per row (variant and grid values; the runs of a cell pooled, as the table
    pools them) with the same colour in every panel;
    ``OUT/curves.png`` and ``OUT/curves.pdf`` (``curves-METRIC`` for another metric, ``-time``
    after it for ``--x time``). Returns them and the runs left out because their curve (or clock)
    could not be used; no file when no curve could. Runs that a table would refuse to pool in one
    cell (``experiments.table.check_cells``) are a ``MixedRuns``: a line would double-count them."""
    if options.x not in X_AXES:
        raise ConfigError("x", f"unknown {options.x!r}; allowed: {list(X_AXES)}")
    curves, skipped = read_curves(runs)
    if curves:
        check_metric(curves, options.metric)
    runs = [r for r in runs if r.run_id in curves]
    check_cells(runs)  # a line is a cell of the table: one configuration, each seed once
    clocks = {}
    if options.x == "time":
        clocks, no_clock = read_clocks(runs, curves)
        skipped, runs = skipped + no_clock, [r for r in runs if r.run_id in clocks]
        if note := device_note(runs):
            print(f"bpo plot: {note}", file=sys.stderr)
    if not runs:
        return [], skipped
    report_provenance([r.summary for r in runs], "bpo plot")
    by_setting: dict = {}
    for r in runs:
        by_setting.setdefault((r.env, r.preset), []).append(r)
    settings = sort_settings(by_setting)
    order = sort_rows(r.row for r in runs)
    colours = {row: f"C{i}" for i, row in enumerate(order)}
    ncols = min(len(settings), 3)
    nrows = -(-len(settings) // ncols)
    fig = Figure(figsize=(5.2 * ncols, 3.8 * nrows))
    axes = fig.subplots(nrows, ncols, squeeze=False)
    for ax, setting in zip(axes.flat, settings, strict=False):  # the last row may have spare axes
        _draw_panel(ax, by_setting[setting], curves, colours, options, clocks)
        _label_panel(ax, setting, by_setting[setting][0].summary["step_unit"], options)
    for ax in list(axes.flat)[len(settings):]:
        ax.set_visible(False)
    fig.tight_layout()
    stem = "curves" if options.metric == "eval_return" else f"curves-{options.metric}"
    return save_figure(fig, Path(out), stem + ("-time" if options.x == "time" else ""), dpi=130), skipped


def _draw_panel(ax, runs: list[Run], curves: dict[str, list[dict]], colours: dict[str, str], options: PlotOptions,
                clocks: dict[str, dict]) -> None:
    """A panel's lines: one per row, its runs pooled (``_draw_cell``), in the order of ``colours``."""
    cells: dict = {}
    for r in runs:
        cells.setdefault(r.row, []).append(r)
    order = list(colours)
    for row in sorted(cells, key=order.index):
        _draw_cell(ax, cells[row], curves, colours[row], options, pooled_clock(cells[row], clocks))


def _label_panel(ax, setting: tuple[str, str], step_unit: str, options: PlotOptions) -> None:
    """A panel's optimum line (where known), title, axis labels and legend."""
    if setting[0] in OPTIMAL_RETURNS and options.metric == "eval_return":
        value = OPTIMAL_RETURNS[setting[0]]
        ax.axhline(value, color="k", linestyle="--", linewidth=1, label=f"optimum ({value:.2f})")
    ax.set_title(setting_label(setting))
    ax.set_xlabel(TIME_LABEL if options.x == "time" else STEP_LABELS.get(step_unit, "steps"))
    what = "evaluation return" if options.metric == "eval_return" else options.metric
    smoothed = f", mean of {options.smooth} evaluations" if options.smooth > 1 else ""
    label = f"{what} (mean ± SE{smoothed})"
    # Two lines where one would run past a 3.8-inch panel's height and be clipped.
    ax.set_ylabel(label if len(label) <= 45 else f"{what}\n(mean ± SE{smoothed})")
    ax.legend(fontsize=7)
