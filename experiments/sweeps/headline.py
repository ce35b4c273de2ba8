"""The paper's headline cell at its budget: HalfCheetah-v5, PPO against BPO (c̄ = 1.0, ρ̄ = 1.5),
1.5M steps (the budget of the authors' code; the paper states none), in two settings:
``mujoco_default`` as Table 4 states, 15 seeds per arm (80 % power for the paper's gap of 1,222 at
our seed-to-seed SD of about 1,100, two-sided Welch, needs about 14), and
``mujoco_default_authors``, the authors' public configuration, 10 seeds per arm (the paper's n).
Each run vmaps its seeds in one process and checkpoints ten times, so running the sweep again
continues it. About 8 core-hours on the 2-core development machine (BPO costs about 16 core-minutes
per seed, PPO about 3; docs/reproduction.md): run it with ``--workers 2``."""

from experiments.sweep import Grid, SlurmResources, Sweep

SWEEP = Sweep(
    name="headline",
    description=__doc__,
    grids=(  # BPO first: the longest runs start first when workers share the sweep
        Grid(preset="mujoco_default", envs=("HalfCheetah-v5",), variants=("bpo_c1.0_rho1.5", "ppo"),
             seeds=15),
        Grid(preset="mujoco_default_authors", envs=("HalfCheetah-v5",), variants=("bpo_c1.0_rho1.5", "ppo"),
             seeds=10),
    ),
    slurm=SlurmResources(timeout_min=12 * 60, cpus_per_task=2, mem_gb=8),
)
