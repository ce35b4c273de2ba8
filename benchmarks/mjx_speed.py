"""Training throughput of the MJX backend (``--backend mjx``: the whole run one jitted program,
seeds vmapped), and the projected wall time of the full Table 1 sweep.

For each preset, algorithm and number of vmapped seeds, one run of three evaluation blocks: the
preset's own rollouts, its 10-episode evaluation every ``eval_every`` = 8,192 steps, and the
timestamps of the evaluations (host callbacks). The time between the second and the third
evaluation is the steady-state cost of 8,192 environment steps per seed *including* the
evaluation that the preset schedules, without compilation or start-up:

    env steps/s = seeds x 8,192 / (t_eval3 - t_eval2)

Also the raw MJX step rate of the task (random actions, auto-reset, no learning) for 16 envs x
seeds. The Table 1 projection: 5 rows (PPO and 4 BPO) x 5 settings (3 tasks with
``mujoco_default`` at 1.5M steps, 2 with ``mujoco_gsde`` at 2M), 10 seeds vmapped per cell,
cells run one after another, every task costed at the measured task's rate (``--env``); BPO's
rows cost the same (they differ in traced c_bar, rho_bar or the truncation mode).

    python benchmarks/mjx_speed.py [--env HalfCheetah-v5] [--presets mujoco_gsde mujoco_default]
                                   [--algos ppo bpo] [--seeds 1 10 100]

Prints a table; nothing is asserted. On a CPU this is slow (MJX is made for accelerators): there,
``--seeds 1`` gives the single-seed figures in a few minutes per configuration.
"""

from __future__ import annotations

import argparse
import time

EVAL_EVERY = 8_192
TABLE1 = {"mujoco_default": (3, 1_500_000), "mujoco_gsde": (2, 2_000_000)}  # settings, budget per run
ROWS = 5


def raw_env_steps_per_s(env_id: str, n: int, steps: int = 200) -> float:
    import jax

    from envs import make_env
    from envs.functional import auto_reset_step

    env = make_env(env_id, "mjx")

    def run(key):
        state, _ = jax.vmap(env.reset)(jax.random.split(key, n))

        def body(state, k):
            action = jax.random.uniform(k, (n, env.spec.n_actions), minval=-1.0, maxval=1.0)
            step = jax.vmap(lambda kk, s, a: auto_reset_step(env, kk, s, a))(jax.random.split(k, n), state, action)
            return step.state, step.reward.sum()

        return jax.lax.scan(body, state, jax.random.split(key, steps))[1].sum()

    compiled = jax.jit(run).lower(jax.random.PRNGKey(0)).compile()
    compiled(jax.random.PRNGKey(0)).block_until_ready()
    start = time.perf_counter()
    compiled(jax.random.PRNGKey(1)).block_until_ready()
    return n * steps / (time.perf_counter() - start)


def training(env_id: str, preset: str, algo: str, seeds: int) -> dict:
    from bpo.config.presets import apply_variant, get_preset
    from bpo.config.schema import replace
    from bpo.training import run

    cfg = apply_variant(get_preset(preset, env_id), "ppo" if algo == "ppo" else "bpo_c1.0_rho1.5")
    cfg = replace(cfg, backend="mjx", seeds=seeds, total_timesteps=2 * EVAL_EVERY, eval_every=EVAL_EVERY)
    stamps: dict[int, float] = {}

    def progress(env_steps, _):
        stamps.setdefault(int(env_steps), time.perf_counter())  # first seed to get there

    out = run(cfg, progress=progress, seed_chunk=0)
    t1, t2 = stamps[EVAL_EVERY], stamps[2 * EVAL_EVERY]
    return {"compile_s": out.compile_time_s, "block_s": t2 - t1, "steps_per_s": seeds * EVAL_EVERY / (t2 - t1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="HalfCheetah-v5")
    parser.add_argument("--presets", nargs="+", default=["mujoco_gsde", "mujoco_default"], choices=sorted(TABLE1))
    parser.add_argument("--algos", nargs="+", default=["ppo", "bpo"], choices=["ppo", "bpo"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 10, 100])
    parser.add_argument("--skip-raw", action="store_true")
    args = parser.parse_args()

    import jax

    print(f"device: {jax.devices()[0].device_kind} ({jax.default_backend()}), jax {jax.__version__}")
    if not args.skip_raw:
        for seeds in args.seeds:
            rate = raw_env_steps_per_s(args.env, 16 * seeds)
            print(f"raw MJX {args.env}, 16 envs x {seeds} seeds, random actions: {rate:,.0f} env steps/s", flush=True)
    print("| preset | algo | seeds | compile s | s per 8,192 steps per seed (incl. eval) | env steps/s (all seeds) |")
    print("| --- | --- | --- | --- | --- | --- |")
    measured = {}
    for preset in args.presets:
        for algo in args.algos:
            for seeds in args.seeds:
                r = training(args.env, preset, algo, seeds)
                measured[(preset, algo, seeds)] = r
                print(f"| {preset} | {algo} | {seeds} | {r['compile_s']:.1f} | {r['block_s']:.2f} | "
                      f"{r['steps_per_s']:,.0f} |", flush=True)
    seeds = 10 if 10 in args.seeds else max(args.seeds)
    total, complete = 0.0, True
    for preset, (settings, budget) in TABLE1.items():
        for algo, rows in (("ppo", 1), ("bpo", ROWS - 1)):
            r = measured.get((preset, algo, seeds))
            if r is None:
                complete = False
                continue
            cell_s = budget / EVAL_EVERY * r["block_s"] * 10 / seeds + r["compile_s"]
            total += settings * rows * cell_s
    label = "" if complete else " (partial: only the measured presets and algorithms)"
    scaling = "" if seeds == 10 else f", cost scaled linearly from {seeds} seeds to 10"
    print(f"projected Table 1 sweep (25 cells x 10 seeds one cell after another{scaling}){label}: {total / 3600:.1f} h")


if __name__ == "__main__":
    main()
