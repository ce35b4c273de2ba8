"""Our BPO with the authors' public code's bugs switched on (``mujoco_authors_code``:
docs/authors_code.md rows 14, 15, 17, 21 and 22 on top of their configuration), in the headline's
cell and protocol: HalfCheetah-v5, BPO (c̄ = 1.0, ρ̄ = 1.5), 1.5M steps, 10 seeds (the paper's n),
the last of the evaluations every 8,192 steps as the final return. Set beside their code run as it
is (benchmarks/authors_reference.py) and our two headline settings in docs/reproduction.md. Each run
vmaps its seeds in one process and checkpoints ten times, so running the sweep again continues it.
About 2.7 core-hours on the 2-core development machine (BPO costs about 16 core-minutes per seed)."""

from experiments.sweep import Grid, SlurmResources, Sweep

SWEEP = Sweep(
    name="authors_code",
    description=__doc__,
    grids=(Grid(preset="mujoco_authors_code", envs=("HalfCheetah-v5",), variants=("bpo_c1.0_rho1.5",), seeds=10),),
    slurm=SlurmResources(timeout_min=12 * 60, cpus_per_task=2, mem_gb=8),
)
