"""Progress display fed from inside jitted runs through ``jax.debug.callback``."""

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


class EvalProgress:
    """Counts evaluation callbacks (one per seed per evaluation) and shows the latest return."""

    def __init__(self, label: str, total_calls: int, enabled: bool = True):
        self.enabled = enabled
        self.latest = float("nan")
        self._progress = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("eval return {task.fields[latest]:.2f}"), disable=not enabled,
        )
        self._task = self._progress.add_task(label, total=total_calls, latest=float("nan"))

    def update(self, episode, eval_return) -> None:
        del episode
        self.latest = float(eval_return)
        self._progress.update(self._task, advance=1, latest=self.latest)

    def __enter__(self):
        self._progress.__enter__()
        return self

    def __exit__(self, *exc):
        return self._progress.__exit__(*exc)
