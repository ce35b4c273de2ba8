"""Reference throughput of Stable-Baselines3 PPO on a MuJoCo task (CPU, 1 thread).

Measures environment steps per second of SB3's ``PPO.learn`` on Gymnasium's
HalfCheetah-v5 with the BPO paper's Table 4 "MuJoCo default" hyperparameters:
n_steps=2048, one env, batch 64, 10 epochs, lr 3e-4 (constant), gamma 0.99,
GAE lambda 0.95, clip 0.2, ent_coef 0.001, vf_coef 0.5, max_grad_norm 0.5,
normalised advantages, observation normalisation (VecNormalize, rewards not
normalised), no gSDE, log_std_init -1, separate 2x64 ReLU actor/critic MLPs.

Only ``model.learn(total_steps)`` is timed (model construction excluded, no
evaluation callback). Torch runs on the CPU with a single thread.

Benchmark-only dependency, not needed by ``bpo`` itself:
    pip install torch==2.13.0 stable-baselines3

Usage:
    python benchmarks/sb3_reference.py --steps 20480 --env HalfCheetah-v5
"""

from __future__ import annotations

import argparse
import json
import time


def sb3_ppo_steps_per_s(env_id: str = "HalfCheetah-v5", total_steps: int = 20480, seed: int = 0) -> dict:
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    torch.set_num_threads(1)
    env = VecNormalize(make_vec_env(env_id, n_envs=1, seed=seed), norm_obs=True, norm_reward=False)
    model = PPO(
        "MlpPolicy",
        env,
        n_steps=2048,
        batch_size=64,
        n_epochs=10,
        learning_rate=3e-4,
        gamma=0.99,
        gae_lambda=0.95,
        clip_range=0.2,
        ent_coef=0.001,
        vf_coef=0.5,
        max_grad_norm=0.5,
        normalize_advantage=True,
        use_sde=False,
        policy_kwargs=dict(
            net_arch=dict(pi=[64, 64], vf=[64, 64]),
            activation_fn=torch.nn.ReLU,
            log_std_init=-1.0,
        ),
        device="cpu",
        seed=seed,
        verbose=0,
    )
    start = time.perf_counter()
    model.learn(total_timesteps=total_steps)
    seconds = time.perf_counter() - start
    steps = int(model.num_timesteps)
    env.close()
    return {
        "env": env_id,
        "steps": steps,
        "seconds": seconds,
        "steps_per_s": steps / seconds,
        "torch_threads": torch.get_num_threads(),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20480)
    parser.add_argument("--env", default="HalfCheetah-v5")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(json.dumps(sb3_ppo_steps_per_s(args.env, args.steps, args.seed)))
