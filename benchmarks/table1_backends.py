"""Table 1's cost on each backend: per-component times at a few lane counts, and the projected wall time.

A lane is one seed of one row. Table 1's three per-decision BPO rows of a column differ only in the
traced c_bar and rho_bar, so their 3 x 10 seeds share one program (``bpo.training.rows``); the
trajectory row (a static switch) is a program of 10 lanes, PPO another: 15 programs in all.

For each backend, algorithm and width (lanes) the script measures, in one process:

* components (JAX-program backends ``threads`` and ``mjx``): the physics of one lockstep step of
  every lane (``threads``: MuJoCo on the host pool alone, then inside the jitted program, i.e. with
  the callback), one rollout step (acting + physics), one update (the learner's whole update for
  one rollout of every lane) and one evaluation (10 greedy episodes per lane); the Gymnasium
  backend's vector-env step for the physics;
* a steady-state block of the real run (``bpo.training.run``, the preset's own schedule): 8,192
  training steps per lane and one 10-episode evaluation, from the wall times of a 3-block and a
  1-block run

    seed-steps/s = lanes x 8,192 / block seconds

and prints the projected wall time of Table 1 (25 cells x 10 seeds at the paper's budgets: 1.5M
steps for the three ``mujoco_default`` columns, 2M for the two ``mujoco_gsde`` ones) per backend,
with the 15 programs run one after another, each costed at the block time measured at the
smallest width of at least its lanes (scaled linearly beyond the widest) on the tasks given. A
program not measured is costed at BPO's rate of its preset, else at the other preset's, and the
line says which (for PPO an upper bound: its update is a fraction of BPO's).

    python benchmarks/table1_backends.py                  # a GPU machine: threads and mjx, BPO at 30 lanes
    python benchmarks/table1_backends.py --algos ppo bpo --widths 10 30 100   # the fuller picture, longer
    python benchmarks/table1_backends.py --quick          # a CPU: threads and gymnasium, BPO, 2 and 10 lanes

Nothing is asserted; the printed table is the result.
"""

from __future__ import annotations

import argparse
import os
import time

import jax
import numpy as np

from bpo.config.presets import apply_variant, get_preset
from bpo.config.schema import replace, traced_hyperparams
from bpo.runners.onpolicy import make_program
from bpo.training import run
from envs import make_env
from envs.functional import auto_reset_step
from envs.gymnasium_envs import make_vector_env

EVAL_EVERY = 8_192
COLUMNS = {"mujoco_default": (("HalfCheetah-v5", "Hopper-v5", "Walker2d-v5"), 1_500_000),
           "mujoco_gsde": (("Ant-v5", "HalfCheetah-v5"), 2_000_000)}
SEEDS = 10
PROGRAMS = (("ppo", 1), ("bpo", 3), ("bpo", 1))  # (algorithm, rows) of a column's three programs
PHYSICS_STEPS = 200


def config(preset: str, env_id: str, algo: str, backend: str, lanes: int):
    cfg = apply_variant(get_preset(preset, env_id), "ppo" if algo == "ppo" else "bpo_c1.0_rho1.5")
    return replace(cfg, backend=backend, seeds=lanes, total_timesteps=3 * EVAL_EVERY, eval_every=EVAL_EVERY)


def timed(fn, *args) -> float:
    """Seconds of one call of a compiled function (after a first call that compiles it)."""
    jax.block_until_ready(fn(*args))
    start = time.perf_counter()
    jax.block_until_ready(fn(*args))
    return time.perf_counter() - start


def physics_ms(cfg) -> dict:
    """Milliseconds per lockstep step of ``seeds x n_envs`` lanes with random actions."""
    lanes = cfg.seeds * cfg.ppo.n_envs
    if cfg.backend == "gymnasium":
        env = make_vector_env(cfg.env, lanes, "sync")
        env.reset(seed=list(range(lanes)))
        actions = np.random.default_rng(0).uniform(-1, 1, (PHYSICS_STEPS, *env.action_space.shape))
        start = time.perf_counter()
        for a in actions:
            env.step(a.astype(np.float32))
        env.close()
        return {"physics": 1e3 * (time.perf_counter() - start) / PHYSICS_STEPS}
    env = make_env(cfg.env, cfg.backend, cfg.physics_threads)
    out = {}
    if cfg.backend == "threads":
        state, _ = env.pool.reset(np.tile(env.pool.model.qpos0, (lanes, 1)), np.zeros((lanes, env.pool.model.nv)))
        action = np.random.default_rng(0).uniform(-1, 1, (lanes, env.spec.n_actions)).astype(np.float32)
        start = time.perf_counter()
        for _ in range(PHYSICS_STEPS):
            state = env.pool.transition(state, action)[0]
        out["host physics"] = 1e3 * (time.perf_counter() - start) / PHYSICS_STEPS
    keys = jax.random.split(jax.random.PRNGKey(0), lanes)
    step = jax.vmap(lambda k, s, a: auto_reset_step(env, k, s, a))

    def steps(state, key):
        def body(state, k):
            a = jax.random.uniform(k, (lanes, env.spec.n_actions), minval=-1.0, maxval=1.0)
            return step(jax.random.split(k, lanes), state, a).state, None
        return jax.lax.scan(body, state, jax.random.split(key, PHYSICS_STEPS))[0]

    state = jax.vmap(env.reset)(keys)[0]
    out["physics"] = 1e3 * timed(jax.jit(steps), state, keys[0]) / PHYSICS_STEPS
    return out


