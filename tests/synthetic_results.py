"""Run directories with chosen final returns, for testing the analysis commands without training."""

from pathlib import Path

import numpy as np

from bpo.config import replace
from bpo.presets import apply_variant, get_preset
from bpo.results import write_run_dir


def fake_run(run_dir: Path, cfg, finals, steps=(0, 100, 200)):
    """A run directory with known final returns and a curve rising to them."""
    finals = np.asarray(finals, float)
    curve = [{"step": s, "seed": i, "eval_return": float(f * (k + 1) / len(steps))}
             for i, f in enumerate(finals) for k, s in enumerate(steps)]
    summary = {"seeds": len(finals), "step_unit": "env_step", "final_eval_returns": finals.tolist(),
               "final_mean": float(finals.mean()), "final_se": float(finals.std(ddof=1) / np.sqrt(len(finals))),
               "wall_time_s": 1.0}
    write_run_dir(run_dir, cfg, curve, summary)


def synthetic_results(root: Path, cells: dict) -> None:
    """{(env, preset): {variant: final returns}} as run directories like `bpo reproduce` writes."""
    for (env, preset), rows in cells.items():
        for variant, finals in rows.items():
            cfg = replace(apply_variant(get_preset(preset, env), variant), seeds=len(finals))
            fake_run(root / env / preset / variant, cfg, finals)
