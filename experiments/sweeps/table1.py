"""Table 1: every row (PPO and the four BPO truncation settings) on the five MuJoCo columns, 10 seeds.

Gymnasium on CPU by default; on GPU nodes add ``--set backend=mjx`` and ask for a GPU
(``gpus_per_node=1`` below). On a 2-core machine this is about 330 h: run it on a cluster.
"""

from bpo.presets import TABLE1_ROWS
from experiments.sweep import Grid, SlurmResources, Sweep

SWEEP = Sweep(
    name="table1",
    description=__doc__,
    grids=(
        Grid(preset="mujoco_gsde", envs=("Ant-v5", "HalfCheetah-v5"), variants=TABLE1_ROWS, seeds=10),
        Grid(preset="mujoco_default", envs=("HalfCheetah-v5", "Hopper-v5", "Walker2d-v5"), variants=TABLE1_ROWS,
             seeds=10),
    ),
    # One run = one cell of the table, its 10 seeds vectorised in one process.
    slurm=SlurmResources(timeout_min=48 * 60, cpus_per_task=4, mem_gb=16),
)
