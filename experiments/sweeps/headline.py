"""The paper's headline cell at its budget: HalfCheetah-v5, PPO against BPO (c̄ = 1.0, ρ̄ = 1.5),
1.5M steps, in two settings: ``mujoco_default`` as Table 4 states (5 seeds) and
``mujoco_default_authors``, the authors' public configuration (no observation normalisation,
initial log std 0.0; 3 seeds). Each run vmaps its seeds in one process and checkpoints ten times, so
running the sweep again continues it. About 2.5 h of one core for the four runs on the
2-core development machine with the other core busy (BPO 5 seeds 80 min, BPO 3 seeds 46 min, PPO
15 and 6 min; docs/reproduction.md)."""

from experiments.sweep import Grid, SlurmResources, Sweep

SWEEP = Sweep(
    name="headline",
    description=__doc__,
    grids=(  # BPO first: the longest runs start first when workers share the sweep
        Grid(preset="mujoco_default", envs=("HalfCheetah-v5",), variants=("bpo_c1.0_rho1.5", "ppo"),
             seeds=5),
        Grid(preset="mujoco_default_authors", envs=("HalfCheetah-v5",), variants=("bpo_c1.0_rho1.5", "ppo"),
             seeds=3),
    ),
    slurm=SlurmResources(timeout_min=12 * 60, cpus_per_task=2, mem_gb=8),
)
