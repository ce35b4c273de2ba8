"""A JAX run as a program: its loop cut into iterations, so that a host loop can checkpoint
between them (``bpo.runners.jax_runner``), or the whole loop compiled as one ``lax.scan``
(``whole_run``, PureJaxRL's ``train(key, hparams)``).

Two implementations: ``bpo.runners.episodic.EpisodicProgram`` (REINFORCE, BPO-REINFORCE; an
iteration is a block of episodes and its evaluation) and ``bpo.runners.onpolicy.OnPolicyProgram``
(PPO, BPO-PPO; an iteration is an evaluation when scheduled, then one update).
"""

from __future__ import annotations

from typing import Protocol

import jax.numpy as jnp
import numpy as np


class Program(Protocol):
    """One seed's run of a JAX runner, cut into ``n_iterations`` loop iterations.

    * ``init(key, hp) -> carry``;
    * ``segment(carry, hp, indices) -> (carry, outputs)`` runs the iterations ``indices`` (past the
      end they do nothing);
    * ``finish(carry, outputs) -> metrics`` turns the outputs of every iteration, concatenated,
      into the run's metrics;
    * ``unit_metrics(train_outputs, start)``: the training outputs of the iterations from
      ``start`` on as ``{name: [seeds, units]}`` (units: ``cfg.unit``), for the non-finite check;
    * ``first_unit(start)``: the first unit trained by iteration ``start``;
    * ``policies(carry)``: what the run keeps of its policies (``bpo.training.policies``), read
      from a carry with or without a seed axis;
    * ``evaluations_in(iterations)``: the evaluations of one seed in the first ``iterations``
      loop iterations (a resumed run's progress bar starts there);
    * ``reported(outputs)``: (step, eval return) of each evaluation in one iteration's outputs on
      the host, what the runner reports to a progress bar. A program has no host callback of its
      own, so its compiled form can be kept in the persistent compile cache.
    """

    n_iterations: int

    def init(self, key, hp): ...

    def segment(self, carry, hp, indices): ...

    def finish(self, carry, outputs) -> dict: ...

    def unit_metrics(self, train_outputs: dict, start: int) -> dict: ...

    def first_unit(self, start: int) -> int: ...

    def policies(self, carry) -> dict: ...

    def evaluations_in(self, iterations: int) -> int: ...

    def reported(self, outputs) -> list[tuple[int, float]]: ...


def reported_evaluations(evals: dict, unit: str) -> list[tuple[int, float]]:
    """(``unit``, eval return) of each seed's evaluation in one iteration's ``evals`` on the host,
    the evaluations not made (``unit`` -1, a skipped on-policy evaluation) left out: what a
    program's ``reported`` gives its runner's progress bar."""
    pairs = zip(np.ravel(evals[unit]).tolist(), np.ravel(evals["eval_return"]).tolist(), strict=True)
    return [(at, ret) for at, ret in pairs if at >= 0]


def whole_run(program: Program):
    """``train(key, hp) -> metrics``: every iteration in one segment, one program."""

    def train(key, hp):
        carry, outputs = program.segment(program.init(key, hp), hp, jnp.arange(program.n_iterations))
        return program.finish(carry, outputs)

    return train
