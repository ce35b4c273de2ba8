"""The on-policy learner of Algorithm 1 for any registered method (``bpo.agents.methods``):
PPO and BPO-PPO (Listings 1 and 4), A2C and BPO-A2C, or a method of one's own, independent of how
the environment is stepped: the JAX runner calls its methods inside one jitted program, a host
runner (Gymnasium on the CPU) calls ``act_with`` once per vector step and ``update`` once per
rollout.

    act:     normalise the observation; sample from pi (the method alone) or mu (bpo); gSDE noise
    update:  add the rollout to D (bpo); ``ppo_batch`` (GAE) or ``bpo_ppo_batch`` (truncated
             IS-TD(lambda) returns, and the method's correction for mu: ``behaviour_batch``); the
             method's target update (``TargetUpdate.update``: PPO's epochs with the ratio
             pi_theta / pi_old or / mu, A2C's step); behaviour step: FQE Q, r-hat, FQE Q-hat, mu (bpo)

Rollout rows are time-major ``[n_steps, n_envs, ...]`` dicts with ``obs`` (normalised as the
acting policy saw it), ``raw_obs``, ``action``, ``log_prob``, ``reward``, ``terminated``,
``truncated``, ``next_obs`` (the real next observation, normalised with the same statistics)
and ``raw_next_obs``. Observation statistics are updated by the caller with ``observe`` after
every vector step, on the observations the environments return.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from bpo.agents.bpo import Behaviour, BehaviourState, DistFn, make_behaviour
from bpo.agents.methods import get_method
from bpo.agents.ppo import linear_schedule
from bpo.agents.target import Batch, TargetUpdate, UpdateContext
from bpo.config.schema import ConfigError, OnPolicyReturnConfig, OnPolicyTrainConfig, PPOHyperparams
from bpo.core import diagnostics as dg
from bpo.core import distributions
from bpo.core import replay as rb
from bpo.core.networks import Actor, Critic, sde_feature_width
from bpo.core.normalization import RunningStats, init_stats, update_stats
from bpo.core.normalization import normalize as normalize_obs
from bpo.core.optim import clipped
from bpo.core.returns import gae_returns, tis_advantages
from envs.functional import EnvSpec

Rows = dict[str, jax.Array]
"""A rollout, time-major ``[n_steps, n_envs, ...]`` (module docstring)."""
ActResult = tuple[jax.Array, jax.Array, jax.Array, jax.Array, jax.Array]
"""(action, environment action (clipped to the bounds), log-prob, normalised obs, gSDE matrices)."""


class LearnerState(NamedTuple):
    target: Any  # the target update's state (``TargetUpdate.init``: PPOState for PPO, A2CState for A2C)
    behaviour: BehaviourState | tuple  # () for ppo
    replay: rb.Replay | tuple  # () for ppo
    stats: RunningStats
    update: jnp.ndarray  # updates done


_LEARNER_STATE_BEFORE_TARGET = frozenset({"ppo", "behaviour", "replay", "stats", "update"})


def migrate_state_dict(tree):
    """A checkpoint's state (flax's state dict) as this version names it: ``LearnerState.target``
    was called ``ppo`` before A2C and plug-ins shared it; every such node is renamed, nothing else
    changes (``bpo.infra.checkpoint.load``'s ``migrate``)."""
    if not isinstance(tree, dict):
        return tree
    if set(tree) == _LEARNER_STATE_BEFORE_TARGET:
        tree = {("target" if k == "ppo" else k): v for k, v in tree.items()}
    return {k: migrate_state_dict(v) for k, v in tree.items()}


def ppo_batch(rows: Rows, values, next_values, hp: PPOHyperparams) -> Batch:
    """Listing 1's data: GAE(lambda) returns G_t (eq. 6 on-policy, Lemma 3), advantages
    G_t - V(s_t), ratio pi_theta / pi_old with pi_old the collecting policy. ``values`` and
    ``next_values`` are V(s_t) and V(s_{t+1}) of the rows' observations."""
    done = jnp.maximum(rows["terminated"], rows["truncated"])
    adv_weight = jnp.ones_like(rows["reward"])
    returns = gae_returns(rows["reward"], values, next_values, rows["terminated"], done, gamma=hp.gamma,
                          lam=hp.gae_lambda)
    return {"obs": rows["obs"], "action": rows["action"], "old_log_prob": rows["log_prob"],
            "advantage": returns - values, "return": returns, "adv_weight": adv_weight,
            "pi_old_log_prob": rows["log_prob"], "behaviour_log_prob": rows["log_prob"]}


def bpo_ppo_batch(rows: Rows, values, next_values, pi_old: DistFn, mu: DistFn, hp: PPOHyperparams,
                  cfg: OnPolicyReturnConfig, discrete: bool) -> tuple[Batch, dict]:
    """Listing 4's data, on a rollout collected by mu (``rows['log_prob']`` = log mu(a|s)).

    ``pi_old``: the target policy before this update; ``mu``: the behaviour policy with the
    parameters that collected the rollout (for the diagnostics). Value targets G_t are
    the truncated IS-TD(lambda) returns of eq. (6) with log rho = log pi_old - log mu; advantages
    are eq. (11), G_t - V(s_t), with ``cfg.advantage = 'eq11'``, or the authors' form without
    rho_t (``bpo.core.returns.tis_advantages``). The ratio of eq. (10) is pi_theta / mu, or with
    ``weight_on_advantage`` pi_theta / pi_old with the advantage weighted by min(rho_bar, pi_old/mu).
    Trust Region Masking (finite ``trust_region_delta``) zeroes the advantage weight of whole
    segments whose pi_old/mu is too far from 1. Returns the batch and the off-policy diagnostics."""
    done = jnp.maximum(rows["terminated"], rows["truncated"])
    adv_weight = jnp.ones_like(rows["reward"])
    old_log_prob = rows["log_prob"]
    pi_dist = pi_old(rows["obs"])
    log_pi = distributions.log_prob(pi_dist, rows["action"], discrete)
    log_ratio = log_pi - rows["log_prob"]
    advantages, returns = tis_advantages(
        rows["reward"], values, next_values, rows["terminated"], done, log_ratio, gamma=hp.gamma, lam=hp.gae_lambda,
        rho_bar=hp.rho_bar, c_bar=hp.c_bar, traj=cfg.traj, current_rho=cfg.advantage == "eq11",
    )
    if cfg.weight_on_advantage:
        old_log_prob = log_pi
        adv_weight = jnp.minimum(hp.rho_bar, jnp.exp(log_ratio))
    mu_dist = mu(rows["obs"])
    log_mu_now = distributions.log_prob(mu_dist, rows["action"], discrete)
    diagnostics = dg.off_policy_diagnostics(log_pi, rows["log_prob"], log_mu_now, pi_dist, mu_dist, discrete,
                                            hp.rho_bar, hp.c_bar)
    if math.isfinite(cfg.trust_region_delta):
        mask = dg.trust_region_mask(log_ratio, done, cfg.trust_region_delta, cfg.trust_region_criterion)
        adv_weight = adv_weight * mask  # masked steps add 0; the loss still divides by every step
        diagnostics.update(trm_mask_rate=1.0 - jnp.mean(mask),
                           trm_segments_masked=dg.masked_segment_fraction(mask, done))
    batch = {"obs": rows["obs"], "action": rows["action"], "old_log_prob": old_log_prob, "advantage": advantages,
             "return": returns, "adv_weight": adv_weight, "pi_old_log_prob": log_pi,
             "behaviour_log_prob": rows["log_prob"]}
    return batch, diagnostics


@dataclass(frozen=True, eq=False)
class Learner:
    """A method (PPO, A2C, ...: ``target``) alone or with BPO for one configuration and environment;
    build it with ``make_learner``. ``behaviour`` is None for the method alone. Every method is pure
    and jit-compatible."""

    cfg: OnPolicyTrainConfig
    spec: EnvSpec
    actor: Actor
    critic: Critic
    target: TargetUpdate
    behaviour: Behaviour | None
    action_low: jax.Array | None  # continuous actions: the bounds the environment accepts
    action_high: jax.Array | None

    def tx(self, lr) -> optax.GradientTransformation:
        """The target update's optimiser at learning rate ``lr`` (each method decides which
        parameters share a state: PPO's actor and critic keep their own, A2C's one over both); its
        state does not depend on the rate, so ``init`` may build it with any."""
        p = self.cfg.settings
        eps = p.rms_prop_eps if p.optimizer == "rmsprop" else p.adam_eps
        return clipped(lr, p.optimizer, eps, p.max_grad_norm)

    @property
    def rollout_size(self) -> int:
        return self.cfg.rollout_size

    def init(self, keys: tuple[jax.Array, jax.Array, jax.Array], hp: PPOHyperparams, obs0) -> LearnerState:
        """State from keys (actor, critic, behaviour) and the first observations [n_envs, obs]."""
        k_actor, k_critic, k_beh = keys
        spec, discrete = self.spec, self.spec.discrete
        stats = update_stats(init_stats(spec.obs_dim), obs0)
        actor_params = self.actor.init(k_actor, obs0)
        critic_params = self.critic.init(k_critic, obs0)
        target_state = self.target.init(self.context, actor_params, critic_params, hp)
        if not all(hasattr(target_state, f) for f in ("actor_params", "critic_params")):  # a plug-in's slip
            raise ConfigError("method", f"{self.target.name!r}: init returned {type(target_state).__name__}, not a "
                              "state with the fields actor_params and critic_params; allowed: a state as "
                              "bpo.agents.target.TargetUpdate.init describes (docs/methods.md)")
        bstate, replay = (), ()
        if self.behaviour is not None:
            action0 = jnp.int32(0) if discrete else jnp.zeros(spec.n_actions, jnp.float32)
            bstate = self.behaviour.init(k_beh, obs0[0], action0, actor_params, hp)  # mu starts equal to pi
            zero = jnp.float32(0.0)
            example = {"obs": obs0[0], "action": action0, "reward": zero, "terminated": zero, "truncated": zero,
                       "next_obs": obs0[0], "log_mu": zero}
            replay = rb.init_replay(example, self.cfg.bpo.replay_size)
        return LearnerState(target_state, bstate, replay, stats, jnp.zeros((), jnp.int32))

    @property
    def use_sde(self) -> bool:
        """gSDE exploration (continuous actions only)."""
        return self.cfg.settings.use_sde and not self.spec.discrete

    def sde_init(self) -> jax.Array:
        """Initial gSDE exploration matrices [n_envs, features, action] (zeros; a dummy without gSDE)."""
        p = self.cfg.settings
        width = sde_feature_width(p.pi_hidden, p.sde_features)
        return jnp.zeros((p.n_envs, width, self.spec.n_actions) if self.use_sde else (p.n_envs,))

    def acting_params(self, state: LearnerState) -> dict:
        """Parameters of the collecting policy: mu for bpo, pi for ppo."""
        return state.behaviour.mu_params if self.behaviour is not None else state.target.actor_params

    def final_params(self, state: LearnerState) -> dict:
        """What a finished run keeps of its learner (``bpo.training.policies``): pi's and the
        critic's parameters, the observation statistics and, for BPO, mu's parameters."""
        out = {"actor_params": state.target.actor_params, "critic_params": state.target.critic_params,
               "obs_stats": state.stats}
        if self.behaviour is not None:
            out["mu_params"] = state.behaviour.mu_params
        return out

    def normalize(self, stats: RunningStats, obs) -> jax.Array:
        """The networks' input for raw observations ``obs``."""
        return normalize_obs(stats, obs) if self.cfg.settings.normalize_observations else obs

    def observe(self, stats: RunningStats, obs) -> RunningStats:
        return update_stats(stats, obs) if self.cfg.settings.normalize_observations else stats

    def dist_fn(self, params) -> DistFn:
        return lambda obs: self.actor.apply(params, obs)[0]

    def critic_apply(self, critic_params, obs) -> jax.Array:
        """V(s)."""
        return self.critic.apply(critic_params, obs)

    def act(self, state: LearnerState, k_act, k_sde, obs, sde, step_index) -> ActResult:
        return self.act_with(self.acting_params(state), state.stats, k_act, k_sde, obs, sde, step_index)

    def act_with(self, params, stats: RunningStats, k_act, k_sde, obs, sde, step_index) -> ActResult:
        """``act`` from just the acting parameters and the statistics: a host runner calls this
        every vector step, and passing the whole learner state would cost a dispatch per leaf."""
        discrete = self.spec.discrete
        obs_n = self.normalize(stats, obs)
        dist, latent = self.actor.apply(params, obs_n)
        if self.use_sde:
            action, sde = distributions.gsde_action(k_sde, dist, latent, sde, params["params"]["log_std"],
                                                    step_index, self.cfg.settings.sde_sample_freq)
        else:
            action = distributions.sample(k_act, dist, discrete)
        env_action = distributions.clip_action(action, self.action_low, self.action_high)
        return action, env_action, distributions.log_prob(dist, action, discrete), obs_n, sde

    def greedy_action(self, state: LearnerState, obs) -> jax.Array:
        """Deterministic environment action of pi (argmax or the Gaussian mean)."""
        return self.greedy_with(state.target.actor_params, state.stats, obs)

    def greedy_with(self, actor_params, stats: RunningStats, obs) -> jax.Array:
        action = distributions.mode(self.dist_fn(actor_params)(self.normalize(stats, obs)), self.spec.discrete)
        return distributions.clip_action(action, self.action_low, self.action_high)

    def flatten(self, x):
        return x.reshape((self.rollout_size,) + x.shape[2:])

    @property
    def context(self) -> UpdateContext:
        """What the target update may use of the learner (``bpo.agents.target``)."""
        return UpdateContext(self.actor.apply, self.critic_apply, self.tx, self.scheduled_tx, self.spec.discrete,
                             self.cfg)

    def scheduled_tx(self, hp: PPOHyperparams, progress_remaining) -> optax.GradientTransformation:
        """``tx`` at this point of the run's learning-rate schedule (``settings.lr_schedule``)."""
        return self.tx(linear_schedule(hp.learning_rate, progress_remaining, self.cfg.settings.lr_schedule))

    def update(self, state: LearnerState, k_target, k_beh, rows: Rows, hp: PPOHyperparams) -> tuple[LearnerState, dict]:
        """One phase of Listing 1 (ppo, a2c) or Listing 4 lines 4-16 (bpo) on a rollout."""
        b, beh, discrete = self.cfg.bpo, self.behaviour, self.spec.discrete
        replay = state.replay
        if beh is not None:
            transitions = {"obs": rows["raw_obs"], "action": rows["action"], "reward": rows["reward"],
                           "terminated": rows["terminated"], "truncated": rows["truncated"],
                           "next_obs": rows["raw_next_obs"], "log_mu": rows["log_prob"]}
            replay = rb.add(replay, jax.tree.map(self.flatten, transitions), jnp.ones(self.rollout_size, bool))
        values = self.critic_apply(state.target.critic_params, rows["obs"])
        next_values = self.critic_apply(state.target.critic_params, rows["next_obs"])
        if beh is not None:
            # mu's parameters are still those that collected the rollout: the behaviour step comes later.
            batch, diagnostics = bpo_ppo_batch(rows, values, next_values, self.dist_fn(state.target.actor_params),
                                               self.dist_fn(state.behaviour.mu_params), hp, self.cfg.returns, discrete)
        else:
            batch, diagnostics = ppo_batch(rows, values, next_values, hp), {}
        if beh is not None:
            batch = self.target.behaviour_batch(batch, hp)
        batch = jax.tree.map(self.flatten, batch)
        progress_remaining = jnp.maximum(1.0 - (state.update + 1) * self.rollout_size / self.cfg.total_timesteps, 0.0)
        target_state, target_metrics = self.target.update(self.context, k_target, state.target, batch, hp,
                                                          progress_remaining)
        bstate, beh_metrics = state.behaviour, {}
        if beh is not None:
            normed = replay.replace(data={**replay.data, "obs": self.normalize(state.stats, replay.data["obs"]),
                                          "next_obs": self.normalize(state.stats, replay.data["next_obs"])})
            lr_scale = linear_schedule(1.0, progress_remaining, b.lr_schedule)
            bstate, beh_metrics = beh.step(k_beh, bstate, normed, self.dist_fn(target_state.actor_params), hp, lr_scale)
        new_state = LearnerState(target_state, bstate, replay, state.stats, state.update + 1)
        return new_state, {**target_metrics, **beh_metrics, **diagnostics}


def make_learner(cfg: OnPolicyTrainConfig, spec: EnvSpec) -> Learner:
    """The actor and critic (separate networks and Adam optimisers, Tables 3-4) and, for BPO-PPO,
    the behaviour step with mu of pi's architecture."""
    p, discrete = cfg.settings, spec.discrete
    use_sde = p.use_sde and not discrete
    unit = p.ortho_gains == "unit"
    actor = Actor(p.pi_hidden, spec.n_actions, discrete, use_sde, p.log_std_init, p.activation, p.ortho_init, unit,
                  p.sde_features)
    critic = Critic(p.vf_hidden, p.activation, p.ortho_init, unit)
    behaviour = None
    if cfg.bpo is not None:
        behaviour = make_behaviour(cfg.bpo, discrete, spec.n_actions, lambda prm, o: actor.apply(prm, o)[0],
                                   spec.action_low, spec.action_high, cfg.bpo.clip_actions, cfg.minibatch_group)
    low = None if discrete else jnp.asarray(spec.action_low)
    high = None if discrete else jnp.asarray(spec.action_high)
    return Learner(cfg, spec, actor, critic, get_method(cfg.method), behaviour, low, high)


def keyed_update(learner: Learner, state: LearnerState, key, rows: Rows, hp: PPOHyperparams):
    """One learner update from a run's key: ``(key, state, rows, hp) -> (key, state, metrics)``.
    Both runners call this, so given the same rollout they perform the same update."""
    key, k_target, k_beh = jax.random.split(key, 3)
    state, metrics = learner.update(state, k_target, k_beh, rows, hp)
    return key, state, metrics
