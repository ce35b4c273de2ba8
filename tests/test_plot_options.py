"""`bpo plot --metric/--per-seed/--smooth/--x time`: any per-evaluation column of the runs, each
seed's curve, a trailing mean, and the wall-clock axis, checked against plain loops, hand-made
run directories and a copy of committed results."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from bpo.config.presets import get_preset
from bpo.config.schema import replace
from experiments import plotting
from experiments.cli import main
from experiments.common import row_label
from experiments.plotting import PlotOptions, _draw_cell, _label_panel, read_clocks, read_curves, trailing_mean
from experiments.store import load_runs

from synthetic_results import fake_run, provenance_record, synthetic_results

RESULTS = Path(__file__).parents[1] / "results"


@pytest.mark.parametrize("window", [1, 2, 3, 7])
def test_trailing_mean_is_the_mean_of_the_window(window):
    rng = np.random.default_rng(0)
    values = rng.normal(size=(3, 12))
    values[1, 4] = np.nan  # a diverged evaluation is left out of its windows
    got = trailing_mean(values, window)
    for s in range(3):
        for i in range(12):
            window_values = values[s, max(0, i - window + 1):i + 1]
            finite = window_values[np.isfinite(window_values)]
            want = finite.mean() if finite.size else np.nan
            np.testing.assert_allclose(got[s, i], want, rtol=1e-12, equal_nan=True)


def test_a_diagnostic_is_plotted_per_seed_and_smoothed(tmp_path, capsys):
    results = tmp_path / "table1_small"
    shutil.copytree(RESULTS / "table1_small", results)
    assert main(["plot", str(results), "--metric", "ess_frac", "--per-seed", "--smooth", "3", "--out",
                 str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "curves-ess_frac.png").stat().st_size > 10_000
    assert main(["plot", str(results), "--metric", "nope", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "error: metric: no run's curve.csv has 'nope'; allowed: [" in err and "'ess_frac'" in err
    assert main(["plot", str(results), "--smooth", "0", "--out", str(tmp_path / "new")]) == 2
    assert not (tmp_path / "new").exists()  # refused before the folder is made


def with_clock(run_dir: Path, clock: dict | None) -> None:
    """Give a run directory's summary an ``evaluation_clock`` (or take it away)."""
    path = run_dir / "summary.json"
    summary = json.loads(path.read_text())
    summary.pop("evaluation_clock", None)
    if clock is not None:
        summary["evaluation_clock"] = clock
    path.write_text(json.dumps(summary))


def two_timed_runs(root: Path) -> dict[str, dict]:
    """PPO and BPO on one task, steps 0, 100, 200 (tests/synthetic_results.py), BPO three times slower."""
    synthetic_results(root, {("CartPole-v1", "cartpole_ppo"): {"ppo": [10.0, 20.0], "bpo_c1.0_rho1.5": [30.0, 50.0]}})
    clocks = {"ppo": {"step": [0, 100, 200], "elapsed_s": [0.0, 1.5, 3.0]},
              "bpo_c1.0_rho1.5": {"step": [0, 100, 200], "elapsed_s": [0.5, 4.5, 9.0]}}
    for variant, clock in clocks.items():
        with_clock(root / "CartPole-v1" / "cartpole_ppo" / variant, clock)
    return clocks


def test_x_time_draws_each_run_against_its_recorded_seconds(tmp_path):
    clocks = two_timed_runs(tmp_path / "runs")
    runs, _ = load_runs(tmp_path / "runs")
    curves, _ = read_curves(runs)
    times, skipped = read_clocks(runs, curves)
    assert not skipped
    ax = Figure().subplots()
    for r in runs:
        _draw_cell(ax, [r], curves, "C0", PlotOptions(x="time"), times[r.run_id])
        line = ax.lines[-1]
        np.testing.assert_array_equal(line.get_xdata(), clocks[r.row]["elapsed_s"])
        finals = r.summary["final_eval_returns"]  # the curve rises to them in thirds
        np.testing.assert_allclose(line.get_ydata(), [np.mean(finals) * k / 3 for k in (1, 2, 3)])


def test_a_point_with_no_finite_neighbour_is_drawn_with_a_marker(tmp_path):
    """A line draws nothing at a finite value between NaNs (a diagnostic that is NaN at step 0 of a
    two-evaluation run): it was an invisible series; such points get a marker, no other does."""
    synthetic_results(tmp_path / "runs", {("CartPole-v1", "cartpole_ppo"): {"ppo": [10.0, 20.0]}})
    runs, _ = load_runs(tmp_path / "runs")
    curves, _ = read_curves(runs)
    (run,) = runs
    curve = [{**row, "eval_return": float("nan")} if row["step"] != 100 else row for row in curves[run.run_id]]
    ax = Figure().subplots()
    for rows in (curves[run.run_id], curve):
        _draw_cell(ax, [run], {run.run_id: rows}, "C0", PlotOptions(), None)
    whole, line, lone = ax.lines  # no marker for the whole curve; the lone point's, without a legend entry
    assert whole.get_marker() == line.get_marker() == "None" and lone.get_marker() == "o"
    assert list(lone.get_xdata()) == [100] and lone.get_label().startswith("_")


