"""The on-policy learner of PPO (Listing 1) and BPO-PPO (Listing 4), independent of how the
environment is stepped: the JAX runner calls these functions inside one jitted program, a host
runner (Gymnasium on the CPU) calls ``act`` once per vector step and ``update`` once per rollout.

    act:     normalise the observation; sample from pi (ppo) or mu (bpo); gSDE noise when due
    update:  add the rollout to D (bpo); GAE (ppo) or truncated IS-TD(lambda) returns (bpo);
             n_epochs of PPO steps, ratio pi_theta / pi_old (ppo) or / mu (bpo);
             behaviour step: FQE Q, r-hat, FQE Q-hat, mu (bpo)

Rollout rows are time-major ``[n_steps, n_envs, ...]`` dicts with ``obs`` (normalised as the
acting policy saw it), ``raw_obs``, ``action``, ``log_prob``, ``reward``, ``terminated``,
``truncated``, ``next_obs`` (the real next observation, normalised with the same statistics)
and ``raw_next_obs``. Observation statistics are updated by the caller with ``observe`` after
every vector step, on the observations the environments return.
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

from bpo import diagnostics as dg
from bpo import distributions as D
from bpo import replay as rb
from bpo.agents.bpo import make_behaviour
from bpo.agents.ppo import PPOState, linear_schedule, make_optimizer, ppo_update
from bpo.config import OnPolicyTrainConfig, PPOHyperparams
from bpo.networks import Actor, Critic
from bpo.normalization import RunningStats, init_stats, normalize, update_stats
from bpo.returns import gae_returns, tis_advantages
from envs.functional import EnvSpec


class LearnerState(NamedTuple):
    ppo: PPOState
    behaviour: tuple  # BehaviourState for bpo, () for ppo
    replay: rb.Replay | tuple
    stats: RunningStats
    update: jnp.ndarray  # updates done


class Learner(NamedTuple):
    init: Callable  # (keys (actor, critic, behaviour), hp, obs0 [n_envs, obs]) -> LearnerState
    act: Callable  # (state, k_act, k_sde, obs, sde, step_index) -> (action, env_action, log_prob, obs_n, sde)
    act_with: Callable  # (acting params, stats, k_act, k_sde, obs, sde, step_index) -> as act
    acting_params: Callable  # (state) -> parameters of the collecting policy (mu for bpo, pi for ppo)
    observe: Callable  # (stats, obs) -> stats
    normalize: Callable  # (stats, obs) -> network input
    update: Callable  # (state, k_ppo, k_beh, rows, hp) -> (state, metrics)
    greedy_action: Callable  # (state, obs) -> deterministic environment action
    greedy_with: Callable  # (actor params, stats, obs) -> deterministic environment action
    sde_init: Callable  # () -> initial gSDE exploration matrices (zeros; a dummy without gSDE)
    critic_apply: Callable  # (critic_params, obs) -> V(s)


def make_learner(cfg: OnPolicyTrainConfig, spec: EnvSpec) -> Learner:
    p, b = cfg.ppo, cfg.bpo
    discrete, use_bpo = spec.discrete, cfg.algo == "bpo"
    use_sde = p.use_sde and not discrete
    n_envs = p.n_envs
    batch_size = p.n_steps * n_envs
    actor = Actor(p.pi_hidden, spec.n_actions, discrete, use_sde, p.log_std_init, p.activation, p.ortho_init)
    critic = Critic(p.vf_hidden, p.activation, p.ortho_init)
    tx = make_optimizer(p.max_grad_norm, p.adam_eps)
    low = None if discrete else jnp.asarray(spec.action_low)
    high = None if discrete else jnp.asarray(spec.action_high)

    def norm(stats, obs):
        return normalize(stats, obs) if p.normalize_observations else obs

    def observe(stats, obs):
        return update_stats(stats, obs) if p.normalize_observations else stats

    def env_action(action):
        return action if discrete else jnp.clip(action, low, high)

    def dist_fn(params):
        return lambda obs: actor.apply(params, obs)[0]

    def critic_fn(params, obs):
        return critic.apply(params, obs)

    def behaviour_for(hp):
        return make_behaviour(b, discrete, spec.n_actions, lambda prm, o: actor.apply(prm, o)[0], hp,
                              spec.action_low, spec.action_high, b.clip_actions)

    def init(keys, hp: PPOHyperparams, obs0) -> LearnerState:
        k_actor, k_critic, k_beh = keys
        stats = update_stats(init_stats(spec.obs_dim), obs0)
        actor_params = actor.init(k_actor, obs0)
        critic_params = critic.init(k_critic, obs0)
        ppo_state = PPOState(actor_params, critic_params, tx.init(actor_params), tx.init(critic_params))
        bstate, replay = (), ()
        if use_bpo:
            action0 = jnp.int32(0) if discrete else jnp.zeros(spec.n_actions, jnp.float32)
            bstate = behaviour_for(hp).init(k_beh, obs0[0], action0, actor_params)  # mu starts equal to pi
            zero = jnp.float32(0.0)
            example = {"obs": obs0[0], "action": action0, "reward": zero, "terminated": zero, "truncated": zero,
                       "next_obs": obs0[0], "log_mu": zero}
            replay = rb.init_replay(example, b.replay_size)
        return LearnerState(ppo_state, bstate, replay, stats, jnp.zeros((), jnp.int32))

    def sde_init():
        return jnp.zeros((n_envs, p.pi_hidden[-1], spec.n_actions) if use_sde else (n_envs,))

    def acting_params(state: LearnerState):
        return state.behaviour.mu_params if use_bpo else state.ppo.actor_params

    def act(state: LearnerState, k_act, k_sde, obs, sde, step_index):
        return act_with(acting_params(state), state.stats, k_act, k_sde, obs, sde, step_index)

    def act_with(params, stats, k_act, k_sde, obs, sde, step_index):
        """``act`` from just the acting parameters and the statistics: a host runner calls this
        every vector step, and passing the whole learner state would cost a dispatch per leaf."""
        obs_n = norm(stats, obs)
        dist, latent = actor.apply(params, obs_n)
        if use_sde:
            action, sde = D.gsde_action(k_sde, dist, latent, sde, params["params"]["log_std"], step_index,
                                        p.sde_sample_freq)
        else:
            action = D.sample(k_act, dist, discrete)
        return action, env_action(action), D.log_prob(dist, action, discrete), obs_n, sde

    def greedy_action(state: LearnerState, obs):
        return greedy_with(state.ppo.actor_params, state.stats, obs)

    def greedy_with(actor_params, stats, obs):
        return env_action(D.mode(dist_fn(actor_params)(norm(stats, obs)), discrete))

    def returns_and_batch(state: LearnerState, rows, hp):
        values = critic_fn(state.ppo.critic_params, rows["obs"])
        next_values = critic_fn(state.ppo.critic_params, rows["next_obs"])
        done = jnp.maximum(rows["terminated"], rows["truncated"])
        adv_weight = jnp.ones_like(rows["reward"])
        old_log_prob = rows["log_prob"]
        diagnostics = {}
        if use_bpo:
            log_pi = D.log_prob(dist_fn(state.ppo.actor_params)(rows["obs"]), rows["action"], discrete)
            log_ratio = log_pi - rows["log_prob"]
            advantages, returns = tis_advantages(
                rows["reward"], values, next_values, rows["terminated"], done, log_ratio, gamma=hp.gamma,
                lam=hp.gae_lambda, rho_bar=hp.rho_bar, c_bar=hp.c_bar, traj=b.traj,
                current_rho=b.advantage == "eq11",
            )
            if b.weight_on_advantage:
                old_log_prob = log_pi
                adv_weight = jnp.minimum(hp.rho_bar, jnp.exp(log_ratio))
            # mu's parameters are still those that collected the rollout: the behaviour step comes later.
            mu_dist = dist_fn(state.behaviour.mu_params)(rows["obs"])
            diagnostics = dg.off_policy_diagnostics(
                log_pi, rows["log_prob"], D.log_prob(mu_dist, rows["action"], discrete),
                dist_fn(state.ppo.actor_params)(rows["obs"]), mu_dist, discrete, hp.rho_bar, hp.c_bar)
            if math.isfinite(b.trust_region_delta):
                mask = dg.trust_region_mask(log_ratio, done, b.trust_region_delta, b.trust_region_criterion)
                adv_weight = adv_weight * mask  # masked steps add 0; the loss still divides by every step
                diagnostics.update(trm_mask_rate=1.0 - jnp.mean(mask),
                                   trm_segments_masked=dg.masked_segment_fraction(mask, done))
        else:
            returns = gae_returns(rows["reward"], values, next_values, rows["terminated"], done,
                                  gamma=hp.gamma, lam=hp.gae_lambda)
            advantages = returns - values
        batch = {"obs": rows["obs"], "action": rows["action"], "old_log_prob": old_log_prob,
                 "advantage": advantages, "return": returns, "adv_weight": adv_weight}
        return jax.tree.map(flatten, batch), diagnostics

    def flatten(x):
        return x.reshape((batch_size,) + x.shape[2:])

    def update(state: LearnerState, k_ppo, k_beh, rows, hp: PPOHyperparams):
        replay = state.replay
        if use_bpo:
            transitions = {"obs": rows["raw_obs"], "action": rows["action"], "reward": rows["reward"],
                           "terminated": rows["terminated"], "truncated": rows["truncated"],
                           "next_obs": rows["raw_next_obs"], "log_mu": rows["log_prob"]}
            replay = rb.add(replay, jax.tree.map(flatten, transitions), jnp.ones(batch_size, bool))
        batch, diagnostics = returns_and_batch(state, rows, hp)
        progress_remaining = jnp.maximum(1.0 - (state.update + 1) * batch_size / cfg.total_timesteps, 0.0)
        ppo_state, ppo_metrics = ppo_update(
            k_ppo, state.ppo, batch, actor_apply=actor.apply, critic_apply=critic_fn, tx=tx,
            n_epochs=p.n_epochs, batch_size=p.batch_size,
            lr=linear_schedule(hp.learning_rate, progress_remaining, p.lr_schedule),
            clip_range=linear_schedule(hp.clip_range, progress_remaining, p.clip_range_schedule),
            ent_coef=hp.ent_coef, vf_coef=hp.vf_coef, discrete=discrete, normalize_advantage=p.normalize_advantage,
        )
        bstate, beh_metrics = state.behaviour, {}
        if use_bpo:
            normed = replay.replace(data={**replay.data, "obs": norm(state.stats, replay.data["obs"]),
                                          "next_obs": norm(state.stats, replay.data["next_obs"])})
            lr_scale = linear_schedule(1.0, progress_remaining, b.lr_schedule)
            bstate, beh_metrics = behaviour_for(hp).step(k_beh, bstate, normed, dist_fn(ppo_state.actor_params),
                                                         hp.gamma, lr_scale)
        new_state = LearnerState(ppo_state, bstate, replay, state.stats, state.update + 1)
        return new_state, {**ppo_metrics, **beh_metrics, **diagnostics}

    return Learner(init=init, act=act, act_with=act_with, acting_params=acting_params, observe=observe,
                   normalize=norm, update=update, greedy_action=greedy_action, greedy_with=greedy_with,
                   sde_init=sde_init, critic_apply=critic_fn)


def keyed_update(learner: Learner, state: LearnerState, key, rows, hp: PPOHyperparams):
    """One learner update from a run's key: ``(key, state, rows, hp) -> (key, state, metrics)``.
    Both runners call this, so given the same rollout they perform the same update."""
    key, k_ppo, k_beh = jax.random.split(key, 3)
    state, metrics = learner.update(state, k_ppo, k_beh, rows, hp)
    return key, state, metrics
