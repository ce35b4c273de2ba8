"""Host runner for PPO (Listing 1) and BPO-PPO (Listing 4) on Gymnasium environments.

The environments step on the host; everything else is the learner of ``bpo.agents.learner``, jitted,
with the seeds of the config vmapped (one Gymnasium vector env holds ``seeds x n_envs``
sub-environments). Per vector step there is one compiled call; per rollout one more:

    step call:    row t-1's next observation, normalised with the statistics that row t-1 saw;
                  statistics updated with the new observations; act with pi (ppo) or mu (bpo)
    update call:  keyed_update: add the rollout to D, returns, PPO epochs, behaviour step

These are the calls the JAX runner makes inside its scan, so the semantics (observation
normalisation, truncation bootstrapping from the real final observation, key streams per seed)
are the same. Evaluation (``bpo.runners.evaluation``) runs ``eval_episodes`` deterministic
episodes per seed on separate vector environments, by default in a worker process while training
goes on; the time the training loop spends on it is timed apart, so training throughput excludes it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from bpo.agents.learner import keyed_update, make_learner
from bpo.config.schema import OnPolicyTrainConfig, PPOHyperparams
from bpo.infra import memory, processes
from bpo.runners.evaluation import Evaluations
from bpo.runners.seeds import seed_keys, seed_map
from envs.gymnasium_envs import TRAIN_STREAM, env_seeds, final_observations, gym_spec, make_vector_env


def pack_step(env_action, action, log_prob, obs_n, prev_next_obs):
    """Every per-step output the host needs in one float32 array [seeds, envs, k]: one transfer
    instead of five; ``packed_columns`` says where each is."""
    def col(x):
        x = x.astype(jnp.float32)
        return x[..., None] if x.ndim == 1 else x  # discrete actions: [envs]
    return jnp.concatenate([col(env_action), col(action), log_prob[..., None], obs_n, prev_next_obs], axis=-1)


def packed_columns(n_act: int, obs_dim: int) -> dict:
    """Where ``pack_step`` puts each output along its last axis (``n_act`` is 1 for a discrete action)."""
    return {"env_action": slice(0, n_act), "action": slice(n_act, 2 * n_act), "log_prob": 2 * n_act,
            "obs": slice(2 * n_act + 1, 2 * n_act + 1 + obs_dim),
            "next_obs": slice(2 * n_act + 1 + obs_dim, 2 * n_act + 1 + 2 * obs_dim)}


def _step_functions(learner):
    """One seed's per-step calls of the host loop: (the rollout's first step, every later step,
    the rollout's close), the calls the JAX runner makes inside its scan."""
    def step(params, stats, key, prev_final_obs, obs, sde, step_index):
        # Row t-1's next observation is normalised with the statistics row t-1 was acted on
        # with; then the statistics take in the new observations, as the JAX runner does.
        prev_next_obs = learner.normalize(stats, prev_final_obs)
        stats = learner.observe(stats, obs)
        key, k_act, _, k_sde = jax.random.split(key, 4)
        action, env_action, log_prob, obs_n, sde = learner.act_with(params, stats, k_act, k_sde, obs, sde, step_index)
        return pack_step(env_action, action, log_prob, obs_n, prev_next_obs), stats, key, sde

    def first_step(params, stats, key, obs, sde, step_index):
        # The statistics already hold obs (from init or from the end of the previous rollout).
        key, k_act, _, k_sde = jax.random.split(key, 4)
        action, env_action, log_prob, obs_n, sde = learner.act_with(params, stats, k_act, k_sde, obs, sde, step_index)
        return pack_step(env_action, action, log_prob, obs_n, obs_n), key, sde

    def close_rollout(stats, final_obs, obs):
        return learner.normalize(stats, final_obs), learner.observe(stats, obs)

    return first_step, step, close_rollout


