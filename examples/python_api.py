"""bpo from Python, in PureJaxRL's shape: a preset, a change, ``make_train(cfg) -> train(key, hp)``,
seeds and a traced hyperparameter vmapped in one program, then a run directory as `bpo train`
writes it and its policy loaded back.

    python examples/python_api.py [--timesteps N]       (about a minute on a 2-core CPU)
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from bpo.agents.methods import validate
from bpo.config.presets import get_preset, with_bpo_labelled
from bpo.config.schema import replace, traced_hyperparams
from bpo.training import make_train, run, write
from bpo.training.policies import load_policy


def main(timesteps: int) -> dict:
    cfg = validate(replace(with_bpo_labelled(get_preset("cartpole_ppo"), True), total_timesteps=timesteps,
                           eval_every=timesteps))
    hp = traced_hyperparams(cfg)  # the hyperparameters the program takes as arguments

    # Four seeds of one configuration, one jitted program.
    keys = jax.random.split(jax.random.PRNGKey(0), 4)
    seeds = jax.jit(jax.vmap(make_train(cfg), in_axes=(0, None)))(keys, hp)
    final = np.asarray(seeds["eval"]["eval_return"][:, -1])
    print(f"4 seeds: final returns {final.round(1)}")

    # Three values of the trace-truncation level c_bar (eq. (6)), vmapped like seeds: one program.
    axes = type(hp)(*[0 if name == "c_bar" else None for name in hp._fields])
    c_bars = jnp.array([1.0, 1.5, 2.0])
    sweep = jax.jit(jax.vmap(make_train(cfg), in_axes=(None, axes)))(keys[0], hp._replace(c_bar=c_bars))
    by_c = np.asarray(sweep["eval"]["eval_return"][:, -1])
    print(f"c_bar 1.0, 1.5, 2.0: final returns {by_c.round(1)}")

    # The command line's path: checkpoints, timings, a run directory; then its policy as a function.
    out = Path(tempfile.mkdtemp(prefix="bpo-api-")) / "run"
    summary = write(run(replace(cfg, seeds=2)), out)
    act = load_policy(out, seed=0)
    print(f"run directory {out}: final {summary['final_mean']:.1f}; pi(0, 0, 0, 0) = {act(np.zeros(4, np.float32))}")
    return {"seeds": final, "c_bar": by_c, "summary": summary}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timesteps", type=int, default=20_000)
    main(parser.parse_args().timesteps)
