"""MJX's solver settings for float32 training against Gymnasium: random-policy returns per task.

For each task, ``--episodes`` episodes of a uniformly random policy (a fixed action sequence per
episode, the same on every engine) on Gymnasium's environment (MuJoCo, float64) and on the MJX
port in float32 with each solver setting of ``--settings`` (iterations/line-search iterations; 0/0
is the XML's: 100/50), run up to ``--steps`` steps or termination. Prints mean return ± SE (the
standard error over episodes), the difference from Gymnasium's with its 95 % Welch interval and
the two-sided Welch p, and MJX's milliseconds per lockstep step of all episodes on this device.

    python benchmarks/mjx_fidelity.py                                 # 4 tasks, XML and 4/8, 16 episodes
    python benchmarks/mjx_fidelity.py --tasks Hopper-v5 --settings 4/8 1/4

Non-significance is not agreement: read the interval. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats

from envs.mjx import make_mjx_env
from experiments.common import welch_interval

TASKS = ["HalfCheetah-v5", "Hopper-v5", "Walker2d-v5", "Ant-v5"]


def actions(env_id: str, episodes: int, steps: int) -> np.ndarray:
    n = gym.make(env_id).action_space.shape[0]
    return np.random.default_rng(0).uniform(-1.0, 1.0, (episodes, steps, n)).astype(np.float32)


def gymnasium_returns(env_id: str, acts: np.ndarray) -> np.ndarray:
    env = gym.make(env_id).unwrapped  # the step limit is --steps
    out = []
    for i, episode in enumerate(acts):
        env.reset(seed=i)
        total = 0.0
        for a in episode:
            _, r, terminated, _, _ = env.step(a)
            total += r
            if terminated:
                break
        out.append(total)
    return np.array(out)


def mjx_returns(env_id: str, acts: np.ndarray, iterations: int, ls_iterations: int) -> tuple[np.ndarray, float]:
    env = make_mjx_env(env_id, iterations, ls_iterations)
    episodes, steps = acts.shape[:2]

    def episode(key, episode_actions):
        state, _ = env.reset(key)

        def body(c, a):
            state, alive, total = c
            state, _, r, terminated, _ = env.step_env(key, state, a)
            return (state, alive & ~terminated, total + jnp.where(alive, r, 0.0)), None

        return jax.lax.scan(body, (state, jnp.array(True), jnp.zeros(())), episode_actions)[0][2]

    run = jax.jit(jax.vmap(episode))
    keys = jax.random.split(jax.random.PRNGKey(0), episodes)
    jax.block_until_ready(run(keys, acts))
    start = time.perf_counter()
    returns = np.asarray(jax.block_until_ready(run(keys, acts)))
    return returns, 1e3 * (time.perf_counter() - start) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", default=TASKS, choices=TASKS)
    parser.add_argument("--settings", nargs="+", default=["0/0", "4/8"])
    parser.add_argument("--episodes", type=int, default=16)
    parser.add_argument("--steps", type=int, default=1000)
    args = parser.parse_args()
    print(f"device: {jax.devices()[0].device_kind}; {args.episodes} random-policy episodes of up to {args.steps} "
          "steps; ± is the SE over episodes")
    print("| task | engine | solver | return | MJX - Gymnasium (95 % CI) | Welch p | ms per step |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for env_id in args.tasks:
        acts = actions(env_id, args.episodes, args.steps)
        ref = gymnasium_returns(env_id, acts)
        print(f"| {env_id} | Gymnasium | XML | {ref.mean():.1f} ± {ref.std(ddof=1) / np.sqrt(len(ref)):.1f} | | | |")
        for setting in args.settings:
            it, ls = (int(x) for x in setting.split("/"))
            got, ms = mjx_returns(env_id, acts, it, ls)
            diff, lo, hi = welch_interval(got.mean(), got.std(ddof=1), len(got), ref.mean(), ref.std(ddof=1), len(ref))
            p = stats.ttest_ind(got, ref, equal_var=False).pvalue
            print(f"| {env_id} | MJX float32 | {'XML' if it == ls == 0 else setting} | "
                  f"{got.mean():.1f} ± {got.std(ddof=1) / np.sqrt(len(got)):.1f} | "
                  f"{diff:+.1f} ({lo:+.1f}, {hi:+.1f}) | "
                  f"{p:.2f} | {ms:.2f} |", flush=True)


if __name__ == "__main__":
    main()
