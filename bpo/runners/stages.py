"""A run of a JAX runner cut into stages, so that checkpointing can stop between them."""

from collections.abc import Callable
from typing import NamedTuple

import jax.numpy as jnp


class Stages(NamedTuple):
    """``init(key, hp) -> carry``; ``segment(carry, hp, indices) -> (carry, outputs)`` runs the loop
    iterations ``indices`` (past the end they do nothing); ``finish(carry, outputs)`` turns the
    outputs of all iterations, concatenated, into the run's metrics."""

    init: Callable
    segment: Callable
    finish: Callable
    n_iterations: int


def whole_run(stages: Stages) -> Callable:
    """``train(key, hp) -> metrics``: every iteration in one segment, one program."""

    def train(key, hp):
        carry, outputs = stages.segment(stages.init(key, hp), hp, jnp.arange(stages.n_iterations))
        return stages.finish(carry, outputs)

    return train
