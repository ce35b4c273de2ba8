"""``bpo evaluate``: a saved policy re-evaluated, on any backend that runs its task.

Episodes are run by ``bpo.runners.evaluation.run_episodes``, the evaluation of every JAX run, all
seeds at once as the run does. With the run's own settings (pi, deterministic, its number of
episodes and backend, ``key_from="run"``) the episodes are those of the run's final evaluation,
drawn from the key saved with the policies, so the mean return repeats the recorded final return
(``tests/test_policies.py``); other settings give new episodes from ``--seed``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from bpo.config.schema import ConfigError, EpisodicTrainConfig
from bpo.infra.results import json_number
from bpo.instruments.stats import describe
from bpo.runners.evaluation import run_episodes
from bpo.runners.onpolicy import run_env
from bpo.training.policies import SavedPolicies, acting_function, check_sampled, load_policies, task_backend


@dataclass(frozen=True)
class EvalRequest:
    episodes: int | None = None
    """Episodes per seed; default the run's ``eval_episodes``."""
    which: str = "pi"
    deterministic: bool = True
    backend: str | None = None
    """jax, mjx or threads; default the run's own (jax for a Gymnasium-backend run of a JAX task)."""
    seed: int | None = None
    """Draw new episodes from this seed; default: the run's final-evaluation key when it was saved."""


def episode_keys(saved: SavedPolicies, request: EvalRequest, episodes: int) -> jax.Array:
    """[seeds, episodes] keys: the run's final evaluation's (``fold_in(key, 7)``, as
    ``OnPolicyProgram.evaluate``) or fresh ones from ``request.seed``."""
    if request.seed is None:
        if "key" not in saved.final:
            raise ConfigError("seed", "this run saved no evaluation key (a Gymnasium-backend run): give --seed")
        base = jnp.asarray(saved.final["key"])
        return jax.vmap(lambda k: jax.random.split(jax.random.fold_in(k, 7), episodes))(base)
    return jax.random.split(jax.random.PRNGKey(request.seed), saved.seeds * episodes).reshape(saved.seeds, episodes, -1)


def check_evaluable(saved: SavedPolicies, which: str = "pi", backend: str | None = None,
                    deterministic: bool = True) -> None:
    """A ConfigError for what this module does not evaluate: an episodic run's policies, mu of a
    run without BPO, the run's task on a backend that does not have it, or stochastic actions of a
    gSDE policy (checked before ``bpo evaluate`` makes its output folder)."""
    if isinstance(saved.config, EpisodicTrainConfig):
        raise ConfigError("run", "episodic runs (ShortCorridor) are evaluated exactly by `bpo verify-variance`; "
                                 "allowed here: on-policy runs (PPO, BPO-PPO)")
    if which == "mu" and "mu_params" not in saved.final:
        raise ConfigError("which", "not a BPO run: it has no mu; allowed: pi")
    check_sampled(saved.config, deterministic, "stochastic", "the deterministic policy (no --stochastic)")
    task_backend(saved, backend)


def evaluate_saved(run_dir: Path, request: EvalRequest) -> dict:
    """Every seed's policy for ``episodes`` episodes: per seed the returns and lengths, and the
    mean, SD and SE over seeds of the per-seed mean return (the statistics of ``summary.json``)."""
    saved = load_policies(run_dir)
    check_evaluable(saved, request.which, request.backend, request.deterministic)
    episodes = request.episodes or saved.config.eval_episodes
    backend = task_backend(saved, request.backend)
    cfg = saved.config
    env = run_env(cfg, backend)
    act = acting_function(saved, request.which, request.deterministic)
    keys = episode_keys(saved, request, episodes)
    params = jax.tree.map(jnp.asarray, saved.final)
    def one_seed(p, k):
        returns, lengths = run_episodes(env, lambda key, o: act(p, jax.random.fold_in(key, 1), o), k)
        return returns, lengths, jnp.mean(returns)  # float32, as the run's evaluation averages

    returns, lengths, seed_means = jax.jit(jax.vmap(one_seed))(params, keys)
    means = np.asarray(seed_means, np.float64)
    stats = describe(means, drop_non_finite=False)
    return {"run": str(run_dir), "which": request.which, "deterministic": request.deterministic,
            "backend": backend, "episodes_per_seed": episodes, "key": "run" if request.seed is None else request.seed,
            "returns": np.asarray(returns).tolist(), "lengths": np.asarray(lengths).tolist(),
            "per_seed_mean": means.tolist(), "mean": stats["mean"], "sd": json_number(stats["sd"]),
            "se": json_number(stats["se"]),
            "mean_length": float(np.mean(lengths))}

