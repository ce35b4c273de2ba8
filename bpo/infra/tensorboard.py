"""Scalars of a run for TensorBoard (tensorboardX) and, with ``--track``, Weights & Biases, written
outside jit.

The host runner logs live, after every update and evaluation; a JAX-runner run, whose metrics
come back from one jitted call, is logged from its output arrays when it ends. Scalars are means
over seeds, x-axis environment steps: ``train/<metric>`` and ``eval/return``; with
``--per-seed-scalars`` also each seed's, ``train/<metric>/seed<i>`` and ``eval/return/seed<i>``. Both sinks get the
same scalars (``ScalarLogger``); ``Loggers`` sends them to several.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


class ScalarLogger:
    """What a run logs, in terms of one method, ``scalar(name, value, env_steps)``. With
    ``per_seed`` each seed's value is logged too, as ``<name>/seed<i>`` (one value per seed)."""

    per_seed: bool = False

    def scalar(self, name: str, value: float, env_steps: int) -> None:
        raise NotImplementedError

    def log_update(self, update_index: int, env_steps: int, metrics: dict) -> None:
        del update_index
        for name, values in metrics.items():
            value = np.nanmean(np.asarray(values, dtype=np.float64)) if np.size(values) else np.nan
            if np.isfinite(value):
                self.scalar(f"train/{name}", float(value), env_steps)
            self._seeds(f"train/{name}", values, env_steps)

    def log_eval(self, env_steps: int, eval_returns) -> None:
        self.scalar("eval/return", float(np.mean(eval_returns)), env_steps)
        self._seeds("eval/return", eval_returns, env_steps)

    def _seeds(self, name: str, values, env_steps: int) -> None:
        values = np.asarray(values, dtype=np.float64)
        if not self.per_seed or values.ndim != 1:  # a metric with more than one value per seed: mean only
            return
        for i, value in enumerate(values):
            if np.isfinite(value):
                self.scalar(f"{name}/seed{i}", float(value), env_steps)

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
        pass


class TensorBoardLogger(ScalarLogger):
    def __init__(self, log_dir: Path):
        from tensorboardX import SummaryWriter  # imported on use: bpo train without --tensorboard skips it

        self.writer = SummaryWriter(str(log_dir))

    def scalar(self, name: str, value: float, env_steps: int) -> None:
        self.writer.add_scalar(name, value, env_steps)

    def close(self) -> None:
        self.writer.close()


class WandbLogger(ScalarLogger):
    """A Weights & Biases run (the optional ``track`` extra): the run's config as its config, the
    scalars against an ``env_steps`` axis of their own, so updates and evaluations logged out of
    order (a JAX run logs all updates, then all evaluations) keep their steps. ``WANDB_MODE=offline``
    writes it locally (``wandb sync`` uploads it later)."""

    def __init__(self, project: str, name: str, config: dict, directory: Path, entity: str | None = None):
        import wandb  # an optional extra, checked before the run starts (experiments.cli)

        self.run = wandb.init(project=project, entity=entity, name=name, config=config, dir=str(directory),
                              reinit="finish_previous")
        self.run.define_metric("env_steps")
        self.run.define_metric("*", step_metric="env_steps")

    def scalar(self, name: str, value: float, env_steps: int) -> None:
        self.run.log({"env_steps": env_steps, name: value})

    def close(self) -> None:
        self.run.finish()


class Loggers(ScalarLogger):
    """Several sinks as one."""

    def __init__(self, sinks: list[ScalarLogger], per_seed: bool = False):
        self.sinks = sinks
        self.per_seed = per_seed

    def scalar(self, name: str, value: float, env_steps: int) -> None:
        for sink in self.sinks:
            sink.scalar(name, value, env_steps)

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()
