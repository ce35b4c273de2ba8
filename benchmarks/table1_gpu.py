"""Table 1 on one accelerator: throughput of the MJX backend against the number of vmapped lanes,
and the wall time of the whole table when each column runs as three programs.

A lane is one seed of one row: Table 1's three per-decision BPO rows of a column differ only in the
traced c_bar and rho_bar, so their 3 x 10 seeds share one program (``bpo.training.rows``); the
trajectory row (a static switch) is a program of 10 lanes, PPO another. For every preset, task and
algorithm, the script runs three evaluation blocks (8,192 steps per lane each, the preset's own
rollouts and 10-episode evaluations) at each width of ``--widths`` and stops widening once the
total throughput grows by less than ``--flat`` (default 10 %) from the previous width:

    env steps/s (all lanes) = lanes x 8,192 / (t_eval3 - t_eval2)      (steady state, evaluation included)

It prints one row per width (compile s, steady-state s per block, env steps/s in total and per
lane, the device's peak memory) and the projected wall time of Table 1 (25 cells x 10 seeds at the
paper's budgets: 1.5M steps for the three ``mujoco_default`` columns, 2M for the two
``mujoco_gsde`` ones), with each column's three programs run one after another and every task of a
preset costed at the rate measured on the tasks given (``--envs``).

    python benchmarks/table1_gpu.py                       # on the GPU: both presets, HalfCheetah and Hopper
    python benchmarks/table1_gpu.py --quick               # a smoke run on a CPU: tiny widths, one block

Nothing is asserted; the printed table is the result.
"""

from __future__ import annotations

import argparse
import time

import jax

from bpo.config import replace
from bpo.presets import apply_variant, get_preset
from bpo.training import run_rows

EVAL_EVERY = 8_192
# --quick: blocks of one 256-step rollout and a single pass of each behaviour epoch loop.
QUICK = {"ppo.n_envs": 1, "ppo.n_steps": 256, "ppo.batch_size": 64, "bpo.replay_size": 512, "bpo.n_qvf_epochs": 1,
         "bpo.n_mu_epochs": 1, "eval_episodes": 1}
COLUMNS = {"mujoco_default": (("HalfCheetah-v5", "Hopper-v5", "Walker2d-v5"), 1_500_000),
           "mujoco_gsde": (("Ant-v5", "HalfCheetah-v5"), 2_000_000)}
SEEDS = 10
PROGRAMS = (("ppo", 1), ("bpo", 3), ("bpo", 1))  # (algorithm, rows) of a column's three programs


def peak_memory_gb() -> float | None:
    stats = jax.devices()[0].memory_stats() or {}
    peak = stats.get("peak_bytes_in_use")
    return None if peak is None else peak / 2**30


def measure(preset: str, env_id: str, algo: str, lanes: int, eval_every: int, quick: bool) -> dict:
    """One program of ``lanes`` lanes: compile time and the steady-state time of one block."""
    cfg = apply_variant(get_preset(preset, env_id), "ppo" if algo == "ppo" else "bpo_c1.0_rho1.5")
    cfg = replace(cfg, backend="mjx", seeds=lanes, total_timesteps=3 * eval_every, eval_every=eval_every,
                  **(QUICK if quick else {}))
    stamps: dict[int, float] = {}

    def progress(env_steps, _):
        stamps.setdefault(int(env_steps), time.perf_counter())  # the first lane to get there

    out = run_rows([cfg], progress=progress, seed_chunk=0)[0]
    block = stamps[3 * eval_every] - stamps[2 * eval_every]
    return {"compile_s": out.compile_time_s, "block_s": block, "steps_per_s": lanes * eval_every / block,
            "memory_gb": peak_memory_gb()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--presets", nargs="+", default=sorted(COLUMNS), choices=sorted(COLUMNS))
    parser.add_argument("--envs", nargs="+", default=["HalfCheetah-v5", "Hopper-v5"])
    parser.add_argument("--algos", nargs="+", default=["ppo", "bpo"], choices=["ppo", "bpo"])
    parser.add_argument("--widths", nargs="+", type=int, default=[1, 10, 40, 100, 200, 400, 800])
    parser.add_argument("--flat", type=float, default=0.10)
    parser.add_argument("--quick", action="store_true", help="CPU smoke run: widths 1 and 2, 256-step blocks")
    args = parser.parse_args()
    widths, eval_every = ([1, 2], 256) if args.quick else (args.widths, EVAL_EVERY)

    device = jax.devices()[0]
    print(f"device: {device.device_kind} ({jax.default_backend()}), jax {jax.__version__}")
    print("| preset | task | algo | lanes | compile s | s per block | env steps/s (all) | per lane | peak GiB |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    rates: dict[tuple[str, str], list[tuple[int, dict]]] = {}
    for preset in args.presets:
        for env_id in args.envs:
            if env_id not in COLUMNS[preset][0]:
                continue
            for algo in args.algos:
                series = rates.setdefault((preset, algo), [])
                previous = None
                for lanes in widths:
                    r = measure(preset, env_id, algo, lanes, eval_every, args.quick)
                    series.append((lanes, r))
                    memory = "n/a" if r["memory_gb"] is None else f"{r['memory_gb']:.1f}"
                    print(f"| {preset} | {env_id} | {algo} | {lanes} | {r['compile_s']:.1f} | {r['block_s']:.2f} | "
                          f"{r['steps_per_s']:,.0f} | {r['steps_per_s'] / lanes:,.0f} | {memory} |", flush=True)
                    if previous is not None and r["steps_per_s"] < (1 + args.flat) * previous:
                        break
                    previous = r["steps_per_s"]
    print(projection(rates, eval_every))


def program_seconds(series: list[tuple[int, dict]], lanes: int, budget: int, eval_every: int) -> float | None:
    """A program of ``lanes`` lanes: compile + budget / block x block time, the block time taken at
    the smallest measured width of at least ``lanes`` (or scaled up linearly from the widest)."""
    if not series:
        return None
    wide_enough = [(w, r) for w, r in series if w >= lanes]
    width, r = min(wide_enough, key=lambda x: x[0]) if wide_enough else max(series, key=lambda x: x[0])
    block = r["block_s"] * max(1.0, lanes / width)
    return r["compile_s"] + budget / eval_every * block


def projection(rates: dict, eval_every: int) -> str:
    total, missing = 0.0, []
    for preset, (envs, budget) in COLUMNS.items():
        for algo, rows in PROGRAMS:
            seconds = program_seconds(rates.get((preset, algo), []), rows * SEEDS, budget, eval_every)
            if seconds is None:
                missing += [] if f"{preset}/{algo}" in missing else [f"{preset}/{algo}"]
                continue
            total += len(envs) * seconds
    note = f" (not measured, left out: {', '.join(missing)})" if missing else ""
    return (f"projected Table 1 (25 cells x {SEEDS} seeds; per column PPO, the 3 per-decision BPO rows, the traj "
            f"row as 3 programs run one after another){note}: {total / 3600:.2f} h")


if __name__ == "__main__":
    main()
