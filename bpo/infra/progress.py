"""Progress of a run: a live bar on a terminal; in a log (a file, a pipe, Slurm's output), whole
lines, one when each evaluation of every seed is done and one at least every ``BPO_LOG_EVERY_S``
seconds (default 30) in between, so a run under nohup or Slurm is never silent for long. Fed by
the runners from the host after each loop iteration."""

import contextlib
import os
import threading
import time

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

LOG_WIDTH = 200
"""Columns of progress lines written to a file or a pipe (a log): wide enough that no line wraps
and the last frame is not cut, as at rich's default of 80 ('0:0… eta 0:00:…')."""


def log_every_s() -> float:
    """``BPO_LOG_EVERY_S``: the longest silence of a run's progress lines in a log, in seconds."""
    raw = os.environ.get("BPO_LOG_EVERY_S", "") or "30"
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0.1 <= value <= 86400:
        raise ValueError(f"BPO_LOG_EVERY_S: must be a number of seconds from 0.1 to 86400, got {raw!r}")
    return value


def console() -> Console:
    """rich's console on a terminal; in a log, ``COLUMNS`` (or ``LOG_WIDTH``) columns wide. A
    ``COLUMNS`` that is not a whole number of columns >= 1 is ignored, as the shell's own tools and
    ``shutil.get_terminal_size`` ignore it: it describes the terminal, not the run (it stopped
    runs with a traceback once their folders were made)."""
    terminal = Console()
    if terminal.is_terminal:
        return terminal
    raw = os.environ.get("COLUMNS", "").strip()
    return Console(width=int(raw) if raw.isdigit() and int(raw) >= 1 else LOG_WIDTH)


class EvalProgress:
    """Counts evaluation callbacks (one per seed per evaluation) and shows evaluations done (each of
    every seed), the mean return of the last one over seeds, and, when ``total_env_steps`` is
    given, the training throughput in environment steps per second: the training between the
    evaluations since the segment's first (whose calls start the clock), over the time since. The
    first evaluation comes before any training, so ``n`` evaluations frame ``n - 1`` stretches of
    it. A run continued from a checkpoint starts the count where it stopped (``resume``)."""

    def __init__(self, label: str, total_calls: int, enabled: bool = True, total_env_steps: float | None = None,
                 seeds: int = 1):
        self.enabled, self.label, self.seeds = enabled, label, seeds
        self.latest, self.rate = float("nan"), 0.0
        self.total_calls = total_calls
        self.total_env_steps = total_env_steps
        self._calls = self._calls_before = 0
        self._round: list[float] = []  # the returns of the evaluation under way, one per seed so far
        self._start = None
        out = console()
        self._lines = LogLines(self, out) if enabled and not out.is_terminal else None
        columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   TextColumn("eval return {task.fields[latest]:.2f}")]
        if total_env_steps:
            columns.append(TextColumn("{task.fields[rate]:,.0f} steps/s"))
        self._progress = Progress(*columns, disable=not enabled or self._lines is not None, console=out)
        self._task = self._progress.add_task(label, total=total_calls // seeds, latest=float("nan"), rate=0.0)

    def update(self, step, eval_return, rate: float | None = None) -> None:
        """One evaluation of one seed. ``rate``: training steps/s measured by the caller (the host
        runner, which excludes evaluation time); estimated from the call count otherwise."""
        del step
        now = time.perf_counter()
        if self._start is None:
            self._start = now  # the first evaluation happens before training: time counts from it
        self._calls += 1
        self._round.append(float(eval_return))
        complete = len(self._round) == self.seeds  # every seed's return of this evaluation: their mean
        if complete:
            self.latest, self._round = sum(self._round) / self.seeds, []
        done = self._calls - self._calls_before - self.seeds  # calls since the segment's first evaluation
        stretches = self.total_calls - self.seeds  # calls that each end a share of the training
        if rate is None and self.total_env_steps and done > 0 and stretches > 0 and now > self._start:
            rate = done / stretches * self.total_env_steps / (now - self._start)
        self.rate = rate or 0.0
        self._progress.update(self._task, advance=int(complete), latest=self.latest, rate=self.rate)
        if self._lines is not None and self._calls % self.seeds == 0:  # an evaluation of every seed
            self._lines.write()

    def resume(self, calls_done: int) -> None:
        """The run continues from a checkpoint after ``calls_done`` evaluation callbacks: the bar
        counts on from there (it started at 0 and ended short, e.g. at 2/6 evaluations), and the
        throughput counts only this segment's evaluations."""
        self._calls = self._calls_before = calls_done
        self._progress.update(self._task, completed=calls_done // self.seeds)

    @property
    def calls(self) -> int:
        return self._calls

    @property
    def calls_before(self) -> int:
        """The calls made before this segment (a run continued from a checkpoint), else 0."""
        return self._calls_before

    def seconds_left(self) -> float | None:
        """The time the remaining evaluations will take at this segment's pace since its first
        evaluation (which starts the clock), or None before there is a pace or after the last."""
        since_first = self._calls - self._calls_before - self.seeds
        if self._start is None or since_first <= 0 or self._calls >= self.total_calls:
            return None
        return (time.perf_counter() - self._start) / since_first * (self.total_calls - self._calls)

    def __enter__(self):
        self._progress.__enter__()
        if self._lines is not None:
            self._lines.start()
        return self

    def __exit__(self, *exc):
        if self._lines is not None:
            self._lines.stop()
        return self._progress.__exit__(*exc)


class LogLines:
    """``EvalProgress`` as lines in a log: ``write()`` at each evaluation of every seed, and a
    thread that writes one more whenever ``BPO_LOG_EVERY_S`` seconds passed without one (while the
    run compiles, or between evaluations far apart)."""

    def __init__(self, bar: EvalProgress, out: Console):
        self.bar, self.out, self.every = bar, out, log_every_s()
        self._began = self._last = time.perf_counter()
        self._lock, self._done = threading.Lock(), threading.Event()
        self._thread = threading.Thread(target=self._heartbeat, name="bpo-progress-lines", daemon=True)

    def line(self) -> str:
        bar, elapsed = self.bar, time.perf_counter() - self._began
        evaluations = bar.calls // bar.seeds
        parts = [f"{bar.label} {evaluations}/{bar.total_calls // bar.seeds} evaluations", f"elapsed {_clock(elapsed)}"]
        if bar.calls == bar.calls_before == 0:  # a first run of a configuration compiles for minutes
            parts.append("compiling (cached for the next run of this configuration), then the first evaluation")
        elif bar.calls == bar.calls_before:  # a continued run compiles (or loads) its program again
            parts.append("continued from its checkpoint: compiling, then the next evaluation")
        elif bar.calls - bar.calls_before >= bar.seeds:  # an evaluation of every seed in this segment: NaN shown
            parts.append(f"eval return {bar.latest:.2f}" + (f" (mean of {bar.seeds} seeds)" if bar.seeds > 1 else ""))
        if bar.rate:
            parts.append(f"{bar.rate:,.0f} steps/s")
        if (left := bar.seconds_left()) is not None:
            parts.append(f"eta {_clock(left)}")
        return ", ".join(parts)

    def write(self) -> None:
        with self._lock:
            self._last = time.perf_counter()
            with contextlib.suppress(OSError):  # a closed or full log must not stop the run
                print(self.line(), file=self.out.file, flush=True)

    def _heartbeat(self) -> None:
        while not self._done.wait(min(self.every, 1.0)):
            if time.perf_counter() - self._last >= self.every:
                self.write()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._done.set()
        self._thread.join()


def _clock(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"
