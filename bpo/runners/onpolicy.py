"""JAX runner for PPO (Listing 1) and BPO-PPO (Listing 4) on vectorised functional environments.

``OnPolicyProgram``: the run as a ``bpo.runners.program.Program`` whose loop iterations are an
evaluation (when scheduled) and one update:

    rollout of n_steps x n_envs with pi (ppo) or mu (bpo); add it to D       (Listing 4, l.3-4)
    V(s), V(s'); GAE (ppo) or truncated IS-TD(lambda) returns (bpo)          (eqs. 6, 11)
    n_epochs of PPO minibatch steps, ratio pi_theta / pi (ppo) or / mu (bpo) (eqs. 10, 12)
    behaviour step: FQE Q, r-hat, FQE Q-hat, mu                              (bpo only; eqs. 7, 13-16)

The learner (acting and the per-rollout update) lives in ``bpo.agents.learner``; this module steps the
environments and schedules evaluations. Observations are normalised with running statistics
updated from the rollouts (shared by every network). Rollout rows keep the observations
normalised as the acting policy saw them, so the PPO ratio starts at pi/mu exactly; D keeps raw
observations, normalised with the current statistics whenever Q, Q-hat and mu train on them.
"""

from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from bpo.agents.learner import Learner, LearnerState, Rows, keyed_update, make_learner
from bpo.config.schema import OnPolicyTrainConfig, PPOHyperparams
from bpo.core.branches import step_or_skip
from bpo.runners.evaluation import run_episodes
from bpo.runners.program import reported_evaluations
from envs import make_env
from envs.functional import FunctionalEnv, auto_reset_step


class OnPolicyCarry(NamedTuple):
    key: jnp.ndarray
    learner: LearnerState
    env_state: tuple
    obs: jnp.ndarray  # raw observations [n_envs, obs_dim]
    sde: jnp.ndarray  # gSDE exploration matrices [n_envs, latent, action] (zeros without gSDE)
    episode_return: jnp.ndarray  # running return of the current episode of each env


def evaluations_before(cfg: OnPolicyTrainConfig) -> np.ndarray:
    """Boolean per loop iteration: evaluate before it (iteration ``n_updates`` is the last, with
    no update)."""
    return np.concatenate([[True], cfg.eval_schedule])


