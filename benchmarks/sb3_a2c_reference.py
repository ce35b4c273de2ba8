"""A reference learning curve of A2C: Stable-Baselines3's ``A2C`` with rl-baselines3-zoo's
CartPole-v1 settings (hyperparams/a2c.yml: 8 environments, 500k steps, ``ent_coef`` 0, SB3's
defaults otherwise: n_steps 5, lr 7e-4, gamma 0.99, GAE lambda 1, vf_coef 0.5, max_grad_norm 0.5,
RMSprop with eps 1e-5, no advantage normalisation, separate 64-64 tanh actor and critic), evaluated
as this project evaluates (``eval_every`` steps, 10 episodes of the deterministic policy on a
separate environment, the mean undiscounted return), so that ``bpo train cartpole_a2c --no-bpo``
can be set beside it (docs/a2c.md, "Against the reference").

Benchmark-only dependencies, not needed by ``bpo`` itself (a virtual environment of their own):
    pip install torch==2.13.0 stable-baselines3 "gymnasium[classic-control]"

Usage (about 4 minutes per seed on one core):
    python benchmarks/sb3_a2c_reference.py --seeds 5 --out results/a2c/sb3_cartpole.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

EVAL_EVERY = 10_000
EVAL_EPISODES = 10
TOTAL_STEPS = 500_000


def evaluate(model, env_id: str, seed: int, episodes: int) -> float:
    """Mean undiscounted return of ``episodes`` episodes of the deterministic policy."""
    import gymnasium as gym

    env = gym.make(env_id)
    returns = []
    for i in range(episodes):
        obs, _ = env.reset(seed=seed * 1000 + i)
        done, total = False, 0.0
        while not done:
            action, _ = model.predict(obs, deterministic=True)
            obs, reward, terminated, truncated, _ = env.step(int(action))
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    env.close()
    return sum(returns) / len(returns)


def run_seed(seed: int, total_steps: int, eval_every: int) -> dict:
    """One seed's curve: (step, eval return) at step 0 and every ``eval_every`` steps."""
    import torch
    from stable_baselines3 import A2C
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    torch.set_num_threads(1)
    env = make_vec_env("CartPole-v1", n_envs=8, seed=seed)
    model = A2C("MlpPolicy", env, ent_coef=0.0, seed=seed, device="cpu", verbose=0)
    curve = [(0, evaluate(model, "CartPole-v1", seed, EVAL_EPISODES))]

    class Every(BaseCallback):
        def _on_step(self) -> bool:
            if self.num_timesteps // eval_every > (curve[-1][0] // eval_every):
                curve.append((self.num_timesteps, evaluate(self.model, "CartPole-v1", seed, EVAL_EPISODES)))
            return True

    start = time.perf_counter()
    model.learn(total_timesteps=total_steps, callback=Every())
    return {"seed": seed, "steps": [s for s, _ in curve], "eval_return": [r for _, r in curve],
            "wall_s": time.perf_counter() - start}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--total-steps", type=int, default=TOTAL_STEPS)
    parser.add_argument("--eval-every", type=int, default=EVAL_EVERY)
    parser.add_argument("--out", required=True, help="JSON file to write (atomically)")
    args = parser.parse_args()
    import stable_baselines3
    import torch

    runs = [run_seed(s, args.total_steps, args.eval_every) for s in range(args.seeds)]
    finals = [r["eval_return"][-1] for r in runs]
    out = {"reference": "stable-baselines3 A2C, rl-baselines3-zoo CartPole-v1 settings",
           "stable_baselines3": stable_baselines3.__version__, "torch": torch.__version__,
           "python": platform.python_version(), "machine": platform.machine(),
           "command": f"python benchmarks/sb3_a2c_reference.py --seeds {args.seeds} --total-steps "
                      f"{args.total_steps} --eval-every {args.eval_every} --out {args.out}",
           "eval_episodes": EVAL_EPISODES, "deterministic": True, "runs": runs, "final_returns": finals}
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(out, f, indent=1)
    os.replace(tmp, args.out)
    print(f"SB3 A2C CartPole-v1: final returns {finals}")


if __name__ == "__main__":
    main()
