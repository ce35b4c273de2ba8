"""BPO on a third policy-gradient method (docs/a2c.md): A2C vs BPO-A2C (c̄ = 1.0, ρ̄ = 1.5) with
rl-baselines3-zoo's A2C settings on CartPole-v1 (500k steps), Pendulum-v1 (1M steps) and
HalfCheetah-v5 (300k steps instead of rl-zoo's 1M), 5 seeds each; tested two-sided, since the paper
makes no claim for A2C."""

from experiments.sweep import Grid, SlurmResources, Sweep

ROWS = ("a2c", "bpo_c1.0_rho1.5")

SWEEP = Sweep(
    name="a2c",
    description=__doc__,
    grids=(
        Grid(preset="cartpole_a2c", envs=("CartPole-v1",), variants=ROWS, seeds=5),
        Grid(preset="pendulum_a2c", envs=("Pendulum-v1",), variants=ROWS, seeds=5),
        Grid(preset="mujoco_a2c", envs=("HalfCheetah-v5",), variants=ROWS, fixed=(("total_timesteps", 300_000),),
             seeds=5),
    ),
    slurm=SlurmResources(timeout_min=120, cpus_per_task=2, mem_gb=8),
    alternative="two-sided",
)