def test_the_runs_of_one_cell_are_one_line_over_all_their_seeds(tmp_path, monkeypatch):
    """Two runs of one configuration with other seeds are one cell of the table (its final returns
    pooled): the plot drew them as two lines of the same colour and label (newcomer's walkthrough,
    session 62). One line now, its mean over the five seeds, checked against a plain loop."""
    cfg = get_preset("cartpole_ppo")
    finals = {"a": [10.0, 20.0], "b": [30.0, 50.0, 70.0]}
    fake_run(tmp_path / "runs" / "a", replace(cfg, seed=0, seeds=2), finals["a"])
    fake_run(tmp_path / "runs" / "b", replace(cfg, seed=100, seeds=3), finals["b"])
    drawn = []
    monkeypatch.setattr(plotting, "save_figure", lambda fig, out, stem, dpi: drawn.append(fig) or [])
    runs, _ = load_runs(tmp_path / "runs")
    plotting.plot_results(runs, tmp_path / "out")
    (ax,) = [ax for ax in drawn[0].axes if ax.get_visible()]
    (line,) = ax.lines
    assert line.get_label() == f"{row_label(runs[0].row)} (5 seeds)"
    every = finals["a"] + finals["b"]
    want = [sum(f * k / 3 for f in every) / len(every) for k in (1, 2, 3)]  # fake_run's curves rise in thirds
    np.testing.assert_allclose(line.get_ydata(), want)


def test_x_time_writes_its_own_figure_the_same_bytes_every_time(tmp_path):
    two_timed_runs(tmp_path / "runs")
    for out in ("a", "b"):
        assert main(["plot", str(tmp_path / "runs"), "--x", "time", "--out", str(tmp_path / out)]) == 0
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["curves-time.pdf", "curves-time.png"]
    for name in ("curves-time.pdf", "curves-time.png"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_x_time_on_runs_without_recorded_times_is_one_line_naming_the_run(tmp_path, capsys):
    results = tmp_path / "fig2"
    shutil.copytree(RESULTS / "fig2", results)  # committed before runs recorded their times
    assert main(["plot", str(results), "--x", "time", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: x: {results / 'ShortCorridor-v0-short_corridor-bpo'} (and 1 more run): summary.json has "
                   "no evaluation times (evaluation_clock; written before runs recorded them), so no wall-clock axis; "
                   "allowed: --x step, or train the run again"]
    assert not (tmp_path / "out" / "curves-time.png").exists()
    assert main(["plot", str(results), "--out", str(tmp_path / "out")]) == 0  # the step axis still works


@pytest.mark.parametrize("clock, reason", [
    ({"step": [0, 100, 200], "elapsed_s": [0.0, 1.0]}, "evaluation_clock has 3 steps and 2 times"),
    ({"step": [0, 100], "elapsed_s": [0.0, 1.0]}, "evaluation_clock has no time for step 200 of curve.csv"),
    ({"step": [0, 100, 200], "elapsed_s": "fast"}, "evaluation_clock.elapsed_s must be a list of numbers"),
    ([1, 2], "evaluation_clock must be an object"),
], ids=["lengths", "a-step-missing", "not-a-list", "not-an-object"])
def test_x_time_skips_a_run_whose_recorded_times_are_damaged_and_names_it(tmp_path, capsys, clock, reason):
    two_timed_runs(tmp_path / "runs")
    damaged = tmp_path / "runs" / "CartPole-v1" / "cartpole_ppo" / "bpo_c1.0_rho1.5"
    with_clock(damaged, clock)
    assert main(["plot", str(tmp_path / "runs"), "--x", "time"]) == 1
    assert f"skipped {damaged}: summary.json: {reason}" in capsys.readouterr().err
    assert (tmp_path / "runs" / "curves-time.png").exists()  # from the other run


def test_x_time_warns_when_the_runs_were_timed_on_different_devices(tmp_path, capsys):
    two_timed_runs(tmp_path / "runs")
    for variant, device in (("ppo", "CPU A"), ("bpo_c1.0_rho1.5", "CPU B")):
        path = tmp_path / "runs" / "CartPole-v1" / "cartpole_ppo" / variant / "summary.json"
        summary = json.loads(path.read_text())
        path.write_text(json.dumps({**summary, "provenance": {**provenance_record(), "device": device}}))
    assert main(["plot", str(tmp_path / "runs"), "--x", "time"]) == 0
    assert ("Warning: --x time: the runs were timed on different devices: CPU A (1 run), CPU B (1 run); wall-clock "
            "times differ across machines and with load") in capsys.readouterr().err


@pytest.mark.parametrize("smooth,x", [(1, "steps"), (5, "steps"), (20, "time")])
def test_a_single_panels_y_label_fits_inside_the_figure(smooth, x):
    """One panel is 3.8 inches high: a long y-label (a trailing mean's) goes on two lines instead
    of running past the figure's edges, where the saved file cut it off."""
    fig = Figure(figsize=(5.2, 3.8))
    ax = fig.subplots()
    ax.plot([0, 1], [0, 1], label="PPO")
    _label_panel(ax, ("HalfCheetah-v5", "mujoco_default"), "env_steps", PlotOptions("eval_return", False, smooth, x))
    canvas = FigureCanvasAgg(fig)
    fig.tight_layout()
    canvas.draw()  # the label's place is set when the axis is drawn
    box, label = fig.bbox, ax.yaxis.label.get_window_extent(canvas.get_renderer())
    assert box.y0 <= label.y0 and label.y1 <= box.y1 and box.x0 <= label.x0, (label, box)
