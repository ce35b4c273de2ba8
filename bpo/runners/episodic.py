"""JAX runner for episodic policy gradient (REINFORCE, Listing 2; BPO-REINFORCE, Listing 3).

``EpisodicProgram``: the run as a ``bpo.runners.program.Program`` whose loop iterations are
blocks of ``eval_every`` episodes, each followed by an evaluation, one phase per episode:

    generate an episode with mu (bpo) or pi (reinforce)
    reinforce_episode_update (Listing 2) or bpo_reinforce_episode_update (Listing 3): add the
    episode to D; G_t <- truncated IS return; REINFORCE step on pi; behaviour step (bpo only)

The updates live in ``bpo.agents.reinforce``; this module steps the environment, evaluates and
schedules the blocks.

Seeds and traced hyperparameters are vmapped by the caller (see ``bpo.training``).
"""

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from bpo.agents.bpo import Behaviour, make_behaviour
from bpo.agents.reinforce import Episode, bpo_reinforce_episode_update, make_optimizer, reinforce_episode_update
from bpo.config.schema import EpisodicTrainConfig, Hyperparams
from bpo.core import replay as rb
from bpo.core.branches import traced_once, zeros_shaped
from bpo.core.distributions import logits_dist
from bpo.core.networks import MLP, SHORT_CORRIDOR_FEATURES, LinearSoftmax, two_action_logits
from bpo.runners.evaluation import run_episodes
from bpo.runners.program import reported_evaluations
from envs import ShortCorridorJax, make_jax_env
from envs.functional import ShortCorridorFunctional


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


def act(logits_fn: Callable, deterministic: bool, key, obs):
    """pi's action at ``obs``: its mode, or a draw with the step's own key (the episodic
    environment's step draws nothing)."""
    logits = logits_fn(obs)
    return jnp.argmax(logits, -1) if deterministic else jax.random.categorical(key, logits)


class EpisodicCarry(NamedTuple):
    key: jnp.ndarray
    pi_params: dict
    pi_opt_state: tuple
    behaviour: tuple
    replay: rb.Replay | None
    episode: jnp.ndarray


