"""Our BPO-PPO update beside the authors' public code's, on the same inputs, quantity by quantity.

Two halves, run in two environments, exchanging one ``.npz`` file:

1. ``record`` runs in the authors' environment (the recipe of ``benchmarks/authors_reference.py``).
   It builds their BPO-PPO agent for HalfCheetah-v5, or the task ``--env`` names (``--configs
   mujoco_ppo ppo_bpo_zero1.0_1.5``, their seed), trains it with their own code for ``--update - 1``
   updates, collects the rollout of update ``--update``, and then runs that update with their
   ``optimize`` while recording, without changing any of their code (their jitted step functions and
   buffer samplers are wrapped, not edited): every minibatch's row indices, the standard normal
   draws behind every sampled action (a' ~ pi in the FQE targets, a ~ mu in eq. (16)), each step's
   loss and outputs, the state of every network (parameters, Polyak targets, Adam moments) at the
   start of each stage and after its first step, r-hat, and the state after the update. The FQE
   targets before and after clipping are recomputed from their networks by their formula
   (``bpo.py``'s ``_update_q_vf_fqe_cont``), since their step does not return them.
2. ``compare`` runs here. It maps their parameter trees onto ours and, for each of our presets
   (``mujoco_authors_code``: their configuration with their bugs; ``mujoco_default_authors``:
   without them), replays each stage of the update with our functions
   (``bpo.agents.learner.bpo_ppo_batch``, ``bpo.agents.ppo.ppo_step``, ``bpo.core.fqe.fqe_step`` through our
   ``Behaviour``, ``bpo.core.fqe.second_moment_problem``, ``bpo.agents.bpo.mu_loss``) from their state at
   that stage's start, on their minibatches and their draws, and prints one table: for each
   quantity the largest absolute and relative difference, and what explains it. The gradients of
   each loop's first step are compared as their optimiser saw them: clipped to the global norm,
   recovered from their Adam first moment, m1 = b1 m0 + (1 - b1) g.

What is not compared here: the order of our minibatches and our random draws (each run draws its
own: that the same draws give the same update is the point of feeding theirs), and while D fills
the number of minibatches of an epoch, which the harness takes from their run (row 21 of
docs/authors_code.md: ``mujoco_default_authors`` pads each epoch to |D| rows).

Recipe (their environment as in ``benchmarks/authors_reference.py``)::

    ../authors-venv/bin/python benchmarks/authors_differential.py record \\
        --checkout ../authors-BPO --update 3 --out /tmp/their_update.npz
    python benchmarks/authors_differential.py compare --recorded /tmp/their_update.npz \\
        --out results/authors_reference/differential.md
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from authors_reference import _cpu_model, _versions  # the sibling script: stdlib only, runs in either environment

try:  # our side; the authors' environment has none of it and runs only ``record``
    import jax
    import jax.numpy as jnp
    import optax

    from bpo.agents.bpo import mu_loss
    from bpo.agents.learner import bpo_ppo_batch, make_learner
    from bpo.agents.methods import validate
    from bpo.agents.ppo import PPOState, actor_loss, ppo_step, value_loss
    from bpo.config.presets import get_preset
    from bpo.config.schema import traced_hyperparams
    from bpo.core import distributions
    from bpo.core import replay as rb
    from bpo.core.fqe import (
        QState,
        bellman_targets,
        clip_targets,
        fqe_loss,
        fqe_step,
        q_bounds,
        q_hat_bounds,
        second_moment_problem,
        td_weights,
    )
    from envs.gymnasium_envs import gym_spec
except ModuleNotFoundError:
    pass

STAGES = ("ppo", "q", "q_hat", "mu")
ADAM_B1 = 0.9


# --- their side: runs in the authors' environment ---------------------------------------------------


def _path_key(path) -> str:
    return "/".join(str(getattr(k, "key", getattr(k, "idx", k))) for k in path)


def _flat(tree, prefix: str, out: dict) -> None:
    import jax  # noqa: PLC0415 - either side's own JAX: the two halves run in different environments

    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        out[f"{prefix}/{_path_key(path)}"] = np.asarray(leaf)


def _adam_state(opt_state):
    """The ScaleByAdamState inside an optax state of any nesting."""
    import optax  # noqa: PLC0415

    found = [s for s in _walk(opt_state) if isinstance(s, optax.ScaleByAdamState)]
    if len(found) != 1:
        raise SystemExit(f"expected one Adam state, found {len(found)}")
    return found[0]


def _walk(node):
    yield node
    if isinstance(node, tuple | list):
        for child in node:
            yield from _walk(child)
    elif hasattr(node, "inner_state"):
        yield from _walk(node.inner_state)


def _their_states(pol) -> dict:
    return {"actor": pol.actor_state, "critic": pol.critic_state, "mu": pol.mu_state, "q": pol.q_vf_state,
            "q_hat": pol.q_hat_vf_state}


def _snapshot(states: dict, prefix: str, out: dict) -> None:
    """Parameters, Polyak targets and Adam moments of every network, under ``prefix/NET/...``."""
    for name, st in states.items():
        _flat(st.params, f"{prefix}/{name}/params", out)
        if hasattr(st, "target_params"):
            _flat(st.target_params, f"{prefix}/{name}/target", out)
        adam = _adam_state(st.opt_state)
        _flat(adam.mu, f"{prefix}/{name}/adam_mu", out)
        _flat(adam.nu, f"{prefix}/{name}/adam_nu", out)
        out[f"{prefix}/{name}/count"] = np.asarray(adam.count)


# Their env ids (their run.py's make_env) -> the Gymnasium task their wrapper makes and ours runs.
ENVS = {"half_cheetah": "HalfCheetah-v5", "hopper": "Hopper-v5", "walker_2d": "Walker2d-v5", "ant": "Ant-v5"}


def _their_agent(checkout: Path, seed: int, env_id: str = "half_cheetah"):
    """Their BPO-PPO agent as their ``run.main`` builds it (without its training loop)."""
    sys.path.insert(0, str(checkout))
    os.chdir(checkout)
    import ruamel.yaml as yaml  # noqa: PLC0415
    import run as their_run  # noqa: PLC0415
    from common.configs import Config, Flags  # noqa: PLC0415

    from bpo import BPO_PPO  # noqa: PLC0415 - their bpo.py, first on the path

    argv = ["--configs", "mujoco_ppo", "ppo_bpo_zero1.0_1.5", "--env.env_id", env_id, "--run.seed",
            str(seed), "--run.logdir", tempfile.mkdtemp(prefix="authors-differential-")]
    parsed, other = Flags(configs=["defaults"]).parse_known(argv)
    configs = yaml.YAML(typ="safe").load((checkout / "configs.yaml").read_text())
    config = Config(configs["defaults"])
    for name in parsed.configs:
        config = config.update(configs[name])
    config = Flags(config).parse(other)
    env = their_run.make_env(config.env.env_id, config.env.max_episode_steps)
    eval_env = their_run.make_env(config.env.env_id, config.env.max_episode_steps)
    kwargs = dict(tensorboard_logdir=None, seed=config.run.seed, device=config.run.device, verbose=0,
                  eval_env=eval_env, **their_run.parse_policy_kwargs(config))
    return BPO_PPO(env, **kwargs), argv


class _Recorder:
    """Wraps their step functions and samplers on one agent and keeps what each call saw."""

    def __init__(self, algo):
        self.algo, self.out, self.rows = algo, {}, {"rollout": None, "replay": None}
        self.steps = {s: [] for s in STAGES}
        for buf, name in ((algo.rollout_buffer, "rollout"), (algo.replay_buffer, "replay")):
            buf._get_samples = self._sampler(buf._get_samples, name)
        algo._one_update = self._ppo(algo._one_update)
        algo._update_q_vf_fqe_cont = self._fqe(algo._update_q_vf_fqe_cont)
        algo._update_mu_cont = self._mu(algo._update_mu_cont)
        algo.replay_buffer.compute_r_hat_rewards = self._r_hat(algo.replay_buffer.compute_r_hat_rewards)

    def _sampler(self, fn, name):
        def sample(batch_inds):
            self.rows[name] = np.asarray(batch_inds)
            return fn(batch_inds)
        return sample

    def _stage_start(self, stage):
        if not self.steps[stage]:
            _snapshot(_their_states(self.algo.policy), f"start_{stage}", self.out)

    def _first_step(self, stage, states: dict):
        if len(self.steps[stage]) == 1:
            _snapshot(states, f"first_{stage}", self.out)

    def _ppo(self, fn):
        def one_update(**kw):
            self._stage_start("ppo")
            (_, actor, critic), (pg, vf) = out = fn(**kw)
            self.steps["ppo"].append({"idx": self.rows["rollout"], "pg_loss": float(pg), "vf_loss": float(vf)})
            self._first_step("ppo", {"actor": actor, "critic": critic})
            return out
        return one_update

    def _noise(self, state, feats_state, obs, key):
        """The standard normal draws of ``state``'s policy sampling at ``obs`` with ``key``."""
        feats = feats_state.apply_fn(feats_state.params, obs)
        dist = state.apply_fn(state.params, feats)
        return np.asarray((dist.sample(seed=key) - dist.mean()) / dist.stddev()), np.asarray(dist.sample(seed=key))

    def _fqe(self, fn):
        import jax.numpy as jnp  # noqa: PLC0415
        from common.symlog import jsymexp  # noqa: PLC0415

        def update(**kw):
            stage = "q" if kw["gamma"] == self.algo.gamma else "q_hat"
            self._stage_start(stage)
            noise, next_action = self._noise(kw["actor_state"], kw["featurizer_state"], kw["next_observations"],
                                             kw["key"])
            # their targets (bpo.py, _update_q_vf_fqe_cont, symlog and clipped-target branches); their
            # call passes no clip_actions, so their function's default (False) holds
            q = kw["q_vf_state"]
            if kw.get("clip_actions", False):
                next_action = jnp.clip(next_action, kw["clip_act_low"], kw["clip_act_high"])
            nxt = jsymexp(q.apply_fn(q.params, kw["next_observations"], next_action).squeeze(-1))
            g = kw["gamma"]
            targets = kw["rewards"] + g * (1.0 - kw["terminal"]) * nxt + g * kw["truncated"] * nxt
            clipped = jnp.clip(targets, kw["r_min"] / (1 - g), kw["r_max"] / (1 - g))
            state, loss, ratios, clip_frac = out = fn(**kw)
            self.steps[stage].append({
                "idx": self.rows["replay"], "noise": noise, "rewards": np.asarray(kw["rewards"]),
                "loss": float(loss), "ratios": np.asarray(ratios), "clip_frac": float(clip_frac),
                "targets": np.asarray(targets), "clipped_targets": np.asarray(clipped),
                "bounds": np.asarray([kw["r_min"] / (1 - g), kw["r_max"] / (1 - g)], np.float64)})
            self._first_step(stage, {stage: state})
            return out
        return update

    def _mu(self, fn):
        def update(**kw):
            self._stage_start("mu")
            noise, _ = self._noise(kw["mu_state"], kw["featurizer_state"], kw["observations"], kw["key"])
            state, loss, q_hat = out = fn(**kw)
            self.steps["mu"].append({"idx": self.rows["replay"], "noise": noise, "loss": float(loss),
                                     "q_hat": np.asarray(q_hat)})
            self._first_step("mu", {"mu": state})
            return out
        return update

    def _r_hat(self, fn):
        def compute(*a, **kw):
            q_values, r_hat = fn(*a, **kw)
            self.out["r_hat/q_values"], self.out["r_hat/r_hat"] = np.array(q_values), np.array(r_hat)
            return q_values, r_hat
        return compute

    def stacked(self) -> dict:
        out = dict(self.out)
        for stage, steps in self.steps.items():
            for key in steps[0]:
                out[f"steps/{stage}/{key}"] = np.stack([np.asarray(s[key]) for s in steps])
        return out


