"""What a finished run hands to the summary: its metrics and timings."""

from __future__ import annotations

from dataclasses import dataclass

import jax
import numpy as np

from bpo.config.schema import TrainConfig


@dataclass
class RunOutput:
    config: TrainConfig
    metrics: dict  # numpy arrays with a leading seed axis: {"eval": {...}, "train": {...}}
    compile_time_s: float
    wall_time_s: float
    run_time_s: float
    seed_chunk: int
    backend: str
    eval_time_s: float = 0.0  # host runner: time the training loop spent on evaluation, excluded from throughput
    eval_worker_time_s: float = 0.0  # host runner: time evaluation took, in a worker process when in the background
    group_size: int = 1  # configurations trained in the same compiled program (bpo.training.rows)
    threads: int = 1  # seed shards trained side by side (bpo.runners.jax_runner); results do not depend on it
    # Training seconds after 0, 1, ..., n loop iterations (bpo.training.driver's loop clock); None if unknown.
    loop_clock_s: np.ndarray | None = None


def default_seed_chunk() -> int:
    """10 seeds per vmapped chunk on a CPU (fits in cache; Figure 2's behaviour step costs 3.1 ms per
    seed at 10, 3.5 at 20, 4.6 at 100), all at once (0) on an accelerator."""
    return 10 if jax.default_backend() == "cpu" else 0