class HostRunner:
    """One configuration, all its seeds, as a runner of ``bpo.training.driver.drive``: one loop
    iteration is one update (a rollout collected on the host, then one compiled update call).
    ``finish()`` returns the JAX runner's output layout: ``{"eval": {eval_return, eval_step},
    "train": {metric: [seeds, updates]}, "final": ...}``."""

    iteration_name = "update"
    unit = "update"
    threads = 1
    checkpoint_info: dict = {}

    def __init__(self, cfg: OnPolicyTrainConfig, hp: PPOHyperparams, progress: Callable | None = None, logger=None):
        self.cfg, self.progress, self.logger = cfg, progress, logger
        self.n_iterations, self.seed_chunk = cfg.n_updates, cfg.seeds
        self.backend = f"gymnasium-{cfg.vector_mode}+{jax.default_backend()}"
        self._env = self._evaluations = None
        self.spec = gym_spec(cfg.env)
        self.learner = make_learner(cfg, self.spec)
        self.n_seeds, self.n_envs, self.n_steps = cfg.seeds, cfg.settings.n_envs, cfg.settings.n_steps
        self.hp = hp
        # Jitted once: the memory check's shapes and the compile share one trace of each.
        self._init_all = jax.jit(seed_map(self._init_one, self.n_seeds))
        self._update_all = jax.jit(seed_map(self._update_one, self.n_seeds))
        self.compile_time_s = 0.0
        self.eval_time_s = 0.0
        self.update_time_s = 0.0  # inside the update calls (a part of the training time)
        self.eval_worker_time_s = 0.0  # spent evaluating, in the worker process when in the background
        self._n_evals = 0

    # -- compiled pieces -------------------------------------------------------------------------
    def _build(self, obs0):
        S = self.n_seeds
        keys = seed_keys(self.cfg.seed, S)
        start = time.perf_counter()
        key, state = self._init_all(keys, jnp.asarray(obs0))
        params, stats = self.learner.acting_params(state), state.stats
        sde = jax.vmap(lambda _: self.learner.sde_init())(keys)
        obs = jnp.asarray(obs0)
        # Per-step calls go through jit's C++ dispatch (a third faster than calling an AOT-compiled
        # executable); a first call compiles them. The update, once per rollout, is compiled ahead.
        first_step, step, close_rollout = _step_functions(self.learner)
        self._first_step = jax.jit(seed_map(first_step, S, in_axes=(0, 0, 0, 0, 0, None)))
        self._step = jax.jit(seed_map(step, S, in_axes=(0, 0, 0, 0, 0, 0, None)))
        self._close = jax.jit(seed_map(close_rollout, S))
        jax.block_until_ready((self._first_step(params, stats, key, obs, sde, np.int32(0)),
                               self._step(params, stats, key, obs, obs, sde, np.int32(0)),
                               self._close(stats, obs, obs)))
        # compiled now: timed apart from training, and each later call skips jit's cache lookup
        self._update = self._update_all.lower(state, key, jax.tree.map(jnp.asarray, self._empty_rows())).compile()
        self.compile_time_s = time.perf_counter() - start
        self._cols = packed_columns(1 if self.spec.discrete else self.spec.n_actions, self.spec.obs_dim)
        return key, state, params, stats, sde

    def _init_one(self, key, obs0):
        """One seed's first state. Keys are split exactly as in the JAX runner (k_env unused here:
        Gymnasium environments have their own seeds), so on twin environments both runners train
        identically."""
        _, k_actor, k_critic, k_beh, key = jax.random.split(key, 5)
        return key, self.learner.init((k_actor, k_critic, k_beh), self.hp, obs0)

    def _update_one(self, state, key, rows):
        """One seed's update call on its rollout."""
        key, state, metrics = keyed_update(self.learner, state, key, rows, self.hp)
        return key, state, metrics, self.learner.acting_params(state)

    def _row_shapes(self) -> dict:
        """The rollout's rows, all seeds: ``{name: jax.ShapeDtypeStruct}``."""
        S, T, E, spec = self.n_seeds, self.n_steps, self.n_envs, self.spec
        obs, f32 = (S, T, E, spec.obs_dim), np.float32
        action = (S, T, E) if spec.discrete else (S, T, E, spec.n_actions)
        shapes = {"obs": obs, "raw_obs": obs, "action": action, "log_prob": (S, T, E), "reward": (S, T, E),
                  "terminated": (S, T, E), "truncated": (S, T, E), "next_obs": obs, "raw_next_obs": obs}
        return {k: jax.ShapeDtypeStruct(v, np.int32 if k == "action" and spec.discrete else f32)
                for k, v in shapes.items()}

    def _empty_rows(self) -> dict:
        return {k: np.zeros(x.shape, x.dtype) for k, x in self._row_shapes().items()}

    def _check_memory(self) -> None:
        """Refuse, before any environment starts or program compiles, a run whose state (traced
        shapes: parameters, optimisers, replay), rollout (on the host and on the device) and kept
        training metrics (one row per seed and update) exceed the memory available
        (``bpo.infra.memory``). The environments' own memory is not counted."""
        S = self.n_seeds
        obs0 = jax.ShapeDtypeStruct((S, self.n_envs, self.spec.obs_dim), jnp.float32)
        keys = jax.ShapeDtypeStruct((S, *seed_keys(0, 1).shape[1:]), seed_keys(0, 1).dtype)
        key, state = jax.eval_shape(self._init_all, keys, obs0)
        rows = self._row_shapes()
        metrics = jax.eval_shape(self._update_all, state, key, rows)[2]
        per_update = memory.nbytes(metrics) + 2 * S * 4  # + train_return, train_episodes
        memory.check_run_fits(self.cfg, memory.nbytes(state) + 2 * memory.nbytes(rows), per_update, self.n_iterations)

    def _report(self, eval_step: int, eval_returns: np.ndarray, rate: float):
        if self.progress is not None:
            for r in eval_returns:
                self.progress(eval_step, float(r), rate)
        if self.logger is not None:
            self.logger.log_eval(eval_step, eval_returns)

    # -- the driver's interface ------------------------------------------------------------------
    def compile(self) -> None:
        """Start the evaluator (first: a background worker starts up while this process compiles),
        the training environments, and compile the per-step and update calls."""
        cfg, S, E = self.cfg, self.n_seeds, self.n_envs
        self._check_memory()
        self._evaluations = Evaluations(cfg, background=cfg.eval_in_background)
        # The per-step programs are fastest with synchronous CPU dispatch, set in bpo/__init__.py.
        self._env = make_vector_env(cfg.env, S * E, cfg.vector_mode, processes.die_with_parent)
        seeds = [s for run in range(S) for s in env_seeds(cfg.seed, run, TRAIN_STREAM, E)]
        obs, _ = self._env.reset(seed=seeds)
        self.obs = obs.astype(np.float32).reshape(S, E, -1)
        self.key, self.state, self.params, self.stats, self.sde = self._build(self.obs)
        self.rows, self.eval_after = self._empty_rows(), cfg.eval_schedule
        self.episode_return, self.train_metrics, self.evals = np.zeros(S * E), [], []

    def init(self) -> None:
        self._start_clock()
        self.evals = self._evaluate(0)

    def template(self, done: int):
        del done  # the learner's state has the same shapes after any update
        return self.key, self.state, self.sde

    def extra_problem(self, extra: dict, done: int) -> str | None:
        """What in a checkpoint's extra (``snapshot``) does not fit ``done`` updates of this run."""
        S, names = self.n_seeds, ("obs", "episode_return", "updates_done", "train", "eval_steps", "eval_returns",
                                  "n_evals", "envs")
        if missing := [k for k in names if k not in extra]:
            return f"it has no {', '.join(missing)}"
        if extra["updates_done"] != done:
            return f"it holds {extra['updates_done']!r} updates' environments, its progress says {done}"
        train = {k: np.shape(v) for k, v in extra["train"].items()}
        if any(shape[:2] != (S, done) for shape in train.values()):
            return f"its training metrics have shapes {train}, {done} updates of {S} seeds make ({S}, {done})"
        steps, returns = np.shape(extra["eval_steps"]), np.shape(extra["eval_returns"])
        if len(steps) != 1 or returns != (*steps, S):
            return f"its curve has {steps} evaluation steps and returns of shape {returns} for {S} seeds"
        E = self.n_envs
        if np.shape(extra["obs"]) != (S, E, self.spec.obs_dim) or np.shape(extra["episode_return"]) != (S * E,) \
                or len(extra["envs"]) != S * E:
            return f"its environments are not this run's {S} x {self.n_envs}"
        return None

    def restore(self, saved, extra: dict) -> None:
        (self.key, self.state, self.sde) = saved
        self._env.set_attr("snapshot", list(extra["envs"]))
        self.params, self.stats = self.learner.acting_params(self.state), self.state.stats
        self.obs, self.episode_return = np.asarray(extra["obs"], np.float32), np.array(extra["episode_return"])
        done = int(extra["updates_done"])
        self.train_metrics = [{k: v[:, i] for k, v in extra["train"].items()} for i in range(done)]
        self.evals = [(int(step), np.asarray(r)) for step, r in zip(extra["eval_steps"], extra["eval_returns"],
                                                                    strict=True)]
        self._n_evals = int(extra["n_evals"])
        self._start_clock()

    def iterate(self, done: int) -> tuple[dict, int]:
        """Update ``done``: a rollout, the update call, an evaluation when scheduled."""
        T = self.n_steps
        self.key, self.stats, self.sde, self.obs, final, finished_sum, finished_n = self._collect_rollout(
            self._env, self.rows, self.params, self.stats, self.key, self.obs, self.sde, self.episode_return)
        last_next, self.stats = self._close(self.stats, final, self.obs)
        self.rows["next_obs"][:, T - 1] = last_next
        started = time.perf_counter()
        self.key, self.state, metrics, self.params = jax.block_until_ready(
            self._update(self.state._replace(stats=self.stats), self.key, self.rows))
        self.update_time_s += time.perf_counter() - started
        metrics = {k: np.asarray(v) for k, v in metrics.items()}
        metrics["train_return"] = np.where(finished_n > 0, finished_sum / np.maximum(finished_n, 1), np.nan)
        metrics["train_episodes"] = finished_n
        self.train_metrics.append(metrics)
        step = (done + 1) * self.cfg.rollout_size
        if self.logger is not None:
            self.logger.log_update(done, step, metrics)
        if self.eval_after[done]:
            self.evals += self._evaluate(step)
        return {k: v[:, None] for k, v in metrics.items()}, done

    def snapshot(self, done: int):
        """At a rollout boundary: learner state and keys; the environments' simulator states and
        the curve so far (evaluations in flight are waited for first)."""
        self.evals += self._wait_for_evaluations(done * self.cfg.rollout_size)
        extra = {"obs": np.asarray(self.obs), "episode_return": self.episode_return, "updates_done": done,
                 "train": self._stacked_train(), "eval_steps": np.array([s for s, _ in self.evals]),
                 "eval_returns": np.stack([r for _, r in self.evals]), "n_evals": self._n_evals,
                 "envs": list(self._env.call("take_snapshot"))}
        return (self.key, self.state, self.sde), extra, self.state

    def evaluations_done(self, done: int) -> int:
        """Evaluations of each seed made and reported after ``done`` updates: all that were
        submitted, since a snapshot waits for those in flight."""
        del done
        return len(self.evals)

    def finish(self) -> dict:
        self.evals += self._wait_for_evaluations(self.cfg.n_updates * self.cfg.rollout_size)
        self.eval_worker_time_s = self._evaluations.worker_time_s
        S = self.n_seeds
        eval_out = {"eval_return": np.stack([r for _, r in self.evals], axis=1).astype(np.float32),
                    "eval_step": np.tile(np.array([s for s, _ in self.evals], np.int32), (S, 1))}
        return {"eval": eval_out, "train": self._stacked_train(), "final": self.policies()}

    def policies(self) -> dict:
        """The learner's networks and normaliser now, every seed (``bpo.training.policies``)."""
        return jax.tree.map(np.asarray, self.learner.final_params(self.state._replace(stats=self.stats)))

    def close(self) -> None:
        try:
            if self._env is not None:
                self._env.close()
        finally:
            if self._evaluations is not None:
                self._evaluations.close()

    # -- helpers ----------------------------------------------------------------------------------
    def _stacked_train(self) -> dict:
        return {k: np.stack([m[k] for m in self.train_metrics], axis=1) for k in self.train_metrics[0]}

    def _start_clock(self) -> None:
        self._train_start, self._eval_at_start = time.perf_counter(), self.eval_time_s
        self._steps_at_start = len(self.train_metrics) * self.cfg.rollout_size

    def _train_rate(self, env_step: int) -> float:
        """Training steps/s of this segment, all seeds, evaluation excluded."""
        seconds = time.perf_counter() - self._train_start - (self.eval_time_s - self._eval_at_start)
        return (env_step - self._steps_at_start) * self.n_seeds / seconds if seconds > 0 else 0.0

    def _evaluate(self, env_step: int) -> list:
        """Submit an evaluation of pi now and report those that are done; returns them as (step, returns)."""
        start = time.perf_counter()
        self._evaluations.submit(env_step, self.state.target.actor_params, self.stats, self._n_evals)
        self._n_evals += 1
        done = self._evaluations.ready()
        self.eval_time_s += time.perf_counter() - start
        for step, returns in done:
            self._report(step, returns, self._train_rate(env_step))
        return done

    def _wait_for_evaluations(self, env_step: int) -> list:
        start = time.perf_counter()
        done = self._evaluations.ready(wait=True)
        self.eval_time_s += time.perf_counter() - start
        for step, returns in done:
            self._report(step, returns, self._train_rate(env_step))
        return done

    def _collect_rollout(self, env, rows: dict, params, stats, key, obs, sde, episode_return: np.ndarray):
        """``n_steps`` vector steps with the acting policy, written into ``rows`` (in place, as is
        ``episode_return``). Returns the new key, statistics, gSDE matrices and observations, the
        real final observations of the last step, and per seed the sum and count of the episode
        returns that finished."""
        S, E, T = self.n_seeds, self.n_envs, self.n_steps
        discrete, cols = self.spec.discrete, self._cols
        finished_sum, finished_n = np.zeros(S), np.zeros(S)
        final = None
        for t in range(T):
            if final is None:
                packed, key, sde = self._first_step(params, stats, key, obs, sde, np.int32(t))
                packed = np.asarray(packed)
            else:
                packed, stats, key, sde = self._step(params, stats, key, final, obs, sde, np.int32(t))
                packed = np.asarray(packed)
                rows["next_obs"][:, t - 1] = packed[..., cols["next_obs"]]
            rows["obs"][:, t], rows["raw_obs"][:, t] = packed[..., cols["obs"]], obs
            rows["log_prob"][:, t] = packed[..., cols["log_prob"]]
            if discrete:
                rows["action"][:, t] = packed[..., cols["action"]][..., 0]
                env_action = packed[..., cols["env_action"]][..., 0].astype(np.int64).reshape(S * E)
            else:
                rows["action"][:, t] = packed[..., cols["action"]]
                env_action = packed[..., cols["env_action"]].reshape(S * E, -1)
            next_obs, reward, terminated, truncated, info = env.step(env_action)
            truncated = truncated & ~terminated
            done = terminated | truncated
            next_obs = next_obs.astype(np.float32).reshape(S, E, -1)
            # The real next observations: the same array unless an episode ended.
            final = final_observations(next_obs.reshape(S * E, -1), done, info).reshape(S, E, -1)
            rows["reward"][:, t] = reward.reshape(S, E)
            rows["terminated"][:, t] = terminated.reshape(S, E)
            rows["truncated"][:, t] = truncated.reshape(S, E)
            rows["raw_next_obs"][:, t] = final
            episode_return += reward
            if done.any():
                by_seed = done.reshape(S, E)
                finished_sum += np.where(by_seed, episode_return.reshape(S, E), 0.0).sum(axis=1)
                finished_n += by_seed.sum(axis=1)
                episode_return[done] = 0.0
            obs = next_obs
        return key, stats, sde, obs, final, finished_sum, finished_n
