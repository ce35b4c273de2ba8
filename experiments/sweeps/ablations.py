"""Figures 4 and 5: the best BPO row of each Table 1 column, the same without Q-hat in the mu loss
(bpo_no_qhat) and without symlog targets (bpo_no_symlog), beside PPO; 10 seeds."""

from bpo.config.presets import PAPER_TABLE1, best_bpo_row
from experiments.sweep import Grid, SlurmResources, Sweep

SWEEP = Sweep(
    name="ablations",
    description=__doc__,
    grids=tuple(
        Grid(preset=preset, envs=(env,), variants=("ppo", best_bpo_row(env, preset), "bpo_no_qhat", "bpo_no_symlog"),
             seeds=10)
        for env, preset in PAPER_TABLE1
    ),
    slurm=SlurmResources(timeout_min=48 * 60, cpus_per_task=4, mem_gb=16),
)
