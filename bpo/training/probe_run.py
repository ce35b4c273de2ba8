"""The return-estimator probe (``bpo.instruments.probe``) on a finished run's saved policies: ``bpo probe RUN``.

For each kept point of a BPO-PPO run (``save_policies_every``: the policies after every N updates,
``SavedPolicies.during``, plus the final ones) and each seed, pi, mu, the value network and the
observation normaliser are rebuilt from the saved parameters. Start states are those mu visits from
fresh resets at that point: M environments are reset and stepped ``settings.horizon`` steps under mu
(``bpo.instruments.probe.visited_states``, auto-reset), and M of the M x H states seen are drawn without
replacement. This is not the run's replay buffer (which is not saved): the states are weighted as
mu visits them in the first H steps after a reset. From each, ``bpo.instruments.probe.probe_segments`` runs K
segments under pi and K under mu with the run's gamma, gae_lambda, rho_bar, c_bar and truncation
mode, ``bpo.instruments.probe.reference_values`` the Monte Carlo v_pi, and ``bpo.instruments.probe.probe_statistics``
summarises them. Every key comes from ``settings.seed`` folded with the point's update count and
the seed index, so the same command gives the same numbers.
"""

from __future__ import annotations

import re
from dataclasses import asdict
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from bpo.agents.learner import make_learner
from bpo.agents.methods import validate
from bpo.config.schema import ConfigError, EpisodicTrainConfig, replace, traced_hyperparams
from bpo.core import distributions
from bpo.core.normalization import RunningStats
from bpo.infra.publish import RUN_FILES
from bpo.instruments.probe import (
    ProbeReturns,
    ProbeSettings,
    probe_segments,
    probe_statistics,
    reference_values,
    visited_states,
)
from bpo.runners.onpolicy import run_env
from bpo.training.job import CHECKPOINT, TENSORBOARD, WANDB
from bpo.training.policies import SavedPolicies, load_policies, task_backend

FINAL = "final"
NETWORKS = ("actor_params", "mu_params", "critic_params", "obs_stats")  # what the probe uses


def _point(p, kept: list) -> int | str:
    """A point as given on the command line ('40', 'final') or in Python (40)."""
    try:
        return p if p == FINAL else int(p)
    except ValueError:
        raise ConfigError("points", f"must be update counts or 'final'; kept: {kept}, got {p!r}") from None


TAKEN = (CHECKPOINT, TENSORBOARD, WANDB, *(name for name in RUN_FILES if "." not in name))
"""The folders a run directory holds of its own: a probe there would be taken for one of them, or
make it pass for derived from the run (``bpo.infra.publish.derived_from_the_run``) and go when the
run is replaced."""


def check_probe_name(name: str, field: str = "name") -> None:
    """A probe's folder under its run (``bpo probe --name``): a plain name of letters, digits, _
    and -, so that it can never point outside the run directory, and none of the run's own folders."""
    if not re.fullmatch(r"[\w-]+", name):
        raise ConfigError(field, f"must be a plain folder name (letters, digits, _ and -), got {name!r}")
    if name in TAKEN:
        raise ConfigError(field, f"{name!r} is a folder of the run's own; allowed: another name, not one of "
                                 f"{sorted(TAKEN)}")


def with_truncation(cfg, rho_bar: float | None = None, c_bar: float | None = None):
    """The run's config with the estimator's truncation levels replaced (None keeps the run's; inf:
    no truncation), checked as a config is: the same pi, mu and critic probed with other rho_bar,
    c_bar. Only the probe's estimator changes; nothing is trained with them."""
    changes = {name: v for name, v in (("returns.rho_bar", rho_bar), ("returns.c_bar", c_bar)) if v is not None}
    return validate(replace(cfg, **changes)) if changes else cfg


