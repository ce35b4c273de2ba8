"""The Slurm backend on a real single-node Slurm (Debian's slurm-wlm and munge, started by the
``slurm_env`` fixture): a 2-job array sweep, with the same results as the local backend; and a
job requeued while it runs (``scontrol requeue``, what a preemption does), which continues from
its checkpoint on its own, with the same results as an uninterrupted local run."""

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest
from test_processes import blocked_signals

from slurm_cluster import ensure_slurm_installed, slurm_env  # noqa: F401 - the fixture

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
    proc = subprocess.run([sys.executable, "-m", "experiments.cli", "sweep", *args, "--no-progress"],
                          capture_output=True, text=True, timeout=timeout)
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


REQUEUE_SWEEP_FILE = '''
from experiments.sweep import Grid, SlurmResources, Sweep

SWEEP = Sweep(
    name="slurm_requeue",
    grids=(Grid(preset="short_corridor", variants=("bpo",),
                fixed=(("episodes", 4000), ("eval_every", 10), ("eval_episodes", 2)), seeds=2),),
    slurm=SlurmResources(partition="{partition}", timeout_min=10, cpus_per_task=1, mem_gb=2),
)
'''


def _iterations_done(checkpoint_info) -> int:
    try:
        return json.loads(checkpoint_info.read_text())["iterations_done"]
    except (OSError, ValueError, KeyError):
        return 0


def _job_logs(out) -> str:
    """Every job log of a sweep folder, for a failure's message: what the jobs did and when."""
    paths = sorted((out / ".slurm").glob("*/*_log.*"))
    return "".join(f"\n--- {p.name}:\n{p.read_text(errors='replace')}" for p in paths)


REQUEUE_RUN = "ShortCorridor-v0-short_corridor-bpo"  # 401 loop iterations, a checkpoint every 40


