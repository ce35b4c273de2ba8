"""Host runner for PPO (Listing 1) and BPO-PPO (Listing 4) on Gymnasium environments.

The environments step on the host; everything else is the learner of ``bpo.learner``, jitted,
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

from bpo import checkpoint as ckpt
from bpo import processes
from bpo.config import ConfigError, OnPolicyTrainConfig, PPOHyperparams
from bpo.learner import keyed_update, make_learner
from bpo.runners.evaluation import Evaluations
from bpo.runners.onpolicy import eval_schedule, n_updates
from bpo.runners.seeds import seed_keys, seed_map
from envs.gymnasium_envs import TRAIN_STREAM, env_seeds, final_observations, gym_spec, make_vector_env


def _aot(fn, *args):
    """Compile ``fn`` for these arguments now, so that compilation is timed apart and each later
    call skips jit's cache lookup."""
    return jax.jit(fn).lower(*args).compile()


class HostRunner:
    """One configuration, all its seeds. ``run()`` trains and returns the JAX runner's output
    layout: ``{"eval": {eval_return, eval_step}, "train": {metric: [seeds, updates]}, "final": ...}``."""

    def __init__(self, cfg: OnPolicyTrainConfig, hp: PPOHyperparams, progress: Callable | None = None, logger=None,
                 checkpoint_dir=None, checkpoint_every: int = 0):
        self.cfg, self.progress, self.logger = cfg, progress, logger
        self.checkpoint_dir, self.checkpoint_every = checkpoint_dir, checkpoint_every
        self.spec = gym_spec(cfg.env)
        self.learner = make_learner(cfg, self.spec)
        self.n_seeds, self.n_envs, self.n_steps = cfg.seeds, cfg.ppo.n_envs, cfg.ppo.n_steps
        self.hp = hp
        self.compile_time_s = 0.0
        self.eval_time_s = 0.0
        self.update_time_s = 0.0  # inside the update calls (a part of the training time)
        self.eval_worker_time_s = 0.0  # spent evaluating, in the worker process when in the background
        self._n_evals = 0

    # -- compiled pieces -------------------------------------------------------------------------
    def _build(self, obs0):
        learner, hp = self.learner, self.hp
        S = self.n_seeds
        keys = seed_keys(self.cfg.seed, S)

        # Keys are split exactly as in the JAX runner (k_env unused here: Gymnasium environments
        # have their own seeds), so on twin environments both runners train identically.
        def init(key, obs0):
            _, k_actor, k_critic, k_beh, key = jax.random.split(key, 5)
            return key, learner.init((k_actor, k_critic, k_beh), hp, obs0)

        n_act = 1 if self.spec.discrete else self.spec.n_actions

        def pack(env_action, action, log_prob, obs_n, prev_next_obs):
            """Every per-step output the host needs in one float32 array [seeds, envs, k]: one
            transfer instead of five."""
            def col(x):
                x = x.astype(jnp.float32)
                return x[..., None] if x.ndim == 1 else x  # discrete actions: [envs]
            return jnp.concatenate([col(env_action), col(action), log_prob[..., None], obs_n, prev_next_obs], axis=-1)

        def step(params, stats, key, prev_final_obs, obs, sde, step_index):
            # Row t-1's next observation is normalised with the statistics row t-1 was acted on
            # with; then the statistics take in the new observations, as the JAX runner does.
            prev_next_obs = learner.normalize(stats, prev_final_obs)
            stats = learner.observe(stats, obs)
            key, k_act, _, k_sde = jax.random.split(key, 4)
            action, env_action, log_prob, obs_n, sde = learner.act_with(params, stats, k_act, k_sde, obs, sde,
                                                                        step_index)
            return pack(env_action, action, log_prob, obs_n, prev_next_obs), stats, key, sde

        def first_step(params, stats, key, obs, sde, step_index):
            # The statistics already hold obs (from init or from the end of the previous rollout).
            key, k_act, _, k_sde = jax.random.split(key, 4)
            action, env_action, log_prob, obs_n, sde = learner.act_with(params, stats, k_act, k_sde, obs, sde,
                                                                        step_index)
            return pack(env_action, action, log_prob, obs_n, obs_n), key, sde

        def close_rollout(stats, final_obs, obs):
            return learner.normalize(stats, final_obs), learner.observe(stats, obs)

        def update(state, key, rows):
            key, state, metrics = keyed_update(learner, state, key, rows, hp)
            return key, state, metrics, learner.acting_params(state)

        start = time.perf_counter()
        key, state = jax.jit(seed_map(init, S))(keys, jnp.asarray(obs0))
        params, stats, sde = learner.acting_params(state), state.stats, jax.vmap(lambda _: learner.sde_init())(keys)
        obs = jnp.asarray(obs0)
        # Per-step calls go through jit's C++ dispatch (a third faster than calling an AOT-compiled
        # executable); a first call compiles them. The update, once per rollout, is compiled ahead.
        self._first_step = jax.jit(seed_map(first_step, S, in_axes=(0, 0, 0, 0, 0, None)))
        self._step = jax.jit(seed_map(step, S, in_axes=(0, 0, 0, 0, 0, 0, None)))
        self._close = jax.jit(seed_map(close_rollout, S))
        jax.block_until_ready((self._first_step(params, stats, key, obs, sde, np.int32(0)),
                               self._step(params, stats, key, obs, obs, sde, np.int32(0)),
                               self._close(stats, obs, obs)))
        self._update = _aot(seed_map(update, S), state, key, jax.tree.map(jnp.asarray, self._empty_rows()))
        self.compile_time_s = time.perf_counter() - start
        o = self.spec.obs_dim
        self._cols = {"env_action": slice(0, n_act), "action": slice(n_act, 2 * n_act),
                      "log_prob": 2 * n_act, "obs": slice(2 * n_act + 1, 2 * n_act + 1 + o),
                      "next_obs": slice(2 * n_act + 1 + o, 2 * n_act + 1 + 2 * o)}
        return key, state, params, stats, sde

    def _empty_rows(self) -> dict:
        S, T, E, spec = self.n_seeds, self.n_steps, self.n_envs, self.spec
        obs = (S, T, E, spec.obs_dim)
        action = (S, T, E) if spec.discrete else (S, T, E, spec.n_actions)
        f32 = np.float32
        return {"obs": np.zeros(obs, f32), "raw_obs": np.zeros(obs, f32),
                "action": np.zeros(action, np.int32 if spec.discrete else f32), "log_prob": np.zeros((S, T, E), f32),
                "reward": np.zeros((S, T, E), f32), "terminated": np.zeros((S, T, E), f32),
                "truncated": np.zeros((S, T, E), f32), "next_obs": np.zeros(obs, f32),
                "raw_next_obs": np.zeros(obs, f32)}

    def _report(self, eval_step: int, eval_returns: np.ndarray, rate: float):
        if self.progress is not None:
            for r in eval_returns:
                self.progress(eval_step, float(r), rate)
        if self.logger is not None:
            self.logger.log_eval(eval_step, eval_returns)

    # -- the run ---------------------------------------------------------------------------------
    def run(self) -> dict:
        cfg = self.cfg
        if ckpt.exists(self.checkpoint_dir) and (why := ckpt.mismatch(self.checkpoint_dir, cfg)):
            raise ConfigError("resume", why)
        # Started first: a background evaluator's worker process starts up while this one compiles.
        evaluations = Evaluations(cfg, background=cfg.eval_in_background)
        try:
            env = make_vector_env(cfg.env, cfg.seeds * cfg.ppo.n_envs, cfg.vector_mode, processes.die_with_parent)
            # The per-step programs are fastest with synchronous CPU dispatch, set in bpo/__init__.py.
            try:
                return self._run(env, evaluations)
            finally:
                env.close()
        finally:
            evaluations.close()

    def _evaluate(self, evaluations: Evaluations, env_step: int, actor_params, stats, rate: float) -> list:
        """Submit an evaluation and report those that are done; returns them as (step, returns).
        ``rate``: training steps/s so far, all seeds, evaluation excluded."""
        start = time.perf_counter()
        evaluations.submit(env_step, actor_params, stats, self._n_evals)
        self._n_evals += 1
        done = evaluations.ready()
        self.eval_time_s += time.perf_counter() - start
        for step, returns in done:
            self._report(step, returns, rate)
        return done

    def _wait_for_evaluations(self, evaluations: Evaluations, rate: float) -> list:
        start = time.perf_counter()
        done = evaluations.ready(wait=True)
        self.eval_time_s += time.perf_counter() - start
        for step, returns in done:
            self._report(step, returns, rate)
        return done

    def _save(self, env, state, obs, episode_return, updates_done: int, train_metrics: list, evals: list):
        """A checkpoint at a rollout boundary: learner state and keys, the environments' simulator
        states, and the curve so far (evaluations in flight are waited for first)."""
        ckpt.raise_if_non_finite({}, 0, "update", self.checkpoint_dir, state[1], state_at=updates_done - 1)
        extra = {"obs": np.asarray(obs), "episode_return": episode_return, "updates_done": updates_done,
                 "train": {k: np.stack([m[k] for m in train_metrics], axis=1) for k in train_metrics[0]},
                 "eval_steps": np.array([s for s, _ in evals]), "eval_returns": np.stack([r for _, r in evals]),
                 "n_evals": self._n_evals, "envs": list(env.call("take_snapshot"))}
        ckpt.save(self.checkpoint_dir, state, extra, {"updates_done": updates_done, "updates": n_updates(self.cfg),
                                                      "checkpoint_every": self.checkpoint_every, "unit": "update"},
                  self.cfg)

    def _restore(self, env, template):
        state, extra, _ = ckpt.load(self.checkpoint_dir, template)
        env.set_attr("snapshot", list(extra["envs"]))
        return state, extra

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

    def _run(self, env, evaluations: Evaluations) -> dict:
        cfg, S, E, T = self.cfg, self.n_seeds, self.n_envs, self.n_steps
        seeds = [s for run in range(S) for s in env_seeds(cfg.seed, run, TRAIN_STREAM, E)]
        obs, _ = env.reset(seed=seeds)
        obs = obs.astype(np.float32).reshape(S, E, -1)
        key, state, params, stats, sde = self._build(obs)
        rows = self._empty_rows()
        batch = T * E

        eval_after = eval_schedule(cfg)
        self._n_evals = 0
        first_update, episode_return = 0, np.zeros(S * E)
        if ckpt.exists(self.checkpoint_dir):
            (key, state, sde), extra = self._restore(env, (key, state, sde))
            params, stats, obs = self.learner.acting_params(state), state.stats, np.asarray(extra["obs"], np.float32)
            first_update, episode_return = int(extra["updates_done"]), np.array(extra["episode_return"])
            train_metrics = [{k: v[:, i] for k, v in extra["train"].items()} for i in range(first_update)]
            evals = [(int(step), np.asarray(r))
                     for step, r in zip(extra["eval_steps"], extra["eval_returns"], strict=True)]
            self._n_evals = int(extra["n_evals"])
        else:
            evals = self._evaluate(evaluations, 0, state.ppo.actor_params, stats, 0.0)
            train_metrics = []
        train_start, eval_at_start = time.perf_counter(), self.eval_time_s

        def train_rate(env_step):
            seconds = time.perf_counter() - train_start - (self.eval_time_s - eval_at_start)
            return env_step * S / seconds if seconds > 0 else 0.0

        for update_index in range(first_update, n_updates(cfg)):
            key, stats, sde, obs, final, finished_sum, finished_n = self._collect_rollout(
                env, rows, params, stats, key, obs, sde, episode_return)
            last_next, stats = self._close(stats, final, obs)
            rows["next_obs"][:, T - 1] = last_next
            state = state._replace(stats=stats)
            started = time.perf_counter()
            key, state, metrics, params = jax.block_until_ready(self._update(state, key, rows))
            self.update_time_s += time.perf_counter() - started
            metrics = {k: np.asarray(v) for k, v in metrics.items()}
            metrics["train_return"] = np.where(finished_n > 0, finished_sum / np.maximum(finished_n, 1), np.nan)
            metrics["train_episodes"] = finished_n
            ckpt.raise_if_non_finite({k: v[:, None] for k, v in metrics.items()}, update_index, "update",
                                     self.checkpoint_dir)
            train_metrics.append(metrics)
            if self.logger is not None:
                self.logger.log_update(update_index, (update_index + 1) * batch, metrics)
            if eval_after[update_index]:
                step = (update_index + 1) * batch
                evals += self._evaluate(evaluations, step, state.ppo.actor_params, stats, train_rate(step))
            done_updates = update_index + 1
            stop = processes.requested() if done_updates < n_updates(cfg) else None
            saving = self.checkpoint_every > 0 and self.checkpoint_dir is not None
            if saving and done_updates < n_updates(cfg) and (done_updates % self.checkpoint_every == 0 or stop):
                evals += self._wait_for_evaluations(evaluations, train_rate(done_updates * batch))
                self._save(env, (key, state, sde), obs, episode_return, done_updates, train_metrics, evals)
            if stop is not None:
                raise processes.Interrupted(stop, f"after update {done_updates} of {n_updates(cfg)}",
                                            self.checkpoint_dir if saving else None)
        evals += self._wait_for_evaluations(evaluations, train_rate(n_updates(cfg) * batch))
        self.eval_worker_time_s = evaluations.worker_time_s
        train = {k: np.stack([m[k] for m in train_metrics], axis=1) for k in train_metrics[0]}
        eval_out = {"eval_return": np.stack([r for _, r in evals], axis=1).astype(np.float32),
                    "eval_step": np.tile(np.array([s for s, _ in evals], np.int32), (S, 1))}
        final_out = {"actor_params": state.ppo.actor_params, "critic_params": state.ppo.critic_params,
                     "obs_stats": stats}
        return {"eval": eval_out, "train": train, "final": final_out}