def check_probe(run_dir: Path, points=None, seeds=None, backend: str | None = None, rho_bar: float | None = None,
                c_bar: float | None = None):
    """Everything checked before any compilation: (saved policies, points, seeds, backend). Points
    are update counts of kept policies or ``"final"`` (default: all of them); seeds are indices;
    ``rho_bar`` and ``c_bar`` replace the run's (``with_truncation``)."""
    saved = load_policies(run_dir)  # refuses a folder without policies
    if isinstance(saved.config, EpisodicTrainConfig) or "mu_params" not in saved.final:
        raise ConfigError("run", f"{str(run_dir)!r} is not a BPO-PPO run ({saved.config.algo}): it has no "
                                 "behaviour policy mu to probe; allowed: on-policy runs with BPO (a bpo section)")
    kept = sorted(saved.during) + [FINAL]
    points = kept if points is None else [_point(p, kept) for p in points]
    for p in points:
        if p not in kept:
            raise ConfigError("points", f"no policies kept at {p!r}; kept: {kept} (save_policies_every)")
    if len(set(points)) < len(points):  # a point given twice would be probed, and summarised, twice
        raise ConfigError("points", f"must name each point once, got {points}")
    seeds = list(range(saved.seeds)) if seeds is None else [int(s) for s in seeds]
    for s in seeds:
        if not 0 <= s < saved.seeds:
            raise ConfigError("seeds", f"must be in [0, {saved.seeds - 1}], got {s}")
    if len(set(seeds)) < len(seeds):  # a seed given twice would count twice in every pooled statistic
        raise ConfigError("seeds", f"must name each seed once, got {seeds}")
    if not points or not seeds:
        raise ConfigError("points" if not points else "seeds", "must name at least one")
    with_truncation(saved.config, rho_bar, c_bar)
    return saved, points, seeds, task_backend(saved, backend)


def _functions(learner, params):
    """pi, mu (DistFns) and v on raw observations, with the saved normaliser frozen."""
    stats = RunningStats(**params["obs_stats"])
    norm = lambda obs: learner.normalize(stats, obs)  # noqa: E731
    pi = lambda obs: learner.dist_fn(params["actor_params"])(norm(obs))  # noqa: E731
    mu = lambda obs: learner.dist_fn(params["mu_params"])(norm(obs))  # noqa: E731
    value = lambda obs: learner.critic_apply(params["critic_params"], norm(obs))  # noqa: E731
    return pi, mu, value


def make_probe_fn(cfg, env, settings: ProbeSettings):
    """A jitted ``(key, params) -> arrays`` for one seed's parameters at one point: start states
    under mu, the segments and the reference. One compilation serves every point and seed."""
    learner = make_learner(cfg, env.spec)
    hp = traced_hyperparams(cfg)
    returns = ProbeReturns(hp.gamma, hp.gae_lambda, hp.rho_bar, hp.c_bar)
    discrete, s = env.spec.discrete, settings
    to_env = lambda a: distributions.clip_action(a, learner.action_low, learner.action_high)  # noqa: E731

    def probe(key, params):
        pi, mu, value = _functions(learner, params)
        k_reset, k_visit, k_pick, k_seg, k_ref = jax.random.split(key, 5)
        states, obs = jax.vmap(env.reset)(jax.random.split(k_reset, s.m))
        seen, seen_obs = visited_states(k_visit, env, states, obs, mu, n_steps=s.horizon, discrete=discrete,
                                        to_env=to_env)
        pick = jax.random.choice(k_pick, s.m * s.horizon, (s.m,), replace=False)
        starts, start_obs = jax.tree.map(lambda x: x[pick], seen), seen_obs[pick]
        seg = probe_segments(k_seg, env, starts, start_obs, pi, mu, value, returns, horizon=s.horizon, k=s.k,
                             discrete=discrete, to_env=to_env, traj=cfg.returns.traj)
        ref = reference_values(k_ref, env, starts, start_obs, pi, gamma=returns.gamma, horizon=s.ref_horizon,
                               k=s.ref_k, discrete=discrete, value=value if s.ref_bootstrap else None,
                               to_env=to_env)
        return {"est_mu": seg.mu.estimate, "est_pi": seg.pi.estimate, "log_weight_mu": seg.mu.log_weight,
                "v_ref": ref.mean, "v_ref_se": ref.se, "ref_ended_frac": ref.ended_frac}

    return jax.jit(probe)


