"""JAX runner for PPO (Listing 1) and BPO-PPO (Listing 4) on vectorised functional environments.

``make_train(cfg) -> train(key, hparams)``: the whole run is one program of nested ``lax.scan``s
(evaluation blocks of updates; each update is):

    rollout of n_steps x n_envs with pi (ppo) or mu (bpo); add it to D       (Listing 4, l.3-4)
    V(s), V(s'); GAE (ppo) or truncated IS-TD(lambda) returns (bpo)          (eqs. 6, 11)
    n_epochs of PPO minibatch steps, ratio pi_theta / pi (ppo) or / mu (bpo) (eqs. 10, 12)
    behaviour step: FQE Q, r-hat, FQE Q-hat, mu                              (bpo only; eqs. 7, 13-16)

Observations are normalised with running statistics updated from the rollouts (shared by every
network). Rollout rows keep the observations normalised as the acting policy saw them, so the
PPO ratio starts at pi/mu exactly; D keeps raw observations, normalised with the current
statistics whenever Q, Q-hat and mu train on them.
"""

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from bpo import distributions as D
from bpo import replay as rb
from bpo.agents.bpo import make_behaviour
from bpo.agents.ppo import PPOState, linear_schedule, make_optimizer, ppo_update
from bpo.config import OnPolicyTrainConfig, PPOHyperparams, validate
from bpo.networks import Actor, Critic
from bpo.normalization import RunningStats, init_stats, normalize, update_stats
from bpo.returns import gae_returns, tis_advantages
from envs import make_env
from envs.functional import auto_reset_step


class Carry(NamedTuple):
    key: jnp.ndarray
    ppo: PPOState
    behaviour: tuple
    replay: rb.Replay | tuple
    stats: RunningStats
    env_state: tuple
    obs: jnp.ndarray  # raw observations [n_envs, obs_dim]
    sde: jnp.ndarray  # gSDE exploration matrices [n_envs, latent, action] (zeros without gSDE)
    episode_return: jnp.ndarray  # running return of the current episode of each env
    update: jnp.ndarray


