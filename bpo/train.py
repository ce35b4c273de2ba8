"""Running a configuration: all seeds in one jitted call, timings, and the run directory."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from bpo import checkpoint as ckpt
from bpo import diagnostics as dg
from bpo import results
from bpo.config import ConfigError, EpisodicTrainConfig, OnPolicyTrainConfig, to_dict, traced_hyperparams
from bpo.validation import validate


def make_train(cfg, progress: Callable | None = None):
    """The runner's ``train(key, hparams)`` for this kind of config."""
    if isinstance(cfg, OnPolicyTrainConfig):
        from bpo.runners.onpolicy import make_train as make
    else:
        from bpo.runners.episodic import make_train as make
    return make(cfg, progress=progress)


@dataclass
class RunOutput:
    config: EpisodicTrainConfig | OnPolicyTrainConfig
    metrics: dict  # numpy arrays with a leading seed axis
    compile_time_s: float
    wall_time_s: float
    run_time_s: float
    seed_chunk: int
    backend: str
    eval_time_s: float = 0.0  # host runner: time the training loop spent on evaluation, excluded from throughput
    eval_worker_time_s: float = 0.0  # host runner: time evaluation took, in a worker process when in the background


def seed_keys(seed: int, n: int):
    """Run i gets fold_in(PRNGKey(seed), i): adding seeds never changes the existing runs."""
    base = jax.random.PRNGKey(seed)
    return jax.vmap(lambda i: jax.random.fold_in(base, i))(jnp.arange(n))


def default_seed_chunk() -> int:
    """20 seeds per vmapped chunk on a CPU (fits in cache), all at once (0) on an accelerator."""
    return 20 if jax.default_backend() == "cpu" else 0