def _start_requeue_sweep(partition: str, tmp_path):
    """``REQUEUE_SWEEP_FILE``'s one run, submitted by a sweep process that follows it (its output a
    pipe): (the process, the sweep file, the sweep folder, the run's checkpoint.json)."""
    sweep_file = tmp_path / "slurm_requeue.py"
    sweep_file.write_text(REQUEUE_SWEEP_FILE.format(partition=partition))
    out = tmp_path / "slurm"
    proc = subprocess.Popen([sys.executable, "-m", "experiments.cli", "sweep", str(sweep_file), "--backend", "slurm",
                             "--out", str(out), "--no-progress"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    return proc, sweep_file, out, out / ".checkpoints" / REQUEUE_RUN / "checkpoint.json"


def _wait_for(proc, out, condition, what: str) -> None:
    """Until ``condition()``, while the sweep process lives, for 300 s at most."""
    deadline = time.monotonic() + 300
    while not condition():
        assert proc.poll() is None, proc.stdout.read() + _job_logs(out)
        assert time.monotonic() < deadline, f"no {what} after 300 s:\n{_job_logs(out)}"
        time.sleep(0.1)


def _xla_threads_unprotected(pid: int) -> tuple[int, dict[str, list[str]]]:
    """Of the job process ``pid``'s XLA threads: how many there are, and which signals each of them
    that does not block every signal Slurm or submitit sends the job leaves unblocked."""
    sent = {signal.SIGINT, signal.SIGTERM, signal.SIGUSR2, signal.SIGCONT}
    xla = [t for t in os.listdir(f"/proc/{pid}/task")
           if pathlib.Path(f"/proc/{pid}/task/{t}/comm").read_text().startswith("tf_XLA")]
    open_to = {t: sorted(signal.Signals(s).name for s in sent - blocked_signals(pid, int(t))) for t in xla}
    return len(xla), {t: names for t, names in open_to.items() if names}


def test_a_cancelled_job_is_reported_with_its_slurm_state_and_keeps_its_checkpoint(slurm_env, tmp_path):  # noqa: F811
    """``scancel`` of a running job: no result will come, so the sweep reports the run failed with
    the state Slurm gives it (CANCELLED), rather than waiting on it, and the checkpoint stays.
    While it trains, none of its XLA threads can take a signal Slurm or submitit sends (one taken on
    top of compiled code once ended a job in glibc's "corrupted size vs. prev_size";
    bpo.infra.processes)."""
    proc, _, out, info = _start_requeue_sweep(slurm_env["partition"], tmp_path)
    run_id = REQUEUE_RUN
    try:
        _wait_for(proc, out, info.exists, "checkpoint")
        log = "".join(p.read_text() for p in (out / ".slurm").glob("*/*_log.out"))
        pid = int(log.split("training in process ")[1].split()[0])
        count, unprotected = _xla_threads_unprotected(pid)
        assert count > 0 and not unprotected, (count, unprotected)
        job_id = json.loads((out / ".slurm" / "jobs.json").read_text())[run_id]
        subprocess.run(["scancel", job_id], check=True, capture_output=True, timeout=60)
        output, _ = proc.communicate(timeout=300)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 1, output + _job_logs(out)
    assert f"Slurm job {job_id}: left the queue without a result (Slurm state: CANCELLED)" in " ".join(output.split())
    assert _iterations_done(info) > 0


def test_a_requeued_or_preempted_job_continues_from_its_checkpoint(slurm_env, tmp_path):  # noqa: F811
    """``scontrol requeue`` of the running job, then, once it runs again and has checkpointed further,
    a preemption as submitit simulates one (SIGTERM, then SIGUSR2: submitit calls SlurmRun.checkpoint
    and requeues the job itself). The job finishes on its own, bit-identical to a local run."""
    proc, sweep_file, out, info = _start_requeue_sweep(slurm_env["partition"], tmp_path)
    run_id = REQUEUE_RUN

    def logs() -> str:  # what the job printed (the .out files: submitit's lines and ours, once each)
        return "".join(p.read_text() for p in (out / ".slurm").glob("*/*_log.out"))

    try:
        _wait_for(proc, out, info.exists, "checkpoint")
        job_id = json.loads((out / ".slurm" / "jobs.json").read_text())[run_id]
        requeue = subprocess.run(["scontrol", "requeue", job_id], capture_output=True, text=True, timeout=60)
        assert requeue.returncode == 0, requeue.stderr
        _wait_for(proc, out, lambda: "continuing from checkpoint" in logs(), "second start")
        resumed_at = _iterations_done(info)
        _wait_for(proc, out, lambda: _iterations_done(info) > resumed_at, "checkpoint after the second start")
        for sig in ("SIGTERM", "USR2"):
            subprocess.run(["scancel", "--signal", sig, job_id], check=True, capture_output=True, timeout=60)
        output, _ = proc.communicate(timeout=600)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 0, output + _job_logs(out)
    assert f"done {run_id}: final return" in output
    # One job, started three times: stopped with a checkpoint by the requeue's SIGTERM and requeued by
    # Slurm; then requeued by submitit on SIGUSR2 (which may come before the preemption's SIGTERM has
    # stopped the run: then it continues from the last periodic checkpoint, and the requeue's own
    # SIGTERM may end the job before submitit logs "Requeued job"); continuing each time.
    log = logs()
    assert log.count(f"{run_id}: stopped by SIGTERM after loop iteration") in (1, 2), log
    assert "Caught signal SIGUSR2" in log and "Calling checkpoint method" in log, log
    assert log.count(f"{run_id}: continuing from checkpoint") == 2, log
    assert log.count("training in process") == 3, log
    index = json.loads((out / "index.json").read_text())
    assert [(e["run_id"], e["status"]) for e in index["runs"]] == [(run_id, "finished")]
    assert not (out / ".checkpoints").exists() and not (out / ".locks").exists()
    # Bit-identical to the same run done locally in one go.
    _sweep([str(sweep_file), "--backend", "local", "--out", str(tmp_path / "local")])
    for name in ("curve.csv", "train_metrics.csv"):
        assert (out / run_id / name).read_bytes() == (tmp_path / "local" / run_id / name).read_bytes(), name


def test_sbatch_without_a_controller_is_one_line_and_exit_2(tmp_path):
    """sbatch installed, but no controller to take the jobs (a configuration that names no
    reachable slurmctld): one line naming the backend, not submitit's traceback."""
    reason = ensure_slurm_installed()
    if reason is not None:
        pytest.skip(f"no sbatch: {reason}")
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=none\nSlurmctldHost=nowhere(127.0.0.1)\nSlurmctldPort=1\n")
    env = {**os.environ, "SLURM_CONF": str(conf)}
    proc = subprocess.run([sys.executable, "-m", "experiments.cli", "sweep", "--preset", "short_corridor", "--variants",
                           "bpo", "--set", "episodes=20", "--seeds", "1", "--backend", "slurm", "--no-progress",
                           "--out", str(tmp_path / "sweep")], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "error: backend: Slurm refused the jobs (" in proc.stderr, proc.stderr
