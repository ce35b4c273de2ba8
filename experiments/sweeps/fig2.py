"""Figure 2: REINFORCE vs BPO-REINFORCE on ShortCorridor (Table 2 settings), 100 runs each."""

from experiments.sweep import Grid, SlurmResources, Sweep

SWEEP = Sweep(
    name="fig2",
    description=__doc__,
    grids=(Grid(preset="short_corridor", variants=("reinforce", "bpo"), seeds=100),),
    slurm=SlurmResources(timeout_min=60, cpus_per_task=2, mem_gb=4),
)
