"""A finished run's results: the summary, the learning curve, the training-metric table, and the
run directory they are written to (``bpo.infra.results``)."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from bpo.config.schema import OnPolicyTrainConfig, config_digest, recorded_form
from bpo.core import diagnostics as dg
from bpo.infra import results
from bpo.infra.provenance import provenance
from bpo.infra.results import json_number
from bpo.instruments.stats import describe
from bpo.training.policies import write_policies
from bpo.training.run_output import RunOutput


def pool(values: np.ndarray, how: str) -> float:
    """A diagnostic pooled over updates (NaN where there are none): mean, min or max."""
    if values.size == 0:
        return np.nan
    return {"min": np.nanmin, "max": np.nanmax, "mean": np.nanmean}[how](values)


def diagnostic_curves(out: RunOutput) -> dict[str, np.ndarray]:
    """Each off-policy diagnostic pooled over the updates since the previous evaluation, per seed:
    {name: [seeds, n_evals]} (NaN at the first evaluation, before any update)."""
    train = out.metrics["train"]
    done = out.config.units_at_evaluations(out.metrics["eval"])
    curves = {}
    for name, how in dg.POOLING.items():
        if name not in train:
            continue
        v = np.asarray(train[name], float)
        curves[name] = np.array([[pool(v[s, lo:hi], how) for lo, hi in zip(np.r_[0, done[:-1]], done, strict=True)]
                                 for s in range(v.shape[0])])
    return curves


def diagnostics_summary(out: RunOutput) -> tuple[dict, list[str]]:
    """The diagnostics pooled over the whole run and all seeds, and warnings: a log-probability
    mismatch above 0.01 means the learner does not see the data as the rollout produced it."""
    train, pooled, warnings = out.metrics["train"], {}, []
    for name, how in dg.POOLING.items():
        if name in train:
            pooled[name] = float(pool(np.asarray(train[name], float), how))
    for name in ("logprob_mismatch", "logprob_mismatch_sq"):
        if name in train:
            worst = np.abs(np.asarray(train[name], float)).max(axis=0)
            bad = np.flatnonzero(worst > dg.MISMATCH_WARNING)
            if bad.size:
                warnings.append(f"{name} = {worst[bad[0]]:.3g} > {dg.MISMATCH_WARNING} in update {bad[0] + 1} "
                                f"({bad.size} updates): stored and recomputed behaviour log-probabilities disagree")
    return pooled, warnings


def env_steps_per_seed(out: RunOutput) -> float:
    if isinstance(out.config, OnPolicyTrainConfig):
        return float(out.metrics["eval"]["eval_step"][0, -1])
    return float(np.mean(np.sum(out.metrics["train"]["episode_length"], axis=1)))


def evaluation_steps(out: RunOutput) -> np.ndarray:
    """The curve's step of each evaluation (the same for every seed): environment steps for
    on-policy runs, episodes for episodic ones."""
    ev = out.metrics["eval"]
    return np.asarray(ev["eval_step"] if isinstance(out.config, OnPolicyTrainConfig) else ev["eval_episode"])[0]


def evaluation_clock(out: RunOutput) -> dict | None:
    """``{"step": [...], "elapsed_s": [...]}``: the training seconds (the driver's loop clock:
    compilation, initialisation and checkpoint writes left out, every segment of a resumed run
    counted) when each evaluation was made; None when the run has no clock. On-policy runs
    evaluate between updates, after as many loop iterations as updates done; an episodic run's
    k-th evaluation ends its loop iteration k (so after k + 1). Kept in the summary, not in
    curve.csv, which holds results only and so is the same, byte for byte, run after run."""
    if out.loop_clock_s is None:
        return None
    steps = evaluation_steps(out)
    if isinstance(out.config, OnPolicyTrainConfig):
        iterations = out.config.units_at_evaluations(out.metrics["eval"])
    else:
        iterations = np.arange(len(steps)) + 1
    return {"step": [int(x) for x in steps], "elapsed_s": [float(out.loop_clock_s[i]) for i in iterations]}


def summarize(out: RunOutput) -> dict:
    """``summary.json``: final returns per seed with their mean, SD and SE (standard deviation over
    seeds, and the standard error of the mean), throughput and timings, the pooled diagnostics with
    their warnings, and the provenance (code and package versions, device)."""
    cfg = out.config
    final = out.metrics["eval"]["eval_return"][:, -1].astype(float)
    stats = describe(final, drop_non_finite=False)  # a NaN seed shows in the summary's mean
    env_steps = env_steps_per_seed(out) * cfg.seeds
    summary = {
        "config_sha256": config_digest(recorded_form(cfg)),  # the run's config.json (reader._agree)
        "preset": cfg.preset,
        "algo": cfg.algo,
        "env": cfg.env,
        "seeds": cfg.seeds,
        "step_unit": cfg.step_unit,
        "final_eval_returns": final.tolist(),
        # null, not NaN (which strict JSON lacks), where a statistic is undefined: one seed, or a NaN one
        "final_mean": json_number(stats["mean"]),
        "final_sd": json_number(stats["sd"]),
        "final_se": json_number(stats["se"]),
        "env_steps": env_steps,
        "wall_time_s": out.wall_time_s,
        "compile_time_s": out.compile_time_s,
        # The JAX runner's evaluations happen inside its single program: its throughput includes them.
        "train_steps_per_s": env_steps / (out.run_time_s - out.eval_time_s),
        "eval_time_s": out.eval_time_s,
        "eval_worker_time_s": out.eval_worker_time_s,
        "seed_chunk": out.seed_chunk,
        "threads": out.threads,
        "configs_in_program": out.group_size,
        "backend": out.backend,
        "provenance": provenance(out.backend),
    }
    if (clock := evaluation_clock(out)) is not None:
        summary["evaluation_clock"] = clock
    summary["diagnostics"], summary["warnings"] = diagnostics_summary(out)
    if isinstance(cfg, OnPolicyTrainConfig):
        summary["total_timesteps"] = env_steps_per_seed(out)
        summary["variant"] = cfg.variant
    else:
        summary["episodes"] = cfg.episodes
        exact = out.metrics["eval"].get("exact_return")
        summary["final_exact_return_mean"] = None if exact is None else float(np.mean(exact[:, -1]))
    return summary


def curve_rows(out: RunOutput) -> list[dict]:
    """One row per evaluation per seed: step (episodes done, or env steps for on-policy runs),
    seed, eval_return, the diagnostics pooled since the previous evaluation, and for episodic
    runs the environment steps so far and pi's and mu's probabilities of action 1."""
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
    """Per-update (or per-episode) training metrics averaged over seeds: one row per update. A
    metric with no value in an update (the training return when no episode ended) is NaN there."""
    train = out.metrics["train"]
    n = next(iter(train.values())).shape[1]
    with warnings.catch_warnings():  # numpy warns of each empty mean: NaN says it in the file
        warnings.simplefilter("ignore", RuntimeWarning)
        means = {k: np.nanmean(v.reshape(v.shape[0], n, -1), axis=(0, 2)) for k, v in train.items()}
    return [{"update": i, **{k: float(v[i]) for k, v in sorted(means.items())}} for i in range(n)]


def write(out: RunOutput, run_dir: Path) -> dict:
    """Write the run directory (config, curve, training metrics, the trained policies
    (``bpo.training.policies``), summary last); the summary."""
    summary = summarize(out)
    write_policies(run_dir, out.metrics, out.config)
    results.write_run_dir(run_dir, out.config, curve_rows(out), summary, train_metric_rows(out))
    return summary


def final_return_text(summary: dict) -> str:
    """'MEAN ± SE (SE, N seeds)', or 'MEAN (1 seed)': one seed has no standard error ('nan' where
    the summary holds null: a seed's return was not finite)."""
    mean, se = (f"{x:.2f}" if x is not None else "nan" for x in (summary["final_mean"], summary["final_se"]))
    if summary["seeds"] < 2:
        return f"{mean} (1 seed)"
    return f"{mean} ± {se} (SE, {summary['seeds']} seeds)"
