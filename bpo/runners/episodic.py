"""JAX runner for episodic policy gradient (REINFORCE, Listing 2; BPO-REINFORCE, Listing 3).

``make_train(cfg) -> train(key, hparams)``: the whole run is nested ``lax.scan``s (evaluation
blocks of ``eval_every`` episodes), one phase per episode:

    generate an episode with mu (bpo) or pi (reinforce)
    reinforce_episode_update (Listing 2) or bpo_reinforce_episode_update (Listing 3): add the
    episode to D; G_t <- truncated IS return; REINFORCE step on pi; behaviour step (bpo only)

The updates live in ``bpo.agents.reinforce``; this module steps the environment, evaluates and
schedules the blocks.

Seeds and traced hyperparameters are vmapped by the caller (see ``bpo.training``).
"""

from collections.abc import Callable
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from bpo import replay as rb
from bpo.agents.bpo import Behaviour, make_behaviour
from bpo.agents.reinforce import Episode, bpo_reinforce_episode_update, make_optimizer, reinforce_episode_update
from bpo.config import EpisodicTrainConfig, Hyperparams
from bpo.distributions import logits_dist
from bpo.networks import MLP, SHORT_CORRIDOR_FEATURES, LinearSoftmax, two_action_logits
from bpo.runners.stages import Stages, whole_run
from envs import ShortCorridorJax, make_jax_env


def rollout_episode(key, env, logits_fn: Callable, max_steps: int) -> Episode:
    """Sample one episode with the categorical policy ``logits_fn``; stops at the episode end."""
    k_reset, key = jax.random.split(key)
    state, obs = env.reset(k_reset)
    zeros = lambda shape, dtype=jnp.float32: jnp.zeros((max_steps,) + shape, dtype)  # noqa: E731
    buf = Episode(
        obs=zeros(obs.shape), action=zeros((), jnp.int32), reward=zeros(()), terminated=zeros(()),
        truncated=zeros(()), next_obs=zeros(obs.shape), log_prob=zeros(()), valid=zeros((), bool),
    )

    def cond(carry):
        _, _, _, t, done, _ = carry
        return (~done) & (t < max_steps)

    def body(carry):
        key, state, obs, t, _, buf = carry
        key, k_act = jax.random.split(key)
        log_probs = jax.nn.log_softmax(logits_fn(obs))
        action = jax.random.categorical(k_act, log_probs)
        state, next_obs, reward, terminated, truncated = env.step(state, action)
        row = Episode(obs, action, reward, terminated.astype(jnp.float32), truncated.astype(jnp.float32),
                      next_obs, log_probs[action], jnp.array(True))
        buf = jax.tree.map(lambda b, x: b.at[t].set(x), buf, row)
        return key, state, next_obs, t + 1, terminated | truncated, buf

    carry = (key, state, obs, jnp.zeros((), jnp.int32), jnp.array(False), buf)
    return jax.lax.while_loop(cond, body, carry)[-1]


def episode_return(key, env, logits_fn: Callable, deterministic: bool):
    """Undiscounted return of one episode (evaluation; nothing is stored). The env's step limit ends it."""
    k_reset, key = jax.random.split(key)
    state, obs = env.reset(k_reset)

    def cond(carry):
        return ~carry[4]

    def body(carry):
        key, state, obs, total, _ = carry
        key, k_act = jax.random.split(key)
        logits = logits_fn(obs)
        action = jnp.argmax(logits) if deterministic else jax.random.categorical(k_act, logits)
        state, obs, reward, terminated, truncated = env.step(state, action)
        return key, state, obs, total + reward, terminated | truncated

    return jax.lax.while_loop(cond, body, (key, state, obs, jnp.zeros(()), jnp.array(False)))[3]


class Carry(NamedTuple):
    key: jnp.ndarray
    pi_params: dict
    pi_opt_state: tuple
    behaviour: tuple
    replay: rb.Replay | None
    episode: jnp.ndarray