def record(args) -> None:
    checkout = Path(args.checkout).resolve()
    commit = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True,
                            check=True).stdout.strip()
    algo, argv = _their_agent(checkout, args.seed, args.env)
    algo._last_obs, _ = algo.env.reset(seed=algo.seed)
    algo._last_episode_start = [True] * algo.n_envs
    steps = 0
    for _ in range(args.update - 1):  # their own training up to the recorded update
        algo.rollout(steps)
        algo.optimize(steps)
        steps += algo.train_ratio
    algo.rollout(steps)
    out = {}
    _snapshot(_their_states(algo.policy), "S0", out)
    for name in ("r_max", "r_min", "r_hat_max"):
        out[f"S0/{name}"] = np.asarray(getattr(algo, name), np.float64)
    rb, replay = algo.rollout_buffer, algo.replay_buffer
    for name in ("observations", "actions", "rewards", "episode_starts", "values", "mu_log_probs",
                 "actor_log_probs", "returns", "advantages"):
        out[f"rollout/{name}"] = np.array(getattr(rb, name))
    for name in ("observations", "actions", "rewards", "terminal", "truncated", "next_observations", "mu_log_probs"):
        out[f"replay/{name}"] = np.array(getattr(replay, name))
    out["replay/size"] = np.asarray(replay.buffer_size if replay.full else replay.pos)
    out["replay/rollout_end"] = np.asarray(replay.pos if replay.pos else replay.buffer_size)
    recorder = _Recorder(algo)
    algo.optimize(steps)
    out.update(recorder.stacked())
    _snapshot(_their_states(algo.policy), "S1", out)
    out["S1/r_hat_max"] = np.asarray(algo.r_hat_max, np.float64)
    meta = {"their_commit": commit, "their_argv": argv, "update": args.update, "seed": args.seed, "env": args.env,
            "python": platform.python_version(), "gamma": algo.gamma, "n_steps": algo.n_steps,
            "versions": _versions(("jax", "jaxlib", "flax", "optax", "numpy", "gymnasium", "mujoco",
                                   "tensorflow-probability"))}
    out["meta"] = np.asarray(json.dumps(meta))
    np.savez_compressed(args.out, **out)
    print(f"recorded update {args.update} of their code (seed {args.seed}) to {args.out}")


