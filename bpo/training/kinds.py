"""What the training layer needs to know about the two kinds of run, in one place.

An *episodic* run (REINFORCE, BPO-REINFORCE; ``EpisodicTrainConfig``) loops over blocks of
``eval_every`` episodes, each followed by an evaluation; its unit of training is the episode.
An *on-policy* run (PPO, BPO-PPO; ``OnPolicyTrainConfig``) loops over rollouts of
``n_steps x n_envs`` environment steps, each followed by one update; its unit is the update.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from bpo.config import EpisodicTrainConfig, OnPolicyTrainConfig
from bpo.runners import episodic, onpolicy
from bpo.runners.stages import Stages

TrainConfig = EpisodicTrainConfig | OnPolicyTrainConfig


class RunKind(NamedTuple):
    unit: str  # what a row of the training metrics is: "update" or "episode"
    step_unit: str  # what the curve's ``step`` counts: "env_step" or "episode"
    make_stages: Callable[[TrainConfig, Callable | None], Stages]
    n_units: Callable[[TrainConfig], int]  # training units of the whole run
    n_evaluations: Callable[[TrainConfig], int]  # evaluations of one seed, the one before training included
    env_steps_total: Callable[[TrainConfig], int | None]  # known ahead (on-policy) or not (episodic)
    segment_metrics: Callable[[dict, int], dict]  # a segment's loop outputs -> {name: [seeds, units]}
    first_unit: Callable[[TrainConfig, int], int]  # the first unit trained by the loop iteration given
    units_at_evaluations: Callable[[TrainConfig, dict], np.ndarray]  # units done at each evaluation: [n_evals]
    checkpoint_units: Callable[[TrainConfig], int]  # what ``--checkpoint-every N`` counts N of, in a whole run


def _episodic_segment_metrics(metrics: dict, start: int) -> dict:
    """Loop iteration 0 evaluates only; iteration i > 0 is evaluation block i - 1 (its episodes)."""
    skip = 1 if start == 0 else 0
    return {k: v[:, skip:].reshape(v.shape[0], -1) for k, v in metrics.items()}


EPISODIC = RunKind(
    unit="episode",
    step_unit="episode",
    make_stages=episodic.make_stages,
    n_units=lambda cfg: cfg.episodes,
    n_evaluations=lambda cfg: cfg.episodes // cfg.eval_every + 1,
    env_steps_total=lambda cfg: None,
    segment_metrics=_episodic_segment_metrics,
    first_unit=lambda cfg, start: max(start - 1, 0) * cfg.eval_every,
    units_at_evaluations=lambda cfg, ev: ev["eval_episode"][0].astype(int),
    checkpoint_units=lambda cfg: cfg.episodes // cfg.eval_every + 1,  # evaluation blocks
)

ON_POLICY = RunKind(
    unit="update",
    step_unit="env_step",
    make_stages=onpolicy.make_stages,
    n_units=onpolicy.n_updates,
    n_evaluations=lambda cfg: int(onpolicy.eval_schedule(cfg).sum()) + 1,
    env_steps_total=lambda cfg: onpolicy.n_updates(cfg) * cfg.ppo.n_steps * cfg.ppo.n_envs,
    segment_metrics=lambda metrics, start: metrics,
    first_unit=lambda cfg, start: start,
    units_at_evaluations=lambda cfg, ev: (ev["eval_step"][0] // (cfg.ppo.n_steps * cfg.ppo.n_envs)).astype(int),
    checkpoint_units=onpolicy.n_updates,
)


def kind_of(cfg: TrainConfig) -> RunKind:
    return ON_POLICY if isinstance(cfg, OnPolicyTrainConfig) else EPISODIC


def progress_totals(cfg: TrainConfig) -> tuple[int, float | None]:
    """(evaluation callbacks, environment steps) of a whole run over all seeds, for a progress
    bar; environment steps are None for episodic runs, whose episode lengths are not known ahead."""
    kind = kind_of(cfg)
    steps = kind.env_steps_total(cfg)
    return cfg.seeds * kind.n_evaluations(cfg), None if steps is None else cfg.seeds * steps


def default_checkpoint_every(cfg: TrainConfig) -> int:
    """About ten checkpoints per run: every tenth of the loop's iterations."""
    return max(1, kind_of(cfg).checkpoint_units(cfg) // 10)
