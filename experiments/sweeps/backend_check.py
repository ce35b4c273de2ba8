"""The threads backend against the Gymnasium host runner: HalfCheetah-v5, BPO (c̄ = 1.0, ρ̄ = 1.5)
with ``mujoco_default``, 10 seeds each, 30,720 steps (15 rollouts), evaluated every 10,240 steps.

Both backends step the same MuJoCo physics (bit-identical steps, ``tests/test_mujoco_threads.py``)
but draw their reset noise and actions from different random streams (NumPy per environment
against JAX keys), so the runs differ seed by seed; the table tests whether the final returns
differ (two-sided Welch, the Gymnasium runs as the baseline). About 15 minutes on 2 cores."""

from experiments.sweep import Grid, Sweep

SWEEP = Sweep(
    name="backend_check",
    description=__doc__,
    grids=(Grid(preset="mujoco_default", envs=("HalfCheetah-v5",), variants=("bpo_c1.0_rho1.5",),
                grid=(("backend", ("gymnasium", "threads")),),
                fixed=(("total_timesteps", 30_720), ("eval_every", 10_240)), seeds=10),),
    baseline="bpo_c1.0_rho1.5 backend=gymnasium",
    alternative="two-sided",
)