# --- our side --------------------------------------------------------------------------------------------

# Their flax module names -> ours (bpo.core.networks): the actor's and critic's hidden layers sit in a Torso.
_RENAME = {"actor": {"Dense_0": "Torso_0/Dense_0", "Dense_1": "Torso_0/Dense_1", "Dense_2": "Dense_0"},
           "critic": {"Dense_0": "Torso_0/Dense_0", "Dense_1": "Torso_0/Dense_1", "Dense_2": "Dense_0"}}
_RENAME["mu"] = _RENAME["actor"]
PRESETS = ("mujoco_authors_code", "mujoco_default_authors")


class Recorded:
    """The recorded file, read by key; their trees rebuilt in the shape of ours."""

    def __init__(self, path: str):
        self.d = np.load(path)
        self.meta = json.loads(str(self.d["meta"]))
        # recordings made before --env existed are HalfCheetah's
        self.env = ENVS[self.meta.get("env", "half_cheetah")]

    def __getitem__(self, key):
        return self.d[key]

    def tree(self, prefix: str, net: str, like):
        """Their arrays under ``prefix`` (``S0/actor/params/params`` ...) as a tree of ours like ``like``."""
        inverse = {v: k for k, v in _RENAME.get(net, {}).items()}

        def leaf(path, ours):
            key = _path_key(path)
            head, _, name = key.rpartition("/")  # params/<module path>/<param>
            top, _, module = head.partition("/")
            theirs = f"{top}/{inverse.get(module, module)}/{name}" if module else key
            value = self.d[f"{prefix}/{theirs}"]
            assert value.shape == ours.shape, (prefix, key, value.shape, ours.shape)
            return jnp.asarray(value)

        return jax.tree_util.tree_map_with_path(leaf, like)

    def opt_state(self, prefix: str, net: str, params, tx):
        """Our optimiser state holding their Adam moments and step count."""
        def fill(node):
            if isinstance(node, optax.ScaleByAdamState):
                return node._replace(count=jnp.asarray(self.d[f"{prefix}/{net}/count"]),
                                     mu=self.tree(f"{prefix}/{net}/adam_mu", net, params),
                                     nu=self.tree(f"{prefix}/{net}/adam_nu", net, params))
            return node
        return jax.tree_util.tree_map(fill, tx.init(params), is_leaf=lambda n: isinstance(n, optax.ScaleByAdamState))

    def params(self, prefix: str, net: str, like, target: bool = False):
        return self.tree(f"{prefix}/{net}/{'target' if target else 'params'}", net, {"params": like["params"]})


