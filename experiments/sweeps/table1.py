"""Table 1: every row (PPO and the four BPO truncation settings) on the five MuJoCo columns, 10 seeds
each, at the budgets the presets hold for the paper (1.5M steps for ``mujoco_default``, 2M for
``mujoco_gsde``) and the headline's protocol (the last of the evaluations every 8,192 steps as the
final return).

The columns in the order the campaign runs them, so that each finished column can be committed on
its own: HalfCheetah-v5, Hopper-v5 and Walker2d-v5 with ``mujoco_default``, then Ant-v5 and
HalfCheetah-v5 with ``mujoco_gsde``. Gymnasium on CPU by default; on GPU nodes add ``--set
backend=mjx`` and ask for a GPU (``gpus_per_node=1`` below). On the 2-core development machine the
whole table is projected at about 32 h of both cores (docs/backends.md); results/table1/PROGRESS.md
keeps the campaign's measured cost. Run it again to continue from every run's checkpoint.
"""

from bpo.config.presets import TABLE1_ROWS
from experiments.sweep import Grid, SlurmResources, Sweep

SWEEP = Sweep(
    name="table1",
    description=__doc__,
    grids=tuple(Grid(preset="mujoco_default", envs=(env,), variants=TABLE1_ROWS, seeds=10)
                for env in ("HalfCheetah-v5", "Hopper-v5", "Walker2d-v5"))
    + tuple(Grid(preset="mujoco_gsde", envs=(env,), variants=TABLE1_ROWS, seeds=10)
            for env in ("Ant-v5", "HalfCheetah-v5")),
    # One run = one cell of the table, its 10 seeds vectorised in one process.
    slurm=SlurmResources(timeout_min=48 * 60, cpus_per_task=4, mem_gb=16),
)
