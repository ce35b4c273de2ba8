"""The estimator probe's measurement (docs/probe.md): BPO-PPO (c̄ = 1.0, ρ̄ = 1.5, mujoco_default,
Table 4) on HalfCheetah-v5 and Hopper-v5, 3 seeds, 300k steps, with Q̂ (BPO's μ) and without it
(the paper's ablation: μ then has no variance term to minimise, the control), keeping the policies
after updates 29, 58, 87, 116 and 145 of 147; `bpo reproduce probe` then probes each run at those
five points with `bpo probe`'s defaults (the final policies, two updates later, are not probed),
probes the policies of update 145 once more with the estimator untruncated (ρ̄ = c̄ = ∞: the
importance-sampled return of Theorem 2's kind, `--name probe-untruncated`), and summarises both
(`bpo probe-summary`)."""

from experiments.sweep import Grid, ProbePlan, ProbeVariant, SlurmResources, Sweep

SWEEP = Sweep(
    name="probe",
    description=__doc__,
    grids=(
        Grid(preset="mujoco_default", envs=("HalfCheetah-v5", "Hopper-v5"), variants=("bpo_c1.0_rho1.5",),
             grid=(("bpo.use_q_hat", (True, False)),),
             fixed=(("total_timesteps", 300_000), ("save_policies_every", 29)), seeds=3),
    ),
    slurm=SlurmResources(timeout_min=240, cpus_per_task=2, mem_gb=8),
    baseline="bpo_c1.0_rho1.5 bpo.use_q_hat=False",
    alternative="two-sided",
    probe=ProbePlan(points=(29, 58, 87, 116, 145),
                    variants=(ProbeVariant("probe-untruncated", points=(145,), rho_bar=float("inf"),
                                           c_bar=float("inf")),)),
)
