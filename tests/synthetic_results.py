"""Run directories with chosen final returns, for testing the analysis commands without training."""

from pathlib import Path

import numpy as np

from bpo.config.presets import apply_variant, get_preset
from bpo.config.schema import replace
from bpo.infra.results import write_run_dir


def exact_sample(mean: float, sd: float, n: int, seed: int = 0) -> np.ndarray:
    """n normal draws standardised and rescaled so that their sample mean and sample SD (ddof 1)
    are exactly ``mean`` and ``sd``."""
    z = np.random.default_rng(seed).standard_normal(n)
    z = (z - z.mean()) / z.std(ddof=1)
    return mean + sd * z


def provenance_record(code_version: str = "0123abcd", mujoco: str | None = "3.17.0") -> dict:
    """A summary's ``provenance`` as ``bpo.infra.provenance.provenance`` writes it."""
    return {"code_version": code_version, "python": "3.12.0",
            "packages": {"jax": "0.6.0", "jaxlib": "0.6.0", "flax": "0.10.6", "optax": "0.2.4", "mujoco": mujoco,
                         "mujoco-mjx": mujoco, "gymnasium": "1.1.1"},
            "backend": "cpu", "device": "test CPU"}


def fake_run(run_dir: Path, cfg, finals, steps=(0, 100, 200), provenance: dict | None = None):
    """A run directory with known final returns and a curve rising to them; with ``provenance``
    its summary has that record, without it the summary has none (like results written before
    summaries recorded one)."""
    finals = np.asarray(finals, float)
    curve = [{"step": s, "seed": i, "eval_return": float(f * (k + 1) / len(steps))}
             for i, f in enumerate(finals) for k, s in enumerate(steps)]
    summary = {"seeds": len(finals), "step_unit": "env_step", "final_eval_returns": finals.tolist(),
               "final_mean": float(finals.mean()), "final_se": float(finals.std(ddof=1) / np.sqrt(len(finals))),
               "wall_time_s": 1.0}
    if provenance is not None:
        summary["provenance"] = provenance
    write_run_dir(run_dir, cfg, curve, summary)


def synthetic_results(root: Path, cells: dict, provenance: dict | None = None) -> None:
    """{(env, preset): {variant: final returns}} as run directories like `bpo reproduce` writes;
    ``provenance``: {(env, preset, variant): record} for the runs that have one."""
    for (env, preset), rows in cells.items():
        for variant, finals in rows.items():
            cfg = replace(apply_variant(get_preset(preset, env), variant), seeds=len(finals))
            fake_run(root / env / preset / variant, cfg, finals,
                     provenance=(provenance or {}).get((env, preset, variant)))