def progress_totals(cfg) -> tuple[int, float | None]:
    """(evaluation callbacks, environment steps) of a whole run over all seeds, for a progress
    bar; environment steps are None for episodic runs, whose episode lengths are not known ahead."""
    if isinstance(cfg, OnPolicyTrainConfig):
        from bpo.runners.onpolicy import eval_schedule, n_updates

        evaluations = int(eval_schedule(cfg).sum()) + 1
        return cfg.seeds * evaluations, cfg.seeds * n_updates(cfg) * cfg.ppo.n_steps * cfg.ppo.n_envs
    return cfg.seeds * (cfg.episodes // cfg.eval_every + 1), None


def make_stages(cfg, progress: Callable | None = None):
    if isinstance(cfg, OnPolicyTrainConfig):
        from bpo.runners.onpolicy import make_stages as make
    else:
        from bpo.runners.episodic import make_stages as make
    return make(cfg, progress=progress)


def run(cfg, progress: Callable | None = None, seed_chunk: int | None = None, logger=None,
        checkpoint_dir: Path | None = None, checkpoint_every: int = 0) -> RunOutput:
    """Train ``cfg.seeds`` independent runs: in one jitted call (JAX environments), or on the
    host runner with the seeds vmapped in every call (Gymnasium environments).

    Seeds are vmapped in chunks of ``seed_chunk`` that ``lax.map`` runs one after another inside
    the same program: on a CPU, chunks that fit in cache are faster than one huge vmap.
    ``seed_chunk = 0`` vmaps all seeds at once (best on a GPU); ``None`` picks by backend.
    The chunk size is part of what makes a run reproducible: on a GPU a different chunking
    changes floating-point reduction order, and a single flipped action sample changes a run.

    With ``checkpoint_dir`` and ``checkpoint_every = N > 0`` the run saves a checkpoint every N
    updates (on-policy) or N evaluation blocks (episodic), and continues from the checkpoint in
    ``checkpoint_dir`` when there is one: the result is bit-identical to an uninterrupted run with
    the same N. A loss or parameter that becomes NaN or infinite stops the run with a
    ``NonFiniteError`` naming it and the update; the last good checkpoint stays.
    """
    validate(cfg)
    if isinstance(cfg, OnPolicyTrainConfig) and cfg.backend == "gymnasium":
        return _run_host(cfg, progress, logger, checkpoint_dir, checkpoint_every)
    if checkpoint_dir is not None and checkpoint_every > 0:
        return _run_checkpointed(cfg, progress, seed_chunk, Path(checkpoint_dir), checkpoint_every)
    start = time.perf_counter()
    train = make_train(cfg, progress=progress)
    hp = traced_hyperparams(cfg)
    keys = seed_keys(cfg.seed, cfg.seeds)
    seed_chunk = default_seed_chunk() if seed_chunk is None else seed_chunk
    chunk = cfg.seeds if seed_chunk <= 0 else min(seed_chunk, cfg.seeds)

    def train_all(keys, hp):
        if chunk == 1:  # a vmap of size 1 turns every matmul into a batched one, slower on a CPU
            return jax.lax.map(lambda k: train(k, hp), keys)
        return jax.lax.map(lambda k: train(k, hp), keys, batch_size=chunk)

    compiled = jax.jit(train_all).lower(keys, hp).compile()
    compiled_at = time.perf_counter()
    metrics = jax.block_until_ready(compiled(keys, hp))
    end = time.perf_counter()
    ckpt.raise_if_non_finite(jax.tree.map(np.asarray, metrics["train"]), 0, _unit(cfg))
    return RunOutput(
        config=cfg,
        metrics=jax.tree.map(np.asarray, metrics),
        compile_time_s=compiled_at - start,
        wall_time_s=end - start,
        run_time_s=end - compiled_at,
        seed_chunk=seed_chunk,
        backend=jax.default_backend(),
    )


def default_checkpoint_every(cfg) -> int:
    """About ten checkpoints per run: every tenth of the updates (on-policy) or evaluation blocks."""
    if isinstance(cfg, OnPolicyTrainConfig):
        from bpo.runners.onpolicy import n_updates

        return max(1, n_updates(cfg) // 10)
    return max(1, (cfg.episodes // cfg.eval_every + 1) // 10)


def _unit(cfg) -> str:
    return "update" if isinstance(cfg, OnPolicyTrainConfig) else "episode"


def _run_checkpointed(cfg, progress, seed_chunk, directory: Path, every: int) -> RunOutput:
    """The JAX runner in segments of ``every`` loop iterations, saved after each segment."""
    start = time.perf_counter()
    stages = make_stages(cfg, progress)
    hp, keys = traced_hyperparams(cfg), seed_keys(cfg.seed, cfg.seeds)
    seed_chunk = default_seed_chunk() if seed_chunk is None else seed_chunk
    chunk = cfg.seeds if seed_chunk <= 0 else min(seed_chunk, cfg.seeds)

    def over_seeds(fn, xs):
        return jax.lax.map(fn, xs) if chunk == 1 else jax.lax.map(fn, xs, batch_size=chunk)

    init_all = jax.jit(lambda keys, hp: over_seeds(lambda k: stages.init(k, hp), keys))
    segment_all = jax.jit(lambda carry, hp, idx: over_seeds(lambda c: stages.segment(c, hp, idx), carry))
    finish_all = jax.jit(lambda carry, outputs: over_seeds(lambda co: stages.finish(*co), (carry, outputs)))
    carry_shape = jax.eval_shape(init_all, keys, hp)
    indices = np.arange(every)
    outputs_shape = jax.eval_shape(segment_all, carry_shape, hp, indices)[1]
    done, pieces = 0, []
    if ckpt.exists(directory):
        saved, _, info = ckpt.load(directory, {"carry": carry_shape, "outputs": outputs_shape})
        _check_resumable(cfg, info, every, seed_chunk)
        carry, done = saved["carry"], info["iterations_done"]
        pieces.append(saved["outputs"])
    else:
        carry = init_all(keys, hp)
    compile_time = 0.0
    while done < stages.n_iterations:
        t0 = time.perf_counter()
        carry, outputs = jax.block_until_ready(segment_all(carry, hp, indices + done))
        if compile_time == 0.0:
            compile_time = time.perf_counter() - t0  # the first call compiles (an upper bound)
        outputs = jax.tree.map(np.asarray, outputs)
        ckpt.raise_if_non_finite(_chunk_metrics(cfg, outputs[1], done), _first_unit(cfg, done), _unit(cfg),
                                 directory, jax.tree.map(np.asarray, carry))
        pieces.append(outputs)
        done += every
        joined = jax.tree.map(lambda *xs: np.concatenate(xs, axis=1), *pieces)
        pieces = [joined]
        ckpt.save(directory, {"carry": carry, "outputs": joined}, {},
                  {"iterations_done": done, "iterations": stages.n_iterations, "checkpoint_every": every,
                   "seed_chunk": seed_chunk, "unit": _unit(cfg)}, cfg)
    outputs = jax.tree.map(lambda x: x[:, : stages.n_iterations], pieces[0])
    metrics = jax.block_until_ready(finish_all(carry, outputs))
    end = time.perf_counter()
    return RunOutput(config=cfg, metrics=jax.tree.map(np.asarray, metrics), compile_time_s=compile_time,
                     wall_time_s=end - start, run_time_s=end - start - compile_time, seed_chunk=seed_chunk,
                     backend=jax.default_backend())


def _chunk_metrics(cfg, metrics: dict, start: int) -> dict:
    """A segment's per-iteration training metrics as [seeds, units]: the on-policy loop's iteration
    i is update i; the episodic loop's iteration i > 0 is evaluation block i - 1 (its episodes)."""
    if isinstance(cfg, OnPolicyTrainConfig):
        return metrics
    skip = 1 if start == 0 else 0  # iteration 0 evaluates only
    return {k: v[:, skip:].reshape(v.shape[0], -1) for k, v in metrics.items()}


def _first_unit(cfg, start: int) -> int:
    if isinstance(cfg, OnPolicyTrainConfig):
        return start
    return max(start - 1, 0) * cfg.eval_every


def _check_resumable(cfg, info: dict, every: int, seed_chunk: int) -> None:
    """A checkpoint continues only the run that wrote it, cut the same way."""
    stored = json.loads(json.dumps(info["config"]))
    if stored != json.loads(json.dumps(to_dict(cfg))):
        raise ConfigError("resume", "the checkpoint was written by a different configuration")
    if info["checkpoint_every"] != every or info["seed_chunk"] != seed_chunk:
        raise ConfigError("resume", f"the checkpoint was written with checkpoint_every={info['checkpoint_every']} "
                          f"and seed_chunk={info['seed_chunk']}; resume with the same values")


def _run_host(cfg: OnPolicyTrainConfig, progress, logger, checkpoint_dir=None, checkpoint_every=0) -> RunOutput:
    from bpo.runners.host import HostRunner

    start = time.perf_counter()
    runner = HostRunner(cfg, progress=progress, logger=logger, checkpoint_dir=checkpoint_dir,
                        checkpoint_every=checkpoint_every)
    metrics = runner.run()
    wall = time.perf_counter() - start
    return RunOutput(
        config=cfg, metrics=jax.tree.map(np.asarray, metrics), compile_time_s=runner.compile_time_s,
        wall_time_s=wall, run_time_s=wall - runner.compile_time_s, seed_chunk=cfg.seeds,
        backend=f"gymnasium-{cfg.vector_mode}+{jax.default_backend()}", eval_time_s=runner.eval_time_s,
        eval_worker_time_s=runner.eval_worker_time_s,
    )


def _pool(values, how: str):
    if values.size == 0:
        return np.nan
    return {"min": np.nanmin, "max": np.nanmax, "mean": np.nanmean}[how](values)


def updates_at_evaluations(out: RunOutput) -> np.ndarray:
    """Updates (on-policy) or episodes (episodic) done at each evaluation: [n_evals]."""
    ev, cfg = out.metrics["eval"], out.config
    if isinstance(cfg, OnPolicyTrainConfig):
        return (ev["eval_step"][0] // (cfg.ppo.n_steps * cfg.ppo.n_envs)).astype(int)
    return ev["eval_episode"][0].astype(int)


def diagnostic_curves(out: RunOutput) -> dict[str, np.ndarray]:
    """Each off-policy diagnostic pooled over the updates since the previous evaluation, per seed:
    {name: [seeds, n_evals]} (NaN at the first evaluation, before any update)."""
    train, done = out.metrics["train"], updates_at_evaluations(out)
    curves = {}
    for name, how in dg.POOLING.items():
        if name not in train:
            continue
        v = np.asarray(train[name], float)
        curves[name] = np.array([[_pool(v[s, lo:hi], how) for lo, hi in zip(np.r_[0, done[:-1]], done)]
                                 for s in range(v.shape[0])])
    return curves


def diagnostics_summary(out: RunOutput) -> tuple[dict, list[str]]:
    """The diagnostics pooled over the whole run and all seeds, and warnings: a log-probability
    mismatch above 0.01 means the learner does not see the data as the rollout produced it."""
    train, pooled, warnings = out.metrics["train"], {}, []
    for name, how in dg.POOLING.items():
        if name in train:
            pooled[name] = float(_pool(np.asarray(train[name], float), how))
    for name in ("logprob_mismatch", "logprob_mismatch_sq"):
        if name in train:
            worst = np.abs(np.asarray(train[name], float)).max(axis=0)
            bad = np.flatnonzero(worst > dg.MISMATCH_WARNING)
            if bad.size:
                warnings.append(f"{name} = {worst[bad[0]]:.3g} > {dg.MISMATCH_WARNING} at update {bad[0]} "
                                f"({bad.size} updates): stored and recomputed behaviour log-probabilities disagree")
    return pooled, warnings


def env_steps_per_seed(out: RunOutput) -> float:
    cfg = out.config
    if isinstance(cfg, OnPolicyTrainConfig):
        return float(out.metrics["eval"]["eval_step"][0, -1])
    return float(np.mean(np.sum(out.metrics["train"]["episode_length"], axis=1)))


def summarize(out: RunOutput) -> dict:
    cfg = out.config
    final = out.metrics["eval"]["eval_return"][:, -1].astype(float)
    on_policy = isinstance(cfg, OnPolicyTrainConfig)
    env_steps = env_steps_per_seed(out) * cfg.seeds
    summary = {
        "preset": cfg.preset,
        "algo": cfg.algo,
        "env": cfg.env,
        "seeds": cfg.seeds,
        "step_unit": "env_step" if on_policy else "episode",
        "final_eval_returns": final.tolist(),
        "final_mean": float(final.mean()),
        "final_se": float(final.std(ddof=1) / np.sqrt(len(final))) if len(final) > 1 else float("nan"),
        "env_steps": env_steps,
        "wall_time_s": out.wall_time_s,
        "compile_time_s": out.compile_time_s,
        # The JAX runner's evaluations happen inside its single program: its throughput includes them.
        "train_steps_per_s": env_steps / (out.run_time_s - out.eval_time_s),
        "eval_time_s": out.eval_time_s,
        "eval_worker_time_s": out.eval_worker_time_s,
        "seed_chunk": out.seed_chunk,
        "backend": out.backend,
    }
    summary["diagnostics"], summary["warnings"] = diagnostics_summary(out)
    if on_policy:
        summary["total_timesteps"] = env_steps_per_seed(out)
        summary["variant"] = cfg.variant
    else:
        summary["episodes"] = cfg.episodes
        summary["final_exact_return_mean"] = _maybe_mean(out.metrics["eval"].get("exact_return"))
    return summary


def _maybe_mean(values):
    return None if values is None else float(np.mean(values[:, -1]))


def curve_rows(out: RunOutput) -> list[dict]:
    """One row per evaluation per seed: step (episodes done, or env steps for on-policy runs),
    seed, eval_return, extras."""
    ev = out.metrics["eval"]
    n_seeds, n_evals = ev["eval_return"].shape
    extra = diagnostic_curves(out)
    if isinstance(out.config, OnPolicyTrainConfig):
        return [{"step": int(ev["eval_step"][s, i]), "seed": s, "eval_return": float(ev["eval_return"][s, i]),
                 **{k: float(v[s, i]) for k, v in extra.items()}}
                for s in range(n_seeds) for i in range(n_evals)]
    env_steps = np.cumsum(out.metrics["train"]["episode_length"], axis=1)
    rows = []
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
            row.update({k: float(v[s, i]) for k, v in extra.items()})
            rows.append(row)
    return rows


def train_metric_rows(out: RunOutput) -> list[dict]:
    """Per-update (or per-episode) training metrics averaged over seeds: one row per update."""
    train = out.metrics["train"]
    n = next(iter(train.values())).shape[1]
    means = {k: np.nanmean(v.reshape(v.shape[0], n, -1), axis=(0, 2)) for k, v in train.items()}
    return [{"update": i, **{k: float(v[i]) for k, v in sorted(means.items())}} for i in range(n)]


def write(out: RunOutput, run_dir: Path) -> dict:
    summary = summarize(out)
    results.write_run_dir(run_dir, out.config, curve_rows(out), summary, train_metric_rows(out))
    return summary
