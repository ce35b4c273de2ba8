"""TensorBoard event files for a run (tensorboardX), written outside jit.

The host runner logs live, after every update and evaluation; a JAX-runner run, whose metrics
come back from one jitted call, is logged from its output arrays when it ends. Scalars are means
over seeds, x-axis environment steps: ``train/<metric>`` and ``eval/return``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


class TensorBoardLogger:
    def __init__(self, log_dir: Path):
        from tensorboardX import SummaryWriter

        self.writer = SummaryWriter(str(log_dir))

    def log_update(self, update_index: int, env_steps: int, metrics: dict) -> None:
        del update_index
        for name, values in metrics.items():
            value = np.nanmean(np.asarray(values, dtype=np.float64)) if np.size(values) else np.nan
            if np.isfinite(value):
                self.writer.add_scalar(f"train/{name}", float(value), env_steps)

    def log_eval(self, env_steps: int, eval_returns) -> None:
        self.writer.add_scalar("eval/return", float(np.mean(eval_returns)), env_steps)

    def log_run(self, metrics: dict, steps_per_update: int) -> None:
        """A finished run's metrics: ``train`` [seeds, updates] and ``eval`` [seeds, evaluations]."""
        train = metrics["train"]
        n_updates = next(iter(train.values())).shape[1]
        for i in range(n_updates):
            self.log_update(i, (i + 1) * steps_per_update, {k: v[:, i] for k, v in train.items()})
        ev = metrics["eval"]
        for j in range(ev["eval_return"].shape[1]):
            self.log_eval(int(ev["eval_step"][0, j]), ev["eval_return"][:, j])

    def close(self) -> None:
        self.writer.close()
