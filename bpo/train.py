"""Running a configuration: all seeds in one jitted call, timings, and the run directory."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from bpo import results
from bpo.config import EpisodicTrainConfig, traced_hyperparams, validate
from bpo.runners.episodic import make_train


@dataclass
class RunOutput:
    config: EpisodicTrainConfig
    metrics: dict  # numpy arrays with a leading seed axis
    compile_time_s: float
    wall_time_s: float
    run_time_s: float
    seed_chunk: int
    backend: str


def seed_keys(seed: int, n: int):
    """Run i gets fold_in(PRNGKey(seed), i): adding seeds never changes the existing runs."""
    base = jax.random.PRNGKey(seed)
    return jax.vmap(lambda i: jax.random.fold_in(base, i))(jnp.arange(n))


def default_seed_chunk() -> int:
    """20 seeds per vmapped chunk on a CPU (fits in cache), all at once (0) on an accelerator."""
    return 20 if jax.default_backend() == "cpu" else 0


def run(cfg: EpisodicTrainConfig, progress: Callable | None = None, seed_chunk: int | None = None) -> RunOutput:
    """Train ``cfg.seeds`` independent runs in one jitted call.

    Seeds are vmapped in chunks of ``seed_chunk`` that ``lax.map`` runs one after another inside
    the same program: on a CPU, chunks that fit in cache are faster than one huge vmap.
    ``seed_chunk = 0`` vmaps all seeds at once (best on a GPU); ``None`` picks by backend.
    The chunk size is part of what makes a run reproducible: on a GPU a different chunking
    changes floating-point reduction order, and a single flipped action sample changes a run.
    """
    validate(cfg)
    start = time.perf_counter()
    train = make_train(cfg, progress=progress)
    hp = traced_hyperparams(cfg)
    keys = seed_keys(cfg.seed, cfg.seeds)
    seed_chunk = default_seed_chunk() if seed_chunk is None else seed_chunk
    chunk = cfg.seeds if seed_chunk <= 0 else min(seed_chunk, cfg.seeds)

    def train_all(keys, hp):
        return jax.lax.map(lambda k: train(k, hp), keys, batch_size=chunk)

    compiled = jax.jit(train_all).lower(keys, hp).compile()
    compiled_at = time.perf_counter()
    metrics = jax.block_until_ready(compiled(keys, hp))
    end = time.perf_counter()
    return RunOutput(
        config=cfg,
        metrics=jax.tree.map(np.asarray, metrics),
        compile_time_s=compiled_at - start,
        wall_time_s=end - start,
        run_time_s=end - compiled_at,
        seed_chunk=seed_chunk,
        backend=jax.default_backend(),
    )


def summarize(out: RunOutput) -> dict:
    cfg = out.config
    final = out.metrics["eval"]["eval_return"][:, -1].astype(float)
    env_steps = float(np.sum(out.metrics["train"]["episode_length"]))
    return {
        "preset": cfg.preset,
        "algo": cfg.algo,
        "env": cfg.env,
        "seeds": cfg.seeds,
        "episodes": cfg.episodes,
        "step_unit": "episode",
        "final_eval_returns": final.tolist(),
        "final_mean": float(final.mean()),
        "final_se": float(final.std(ddof=1) / np.sqrt(len(final))) if len(final) > 1 else float("nan"),
        "final_exact_return_mean": _maybe_mean(out.metrics["eval"].get("exact_return")),
        "env_steps": env_steps,
        "wall_time_s": out.wall_time_s,
        "compile_time_s": out.compile_time_s,
        "train_steps_per_s": env_steps / out.run_time_s,
        "seed_chunk": out.seed_chunk,
        "backend": out.backend,
    }


def _maybe_mean(values):
    return None if values is None else float(np.mean(values[:, -1]))


def curve_rows(out: RunOutput) -> list[dict]:
    """One row per evaluation per seed: step (episodes done), seed, eval_return, extras."""
    ev = out.metrics["eval"]
    env_steps = np.cumsum(out.metrics["train"]["episode_length"], axis=1)
    rows = []
    n_seeds, n_evals = ev["eval_return"].shape
    for s in range(n_seeds):
        for i in range(n_evals):
            step = int(ev["eval_episode"][s, i])
            row = {
                "step": step,
                "seed": s,
                "eval_return": float(ev["eval_return"][s, i]),
                "env_steps": int(env_steps[s, step - 1]) if step > 0 else 0,
                "pi_prob_1": float(ev["pi_probs"][s, i, 1]),
                "mu_prob_1": float(ev["mu_probs"][s, i, 1]),
            }
            if "exact_return" in ev:
                row["exact_return"] = float(ev["exact_return"][s, i])
            rows.append(row)
    return rows


def write(out: RunOutput, run_dir: Path) -> dict:
    summary = summarize(out)
    results.write_run_dir(run_dir, out.config, curve_rows(out), summary)
    return summary