@dataclass(frozen=True, eq=False)
class EpisodicProgram:
    """REINFORCE or BPO-REINFORCE on a pure-JAX environment: loop iteration 0 is the evaluation
    before training, iteration i > 0 is block i - 1 (``eval_every`` episodes) and its evaluation.
    Progress is reported by the runner from each iteration's outputs (``reported``): no host
    callback, so the compiled program can be kept in the persistent compile cache."""

    cfg: EpisodicTrainConfig
    env: ShortCorridorJax
    policy: LinearSoftmax
    mu_net: MLP | None  # None: REINFORCE (no bpo section)
    behaviour: Behaviour | None

    @property
    def n_iterations(self) -> int:
        return self.cfg.n_blocks + 1

    def policy_optimizer(self, hp: Hyperparams) -> optax.GradientTransformation:
        return make_optimizer(self.cfg.reinforce.optimizer, hp.lr_start, hp.lr_end, self.cfg.episodes)

    def init(self, key, hp: Hyperparams) -> EpisodicCarry:
        """pi's parameters and optimiser; for BPO also mu (Section 5.3: its head starts at zero
        weights with pi's initial logits as bias, so mu starts equal to pi), Q, Q-hat and an empty D."""
        k_pi, k_beh, key = jax.random.split(key, 3)
        _, obs0 = self.env.reset(k_pi)
        pi_params = self.policy.init(k_pi, obs0)
        bstate, replay = (), None
        if self.cfg.bpo is not None:
            k_mu, k_beh = jax.random.split(k_beh)
            bstate = self.behaviour.init(k_beh, obs0, jnp.int32(0), self.mu_net.init(k_mu, obs0), hp)
            zero = jnp.float32(0.0)  # explicit dtypes: Python floats would become float64 under x64
            example = {"obs": obs0, "action": jnp.int32(0), "reward": zero, "terminated": zero, "truncated": zero,
                       "next_obs": obs0, "log_mu": zero}
            replay = rb.init_replay(example, self.cfg.bpo.replay_size)
        return EpisodicCarry(key, pi_params, self.policy_optimizer(hp).init(pi_params), bstate, replay,
                             jnp.zeros((), jnp.int32))

    def behaviour_logits(self, carry: EpisodicCarry) -> Callable:
        """The logits of the policy that generates episodes: mu (bpo) or pi (reinforce)."""
        if self.cfg.bpo is not None:
            return lambda o: self.behaviour.mu_apply(carry.behaviour.mu_params, o).loc
        return lambda o: self.policy.apply(carry.pi_params, o)

    def train_on_episode(self, hp: Hyperparams, tx: optax.GradientTransformation, carry: EpisodicCarry):
        """One episode of Listing 2 (reinforce) or Listing 3 (bpo): generate it, then update."""
        key, k_roll, k_beh = jax.random.split(carry.key, 3)
        ep = rollout_episode(k_roll, self.env, self.behaviour_logits(carry), self.cfg.max_episode_steps)
        replay, bstate = carry.replay, carry.behaviour
        if self.cfg.bpo is not None:
            pi_params, opt_state, bstate, replay, metrics = bpo_reinforce_episode_update(
                k_beh, carry.pi_params, carry.pi_opt_state, bstate, replay, ep, hp, tx=tx,
                pi_apply=self.policy.apply, beh=self.behaviour, traj=self.cfg.returns.traj)
        else:
            pi_params, opt_state, metrics = reinforce_episode_update(carry.pi_params, carry.pi_opt_state, ep, hp,
                                                                     tx=tx, pi_apply=self.policy.apply)
        valid = ep.valid.astype(jnp.float32)
        metrics = {**metrics, "train_return": jnp.sum(ep.reward * valid), "episode_length": jnp.sum(valid)}
        return EpisodicCarry(key, pi_params, opt_state, bstate, replay, carry.episode + 1), metrics

    def evaluate(self, carry: EpisodicCarry, obs0) -> dict:
        """pi's mean return over ``eval_episodes`` episodes, pi's and mu's action probabilities at
        ``obs0`` and, where the environment has it, pi's exact expected return."""
        cfg = self.cfg
        keys = jax.random.split(jax.random.fold_in(carry.key, 7), cfg.eval_episodes)
        pi_fn = lambda o: self.policy.apply(carry.pi_params, o)  # noqa: E731
        returns, _ = run_episodes(ShortCorridorFunctional(env=self.env), partial(act, pi_fn, cfg.eval_deterministic),
                                  jax.vmap(lambda k: jax.random.split(k)[1])(keys))  # each episode's stream as
        # before the loop was shared, so that Figure 2's evaluations stay the same (the reset draws nothing)
        out = {"eval_return": jnp.mean(returns), "eval_episode": carry.episode,
               "pi_probs": jax.nn.softmax(pi_fn(obs0)), "mu_probs": jax.nn.softmax(self.behaviour_logits(carry)(obs0))}
        if hasattr(self.env, "exact_return"):
            out["exact_return"] = self.env.exact_return(out["pi_probs"])
        return out

    def segment(self, carry0: EpisodicCarry, hp: Hyperparams, indices):
        """Loop iterations ``indices`` (class docstring). Iterations past the end (a checkpointed
        run's padded last segment) do nothing."""
        tx = self.policy_optimizer(hp)
        _, obs0 = self.env.reset(jax.random.PRNGKey(0))  # deterministic, and every cell looks the same

        def block(carry):
            carry, train_metrics = jax.lax.scan(lambda c, _: self.train_on_episode(hp, tx, c), carry, None,
                                                length=self.cfg.eval_every)
            return carry, (self.evaluate(carry, obs0), train_metrics)

        block, (_, shapes) = traced_once(block, carry0)  # the switch reuses this trace (bpo.core.branches)
        nothing = lambda c: (c, zeros_shaped(shapes))  # noqa: E731

        def first(c):
            return c, (self.evaluate(c, obs0), zeros_shaped(shapes[1]))

        def iteration(carry, index):
            which = jnp.where(index == 0, 0, jnp.where(index <= self.cfg.n_blocks, 1, 2))
            return jax.lax.switch(which, [first, block, nothing], carry)

        return jax.lax.scan(iteration, carry0, indices)

    def finish(self, carry: EpisodicCarry, outputs) -> dict:
        """The run's metrics from the outputs of all iterations: evaluations, per-episode training metrics."""
        evals, train_metrics = outputs
        cfg = self.cfg
        evals = jax.tree.map(lambda x: x[: cfg.n_blocks + 1], evals)
        train_metrics = jax.tree.map(lambda x: x[1: cfg.n_blocks + 1].reshape((cfg.episodes,) + x.shape[2:]),
                                     train_metrics)
        return {"eval": evals, "train": train_metrics, "final": self.policies(carry)}

    def policies(self, carry: EpisodicCarry) -> dict:
        """pi's parameters and, for BPO, mu's."""
        return {"pi_params": carry.pi_params, **({"mu_params": carry.behaviour.mu_params}
                                                 if self.cfg.bpo is not None else {})}

    def unit_metrics(self, train_outputs: dict, start: int) -> dict:
        """Iteration 0 evaluates only; iteration i > 0 is block i - 1 (its episodes)."""
        skip = 1 if start == 0 else 0
        return {k: v[:, skip:].reshape(v.shape[0], -1) for k, v in train_outputs.items()}

    def first_unit(self, start: int) -> int:
        return max(start - 1, 0) * self.cfg.eval_every

    def reported(self, outputs) -> list[tuple[int, float]]:
        """(episode, eval return) of each seed's evaluation in one iteration's outputs (every
        iteration the host runs evaluates), for a progress bar."""
        return reported_evaluations(outputs[0], "eval_episode")

    def evaluations_in(self, iterations: int) -> int:
        """Every iteration ends with one evaluation."""
        return min(iterations, self.n_iterations)


def make_program(cfg: EpisodicTrainConfig) -> EpisodicProgram:
    """The program of ``cfg``: its environment, pi's linear-softmax policy, and for BPO mu's
    network and the behaviour step."""
    env = make_jax_env(cfg.env, max_steps=cfg.max_episode_steps)
    init_logits = two_action_logits(cfg.reinforce.init_right_prob)
    mu_net = behaviour = None
    if cfg.bpo is not None:
        mu_net = MLP(cfg.bpo.mu_hidden, env.n_actions, zero_head=True, head_bias=init_logits)
        behaviour = make_behaviour(cfg.bpo, True, env.n_actions, lambda p, o: logits_dist(mu_net.apply(p, o)))
    return EpisodicProgram(cfg, env, LinearSoftmax(SHORT_CORRIDOR_FEATURES, init_logits), mu_net, behaviour)