class Table:
    """Rows of (quantity, max |diff|, max relative diff, n compared, explained by)."""

    def __init__(self):
        self.rows, self.notes = [], []

    def add(self, quantity, ours, theirs, explained="", rel_floor=1e-3, baseline=None):
        """``baseline``: the same quantity from our run started one float32 ulp away from their
        state, the size of difference that rounding alone makes after as many steps."""
        a, b = _flat64(ours), _flat64(theirs)
        assert a.shape == b.shape, (quantity, a.shape, b.shape)
        diff = np.abs(a - b)
        rel = diff / np.maximum(np.abs(b), rel_floor)
        base = "" if baseline is None else f"{np.abs(a - _flat64(baseline)).max():.3g}"
        self.rows.append((quantity, float(diff.max()), float(rel.max()), a.size, base, explained))

    def markdown(self, title: str) -> str:
        lines = [f"### {title}", "", "| quantity | max abs diff | max rel diff | values | rounding baseline | "
                 "explained by |", "| --- | --- | --- | --- | --- | --- |"]
        lines += [f"| {q} | {d:.3g} | {r:.3g} | {n:,} | {b} | {e} |" for q, d, r, n, b, e in self.rows]
        return "\n".join(lines + [f"\n{note}" for note in self.notes])


def _flat64(x) -> np.ndarray:
    leaves = jax.tree_util.tree_leaves(x) if isinstance(x, dict | list | tuple) else [x]
    return np.concatenate([np.ravel(np.asarray(v, np.float64)) for v in leaves])


def _ulp(tree, seed: int):
    """``tree`` with every float32 value moved by one unit in the last place, up or down at random."""
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    rng = np.random.default_rng(seed)
    def move(v):
        v = np.asarray(v)
        if v.dtype != np.float32:
            return v
        toward = np.where(rng.random(v.shape) < 0.5, -np.inf, np.inf).astype(np.float32)
        return jnp.asarray(np.nextafter(v, toward))

    moved = [move(v) for v in leaves]
    return jax.tree_util.tree_unflatten(treedef, moved)


def _clipped_grads(grads, max_norm):
    return optax.clip_by_global_norm(max_norm).update(grads, optax.EmptyState())[0]


def _their_grads(rec: Recorded, stage: str, net: str, like):
    """Their first step's clipped gradient, from Adam's first moment: m1 = b1 m0 + (1 - b1) g."""
    m0 = rec.tree(f"start_{stage}/{net}/adam_mu", net, like)
    m1 = rec.tree(f"first_{stage}/{net}/adam_mu", net, like)
    return jax.tree_util.tree_map(lambda a, b: (b - ADAM_B1 * a) / (1 - ADAM_B1), m0, m1)


class Ours:
    """Our learner for one preset, and the recorded update's inputs in our layout."""

    def __init__(self, rec: Recorded, preset: str):
        self.rec, self.cfg = rec, validate(get_preset(preset, rec.env))
        self.spec = gym_spec(self.cfg.env)
        self.learner = make_learner(self.cfg, self.spec)
        self.beh, self.hp = self.learner.behaviour, traced_hyperparams(self.cfg)
        obs0 = jnp.zeros((1, self.spec.obs_dim))
        self.like = {"actor": self.learner.actor.init(jax.random.PRNGKey(0), obs0),
                     "critic": self.learner.critic.init(jax.random.PRNGKey(0), obs0),
                     "q": self.beh.q_net.init(jax.random.PRNGKey(0),
                                              jnp.zeros(self.spec.obs_dim + self.spec.n_actions))}
        self.like["mu"], self.like["q_hat"] = self.like["actor"], self.like["q"]
        size = int(rec["replay/size"])
        self.size = size
        terminal, truncated = rec["replay/terminal"][:, 0], rec["replay/truncated"][:, 0]
        data = {"obs": rec["replay/observations"][:, 0], "action": rec["replay/actions"][:, 0],
                "reward": rec["replay/rewards"][:, 0], "terminated": terminal * (1.0 - truncated),
                "truncated": truncated, "next_obs": rec["replay/next_observations"][:, 0],
                "log_mu": rec["replay/mu_log_probs"][:, 0]}
        self.replay = rb.Replay(data={k: jnp.asarray(v) for k, v in data.items()}, ptr=jnp.int32(size % 8192),
                                size=jnp.int32(size))

    def params(self, prefix, net, target=False):
        return self.rec.params(prefix, net, self.like[net], target)

    def reward_range(self):
        """(r_min, r_max) as our behaviour step tracks them: the running state and the rows of D."""
        d, filled = self.replay.data, jnp.arange(8192) < self.size
        r_min = jnp.minimum(jnp.float32(self.rec["S0/r_min"]), jnp.min(jnp.where(filled, d["reward"], jnp.inf)))
        r_max = jnp.maximum(jnp.float32(self.rec["S0/r_max"]), jnp.max(jnp.where(filled, d["reward"], -jnp.inf)))
        return r_min, r_max

    def q_state(self, prefix, net):
        params = self.params(prefix, net)
        return QState(params, self.params(prefix, net, target=True),
                      self.rec.opt_state(prefix, net, params, self.beh.q_tx(self.hp)))

    def rows(self):
        """The rollout as our learner's rows [n_steps, 1, ...]: raw rewards, termination and
        truncation apart, the real next observation (their rollout buffer folds gamma V(final) into
        the reward at a truncation; the replay keeps them apart)."""
        end = int(self.rec["replay/rollout_end"])
        sl = slice(end - self.cfg.ppo.n_steps, end)
        d = self.replay.data
        r = {"obs": d["obs"][sl], "action": d["action"][sl], "log_prob": d["log_mu"][sl], "reward": d["reward"][sl],
             "terminated": d["terminated"][sl], "truncated": d["truncated"][sl], "next_obs": d["next_obs"][sl]}
        return {k: v[:, None] for k, v in r.items()}


