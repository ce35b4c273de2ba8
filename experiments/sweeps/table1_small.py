"""Table 1 scaled down to a 2-core machine (about an hour): the five rows on HalfCheetah-v5 and
Hopper-v5 with the ``mujoco_default`` preset (Table 4), 3 seeds, 100k steps instead of 1.5M."""

from bpo.config.presets import TABLE1_ROWS
from experiments.sweep import Grid, SlurmResources, Sweep

SWEEP = Sweep(
    name="table1_small",
    description=__doc__,
    grids=(
        Grid(preset="mujoco_default", envs=("HalfCheetah-v5", "Hopper-v5"), variants=TABLE1_ROWS,
             fixed=(("total_timesteps", 100_000),), seeds=3),
    ),
    slurm=SlurmResources(timeout_min=120, cpus_per_task=2, mem_gb=8),
)
