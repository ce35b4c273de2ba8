"""Progress display fed from inside jitted runs through ``jax.debug.callback``."""

import os
import time

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

LOG_WIDTH = 200
"""Columns of progress lines written to a file or a pipe (a log): wide enough that no line wraps
and the last frame is not cut, as at rich's default of 80 ('0:0… eta 0:00:…')."""


def console() -> Console:
    """rich's console on a terminal; in a log, ``COLUMNS`` (or ``LOG_WIDTH``) columns wide."""
    terminal = Console()
    if terminal.is_terminal:
        return terminal
    return Console(width=int(os.environ.get("COLUMNS") or LOG_WIDTH))


class EvalProgress:
    """Counts evaluation callbacks (one per seed per evaluation) and shows the latest return and,
    when ``total_env_steps`` is given, the training throughput in environment steps per second
    (the share of evaluations done times the run's steps, over the time since the first one).
    A run continued from a checkpoint starts the count where it stopped (``resume``)."""

    def __init__(self, label: str, total_calls: int, enabled: bool = True, total_env_steps: float | None = None):
        self.enabled = enabled
        self.latest = float("nan")
        self.total_calls = total_calls
        self.total_env_steps = total_env_steps
        self._calls = self._calls_before = 0
        self._start = None
        columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   TextColumn("eval return {task.fields[latest]:.2f}")]
        if total_env_steps:
            columns.append(TextColumn("{task.fields[rate]:,.0f} steps/s"))
        self._progress = Progress(*columns, disable=not enabled, console=console())
        self._task = self._progress.add_task(label, total=total_calls, latest=float("nan"), rate=0.0)

    def update(self, step, eval_return, rate: float | None = None) -> None:
        """One evaluation of one seed. ``rate``: training steps/s measured by the caller (the host
        runner, which excludes evaluation time); estimated from the call count otherwise."""
        del step
        now = time.perf_counter()
        if self._start is None:
            self._start = now  # the first evaluation happens before training: time counts from it
        self._calls += 1
        self.latest = float(eval_return)
        if rate is None and self.total_env_steps and now > self._start:
            share = (self._calls - self._calls_before) / self.total_calls  # of this segment's work
            rate = share * self.total_env_steps / (now - self._start)
        self._progress.update(self._task, advance=1, latest=self.latest, rate=rate or 0.0)

    def resume(self, calls_done: int) -> None:
        """The run continues from a checkpoint after ``calls_done`` evaluation callbacks: the bar
        counts on from there to ``total_calls`` (it started at 0 and ended short, e.g. at 4/12),
        and the throughput counts only this segment's evaluations."""
        self._calls = self._calls_before = calls_done
        self._progress.update(self._task, completed=calls_done)

    def __enter__(self):
        self._progress.__enter__()
        return self

    def __exit__(self, *exc):
        return self._progress.__exit__(*exc)