def program_components(cfg) -> dict:
    """One rollout step (ms), one update and one evaluation (s) of the whole program's lanes."""
    program = make_program(cfg)
    hp = traced_hyperparams(cfg)
    keys = jax.random.split(jax.random.PRNGKey(0), cfg.seeds)
    carry = jax.jit(jax.vmap(program.init, in_axes=(0, None)))(keys, hp)
    rollout = timed(jax.jit(jax.vmap(lambda c: program.rollout(c)[1])), carry)
    train = timed(jax.jit(jax.vmap(lambda c: program.train_on_rollout(hp, c)[1])), carry)
    evaluate = timed(jax.jit(jax.vmap(program.evaluate)), carry)
    return {"rollout step": 1e3 * rollout / cfg.ppo.n_steps, "update s": train - rollout, "eval s": evaluate}


def block(cfg) -> dict:
    """Compile seconds and the steady-state seconds of one evaluation block of the real run: half
    the difference between the wall times of a 3-block and a 1-block run (compilation cancels;
    progress reports cannot time it on the Gymnasium backend, whose evaluations arrive from a
    worker process when they are done)."""
    walls, compile_s = [], 0.0
    for blocks in (1, 3):
        start = time.perf_counter()
        out = run(replace(cfg, total_timesteps=blocks * EVAL_EVERY))
        walls.append(time.perf_counter() - start)
        compile_s = out.compile_time_s
    seconds = (walls[1] - walls[0]) / 2
    return {"compile s": compile_s, "block s": seconds, "seed-steps/s": cfg.seeds * EVAL_EVERY / seconds}


def measure(preset, env_id, algo, backend, lanes) -> dict:
    cfg = config(preset, env_id, algo, backend, lanes)
    r = physics_ms(cfg)
    if backend != "gymnasium":
        r.update(program_components(cfg))
    return {**r, **block(cfg)}


COLUMNS_SHOWN = ("host physics", "physics", "rollout step", "update s", "eval s", "compile s", "block s",
                 "seed-steps/s")


def row(preset, env_id, algo, backend, lanes, r) -> str:
    cells = [f"{r[c]:,.2f}" if c in r and c != "seed-steps/s" else (f"{r[c]:,.0f}" if c in r else "-")
             for c in COLUMNS_SHOWN]
    return f"| {backend} | {preset} | {env_id} | {algo} | {lanes} | " + " | ".join(cells) + " |"


def program_seconds(series: list[tuple[int, dict]], lanes: int, budget: int) -> float | None:
    """A program of ``lanes`` lanes: compile + budget / block x block time, the block time taken at
    the smallest measured width of at least ``lanes`` (or scaled up linearly from the widest)."""
    if not series:
        return None
    wide_enough = [(w, r) for w, r in series if w >= lanes]
    width, r = min(wide_enough, key=lambda x: x[0]) if wide_enough else max(series, key=lambda x: x[0])
    return r["compile s"] + budget / EVAL_EVERY * r["block s"] * max(1.0, lanes / width)


def stand_in(backend: str, preset: str, algo: str, rates: dict) -> tuple[tuple, list]:
    """The measurement a program is costed at: its own, else BPO's of its preset, else the other
    preset's (the budget is still the program's own)."""
    for key in ((backend, preset, algo), (backend, preset, "bpo"),
                *((backend, p, a) for p in COLUMNS for a in (algo, "bpo"))):
        if rates.get(key):
            return key, rates[key]
    return (), []


def projection(backend: str, rates: dict) -> str:
    total, notes = 0.0, []
    for preset, (envs, budget) in COLUMNS.items():
        for algo, rows in PROGRAMS:
            key, series = stand_in(backend, preset, algo, rates)
            if not series:
                return f"{backend}: nothing measured, no projection"
            if key != (backend, preset, algo) and f"{preset}/{algo} at {key[1]}/{key[2]}" not in notes:
                notes.append(f"{preset}/{algo} at {key[1]}/{key[2]}")
            total += len(envs) * program_seconds(series, rows * SEEDS, budget)
    note = f" (not measured, costed at another's rate: {'; '.join(notes)})" if notes else ""
    return f"{backend}: projected Table 1, 15 programs one after another{note}: {total / 3600:.1f} h"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", nargs="+", choices=["threads", "mjx", "gymnasium"])
    parser.add_argument("--presets", nargs="+", default=["mujoco_default"], choices=sorted(COLUMNS))
    parser.add_argument("--envs", nargs="+", default=["HalfCheetah-v5"])
    parser.add_argument("--algos", nargs="+", choices=["ppo", "bpo"])
    parser.add_argument("--widths", nargs="+", type=int)
    parser.add_argument("--quick", action="store_true", help="a CPU: threads and gymnasium, BPO, 2 and 10 lanes")
    args = parser.parse_args()
    backends = args.backends or (["threads", "gymnasium"] if args.quick else ["threads", "mjx"])
    algos = args.algos or ["bpo"]
    widths = args.widths or ([2, 10] if args.quick else [30])

    print(f"device: {jax.devices()[0].device_kind} ({jax.default_backend()}), {os.cpu_count()} cores, "
          f"jax {jax.__version__}; physics and rollout step in ms per lockstep step of all lanes")
    print("| backend | preset | task | algo | lanes | " + " | ".join(COLUMNS_SHOWN) + " |")
    print("| --- " * (5 + len(COLUMNS_SHOWN)) + "|")
    rates: dict[tuple, list] = {}
    for backend in backends:
        for preset in args.presets:
            for env_id in [e for e in args.envs if e in COLUMNS[preset][0]]:
                for algo in algos:
                    for lanes in widths:
                        r = measure(preset, env_id, algo, backend, lanes)
                        rates.setdefault((backend, preset, algo), []).append((lanes, r))
                        print(row(preset, env_id, algo, backend, lanes, r), flush=True)
    for backend in backends:
        print(projection(backend, rates))


if __name__ == "__main__":
    main()
