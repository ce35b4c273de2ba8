"""PPO vs BPO-PPO on the classic-control presets cartpole_ppo (CartPole-v1) and pendulum_ppo
(Pendulum-v1), each with its own settings and budget (100k steps), 10 seeds; a few minutes on CPU."""

from experiments.sweep import Grid, SlurmResources, Sweep

SWEEP = Sweep(
    name="classic",
    description=__doc__,
    grids=tuple(Grid(preset=preset, variants=("ppo", "bpo"), seeds=10) for preset in ("cartpole_ppo", "pendulum_ppo")),
    slurm=SlurmResources(timeout_min=60, cpus_per_task=2, mem_gb=4),
)