def compare_ppo(o: Ours, t: Table) -> None:
    rec, learner, hp = o.rec, o.learner, o.hp
    actor, critic, mu = o.params("S0", "actor"), o.params("S0", "critic"), o.params("S0", "mu")
    rows = o.rows()
    values = learner.critic_apply(critic, rows["obs"])
    next_values = learner.critic_apply(critic, rows["next_obs"])
    t.add("V(s_t) of the rollout", values[:, 0], rec["rollout/values"][:, 0])
    batch, _ = bpo_ppo_batch(rows, values, next_values, learner.dist_fn(actor), learner.dist_fn(mu), hp,
                             o.cfg.returns, discrete=False)
    t.add("log pi_old(a|s) of the rollout", batch["pi_old_log_prob"][:, 0], rec["rollout/actor_log_probs"][:, 0])
    t.add("returns G_t (eq. 6)", batch["return"][:, 0], rec["rollout/returns"][:, 0])
    expl = "" if o.cfg.returns.advantage == "authors" else "row 6: eq. (11) keeps rho_t in the first TD error"
    t.add("advantages (eq. 11 / their form)", batch["advantage"][:, 0], rec["rollout/advantages"][:, 0], expl)
    batch = jax.tree_util.tree_map(lambda x: x[:, 0], batch)
    tx = learner.tx(hp.learning_rate)
    state = PPOState(actor, critic, o.rec.opt_state("start_ppo", "actor", actor, tx),
                     o.rec.opt_state("start_ppo", "critic", critic, tx))
    kw = dict(actor_apply=learner.actor.apply, critic_apply=learner.critic_apply, tx=tx, clip_range=hp.clip_range,
              ent_coef=hp.ent_coef, vf_coef=hp.vf_coef, discrete=False, normalize_advantage=True)
    step = jax.jit(lambda s, mb: ppo_step(s, mb, **kw))
    idx = rec["steps/ppo/idx"]
    first = jax.tree_util.tree_map(lambda x: x[idx[0]], batch)
    a_grads = jax.grad(lambda p: actor_loss(p, learner.actor.apply, first, hp.clip_range, hp.ent_coef, False,
                                            True)[0])(actor)
    c_grads = jax.grad(lambda p: hp.vf_coef * value_loss(learner.critic_apply(p, first["obs"]),
                                                         first["return"]))(critic)
    p_max = o.cfg.ppo.max_grad_norm
    t.add("pi's gradient, first step (clipped)", _clipped_grads(a_grads, p_max),
          _their_grads(rec, "ppo", "actor", actor))
    t.add("V's gradient, first step (clipped)", _clipped_grads(c_grads, p_max),
          _their_grads(rec, "ppo", "critic", critic))
    def loop(state):
        pg, vf = [], []
        for i in range(idx.shape[0]):
            state, m = step(state, jax.tree_util.tree_map(lambda x, i=i: x[idx[i]], batch))
            pg.append(m["pg_loss"])
            vf.append(hp.vf_coef * m["value_loss"])
        return state, pg, vf

    (state, pg, vf), (moved, pg_b, vf_b) = loop(state), loop(state._replace(actor_params=_ulp(actor, 1),
                                                                         critic_params=_ulp(critic, 2)))
    t.add("pi's loss (eq. 10), every step", pg, rec["steps/ppo/pg_loss"], baseline=pg_b)
    t.add("V's loss (eq. 12 x beta_value), every step", vf, rec["steps/ppo/vf_loss"], baseline=vf_b)
    t.add("pi's parameters after the PPO epochs", state.actor_params, o.params("start_q", "actor"),
          baseline=moved.actor_params)
    t.add("V's parameters after the PPO epochs", state.critic_params, o.params("start_q", "critic"),
          baseline=moved.critic_params)


