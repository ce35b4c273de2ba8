"""The target update of Algorithm 1 as a plug-in: what a policy-gradient method must provide for
the on-policy learner (``bpo.agents.learner``) to run it alone and with BPO.

Algorithm 1 is method-agnostic: a rollout is collected (by pi, or by the behaviour policy mu with
BPO), returns and advantages are computed (GAE, or the truncated IS-TD(lambda) returns of eq. (6)
with BPO), the target policy is updated by the method, and, with BPO, the behaviour step follows.
Only the third part differs between PPO (Listing 1), A2C and any method a researcher adds, so a
method is an object with the members of ``TargetUpdate`` (a name, a label and four methods);
``bpo.agents.methods`` holds the registry that ``cfg.method`` names.

A method module needs nothing else from the package: it receives the networks, the optimiser and
the configuration through ``UpdateContext`` and returns its state and a dict of scalar metrics.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import jax
import optax

from bpo.config.schema import OnPolicyTrainConfig, PPOHyperparams

Batch = dict[str, jax.Array]
"""What a target update trains on, flattened over the rollout ``[rollout_size, ...]``: ``obs``,
``action``, ``old_log_prob`` (the ratio's denominator: log pi_old, or log mu with BPO), ``advantage``,
``return`` (the value target), ``adv_weight`` (1, a Trust Region Mask, or BPO's weight),
``pi_old_log_prob`` and ``behaviour_log_prob`` (log of the policy that drew the action)."""


@dataclass(frozen=True)
class UpdateContext:
    """What a method's update may use of the learner (built once by ``bpo.agents.learner.make_learner``).

    ``actor_apply(params, obs) -> (distribution, latent)``; ``critic_apply(params, obs) -> V(s)``;
    ``optimizer(lr)`` the run's optimiser at learning rate ``lr`` (``settings.optimizer``, ``settings.adam_eps``
    or ``settings.rms_prop_eps``, and the ``settings.max_grad_norm`` clip: ``bpo.core.optim.clipped``);
    ``scheduled_optimizer(hp, progress_remaining)`` the same at this point of the run's learning-rate
    schedule (``settings.lr_schedule``: ``hp.learning_rate``, or it times the progress left); ``discrete``
    whether actions are discrete; ``cfg`` the run's configuration (static: its fields may decide
    shapes and branches)."""

    actor_apply: Callable
    critic_apply: Callable
    optimizer: Callable[[Any], optax.GradientTransformation]
    scheduled_optimizer: Callable[[PPOHyperparams, Any], optax.GradientTransformation]
    discrete: bool
    cfg: OnPolicyTrainConfig


class TargetUpdate(Protocol):
    """A policy-gradient method as the target update of Algorithm 1.

    Its state is any pytree (a NamedTuple of arrays) with at least the fields ``actor_params`` and
    ``critic_params``: the learner acts, evaluates and saves policies from them. Every member is
    pure and jit-compatible; ``hp`` holds the traced hyperparameters (``PPOHyperparams``), which may
    carry a vmapped axis."""

    name: str
    """What ``method`` is set to (``--method NAME``); also the row and run-id name of the method alone."""
    label: str
    """How tables and plots name the method's row (``PPO``, ``A2C``)."""

    def validate(self, cfg: OnPolicyTrainConfig) -> None:
        """Refuse, with ``bpo.config.schema.ConfigError`` naming the field, settings the method cannot run."""

    def init(self, ctx: UpdateContext, actor_params, critic_params, hp: PPOHyperparams) -> Any:
        """The method's state from the networks' initial parameters."""

    def behaviour_batch(self, batch: Batch, hp: PPOHyperparams) -> Batch:
        """With BPO (data from mu), the batch the method trains on: how it corrects for mu (PPO:
        unchanged, its ratio pi_theta/mu does; A2C: rho_t in ``adv_weight``)."""

    def update(self, ctx: UpdateContext, key, state, batch: Batch, hp: PPOHyperparams,
               progress_remaining) -> tuple[Any, dict]:
        """One target update on a flattened rollout. ``progress_remaining`` falls from 1 to 0 over
        the run (for schedules, ``bpo.agents.ppo.linear_schedule``). Returns the new state and
        scalar metrics (their names become columns of train_metrics.csv)."""
