"""Trained policies as artefacts: written into every run directory, loaded back in one line.

``policies.msgpack`` (flax's msgpack; restored as plain dicts and arrays, never unpickled code)
holds ``{"format": FORMAT, "kind": "onpolicy" | "episodic", "final": {...}, "during": {...},
"config_sha256": ...}`` (the digest of the run's config.json, ``config_digest``; files written
before it have none) where ``final`` has a leading seed axis on every array:

* on-policy runs (PPO, BPO-PPO): ``actor_params`` (pi), ``critic_params`` (the value network),
  ``obs_stats`` (the observation normaliser's mean, var, count), for BPO ``mu_params``, and on
  the JAX and MJX backends ``key``, the run's random key at its final evaluation (which draws its
  episodes' keys from ``fold_in(key, 7)``, ``bpo.runners.onpolicy.OnPolicyProgram.evaluate``);
* episodic runs (REINFORCE, BPO-REINFORCE on ShortCorridor): ``pi_params`` and, for BPO, ``mu_params``.

``during`` holds the same, by loop iteration (update, or evaluation block), every
``save_policies_every`` iterations (empty by default).

The networks are rebuilt from the run's ``config.json``. ``load_policy(run_dir, seed)`` returns
a callable ``obs -> action`` with the normaliser applied::

    from bpo.training.policies import load_policy
    act = load_policy("results/classic/CartPole-v1-cartpole_ppo-ppo", seed=0)
    action = act(obs)          # deterministic (argmax or the Gaussian mean), pi
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np
from flax import serialization

from bpo.agents.learner import make_learner
from bpo.agents.methods import validate
from bpo.config.schema import (
    ConfigError,
    EpisodicTrainConfig,
    config_digest,
    read_recorded_config,
    recorded_form,
    traced_hyperparams,
)
from bpo.config.validation import BACKEND_ENVS
from bpo.core import distributions
from bpo.core.normalization import RunningStats
from bpo.infra import results
from bpo.runners import episodic
from envs import make_env
from envs.gymnasium_envs import GYMNASIUM_ENVS, MUJOCO_ENVS, gym_spec

FILE = "policies.msgpack"
FORMAT = "bpo-policies/1"


def plain_tree(tree, leaf=np.array):
    """Arrays as NumPy, named tuples (the normaliser's statistics) as dicts: what msgpack keeps.
    ``leaf`` maps each array (default: a NumPy copy, since a view of a device buffer could change
    under it)."""
    if isinstance(tree, RunningStats):
        tree = tree._asdict()
    if isinstance(tree, dict):
        return {k: plain_tree(v, leaf) for k, v in tree.items()}
    return leaf(tree)


def write_policies(run_dir: Path, metrics: dict, config) -> bool:
    """Write ``policies.msgpack`` from a finished run's ``metrics["final"]``, with the digest of
    the run's config (``config_digest``); False if it has none."""
    if "final" not in metrics:
        return False
    payload = {"format": FORMAT, "kind": "episodic" if isinstance(config, EpisodicTrainConfig) else "onpolicy",
               "final": plain_tree(metrics["final"]), "during": plain_tree(metrics.get("during", {})),
               "config_sha256": config_digest(recorded_form(config))}
    results.atomic_write_bytes(Path(run_dir) / FILE, serialization.msgpack_serialize(payload))
    return True


class NoPolicies(ConfigError):
    """A run directory without usable policies; the message names the file and why."""

    def __init__(self, path: Path, what: str):
        super().__init__("run", f"{str(path)!r}: {what}")


@dataclass(frozen=True)
class SavedPolicies:
    config: object
    kind: str
    final: dict  # arrays with a leading seed axis
    during: dict  # iteration (update or evaluation block) -> the same, with save_policies_every

    def at(self, iteration: int | None) -> dict:
        """The policies after ``iteration`` loop iterations (None: the final ones)."""
        if iteration is None:
            return self.final
        if iteration not in self.during:
            raise ConfigError("at", f"no policies kept after iteration {iteration}; kept: {sorted(self.during)} "
                                    "(save_policies_every) and the final ones")
        return self.during[iteration]

    @property
    def seeds(self) -> int:
        return int(jax.tree.leaves(self.final)[0].shape[0])


def run_config(run_dir: Path) -> tuple[dict, object]:
    """The run's config.json as read (its data) and as checked as ``bpo train`` checks a config:
    the policies are evaluated by its settings (an edited ``eval_episodes: 0`` gave a mean of NaN
    over no episodes, and -3 a JAX traceback). A ``ConfigError`` naming the file and the field otherwise."""
    path = Path(run_dir) / "config.json"
    data, config = read_recorded_config(path)
    try:
        return data, validate(config)
    except ConfigError as e:
        raise ConfigError(e.field_name, f"{str(e).removeprefix(e.field_name + ': ')} (in {str(path)!r})") from None


def load_policies(run_dir: Path) -> SavedPolicies:
    """A run directory's config and saved policies, checked (``NoPolicies`` naming what is wrong)."""
    run_dir = Path(run_dir)
    path = run_dir / FILE
    if not run_dir.is_dir():  # a mistyped folder is not a run to train again
        raise NoPolicies(run_dir, f"is not a folder; allowed: a run's folder (it holds {FILE})")
    if not path.exists():
        if path.with_name(path.name + ".part000").exists():  # a rescued run over a file-size limit
            raise NoPolicies(path, f"is in parts: join them first with `cat {path.name}.part* > {path.name}` in "
                                   f"{str(run_dir)!r}")
        raise NoPolicies(path, "no saved policies (runs written before policies were saved have none; "
                               "train the run again)")
    recorded, config = run_config(run_dir)
    try:
        payload = serialization.msgpack_restore(path.read_bytes())
    except Exception as e:  # noqa: BLE001 -- whatever a damaged file makes a parser raise
        raise NoPolicies(path, f"cannot be read ({type(e).__name__}: {e})") from None
    during = (payload.get("during") or {}) if isinstance(payload, dict) else None
    if (during is None or payload.get("format") != FORMAT or not isinstance(payload.get("final"), dict)
            or payload.get("kind") not in ("onpolicy", "episodic") or not isinstance(during, dict)
            or not all(re.fullmatch(r"[0-9]+", str(k)) for k in during)):
        raise NoPolicies(path, f"not a {FORMAT} file")
    saved = SavedPolicies(config, payload["kind"], payload["final"], {int(k): v for k, v in during.items()})
    # Files written before the digest have none: their shapes are still checked.
    why = "its config digest is not that of the run's config.json" if payload.get(
        "config_sha256", config_digest(recorded)) != config_digest(recorded) else mismatch(saved)
    if why:
        raise NoPolicies(path, f"does not belong to the run in {str(run_dir)!r} ({why}); allowed: the "
                               "policies.msgpack that run wrote")
    return saved


def policies_problem(run_dir: Path) -> str | None:
    """What makes a finished run's ``policies.msgpack`` unusable (``load_policies``' check: cut off,
    not the format, another run's), or None when it is sound or absent (runs written before
    policies were saved have none). A sweep redoes a run whose file is unusable
    (``experiments.store.is_finished``): ``bpo probe`` and ``bpo evaluate`` would refuse it for good."""
    if not (Path(run_dir) / FILE).exists():
        return None
    try:
        load_policies(run_dir)
    except ConfigError as e:  # NoPolicies, or a config.json that cannot be read
        return str(e)
    return None


def _spec(cfg):
    """The spec of a run's task: Gymnasium's for its tasks, else the functional environment's."""
    return gym_spec(cfg.env) if cfg.env in GYMNASIUM_ENVS else make_env(cfg.env).spec


def expected_shapes(cfg) -> dict:
    """The shapes (without the seed axis) of the arrays a run of ``cfg`` keeps, from its networks
    built without computing anything (``jax.eval_shape``)."""
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    if isinstance(cfg, EpisodicTrainConfig):
        program = episodic.make_program(cfg)
        tree = jax.eval_shape(lambda: program.policies(program.init(keys[0], traced_hyperparams(cfg))))
    else:
        learner = make_learner(cfg, _spec(cfg))
        obs0 = jnp.zeros((cfg.settings.n_envs, learner.spec.obs_dim))
        tree = jax.eval_shape(lambda: learner.final_params(learner.init(tuple(keys), traced_hyperparams(cfg), obs0)))
    return plain_tree(tree, leaf=lambda x: tuple(x.shape))


def mismatch(saved: SavedPolicies) -> str | None:
    """Why ``saved.final``, or the policies kept after an iteration (``saved.during``), cannot be
    the policies of a run of ``saved.config`` (other networks, another method, another number of
    seeds); None if they can."""
    expected = expected_shapes(saved.config)
    for where, tree in (("", saved.final), *((f"the policies kept after iteration {i}: ", t)
                                            for i, t in sorted(saved.during.items()))):
        if why := _tree_mismatch(tree, expected, saved.config.seeds):
            return where + why
    return None


def _tree_mismatch(tree, expected: dict, seeds: int) -> str | None:
    if not isinstance(tree, dict):
        return "it holds no networks"
    tree = {k: v for k, v in tree.items() if k != "key"}  # the JAX runs' evaluation key: not a network
    if set(tree) != set(expected):
        return f"it holds {sorted(tree)}, a run of this config keeps {sorted(expected)}"
    try:
        got = plain_tree(tree, leaf=lambda x: tuple(np.shape(x)[1:]))
        held = {np.shape(x)[0] if np.ndim(x) else None for x in jax.tree.leaves(tree)}
    except Exception as e:  # noqa: BLE001 -- whatever a foreign tree makes the mapping raise
        return f"its arrays cannot be read ({type(e).__name__})"
    if held != {seeds}:
        return f"it holds {sorted(held, key=str)} seeds, the run has {seeds}"
    if got != expected:
        return "its networks' shapes differ from those of the run's config (other sizes or another task)"
    return None


def check_sampled(cfg, deterministic: bool, field: str, allowed: str) -> None:
    """Sampled actions of an on-policy run's gSDE policy need its exploration matrices, which runs
    do not save: refused, naming the caller's ``field`` (``bpo evaluate``'s is ``stochastic``)."""
    if not deterministic and cfg.settings.use_sde:  # validate refuses gSDE with discrete actions
        raise ConfigError(field, "stochastic actions of a gSDE policy need its exploration matrices, which are "
                                 f"not saved; allowed: {allowed}")


def task_backend(saved: SavedPolicies, backend: str | None = None) -> str:
    """Where a saved run's policies act again (``bpo evaluate``, ``bpo probe``): the backend asked
    for, else the run's own; a Gymnasium run's task in MuJoCo threads (its dynamics, bit for bit,
    tests/test_mujoco_threads.py) or JAX, since a functional environment is needed. A backend
    without the run's task is refused, naming the backends that have it."""
    backend = backend or saved.config.backend
    if backend == "gymnasium":
        backend = "threads" if saved.config.env in MUJOCO_ENVS else "jax"
    if backend not in ("jax", "mjx", "threads"):
        raise ConfigError("backend", f"must be one of ['jax', 'mjx', 'threads'], got {backend!r}")
    if (env := saved.config.env) not in BACKEND_ENVS[backend]:
        allowed = [b for b in ("jax", "mjx", "threads") if env in BACKEND_ENVS[b]]  # the ones policies act on
        raise ConfigError("backend", f"{backend} does not have the run's task {env}; allowed: {allowed}")
    return backend


def _seed(tree: dict, seed: int) -> dict:
    return jax.tree.map(lambda x: jnp.asarray(x[seed]), tree)


def acting_function(saved: SavedPolicies, which: str = "pi", deterministic: bool = True):
    """``act(params, key, obs) -> action`` for one seed's slice of ``saved.final``: pi or mu of the
    run's networks, the normaliser applied, deterministic (as the run's evaluations: the same
    operations as ``Learner.greedy_with``) or sampled with ``key``."""
    if which == "mu" and "mu_params" not in saved.final:
        raise ConfigError("which", "not a BPO run: it has no mu; allowed: pi")
    if isinstance(saved.config, EpisodicTrainConfig):
        program = episodic.make_program(saved.config)

        def act_episodic(params, key, obs):
            logits = ((lambda o: program.policy.apply(params["pi_params"], o)) if which == "pi"
                      else (lambda o: program.behaviour.mu_apply(params["mu_params"], o).loc))
            return episodic.act(logits, deterministic, key, obs)

        return act_episodic
    cfg = saved.config
    check_sampled(cfg, deterministic, "deterministic", "deterministic")
    learner = make_learner(cfg, _spec(cfg))
    name = "actor_params" if which == "pi" else "mu_params"

    def act(params, key, obs):
        stats = RunningStats(**params["obs_stats"])
        if deterministic:
            return learner.greedy_with(params[name], stats, obs)
        dist = learner.dist_fn(params[name])(learner.normalize(stats, obs))
        action = distributions.sample(key, dist, learner.spec.discrete)
        return distributions.clip_action(action, learner.action_low, learner.action_high)

    return act


def load_policy(run_dir: Path, seed: int = 0, which: Literal["pi", "mu"] = "pi", deterministic: bool = True,
                key: int = 0, at: int | None = None):
    """The policy of seed ``seed`` of a run directory as a function ``obs -> action`` (NumPy in and
    out, one observation or a batch), with the observation normaliser applied. ``seed`` is the
    seed's index in the run, 0 to seeds - 1, as in curve.csv's seed column (not the config's
    ``seed``, from which every seed's key is made). The policy is pi or, for BPO runs,
    mu; deterministic (argmax or the Gaussian mean, as the run's evaluations) or sampled (with a
    key stream seeded by ``key``); the final policy, or the one kept after iteration ``at``
    (``save_policies_every``)."""
    saved = load_policies(run_dir)
    if not 0 <= seed < saved.seeds:
        raise ConfigError("seed", f"must be in [0, {saved.seeds - 1}] for {str(run_dir)!r}, got {seed}")
    params = _seed(saved.at(at), seed)
    act = jax.jit(acting_function(saved, which, deterministic))
    keys = [jax.random.PRNGKey(key)]

    def policy(obs):
        keys[0], k = jax.random.split(keys[0])
        return np.asarray(act(params, k, jnp.asarray(obs, jnp.float32)))

    return policy