class FqeLoop:
    """Our FQE of Q (``stage = 'q'``) or Q-hat on their minibatches and their draws of a' ~ pi, from
    their state at the loop's start (pi after the PPO epochs, the networks' parameters and Adam)."""

    def __init__(self, o: Ours, stage: str, fixed=None):
        self.o, self.stage, self.hat, self.fixed = o, stage, stage == "q_hat", fixed
        beh, hp, rec = o.beh, o.hp, o.rec
        pi = o.learner.dist_fn(o.params(f"start_{stage}", "actor"))
        self.data = o.replay.data if not self.hat else {**o.replay.data, "reward": o.r_hat}
        self.pi_next = pi(self.data["next_obs"])
        self.log_pi = distributions.log_prob(pi(self.data["obs"]), self.data["action"], False)
        self.gamma = hp.gamma ** 2 if self.hat else hp.gamma
        lower = beh.cfg.clip_lower_bounds
        self.bounds = (q_hat_bounds(o.r_hat_max, hp.gamma, lower=lower) if self.hat
                       else q_bounds(*o.reward_range(), hp.gamma, lower=lower))
        self.settings, self.tx, self.clip = beh.fqe_settings(), beh.q_tx(hp), beh.fqe_clip
        self.start = o.q_state(f"start_{stage}", stage)
        self.idx, self.noise = rec[f"steps/{stage}/idx"], rec[f"steps/{stage}/noise"]
        self.step = jax.jit(self._step)

    def batch(self, i):
        b = rb.gather(self.o.replay.replace(data=self.data), self.idx[i])
        if self.fixed is not None:
            b["reward"] = self.fixed
        return {**b, "noise": self.noise[i], "rows": self.idx[i]}

    def next_values(self, p, b):
        a = distributions.reparameterised(jax.tree_util.tree_map(lambda x: x[b["rows"]], self.pi_next), b["noise"])
        return self.o.beh.q_value(p, b["next_obs"], a, self.hat, self.clip)

    def predict(self, p, b):
        return self.o.beh.q_output(p, b["obs"], b["action"], self.hat, self.clip)

    def _step(self, state, b, bounds):
        hp = self.o.hp
        return fqe_step(state, b, self.log_pi[b["rows"]], predict=self.predict, next_values=self.next_values,
                        tx=self.tx, gamma=self.gamma, bounds=bounds, tau=hp.polyak_tau, reg_coef=hp.symlog_reg_coef,
                        settings=self.settings)

    def loop(self, start, bounds=None):
        """Every recorded step: (final state, losses, fractions of targets clipped)."""
        state, losses, clips = start, [], []
        for i in range(len(self.idx)):
            state, m = self.step(state, self.batch(i), self.bounds if bounds is None else bounds)
            losses.append(m["loss"])
            clips.append(m["clip_frac"])
        return state, losses, clips

    def targets(self, b):
        y = bellman_targets(b["reward"], b["terminated"], self.next_values(self.start.params, b), self.gamma)
        return y, clip_targets(y, self.bounds, True)[0]

    def td_weights(self, i):
        return td_weights(self.log_pi[self.idx[i]], self.data["log_mu"][self.idx[i]], clip=self.settings.td_weight_clip)

    def loss(self, params, b):
        """fqe_step's loss at ``params`` from the start state (for the first step's gradient)."""
        s, start = self.settings, self.start
        boot = start.target_params if s.bootstrap_from_target else start.params
        y = clip_targets(bellman_targets(b["reward"], b["terminated"], self.next_values(boot, b), self.gamma),
                         self.bounds, s.clip_targets)[0]
        w = td_weights(self.log_pi[b["rows"]], b["log_mu"], clip=s.td_weight_clip)
        return fqe_loss(self.predict(params, b), y, w, self.predict(start.target_params, b), self.o.hp.symlog_reg_coef,
                        symlog_targets=s.symlog_targets, form=s.loss_form)[0]

    def explained(self) -> str:
        why = []
        if self.hat and self.fixed is None:
            why.append("row 14: their Q-hat regresses onto the last Q minibatch's rewards")
        if self.o.beh.fqe_clip:
            why.append("row 22: their FQE reads unclipped actions")
        return "; ".join(why)


LOWER = "their Q-hat lower bound 1e-8/(1 - gamma^2) = 5e-7, ours 0"


def compare_fqe(o: Ours, t: Table, stage: str, fixed=None) -> None:
    """Q's or Q-hat's FQE loop, quantity by quantity (``FqeLoop``)."""
    f, rec, n = FqeLoop(o, stage, fixed), o.rec, len(o.rec[f"steps/{stage}/idx"])
    why = f.explained()
    low = LOWER if f.hat and o.beh.cfg.clip_lower_bounds else ""
    also = "; ".join(x for x in (why, low) if x)
    t.add(f"{stage}: target clip range", np.broadcast_to(np.asarray(f.bounds, np.float64), (n, 2)),
          rec[f"steps/{stage}/bounds"], low, rel_floor=1.0)
    t.add(f"{stage}: rewards of every minibatch", np.stack([f.batch(i)["reward"] for i in range(n)]),
          rec[f"steps/{stage}/rewards"], why)
    y, yc = f.targets(f.batch(0))
    t.add(f"{stage}: targets before clipping, first step", y, rec[f"steps/{stage}/targets"][0], why)
    t.add(f"{stage}: targets after clipping, first step", yc, rec[f"steps/{stage}/clipped_targets"][0], also)
    theirs_w = np.clip(rec[f"steps/{stage}/ratios"], 0.1, 10.0)
    theirs_w = theirs_w / (theirs_w.mean(axis=1, keepdims=True) + 1e-6)
    t.add(f"{stage}: TD weights, every step", np.stack([f.td_weights(i) for i in range(n)]), theirs_w,
          "theirs divide by mean + 1e-6" + ("" if f.settings.td_weight_clip else "; row 8: ours unclipped"))
    grads = jax.grad(f.loss)(f.start.params, f.batch(0))
    t.add(f"{stage}: gradient, first step (clipped)", _clipped_grads(grads, o.beh.cfg.q_max_grad_norm),
          _their_grads(rec, stage, stage, {"params": o.like[stage]["params"]}), why)
    (state, losses, clips), (moved, losses_b, clips_b) = f.loop(f.start), f.loop(
        f.start._replace(params=_ulp(f.start.params, 3)))
    t.add(f"{stage}: FQE loss (eq. 13/14), every step", losses, rec[f"steps/{stage}/loss"], why, baseline=losses_b)
    t.add(f"{stage}: fraction of targets clipped, every step", clips, rec[f"steps/{stage}/clip_frac"], why,
          rel_floor=1.0, baseline=clips_b)
    after = "start_q_hat" if stage == "q" else "start_mu"
    also = also + (" (the next row runs ours with theirs)" if low else "")
    t.add(f"{stage}: parameters after the loop", state.params, o.params(after, stage), also, baseline=moved.params)
    t.add(f"{stage}: Polyak target after the loop", state.target_params, o.params(after, stage, target=True), also,
          baseline=moved.target_params)
    if low:  # the one difference left in Q-hat's loop
        theirs = tuple(jnp.float32(x) for x in rec[f"steps/{stage}/bounds"][0])
        t.add(f"{stage}: parameters after the loop, run with their clip range", f.loop(f.start, theirs)[0].params,
              o.params(after, stage), why)


