"""The Slurm backend on a real single-node Slurm (Debian's slurm-wlm and munge, started by the
``slurm_env`` fixture): a 2-job array sweep, with the same results as the local backend."""

import subprocess
import sys

import pytest

from slurm_cluster import slurm_env  # noqa: F401 - the fixture

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

SWEEP_FILE = '''
from experiments.sweep import Grid, SlurmResources, Sweep

SWEEP = Sweep(
    name="slurm_smoke",
    grids=(Grid(preset="short_corridor", variants=("reinforce", "bpo"),
                fixed=(("episodes", 20), ("eval_every", 10), ("eval_episodes", 3)), seeds=2),),
    slurm=SlurmResources(partition="{partition}", timeout_min=10, cpus_per_task=1, mem_gb=2),
)
'''


def _sweep(args, timeout=600):
    # A subprocess with a time limit: a lost job must fail the test, not hang it.
    proc = subprocess.run([sys.executable, "-m", "bpo.cli", "sweep", *args, "--no-progress"], capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_slurm_array_sweep_matches_local(slurm_env, tmp_path):  # noqa: F811 - pytest fixture by name
    sweep_file = tmp_path / "slurm_smoke.py"
    sweep_file.write_text(SWEEP_FILE.format(partition=slurm_env["partition"]))
    out = _sweep([str(sweep_file), "--backend", "slurm", "--out", str(tmp_path / "slurm")])
    assert "submitted 2 Slurm jobs (array " in out
    _sweep([str(sweep_file), "--backend", "local", "--workers", "2", "--out", str(tmp_path / "local")])
    run_ids = ["ShortCorridor-v0-short_corridor-reinforce", "ShortCorridor-v0-short_corridor-bpo"]
    for run_id in run_ids:
        for name in ("curve.csv", "train_metrics.csv"):
            slurm, local = (tmp_path / b / run_id / name for b in ("slurm", "local"))
            assert slurm.read_text() == local.read_text(), (run_id, name)
    # Each run was a job of one array, and resubmitting finds everything finished.
    logs = sorted(p.name for p in (tmp_path / "slurm" / ".slurm").glob("[0-9]*_[0-9]*"))
    assert len(logs) == 2 and logs[0].split("_")[0] == logs[1].split("_")[0]
    again = _sweep([str(sweep_file), "--backend", "slurm", "--out", str(tmp_path / "slurm")], timeout=120)
    assert "2 runs, 2 finished or in flight, 0 to run" in again
