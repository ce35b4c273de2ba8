"""Table 1 scaled down to one small machine: PPO vs BPO (c̄ = 1.0, ρ̄ = 1.5) with the mujoco_default
preset (Table 4) on Gymnasium's HalfCheetah-v5 and Hopper-v5, 3 seeds, 300k steps instead of 1.5M."""

from experiments.sweep import Grid, SlurmResources, Sweep

SWEEP = Sweep(
    name="mujoco_small",
    description=__doc__,
    grids=(
        Grid(preset="mujoco_default", envs=("HalfCheetah-v5", "Hopper-v5"), variants=("ppo", "bpo_c1.0_rho1.5"),
             fixed=(("total_timesteps", 300_000),), seeds=3),
    ),
    slurm=SlurmResources(timeout_min=240, cpus_per_task=2, mem_gb=8),
)