def _statistics(arrays: dict, settings: ProbeSettings) -> dict:
    out = probe_statistics(arrays["est_mu"], arrays["est_pi"], arrays["v_ref"], arrays["log_weight_mu"],
                           arrays["v_ref_se"], n_boot=settings.n_boot, level=settings.level, seed=settings.seed)
    out["ref_ended_frac"] = float(np.mean(arrays["ref_ended_frac"]))
    return out


def _same(a: dict, b: dict) -> bool:
    """The same parameters (the policies kept at the last update and the final ones usually are)."""
    a, b = ({k: t[k] for k in NETWORKS} for t in (a, b))
    return jax.tree.structure(a) == jax.tree.structure(b) and all(
        np.array_equal(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True))


def probed_points(saved: SavedPolicies, points) -> int:
    """How many of ``points`` are probed: the final policies are not probed again when they are those
    kept at the last update (``probe_run`` repeats that point's result)."""
    last = saved.config.n_updates
    repeat = FINAL in points and last in points and _same(saved.at(last), saved.final)
    return len(points) - int(repeat)


def point_key(settings: ProbeSettings, update: int, seed: int) -> jax.Array:
    """The key of one point and seed: from ``settings.seed``, folded with both."""
    return jax.random.fold_in(jax.random.fold_in(jax.random.PRNGKey(settings.seed), update), seed)


def probe_run(run_dir: Path, settings: ProbeSettings, points=None, seeds=None, backend: str | None = None,
              rho_bar: float | None = None, c_bar: float | None = None) -> dict:
    """The probe at every requested point and seed of a BPO-PPO run (module docstring): per point its
    update count, environment steps (update x rollout size), per seed ``probe_statistics`` (plus the
    reference's ended fraction) and ``pooled``: the same over the states of all seeds together.
    ``rho_bar``/``c_bar``: the estimator's truncation instead of the run's (``with_truncation``)."""
    saved, points, seeds, backend = check_probe(run_dir, points, seeds, backend, rho_bar, c_bar)
    cfg = with_truncation(saved.config, rho_bar, c_bar)
    env = run_env(cfg, backend)
    probe = make_probe_fn(cfg, env, settings)
    results, done = [], {}
    for point in points:
        update = cfg.n_updates if point == FINAL else point
        policies = saved.at(None if point == FINAL else point)
        if update in done and _same(done[update][0], policies):  # the final ones are the last kept: no rerun
            results.append({**done[update][1], "point": point})
            continue
        per_seed, arrays = {}, []
        for seed in seeds:
            params = jax.tree.map(lambda x, i=seed: jnp.asarray(x[i]), policies)
            out = jax.tree.map(np.asarray, probe(point_key(settings, update, seed), params))
            per_seed[str(seed)] = _statistics(out, settings)
            arrays.append(out)
        pooled = _statistics({k: np.concatenate([a[k] for a in arrays]) for k in arrays[0]}, settings)
        results.append({"point": point, "update": int(update), "env_steps": int(update * cfg.rollout_size),
                        "seeds": per_seed, "pooled": pooled})
        done[update] = (policies, results[-1])
    return {"run": str(run_dir), "env": cfg.env, "backend": backend, "settings": asdict(settings),
            "returns": {"gamma": cfg.settings.gamma, "lambda": cfg.settings.gae_lambda, "rho_bar": cfg.returns.rho_bar,
                        "c_bar": cfg.returns.c_bar, "traj": cfg.returns.traj},
            "start_states": f"{settings.m} of the {settings.m} x {settings.horizon} states mu visits in the first "
                            f"{settings.horizon} steps after fresh resets, drawn without replacement",
            "points": results}