class Parts(NamedTuple):
    """The static pieces of one episodic run: its config, environment and networks."""

    cfg: EpisodicTrainConfig
    env: ShortCorridorJax
    policy: LinearSoftmax
    mu_net: MLP
    behaviour: Behaviour


def make_parts(cfg: EpisodicTrainConfig) -> Parts:
    env = make_jax_env(cfg.env, max_steps=cfg.max_episode_steps)
    init_logits = two_action_logits(cfg.reinforce.init_right_prob)
    mu_net = MLP(cfg.bpo.mu_hidden, env.n_actions, zero_head=True, head_bias=init_logits)
    behaviour = make_behaviour(cfg.bpo, True, env.n_actions, lambda p, o: logits_dist(mu_net.apply(p, o)))
    return Parts(cfg, env, LinearSoftmax(SHORT_CORRIDOR_FEATURES, init_logits), mu_net, behaviour)


def policy_optimizer(parts: Parts, hp: Hyperparams) -> optax.GradientTransformation:
    cfg = parts.cfg
    return make_optimizer(cfg.reinforce.optimizer, hp.lr_start, hp.lr_end, cfg.episodes)


def init_carry(parts: Parts, key, hp: Hyperparams) -> Carry:
    """pi's parameters and optimiser; for BPO also mu (Section 5.3: its head starts at zero weights
    with pi's initial logits as bias, so mu starts equal to pi), Q, Q-hat and an empty D."""
    k_pi, k_beh, key = jax.random.split(key, 3)
    _, obs0 = parts.env.reset(k_pi)
    pi_params = parts.policy.init(k_pi, obs0)
    bstate, replay = (), None
    if parts.cfg.algo == "bpo":
        mu_params = parts.mu_net.init(jax.random.split(k_beh, 3)[2], obs0)
        bstate = parts.behaviour.init(k_beh, obs0, jnp.int32(0), mu_params, hp)
        zero = jnp.float32(0.0)  # explicit dtypes: Python floats would become float64 under x64
        example = {"obs": obs0, "action": jnp.int32(0), "reward": zero, "terminated": zero, "truncated": zero,
                   "next_obs": obs0, "log_mu": zero}
        replay = rb.init_replay(example, parts.cfg.bpo.replay_size)
    return Carry(key, pi_params, policy_optimizer(parts, hp).init(pi_params), bstate, replay,
                 jnp.zeros((), jnp.int32))


def behaviour_logits(parts: Parts, carry: Carry) -> Callable:
    """The logits of the policy that generates episodes: mu (bpo) or pi (reinforce)."""
    if parts.cfg.algo == "bpo":
        return lambda o: parts.behaviour.mu_apply(carry.behaviour.mu_params, o).loc
    return lambda o: parts.policy.apply(carry.pi_params, o)


def train_on_episode(parts: Parts, hp: Hyperparams, tx: optax.GradientTransformation, carry: Carry):
    """One episode of Listing 2 (reinforce) or Listing 3 (bpo): generate it, then update."""
    key, k_roll, k_beh = jax.random.split(carry.key, 3)
    ep = rollout_episode(k_roll, parts.env, behaviour_logits(parts, carry), parts.cfg.max_episode_steps)
    replay, bstate = carry.replay, carry.behaviour
    if parts.cfg.algo == "bpo":
        pi_params, opt_state, bstate, replay, metrics = bpo_reinforce_episode_update(
            k_beh, carry.pi_params, carry.pi_opt_state, bstate, replay, ep, hp, tx=tx, pi_apply=parts.policy.apply,
            beh=parts.behaviour, traj=parts.cfg.bpo.traj)
    else:
        pi_params, opt_state, metrics = reinforce_episode_update(carry.pi_params, carry.pi_opt_state, ep, hp,
                                                                 tx=tx, pi_apply=parts.policy.apply)
    valid = ep.valid.astype(jnp.float32)
    metrics = {**metrics, "train_return": jnp.sum(ep.reward * valid), "episode_length": jnp.sum(valid)}
    return Carry(key, pi_params, opt_state, bstate, replay, carry.episode + 1), metrics


