"""Training throughput on Gymnasium MuJoCo (HalfCheetah-v5, ``mujoco_default``), pinned to one
CPU core, side by side in one process:

* raw Gymnasium stepping (a single env with ``gym.make``, and the runner's vector env), with
  fixed actions: the ceiling for any agent;
* PPO and BPO (c_bar = rho_bar = 1.5) on the host runner: training environment steps per
  second excluding evaluation (which runs once, at the end), the time inside the update calls,
  and compile time;
* Stable-Baselines3's PPO with the same settings (``benchmarks/sb3_reference.py``; a
  benchmark-only dependency: ``pip install torch==2.13.0 stable-baselines3``).

    python benchmarks/mujoco_speed.py [--steps 20480] [--core 0] [--seeds 1] [--skip-sb3]

Prints a table; nothing is asserted. BPO cost / PPO cost is PPO's steps/s over BPO's.
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def pin(core: int) -> None:
    # Before JAX or torch start their thread pools, so that every thread inherits the affinity.
    os.sched_setaffinity(0, {core})


def raw_gym_steps_per_s(env_id: str, steps: int) -> tuple[float, float]:
    import gymnasium as gym
    import numpy as np

    from envs.gymnasium_envs import make_vector_env

    env = gym.make(env_id, disable_env_checker=True)
    env.reset(seed=0)
    action = np.zeros(env.action_space.shape, np.float32)
    start = time.perf_counter()
    for _ in range(steps):
        _, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            env.reset()
    single = steps / (time.perf_counter() - start)
    env.close()
    venv = make_vector_env(env_id, 1)
    venv.reset(seed=[0])
    action = action[None]
    start = time.perf_counter()
    for _ in range(steps):
        venv.step(action)
    vector = steps / (time.perf_counter() - start)
    venv.close()
    return single, vector


def ours(env_id: str, variant: str, steps: int, seeds: int) -> dict:
    from bpo.config.presets import apply_variant, get_preset
    from bpo.config.schema import replace, traced_hyperparams
    from bpo.runners.host import HostRunner
    from bpo.training.driver import drive

    cfg = replace(apply_variant(get_preset("mujoco_default", env_id), variant), seeds=seeds, total_timesteps=steps,
                  eval_every=10 * steps, eval_episodes=1, eval_in_background=False)
    runner = HostRunner(cfg, traced_hyperparams(cfg))
    start = time.perf_counter()
    out = drive(runner, cfg).metrics
    wall = time.perf_counter() - start
    env_steps = float(out["eval"]["eval_step"][0, -1]) * seeds
    train_time = wall - runner.compile_time_s - runner.eval_time_s
    return {"steps_per_s": env_steps / train_time, "update_share": runner.update_time_s / train_time,
            "update_us_per_step": runner.update_time_s / env_steps * 1e6, "compile_s": runner.compile_time_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20480, help="training steps per run (whole rollouts)")
    parser.add_argument("--core", type=int, default=0, help="the CPU core to pin to")
    parser.add_argument("--seeds", type=int, default=1, help="seeds vmapped in our runs (steps/s counts all)")
    parser.add_argument("--env", default="HalfCheetah-v5")
    parser.add_argument("--skip-sb3", action="store_true")
    args = parser.parse_args()
    pin(args.core)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

    single, vector = raw_gym_steps_per_s(args.env, args.steps)
    ppo = ours(args.env, "ppo", args.steps, args.seeds)
    bpo = ours(args.env, "bpo_c1.5_rho1.5", args.steps, args.seeds)
    sb3 = None
    if not args.skip_sb3:
        from sb3_reference import sb3_ppo_steps_per_s

        sb3 = sb3_ppo_steps_per_s(args.env, args.steps)["steps_per_s"]

    print(f"{args.env}, mujoco_default, {args.steps} training steps per run, {args.seeds} seed(s), "
          f"pinned to core {args.core}")
    print("| what | env steps/s | / raw gym.make stepping | time in updates | compile s |")
    print("| --- | --- | --- | --- | --- |")
    print(f"| raw Gymnasium, gym.make, fixed action | {single:,.0f} | 1.00 | | |")
    print(f"| raw Gymnasium, runner's vector env (1 env) | {vector:,.0f} | {vector / single:.2f} | | |")
    for name, r in (("PPO (ours)", ppo), ("BPO c̄ = ρ̄ = 1.5 (ours)", bpo)):
        print(f"| {name} | {r['steps_per_s']:,.0f} | {r['steps_per_s'] / single:.2f} | "
              f"{r['update_share']:.0%} ({r['update_us_per_step']:.0f} us/step) | {r['compile_s']:.1f} |")
    if sb3 is not None:
        print(f"| PPO (Stable-Baselines3 {_sb3_version()}, torch 1 thread) | {sb3:,.0f} | {sb3 / single:.2f} | | |")
    print(f"\nBPO cost / PPO cost: {ppo['steps_per_s'] / bpo['steps_per_s']:.2f}")
    if sb3 is not None:
        print(f"PPO (ours) / PPO (SB3): {ppo['steps_per_s'] / sb3:.2f}")


def _sb3_version() -> str:
    import stable_baselines3

    return stable_baselines3.__version__


if __name__ == "__main__":
    main()