def compare_r_hat(o: Ours, t: Table) -> None:
    """Eq. (7) on D with their Q after its loop."""
    beh, hp, data, rec = o.beh, o.hp, o.replay.data, o.rec
    q = o.params("start_q_hat", "q")
    filled = jnp.arange(8192) < o.size
    bounds = q_bounds(*o.reward_range(), hp.gamma, lower=beh.cfg.clip_lower_bounds)
    q_sa = jnp.clip(beh.q_value(q, data["obs"], data["action"]), *bounds)
    r_hat, _ = second_moment_problem(data["reward"], q_sa, hp.gamma)
    n = o.size
    t.add("Q(s, a) on D, clipped (eq. 7's q)", q_sa[:n], rec["r_hat/q_values"][:n, 0])
    t.add("r-hat on D (eq. 7)", r_hat[:n], rec["r_hat/r_hat"][:n, 0])
    o.r_hat = r_hat
    o.r_hat_max = jnp.maximum(jnp.float32(rec["S0/r_hat_max"]), jnp.max(jnp.where(filled, r_hat, -jnp.inf)))
    t.add("r-hat_max after the update", [o.r_hat_max], [rec["S1/r_hat_max"]])


def compare_mu(o: Ours, t: Table) -> None:
    """Eq. (16)'s loop from their state at its start, on their minibatches and their draws of a ~ mu."""
    rec, beh, hp, data = o.rec, o.beh, o.hp, o.replay.data
    pi = o.learner.dist_fn(o.params("start_mu", "actor"))
    q_hat = o.params("start_mu", "q_hat")
    cap = q_hat_bounds(o.r_hat_max, hp.gamma, lower=True)[1]
    tx = beh.mu_tx(hp)
    params = o.params("start_mu", "mu")
    opt = o.rec.opt_state("start_mu", "mu", params, tx)
    idx, noise = rec["steps/mu/idx"], rec["steps/mu/noise"]
    pi_here = pi(data["obs"])
    expl = "" if beh.cfg.mu_q_hat_batch_min else "rows 15, 17: eq. (16) per sample at clipped actions"

    def loss(p, rows, eps):
        return mu_loss(p, None, data["obs"][rows], jax.tree_util.tree_map(lambda x: x[rows], pi_here), q_hat, cap,
                       None, beh=beh, noise=eps)

    @jax.jit
    def step(p, opt, rows, eps):
        value, g = jax.value_and_grad(loss)(p, rows, eps)
        updates, opt = tx.update(g, opt, p)
        return optax.apply_updates(p, updates), opt, value

    @jax.jit
    def q_hat_lowest(p, rows, eps):
        """The two smallest values of the minibatch's clipped Q-hat(s, a ~ mu), the first of them
        the minimum that eq. (16)'s batch-minimum form reads."""
        a = distributions.reparameterised(beh.mu_apply(p, data["obs"][rows]), eps)
        unclipped = beh.cfg.mu_q_hat_unclipped_actions
        v = beh.q_value(q_hat, data["obs"][rows], a, hat=True, clip=not unclipped)
        return jnp.sort(jnp.clip(v, beh.cfg.q_hat_floor, cap).ravel())[:2]

    g = jax.grad(loss)(params, idx[0], noise[0])
    t.add("mu: gradient, first step (clipped)", _clipped_grads(g, beh.cfg.mu_max_grad_norm),
          _their_grads(rec, "mu", "mu", params), expl)
    def loop(params, opt):
        losses, lowest = [], []
        for i in range(len(idx)):
            lowest.append(np.asarray(q_hat_lowest(params, idx[i], noise[i])))
            params, opt, value = step(params, opt, idx[i], noise[i])
            losses.append(value)
        return params, losses, np.stack(lowest)

    (final, losses, lowest), (moved, losses_b, lowest_b) = loop(params, opt), loop(_ulp(params, 4), opt)
    mins, mins_b = lowest[:, 0], lowest_b[:, 0]
    t.add("mu: min over the minibatch of Q-hat(s, a ~ mu), every step", mins, rec["steps/mu/q_hat"],
          "" if beh.cfg.mu_q_hat_unclipped_actions else "row 17: ours reads clipped actions", baseline=mins_b)
    t.add("mu: loss (eq. 16 and entropy term), every step", losses, rec["steps/mu/loss"], expl, baseline=losses_b)
    t.add("mu: parameters after the update", final, o.params("S1", "mu"), expl, baseline=moved)
    t.notes.append(_mu_drift_note(o, rec, final, lowest, np.abs(np.asarray(mins) - _flat64(rec["steps/mu/q_hat"]))))