def evaluate(parts: Parts, carry: Carry, obs0, progress: Callable | None) -> dict:
    """pi's mean return over ``eval_episodes`` episodes, pi's and mu's action probabilities at
    ``obs0`` and, where the environment has it, pi's exact expected return."""
    keys = jax.random.split(jax.random.fold_in(carry.key, 7), parts.cfg.eval_episodes)
    pi_fn = lambda o: parts.policy.apply(carry.pi_params, o)  # noqa: E731
    returns = jax.vmap(lambda k: episode_return(k, parts.env, pi_fn, parts.cfg.eval_deterministic))(keys)
    out = {"eval_return": jnp.mean(returns), "eval_episode": carry.episode, "pi_probs": jax.nn.softmax(pi_fn(obs0))}
    out["mu_probs"] = jax.nn.softmax(behaviour_logits(parts, carry)(obs0))
    if hasattr(parts.env, "exact_return"):
        out["exact_return"] = parts.env.exact_return(out["pi_probs"])
    if progress is not None:
        jax.debug.callback(progress, carry.episode, out["eval_return"])
    return out


def run_blocks(parts: Parts, carry0: Carry, hp: Hyperparams, indices, progress: Callable | None = None):
    """Loop iterations ``indices``: iteration 0 is the evaluation before training; iteration
    i > 0 is block i - 1 (``eval_every`` episodes) and its evaluation. Iterations past the end (a
    checkpointed run's padded last segment) do nothing."""
    tx = policy_optimizer(parts, hp)
    n_blocks = parts.cfg.episodes // parts.cfg.eval_every
    _, obs0 = parts.env.reset(jax.random.PRNGKey(0))  # deterministic, and every cell looks the same

    def block(carry, _):
        carry, train_metrics = jax.lax.scan(lambda c, _: train_on_episode(parts, hp, tx, c), carry, None,
                                            length=parts.cfg.eval_every)
        return carry, (evaluate(parts, carry, obs0, progress), train_metrics)

    shapes = jax.eval_shape(block, carry0, None)[1]
    nothing = lambda c: (c, jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), shapes))  # noqa: E731

    def first(c):
        return c, (evaluate(parts, c, obs0, progress), nothing(c)[1][1])

    def iteration(carry, index):
        which = jnp.where(index == 0, 0, jnp.where(index <= n_blocks, 1, 2))
        return jax.lax.switch(which, [first, lambda c: block(c, None), nothing], carry)

    return jax.lax.scan(iteration, carry0, indices)


def finish(cfg: EpisodicTrainConfig, carry: Carry, outputs) -> dict:
    """The run's metrics from the outputs of all iterations: evaluations, per-episode training metrics."""
    evals, train_metrics = outputs
    n_blocks = cfg.episodes // cfg.eval_every
    evals = jax.tree.map(lambda x: x[: n_blocks + 1], evals)
    train_metrics = jax.tree.map(lambda x: x[1: n_blocks + 1].reshape((cfg.episodes,) + x.shape[2:]), train_metrics)
    return {"eval": evals, "train": train_metrics}


def make_train(cfg: EpisodicTrainConfig, progress: Callable | None = None):
    """Return ``train(key, hparams) -> metrics`` for one run; ``progress(episode, eval_return)``
    is called from inside the jitted run after every evaluation when given."""
    return whole_run(make_stages(cfg, progress))


def make_stages(cfg: EpisodicTrainConfig, progress: Callable | None = None) -> Stages:
    """The run's stages (``bpo.runners.stages.Stages``); the loop's iterations are the
    ``episodes / eval_every`` blocks of episodes, each followed by an evaluation."""
    parts = make_parts(cfg)
    return Stages(init=partial(init_carry, parts), segment=partial(run_blocks, parts, progress=progress),
                  finish=partial(finish, cfg), n_iterations=cfg.episodes // cfg.eval_every + 1)
