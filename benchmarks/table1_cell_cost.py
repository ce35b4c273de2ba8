"""What one update of each Table 1 column costs, beside the column whose cells the campaign measured.

    python benchmarks/table1_cell_cost.py [--seeds 1] [--repeats 3] [--core 0]

For each column of Table 1 (its preset and environment: the Table 5 overrides applied) and for PPO
and BPO (c̄ = 1.0, ρ̄ = 1.5), one process pinned to one core measures the host runner's per-rollout
learner update (``benchmarks/flop_efficiency.py``'s ``host_update``: random rollout data, D full)
for S seeds vmapped: the median seconds of a call, per seed. It prints that time, the updates a
cell runs (``total_timesteps`` / the rollout, rounded up as the runs do), their product for the 10
seeds of a cell (the update time of a cell on one core), and each as a ratio to HalfCheetah-v5
``mujoco_default``'s, the column whose five cells' whole cost the campaign measured
(``results/table1/PROGRESS.md``). Only the update is measured: environment steps and evaluations
are not in it, so the ratio prices a cell's update share, not the whole cell. State the machine
and whether it was idle with the figures; the ratios come from one run.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
COLUMNS = (("mujoco_default", "HalfCheetah-v5"), ("mujoco_default", "Hopper-v5"),
           ("mujoco_default", "Walker2d-v5"), ("mujoco_gsde", "Ant-v5"), ("mujoco_gsde", "HalfCheetah-v5"))
ROWS = ("ppo", "bpo_c1.0_rho1.5")
CELL_SEEDS = 10


def child(preset: str, env_id: str, row: str, seeds: int, repeats: int) -> None:
    """In a child process: one (column, row)'s update, timed; one JSON line out."""
    sys.path.insert(0, str(HERE))
    import flop_efficiency as F  # noqa: PLC0415 - a sibling script, on the path only here
    import jax  # noqa: PLC0415
    import jax.numpy as jnp  # noqa: PLC0415

    from bpo.config.presets import apply_variant, get_preset  # noqa: PLC0415

    cfg = apply_variant(get_preset(preset, env_id), row)
    fn, (state, key, rows) = F.host_update(preset, env_id, row)
    states = jax.tree.map(lambda x: jnp.stack([x] * seeds), state)
    call = jax.jit(jax.vmap(fn, in_axes=(0, 0, None)))
    args = (states, jax.random.split(key, seeds), rows)
    seconds = F.timed(lambda: call(*args), repeats) / seeds
    print(json.dumps({"s_per_seed": seconds, "updates": cfg.n_updates, "rollout": cfg.rollout_size,
                      "hidden": list(cfg.ppo.pi_hidden)}), flush=True)


def measure(preset: str, env_id: str, row: str, args) -> dict:
    cmd = ["taskset", "-c", str(args.core), sys.executable, str(Path(__file__).resolve()), "child", preset, env_id,
           row, "--seeds", str(args.seeds), "--repeats", str(args.repeats)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{preset} {env_id} {row} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", nargs="?", default="run", choices=["run", "child"])
    parser.add_argument("preset", nargs="?")
    parser.add_argument("env", nargs="?")
    parser.add_argument("row", nargs="?")
    parser.add_argument("--seeds", type=int, default=1, help="seeds vmapped in the timed call")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--core", type=int, default=0)
    args = parser.parse_args(argv)
    if args.mode == "child":
        child(args.preset, args.env, args.row, args.seeds, args.repeats)
        return 0
    results = {(p, e, r): measure(p, e, r, args) for p, e in COLUMNS for r in ROWS}
    print(f"one update per seed, {args.seeds} seed(s) vmapped, core {args.core}, median of {args.repeats}; "
          f"a cell: {CELL_SEEDS} seeds")
    print("| column | row | hidden | rollout | updates | s per update per seed | ratio | a cell's updates, h "
          "| ratio |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for (preset, env_id, row), m in results.items():
        base = results[("mujoco_default", "HalfCheetah-v5", row)]
        cell_h = m["s_per_seed"] * m["updates"] * CELL_SEEDS / 3600
        base_h = base["s_per_seed"] * base["updates"] * CELL_SEEDS / 3600
        print(f"| {env_id} ({preset}) | {row} | {m['hidden']} | {m['rollout']} | {m['updates']} | "
              f"{m['s_per_seed']:.3f} | {m['s_per_seed'] / base['s_per_seed']:.1f} | {cell_h:.2f} | "
              f"{cell_h / base_h:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