def _mu_drift_note(o: Ours, rec: Recorded, final, lowest: np.ndarray, min_diff: np.ndarray) -> str:
    """Two causes that would let rounding grow in mu's loop, measured: a near tie between the two
    smallest Q-hat values of a minibatch (the batch minimum would switch sample), and Adam steps on
    parameters whose second moment is near zero (a step of about the learning rate whatever the
    gradient's size)."""
    gaps = lowest[:, 1] - lowest[:, 0]
    first = int(np.argmax(min_diff > 1e-5)) if (min_diff > 1e-5).any() else None
    diff = _flat64(final) - _flat64(o.params("S1", "mu"))
    nu = _flat64(rec.tree("S1/mu/adam_nu", "mu", final))
    top = np.argsort(-np.abs(diff))[:8]
    where = "never" if first is None else f"first at step {first} (gap there {gaps[first]:.3g})"
    return (f"mu's loop, drift checks: the batch minimum of Q-hat differs from theirs by more than 1e-5 {where}; "
            f"the two smallest Q-hat values of a minibatch are never closer than {gaps.min():.3g} "
            f"(step {int(gaps.argmin())}); the 8 parameters that differ most from theirs after the update have "
            f"Adam second moments (theirs) of median {np.median(nu[top]):.3g}, against {np.median(nu):.3g} over all "
            f"{nu.size:,}; {np.mean(np.abs(diff) > 1e-5):.1%} of the parameters differ by more than 1e-5.")


def _replay_text(rec: Recorded) -> str:
    """D's size, how many of its rows end an episode by termination, and how many episodes the
    rollout began: what says whether the update was compared through terminal rows at all."""
    size = int(rec["replay/size"])
    terminal, truncated = rec["replay/terminal"][:size, 0], rec["replay/truncated"][:size, 0]
    ended = int(np.sum(terminal * (1.0 - truncated)))
    begun = int(np.sum(rec["rollout/episode_starts"]))
    return f"{size} rows, {ended} of them terminal; the rollout began {begun} episodes"


def compare(args) -> None:
    rec = Recorded(args.recorded)
    here = Path(__file__).resolve().parent.parent
    ours = subprocess.run(["git", "-C", str(here), "describe", "--always", "--dirty"], capture_output=True,
                          text=True).stdout.strip()
    parts = [
        "# Our BPO-PPO update beside the authors' code, on the same inputs", "",
        f"Made by `python benchmarks/authors_differential.py compare --recorded FILE --out THIS` at commit {ours} "
        f"({_versions(('jax', 'jaxlib', 'flax', 'optax'))}), from FILE made by `benchmarks/authors_differential.py "
        f"record --checkout CHECKOUT --update {rec.meta['update']} --seed {rec.meta['seed']} "
        f"--env {rec.meta.get('env', 'half_cheetah')}` in the authors' "
        f"environment: update {rec.meta['update']} of their code (commit {rec.meta['their_commit'][:7]}, "
        f"{rec.meta['versions']}), {rec.env}, `{' '.join(rec.meta['their_argv'][:-2])}`; D held "
        f"{_replay_text(rec)}. Machine: {platform.processor() or platform.machine()}, "
        f"{_cpu_model()}.", "",
        "Each stage starts from their state at its start and runs our functions on their minibatches and "
        "their draws. Differences are ours minus theirs over every value compared: max |diff| and max "
        "|diff| / max(|theirs|, 1e-3) (1 for the clip range and fractions). *Rounding baseline*: the "
        "same quantity, ours against ours started one float32 ulp away from their state: what rounding "
        "alone makes of as many steps. *Explained by*: the departures row (docs/authors_code.md) or the "
        "formula that differs; empty where nothing differs but rounding.", ""]
    for preset in PRESETS:
        o, t = Ours(rec, preset), Table()
        compare_ppo(o, t)
        compare_fqe(o, t, "q")
        compare_r_hat(o, t)
        fixed = None
        if o.cfg.bpo.q_hat_reward == "last_q_batch_reward":
            fixed = jnp.asarray(o.replay.data["reward"][rec["steps/q/idx"][-1]])
        compare_fqe(o, t, "q_hat", fixed)
        compare_mu(o, t)
        parts += [t.markdown(f"`{preset}`"), ""]
    text = "\n".join(parts)
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record", help="in the authors' environment: record one update of their code")
    r.add_argument("--checkout", required=True)
    r.add_argument("--update", type=int, default=3, help="which update to record (1: mu = pi, D a quarter full)")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--env", choices=sorted(ENVS), default="half_cheetah", help="their env id (run.py's make_env)")
    r.add_argument("--out", required=True)
    c = sub.add_parser("compare", help="here: replay the recorded update with our functions and tabulate")
    c.add_argument("--recorded", required=True)
    c.add_argument("--out", default=None, help="write the table (markdown) here as well")
    args = p.parse_args(argv)
    if args.cmd == "record":
        record(args)
    else:
        compare(args)


if __name__ == "__main__":
    main()