@dataclass(frozen=True, eq=False)
class OnPolicyProgram:
    """PPO or BPO-PPO on a functional environment (JAX or MJX): ``n_updates + 1`` loop iterations,
    an evaluation before each scheduled one and an update in all but the last. It has no host
    callback (progress is reported by the runner from each iteration's outputs, ``reported``), so
    its compiled form can be kept in the persistent compile cache."""

    cfg: OnPolicyTrainConfig
    env: FunctionalEnv
    learner: Learner

    @property
    def n_iterations(self) -> int:
        return self.cfg.n_updates + 1

    def init(self, key, hp: PPOHyperparams) -> OnPolicyCarry:
        k_env, k_actor, k_critic, k_beh, key = jax.random.split(key, 5)
        n_envs = self.cfg.settings.n_envs
        env_state, obs0 = jax.vmap(self.env.reset)(jax.random.split(k_env, n_envs))
        state0 = self.learner.init((k_actor, k_critic, k_beh), hp, obs0)
        return OnPolicyCarry(key, state0, env_state, obs0, self.learner.sde_init(), jnp.zeros(n_envs))

    def rollout(self, carry: OnPolicyCarry) -> tuple[OnPolicyCarry, Rows]:
        """``n_steps`` steps of the ``n_envs`` environments with the acting policy (pi for ppo, mu
        for bpo); observation statistics are updated after every step (module docstring)."""
        learner, n_envs = self.learner, self.cfg.settings.n_envs
        vec_step = jax.vmap(lambda k, s, a: auto_reset_step(self.env, k, s, a))

        def env_step(c, step_index):
            key, env_state, obs, stats, sde, ep_return = c
            key, k_act, k_env, k_sde = jax.random.split(key, 4)
            acting = carry.learner._replace(stats=stats)
            action, to_env, log_prob, obs_n, sde = learner.act(acting, k_act, k_sde, obs, sde, step_index)
            step = vec_step(jax.random.split(k_env, n_envs), env_state, to_env)
            done = step.terminated | step.truncated
            ep_return = ep_return + step.reward
            row = {
                "obs": obs_n, "raw_obs": obs, "action": action, "log_prob": log_prob,
                "reward": step.reward, "terminated": step.terminated.astype(jnp.float32),
                "truncated": step.truncated.astype(jnp.float32), "next_obs": learner.normalize(stats, step.final_obs),
                "raw_next_obs": step.final_obs, "finished_return": jnp.where(done, ep_return, jnp.nan),
            }
            stats = learner.observe(stats, step.obs)
            return (key, step.state, step.obs, stats, sde, jnp.where(done, 0.0, ep_return)), row

        c = (carry.key, carry.env_state, carry.obs, carry.learner.stats, carry.sde, carry.episode_return)
        (key, env_state, obs, stats, sde, ep_return), rows = jax.lax.scan(env_step, c,
                                                                          jnp.arange(self.cfg.settings.n_steps))
        return carry._replace(key=key, learner=carry.learner._replace(stats=stats), env_state=env_state, obs=obs,
                              sde=sde, episode_return=ep_return), rows

    def train_on_rollout(self, hp: PPOHyperparams, carry: OnPolicyCarry) -> tuple[OnPolicyCarry, dict]:
        """One phase of Listing 1 (ppo) or Listing 4 (bpo): a rollout, then the learner's update."""
        carry, rows = self.rollout(carry)
        key, state, metrics = keyed_update(self.learner, carry.learner, carry.key, rows, hp)
        finished = rows["finished_return"]
        n_finished = jnp.sum(~jnp.isnan(finished))
        # NaN when no episode ended in the rollout, as the host runner records it: a 0 would be
        # averaged with real returns downstream (summary and TensorBoard skip NaN).
        mean_return = jnp.nansum(finished) / jnp.maximum(n_finished, 1)
        metrics = {**metrics, "train_return": jnp.where(n_finished > 0, mean_return, jnp.nan),
                   "train_episodes": n_finished}
        return carry._replace(key=key, learner=state), metrics

    def evaluate(self, carry: OnPolicyCarry) -> dict:
        """pi's mean undiscounted return over ``eval_episodes`` greedy episodes."""
        keys = jax.random.split(jax.random.fold_in(carry.key, 7), self.cfg.eval_episodes)
        returns, _ = run_episodes(self.env, lambda _, obs: self.learner.greedy_action(carry.learner, obs), keys)
        return {"eval_return": jnp.mean(returns), "eval_step": carry.learner.update * self.cfg.rollout_size}

    def segment(self, carry0: OnPolicyCarry, hp: PPOHyperparams, indices):
        """Loop iterations ``indices``: evaluate if scheduled, then update (none in the last
        iteration). Evaluation and update each appear once in the program, so an expensive
        environment (MJX physics) is compiled twice, not three times. Iterations past the end (a
        checkpointed run's padded last segment) do nothing."""
        total_updates = self.cfg.n_updates
        skipped = {"eval_return": jnp.float32(jnp.nan), "eval_step": jnp.int32(-1)}
        scheduled = jnp.asarray(np.concatenate([evaluations_before(self.cfg), [False]]))

        def evaluate_and_update(carry, index):
            # The index comes from xs, so it is not batched under vmap: each cond stays a branch,
            # and evaluation runs only where scheduled.
            ev = jax.lax.cond(scheduled[jnp.minimum(index, total_updates + 1)], self.evaluate, lambda _: skipped,
                              carry)
            carry, metrics = step_or_skip(index < total_updates, lambda c: self.train_on_rollout(hp, c), carry)
            return carry, (ev, metrics)

        return jax.lax.scan(evaluate_and_update, carry0, indices)

    def finish(self, carry: OnPolicyCarry, outputs) -> dict:
        """The run's metrics: scheduled evaluations, per-update training metrics, final parameters."""
        evals, train_metrics = outputs
        evals = jax.tree.map(lambda x: x[np.flatnonzero(evaluations_before(self.cfg))], evals)
        train_metrics = jax.tree.map(lambda x: x[:self.cfg.n_updates], train_metrics)
        return {"eval": evals, "train": train_metrics, "final": self.policies(carry)}

    def policies(self, carry: OnPolicyCarry) -> dict:
        """The learner's networks and normaliser, and the key: after the last iteration (which does
        not update) it is the key of the final evaluation, which `bpo evaluate` repeats."""
        return {**self.learner.final_params(carry.learner), "key": carry.key}

    def unit_metrics(self, train_outputs: dict, start: int) -> dict:
        return train_outputs

    def first_unit(self, start: int) -> int:
        return start

    def reported(self, outputs) -> list[tuple[int, float]]:
        """(env steps, eval return) of each seed's evaluation in one iteration's outputs, if it
        evaluated (skipped evaluations have step -1), for a progress bar."""
        return reported_evaluations(outputs[0], "eval_step")

    def evaluations_in(self, iterations: int) -> int:
        """Iteration i evaluates first when scheduled (``evaluations_before``)."""
        return int(evaluations_before(self.cfg)[:iterations].sum())


def run_env(cfg: OnPolicyTrainConfig, backend: str | None = None) -> FunctionalEnv:
    """The environment of a run of ``cfg`` (JAX, MJX or threads backend, with the run's physics
    threads and MJX solver iterations): the one place that builds it, for training, ``bpo
    evaluate`` and the probe. ``backend``: another backend for the same task (None: the run's)."""
    return make_env(cfg.env, cfg.backend if backend is None else backend, cfg.physics_threads,
                    (cfg.mjx_iterations, cfg.mjx_ls_iterations))


def make_program(cfg: OnPolicyTrainConfig) -> OnPolicyProgram:
    """The program of ``cfg``: its environment (``run_env``) and learner."""
    env = run_env(cfg)
    return OnPolicyProgram(cfg, env, make_learner(cfg, env.spec))
