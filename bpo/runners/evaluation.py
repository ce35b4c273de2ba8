"""Evaluation of the target policy: the one loop of every JAX run, and its twin for Gymnasium runs.

``run_episodes`` runs whole episodes inside a compiled program: the evaluation of the on-policy
runner (``OnPolicyProgram.evaluate``), of the episodic runner (``EpisodicProgram.evaluate``) and
of ``bpo evaluate``. The host runner steps Gymnasium in Python, so its evaluation is a loop of its
own over a vector environment (``PolicyEvaluator``):

``eval_episodes`` episodes per seed with the policy's mode (Gaussian mean / argmax) and the
observation statistics frozen, on a vector env of ``seeds x eval_episodes`` sub-environments
seeded from (base seed, run, evaluation index); one compiled call per vector step for all seeds.
The result depends only on the parameters, the statistics and the evaluation index.

Evaluation costs as much environment stepping as training (MuJoCo: 10 episodes x 1,000 steps
every 8,192 training steps), so by default it runs in a worker process: the training loop hands
over a copy of the parameters and goes on, and collects the returns later, in order. With a
second core free, evaluation then costs the training loop almost nothing. ``inline`` evaluates in
the training process (the training loop waits).
"""

from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor

import jax
import jax.numpy as jnp
import numpy as np

from bpo.agents.learner import make_learner
from bpo.config.schema import OnPolicyTrainConfig
from bpo.infra.plugins import load_plugins
from bpo.infra.processes import die_with_parent
from bpo.infra.runtime import report_crashes
from bpo.runners.seeds import seed_map
from envs.functional import FunctionalEnv
from envs.gymnasium_envs import EVAL_STREAM, env_seeds, gym_spec, make_vector_env


def run_episodes(env: FunctionalEnv, act: Callable, keys) -> tuple[jax.Array, jax.Array]:
    """One episode from each key, all at once: (undiscounted returns, lengths).

    Args:
        env: the environment; an episode ends when it terminates or truncates, or after
            ``env.spec.max_episode_steps`` steps.
        act: ``act(key, obs) -> action``. ``key`` is the step's key, which the environment's step
            also receives: an ``act`` that draws from the policy derives its own key from it
            (``fold_in(key, 1)``), unless the environment's step draws nothing.
        keys: one key per episode; the reset takes it, then each step splits it.
    Returns:
        ``(returns, lengths)``, one of each per key."""
    def episode(k):
        state, obs = env.reset(k)

        def cond(c):
            return ~c[3] & (c[4] < env.spec.max_episode_steps)

        def body(c):
            k, state, obs, _, t, total = c
            k, k_step = jax.random.split(k)
            action = act(k_step, obs)
            state, obs, reward, terminated, truncated = env.step_env(k_step, state, action)
            return k, state, obs, terminated | truncated, t + 1, total + reward

        init = (k, state, obs, jnp.array(False), jnp.zeros((), jnp.int32), jnp.zeros(()))
        out = jax.lax.while_loop(cond, body, init)
        return out[-1], out[-2]

    return jax.vmap(episode)(keys)


class PolicyEvaluator:
    """Evaluates in the calling process."""

    def __init__(self, cfg: OnPolicyTrainConfig):
        self.cfg = cfg
        self.env = make_vector_env(cfg.env, cfg.seeds * cfg.eval_episodes, cfg.vector_mode, die_with_parent)
        self._greedy = jax.jit(seed_map(make_learner(cfg, gym_spec(cfg.env)).greedy_with, cfg.seeds))

    def evaluate(self, actor_params, stats, eval_index: int) -> tuple[np.ndarray, float]:
        """Mean undiscounted return per seed, and the seconds it took."""
        start = time.perf_counter()
        S, N = self.cfg.seeds, self.cfg.eval_episodes
        seeds = [s for run in range(S) for s in env_seeds(self.cfg.seed, run, EVAL_STREAM + eval_index, N)]
        obs, _ = self.env.reset(seed=seeds)
        returns = np.zeros(S * N)
        running = np.ones(S * N, bool)
        while running.any():
            action = np.asarray(self._greedy(actor_params, stats, obs.reshape(S, N, -1).astype(np.float32)))
            obs, reward, terminated, truncated, _ = self.env.step(action.reshape((S * N,) + action.shape[2:]))
            returns += np.where(running, reward, 0.0)
            running &= ~(terminated | truncated)
        return returns.reshape(S, N).mean(axis=1), time.perf_counter() - start

    def close(self) -> None:
        self.env.close()


_worker: PolicyEvaluator | None = None


def _start_worker(cfg: OnPolicyTrainConfig, parent_pid: int) -> None:
    global _worker
    die_with_parent(parent_pid)
    report_crashes()
    load_plugins()  # a spawned process: a plug-in's method must be registered here too to build cfg's learner
    _worker = PolicyEvaluator(cfg)


def _evaluate_in_worker(actor_params, stats, eval_index: int):
    return _worker.evaluate(actor_params, stats, eval_index)


class _Done(Future):
    def __init__(self, value):
        super().__init__()
        self.set_result(value)


class Evaluations:
    """Submits evaluations (to a worker process, or inline) and hands the results back in order."""

    def __init__(self, cfg: OnPolicyTrainConfig, background: bool):
        self.pending: list[tuple[int, Future]] = []
        self.worker_time_s = 0.0
        if background:
            context = multiprocessing.get_context("spawn")  # a fork of a process running XLA is unsafe
            self._pool = ProcessPoolExecutor(1, mp_context=context, initializer=_start_worker,
                                             initargs=(cfg, os.getpid()))
            self._inline = None
        else:
            self._pool, self._inline = None, PolicyEvaluator(cfg)

    def submit(self, env_step: int, actor_params, stats, eval_index: int) -> None:
        # Copies, not views of XLA's buffers: the pool pickles them later on a thread of its own,
        # and what crosses threads here is plain host memory that XLA neither owns nor frees.
        host = jax.tree.map(lambda x: np.array(x, copy=True), (actor_params, stats))
        if self._pool is not None:
            future = self._pool.submit(_evaluate_in_worker, *host, eval_index)
        else:
            future = _Done(self._inline.evaluate(*host, eval_index))
        self.pending.append((env_step, future))

    def ready(self, wait: bool = False) -> list[tuple[int, np.ndarray]]:
        """The finished evaluations at the front of the queue (all of them with ``wait``)."""
        out = []
        while self.pending and (wait or self.pending[0][1].done()):
            env_step, future = self.pending.pop(0)
            returns, seconds = future.result()
            self.worker_time_s += seconds
            out.append((env_step, returns))
        return out

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
        if self._inline is not None:
            self._inline.close()