def n_updates(cfg: OnPolicyTrainConfig) -> int:
    """The budget in whole rollouts, rounded up as SB3 does."""
    return -(-cfg.total_timesteps // (cfg.ppo.n_steps * cfg.ppo.n_envs))


def eval_schedule(cfg: OnPolicyTrainConfig) -> np.ndarray:
    """Boolean per update: evaluate after it. Every ``eval_every`` steps (rounded down to whole
    rollouts, at least one) and after the last update; one more evaluation precedes training."""
    per_eval = max(1, cfg.eval_every // (cfg.ppo.n_steps * cfg.ppo.n_envs))
    after = (np.arange(n_updates(cfg)) + 1) % per_eval == 0
    after[-1] = True
    return after


def make_train(cfg: OnPolicyTrainConfig, progress: Callable | None = None):
    """Return ``train(key, hparams) -> metrics`` for one run; ``progress(env_steps, eval_return)``
    is called from inside the jitted run after every evaluation when given."""
    validate(cfg)
    p, b = cfg.ppo, cfg.bpo
    env = make_env(cfg.env)
    spec = env.spec
    discrete, use_bpo = spec.discrete, cfg.algo == "bpo"
    use_sde = p.use_sde and not discrete
    n_envs, n_steps = p.n_envs, p.n_steps
    batch_size = n_steps * n_envs
    total_updates = n_updates(cfg)
    actor = Actor(p.pi_hidden, spec.n_actions, discrete, use_sde, p.log_std_init, p.activation, p.ortho_init)
    critic = Critic(p.vf_hidden, p.activation, p.ortho_init)
    tx = make_optimizer(p.max_grad_norm, p.adam_eps)
    low = None if discrete else jnp.asarray(spec.action_low)
    high = None if discrete else jnp.asarray(spec.action_high)

    def norm(stats, obs):
        return normalize(stats, obs) if p.normalize_observations else obs

    def env_action(action):
        return action if discrete else jnp.clip(action, low, high)

    def dist_fn(params):
        return lambda obs: actor.apply(params, obs)[0]

    def critic_fn(params, obs):
        return critic.apply(params, obs)

    vec_step = jax.vmap(lambda k, s, a: auto_reset_step(env, k, s, a))

    def train(key, hp: PPOHyperparams):
        k_env, k_actor, k_critic, k_beh, key = jax.random.split(key, 5)
        env_state, obs0 = jax.vmap(env.reset)(jax.random.split(k_env, n_envs))
        stats = update_stats(init_stats(spec.obs_dim), obs0)
        actor_params = actor.init(k_actor, obs0)
        critic_params = critic.init(k_critic, obs0)
        ppo_state = PPOState(actor_params, critic_params, tx.init(actor_params), tx.init(critic_params))
        action0 = jnp.int32(0) if discrete else jnp.zeros(spec.n_actions, jnp.float32)

        behaviour, bstate, replay = None, (), ()
        if use_bpo:
            behaviour = make_behaviour(b, discrete, spec.n_actions, lambda prm, o: actor.apply(prm, o)[0], hp,
                                       spec.action_low, spec.action_high, b.clip_actions)
            bstate = behaviour.init(k_beh, obs0[0], action0, actor_params)  # mu starts equal to pi
            zero = jnp.float32(0.0)
            example = {"obs": obs0[0], "action": action0, "reward": zero, "terminated": zero, "truncated": zero,
                       "next_obs": obs0[0], "log_mu": zero}
            replay = rb.init_replay(example, b.replay_size)
        latent_dim = p.pi_hidden[-1]
        sde0 = jnp.zeros((n_envs, latent_dim, spec.n_actions) if use_sde else (n_envs,))

        def collecting_params(carry: Carry):
            return carry.behaviour.mu_params if use_bpo else carry.ppo.actor_params

        def rollout(carry: Carry):
            params = collecting_params(carry)

            def env_step(c, step_index):
                key, env_state, obs, stats, sde, ep_return = c
                key, k_act, k_env, k_sde = jax.random.split(key, 4)
                obs_n = norm(stats, obs)
                dist, latent = actor.apply(params, obs_n)
                if use_sde:
                    action, sde = D.gsde_action(k_sde, dist, latent, sde, params["params"]["log_std"], step_index,
                                                p.sde_sample_freq)
                else:
                    action = D.sample(k_act, dist, discrete)
                step = vec_step(jax.random.split(k_env, n_envs), env_state, env_action(action))
                done = step.terminated | step.truncated
                ep_return = ep_return + step.reward
                row = {
                    "obs": obs_n, "raw_obs": obs, "action": action, "log_prob": D.log_prob(dist, action, discrete),
                    "reward": step.reward, "terminated": step.terminated.astype(jnp.float32),
                    "truncated": step.truncated.astype(jnp.float32), "next_obs": norm(stats, step.final_obs),
                    "raw_next_obs": step.final_obs, "finished_return": jnp.where(done, ep_return, jnp.nan),
                }
                if p.normalize_observations:
                    stats = update_stats(stats, step.obs)
                return (key, step.state, step.obs, stats, sde, jnp.where(done, 0.0, ep_return)), row

            c = (carry.key, carry.env_state, carry.obs, carry.stats, carry.sde, carry.episode_return)
            (key, env_state, obs, stats, sde, ep_return), rows = jax.lax.scan(env_step, c, jnp.arange(n_steps))
            return carry._replace(key=key, env_state=env_state, obs=obs, stats=stats, sde=sde,
                                  episode_return=ep_return), rows

        def returns_and_batch(carry: Carry, rows):
            values = critic_fn(carry.ppo.critic_params, rows["obs"])
            next_values = critic_fn(carry.ppo.critic_params, rows["next_obs"])
            done = jnp.maximum(rows["terminated"], rows["truncated"])
            adv_weight = jnp.ones_like(rows["reward"])
            old_log_prob = rows["log_prob"]
            diagnostics = {}
            if use_bpo:
                log_pi = D.log_prob(dist_fn(carry.ppo.actor_params)(rows["obs"]), rows["action"], discrete)
                log_ratio = log_pi - rows["log_prob"]
                advantages, returns = tis_advantages(
                    rows["reward"], values, next_values, rows["terminated"], done, log_ratio, gamma=hp.gamma,
                    lam=hp.gae_lambda, rho_bar=hp.rho_bar, c_bar=hp.c_bar, traj=b.traj,
                    current_rho=b.advantage == "eq11",
                )
                if b.weight_on_advantage:
                    old_log_prob = log_pi
                    adv_weight = jnp.minimum(hp.rho_bar, jnp.exp(log_ratio))
                ratio = jnp.exp(log_ratio)
                diagnostics = {"is_ratio_mean": jnp.mean(ratio), "rho_truncated_frac": jnp.mean(ratio > hp.rho_bar),
                               "c_truncated_frac": jnp.mean(ratio > hp.c_bar)}
            else:
                returns = gae_returns(rows["reward"], values, next_values, rows["terminated"], done,
                                      gamma=hp.gamma, lam=hp.gae_lambda)
                advantages = returns - values
            batch = {"obs": rows["obs"], "action": rows["action"], "old_log_prob": old_log_prob,
                     "advantage": advantages, "return": returns, "adv_weight": adv_weight}
            flat = jax.tree.map(lambda x: x.reshape((batch_size,) + x.shape[2:]), batch)
            return flat, diagnostics

        def one_update(carry: Carry, _):
            carry, rows = rollout(carry)
            key, k_ppo, k_beh = jax.random.split(carry.key, 3)
            replay = carry.replay
            if use_bpo:
                flat = lambda x: x.reshape((batch_size,) + x.shape[2:])  # noqa: E731
                transitions = {"obs": flat(rows["raw_obs"]), "action": flat(rows["action"]),
                               "reward": flat(rows["reward"]), "terminated": flat(rows["terminated"]),
                               "truncated": flat(rows["truncated"]), "next_obs": flat(rows["raw_next_obs"]),
                               "log_mu": flat(rows["log_prob"])}
                replay = rb.add(replay, transitions, jnp.ones(batch_size, bool))
            batch, diagnostics = returns_and_batch(carry, rows)
            progress_remaining = jnp.maximum(1.0 - (carry.update + 1) * batch_size / cfg.total_timesteps, 0.0)
            ppo_state, ppo_metrics = ppo_update(
                k_ppo, carry.ppo, batch, actor_apply=actor.apply, critic_apply=critic_fn, tx=tx,
                n_epochs=p.n_epochs, batch_size=p.batch_size,
                lr=linear_schedule(hp.learning_rate, progress_remaining, p.lr_schedule),
                clip_range=linear_schedule(hp.clip_range, progress_remaining, p.clip_range_schedule),
                ent_coef=hp.ent_coef, vf_coef=hp.vf_coef, discrete=discrete, normalize_advantage=p.normalize_advantage,
            )
            bstate, beh_metrics = carry.behaviour, {}
            if use_bpo:
                normed = replay.replace(data={**replay.data, "obs": norm(carry.stats, replay.data["obs"]),
                                              "next_obs": norm(carry.stats, replay.data["next_obs"])})
                lr_scale = linear_schedule(1.0, progress_remaining, b.lr_schedule)
                bstate, beh_metrics = behaviour.step(k_beh, bstate, normed, dist_fn(ppo_state.actor_params), hp.gamma,
                                                     lr_scale)
            finished = rows["finished_return"]
            n_finished = jnp.sum(~jnp.isnan(finished))
            metrics = {**ppo_metrics, **beh_metrics, **diagnostics,
                       "train_return": jnp.nansum(finished) / jnp.maximum(n_finished, 1),
                       "train_episodes": n_finished}
            carry = carry._replace(key=key, ppo=ppo_state, behaviour=bstate, replay=replay, update=carry.update + 1)
            return carry, metrics

        def evaluate(carry: Carry):
            keys = jax.random.split(jax.random.fold_in(carry.key, 7), cfg.eval_episodes)
            policy = dist_fn(carry.ppo.actor_params)

            def episode(k):
                state, obs = env.reset(k)

                def cond(c):
                    return ~c[3] & (c[4] < spec.max_episode_steps)

                def body(c):
                    k, state, obs, _, t, total = c
                    k, k_step = jax.random.split(k)
                    action = env_action(D.mode(policy(norm(carry.stats, obs)), discrete))
                    state, obs, reward, terminated, truncated = env.step_env(k_step, state, action)
                    return k, state, obs, terminated | truncated, t + 1, total + reward

                init = (k, state, obs, jnp.array(False), jnp.zeros((), jnp.int32), jnp.zeros(()))
                return jax.lax.while_loop(cond, body, init)[-1]

            out = {"eval_return": jnp.mean(jax.vmap(episode)(keys)), "eval_step": carry.update * batch_size}
            if progress is not None:
                jax.debug.callback(progress, out["eval_step"], out["eval_return"])
            return out

        eval_after = eval_schedule(cfg)  # static: which updates are followed by an evaluation
        skipped = {"eval_return": jnp.float32(jnp.nan), "eval_step": jnp.int32(-1)}
        carry0 = Carry(key, ppo_state, bstate, replay, stats, env_state, obs0, sde0, jnp.zeros(n_envs),
                       jnp.zeros((), jnp.int32))

        def update_and_maybe_evaluate(carry, index):
            carry, metrics = one_update(carry, None)
            # The index comes from xs, so it is not batched under vmap: cond stays a branch and
            # evaluation runs only after the scheduled updates, in a single compiled loop body.
            ev = jax.lax.cond(jnp.asarray(eval_after)[index], evaluate, lambda _: skipped, carry)
            return carry, (ev, metrics)

        first = evaluate(carry0)
        carry, (evals, train_metrics) = jax.lax.scan(update_and_maybe_evaluate, carry0, jnp.arange(total_updates))
        picked = jax.tree.map(lambda x: x[np.flatnonzero(eval_after)], evals)
        evals = jax.tree.map(lambda a, b: jnp.concatenate([a[None], b]), first, picked)
        final = {"actor_params": carry.ppo.actor_params, "critic_params": carry.ppo.critic_params,
                 "obs_stats": carry.stats}
        return {"eval": evals, "train": train_metrics, "final": final}

    return train
