"""Running a sweep's runs: locally in worker processes, or on Slurm as a submitit job array.

Both backends call ``execute`` for one run: build the config from its spec, train all its seeds
(vmapped), and publish the run directory in one rename. Finished runs (same config, summary
written) are skipped, so re-running a sweep resumes it; runs killed half-way left nothing but
``.staging`` leftovers, which are deleted and redone.

    python -m experiments.launch worker SWEEP_DIR RUN_ID   # what a local worker process runs
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from bpo import checkpoint as ckpt
from bpo import results
from bpo.config import to_dict
from bpo.runtime import enable_compile_cache
from bpo.training import default_checkpoint_every, run_validated, write
from experiments import store
from experiments.sweep import RunSpec, SlurmResources


def execute(sweep_dir: str | Path, run_id: str) -> dict:
    """Train one run of the sweep in ``sweep_dir`` and publish its run directory; its summary.
    The run checkpoints into ``SWEEP/.checkpoints/RUN-ID`` about ten times, and an interrupted run
    continues from its last checkpoint (unless its configuration changed since)."""
    enable_compile_cache()
    spec = {s.run_id: s for s in store.read_specs(sweep_dir)}[run_id]
    cfg = spec.build()  # validated by the planner (experiments.sweep.expand) before any worker started
    directory = Path(sweep_dir) / store.CHECKPOINTS / run_id
    if ckpt.exists(directory):
        stored = json.loads((directory / ckpt.INFO_FILE).read_text())["config"]
        if stored != json.loads(json.dumps(to_dict(cfg))):
            ckpt.remove(directory)
        else:
            print(f"{run_id}: continuing from checkpoint {directory}", flush=True)
    every = default_checkpoint_every(cfg)
    summary = store.publish(Path(sweep_dir), spec, lambda staging: write(
        run_validated(cfg, checkpoint_dir=directory, checkpoint_every=every), staging))
    ckpt.remove(directory)
    return summary


def default_workers() -> int:
    """One worker per core this process may use (its affinity, which Slurm and taskset restrict)."""
    return max(1, len(os.sched_getaffinity(0)))


def _die_with_parent() -> None:
    """Linux: a worker gets SIGKILL when the sweep process dies, even by SIGKILL, so no orphan keeps
    computing (and racing the next sweep for the same run)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def _progress(show: bool) -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    TextColumn("eta"), TimeRemainingColumn(), disable=not show, transient=False)


def _report(console, spec: RunSpec, summary: dict | None, error: str | None) -> None:
    if summary is not None:
        console.print(f"[green]done[/] {spec.run_id}: final return {summary['final_mean']:.2f} ± "
                      f"{summary['final_se']:.2f} ({summary['seeds']} seeds, {summary['wall_time_s']:.0f} s)")
    else:
        console.print(f"[red]failed[/] {spec.run_id}: {error}")


def _log_tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def run_local(sweep_dir: Path, specs: list[RunSpec], workers: int, show_progress: bool = True) -> dict[str, str]:
    """Run ``specs`` in up to ``workers`` processes at once; returns {run_id: error} of failed runs."""
    sweep_dir = Path(sweep_dir)
    logs = sweep_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    queue, running, failed = list(specs), {}, {}
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with _progress(show_progress) as bar:
        task = bar.add_task(f"sweep {sweep_dir.name}", total=len(specs))
        try:
            while queue or running:
                while queue and len(running) < workers:
                    spec = queue.pop(0)
                    log = open(logs / f"{spec.run_id}.log", "w")
                    cmd = [sys.executable, "-m", "experiments.launch", "worker", str(sweep_dir), spec.run_id]
                    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                            preexec_fn=_die_with_parent)
                    running[proc] = (spec, log, time.monotonic())
                bar.update(task, description=f"sweep {sweep_dir.name}: running " +
                           ", ".join(s.run_id for s, _, _ in running.values()))
                time.sleep(0.2)
                for proc in [p for p in running if p.poll() is not None]:
                    spec, log, _ = running.pop(proc)
                    log.close()
                    if proc.returncode == 0 and store.is_finished(sweep_dir, spec):
                        _report(bar.console, spec, results.read_summary(sweep_dir / spec.run_id), None)
                    else:
                        failed[spec.run_id] = (f"exit code {proc.returncode}; log {logs / (spec.run_id + '.log')}:\n"
                                               + _log_tail(logs / f"{spec.run_id}.log"))
                        _report(bar.console, spec, None, failed[spec.run_id])
                    store.refresh_index(sweep_dir, failed)
                    bar.advance(task)
        finally:
            for proc in running:  # Ctrl-C or an error here: stop the workers, nothing is published
                proc.kill()
    return failed


def _jobs_file(sweep_dir: Path) -> Path:
    return Path(sweep_dir) / ".slurm" / "jobs.json"


def slurm_in_flight(sweep_dir: Path) -> set[str]:
    """Runs whose Slurm job from an earlier submission is still queued or running: not resubmitted."""
    path = _jobs_file(sweep_dir)
    if not path.exists():
        return set()
    jobs = json.loads(path.read_text())
    alive = _queued(set(jobs.values())) or set()
    return {run_id for run_id, job_id in jobs.items() if job_id in alive}


def run_slurm(sweep_dir: Path, specs: list[RunSpec], resources: SlurmResources, wait: bool = True,
              show_progress: bool = True) -> dict[str, str]:
    """Submit ``specs`` as one Slurm job array (one job per run); with ``wait``, follow the jobs to the
    end. Returns {run_id: error} of the runs that failed."""
    # Imported here, the one import of experiments/ not at the top: importing submitit reconfigures
    # the logging module (logging.config.dictConfig, closing the handlers there were), which only the
    # Slurm backend should pay for.
    import submitit

    sweep_dir = Path(sweep_dir).resolve()
    executor = submitit.AutoExecutor(folder=sweep_dir / ".slurm" / "%j", cluster="slurm")
    executor.update_parameters(
        name=f"bpo-{sweep_dir.name}", timeout_min=resources.timeout_min, cpus_per_task=resources.cpus_per_task,
        mem_gb=resources.mem_gb, gpus_per_node=resources.gpus_per_node, tasks_per_node=1, nodes=1,
        slurm_partition=resources.partition, slurm_array_parallelism=resources.array_parallelism,
        slurm_additional_parameters=dict(resources.additional),
    )
    jobs = executor.map_array(execute, [str(sweep_dir)] * len(specs), [s.run_id for s in specs])
    recorded = json.loads(_jobs_file(sweep_dir).read_text()) if _jobs_file(sweep_dir).exists() else {}
    recorded.update({s.run_id: j.job_id for s, j in zip(specs, jobs, strict=True)})
    results.atomic_write_json(_jobs_file(sweep_dir), recorded)
    print(f"submitted {len(jobs)} Slurm jobs (array {jobs[0].job_id.split('_')[0]}); logs in {sweep_dir / '.slurm'}")
    if not wait:
        return {}
    failed, missing = {}, {}
    with _progress(show_progress) as bar:
        task = bar.add_task(f"sweep {sweep_dir.name} (slurm)", total=len(jobs))
        pending = dict(zip(jobs, specs, strict=True))
        while pending:
            time.sleep(2.0)
            queued = _queued({j.job_id for j in pending})
            for job in list(pending):
                # A job that left the queue without a result (time limit, preemption, node failure)
                # would look unfinished forever where sacct is off: two checks 2 s apart decide.
                missing[job] = missing.get(job, 0) + 1 if queued is not None and job.job_id not in queued else 0
                if not job.done() and missing[job] < 2:
                    continue
                spec = pending.pop(job)
                try:
                    if not job.done():
                        raise RuntimeError(f"left the queue without a result; see {job.paths.stderr}")
                    _report(bar.console, spec, job.result(), None)
                except Exception as e:  # the job's traceback, as submitit reports it
                    failed[spec.run_id] = f"Slurm job {job.job_id}: {e}"
                    _report(bar.console, spec, None, failed[spec.run_id])
                store.refresh_index(sweep_dir, failed)
                bar.advance(task)
    return failed


def _queued(job_ids: set[str]) -> set[str] | None:
    """The job ids squeue still lists (pending or running), or None when squeue cannot answer."""
    try:
        proc = subprocess.run(["squeue", "-h", "-r", "-o", "%i", "-j", ",".join(sorted(job_ids))],
                              capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    # squeue exits non-zero when none of the ids is known any more: an empty queue, not an error.
    return set(proc.stdout.split()) if proc.returncode == 0 or "Invalid job id" in proc.stderr else None


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] != "worker":
        sys.exit("usage: python -m experiments.launch worker SWEEP_DIR RUN_ID")
    summary = execute(sys.argv[2], sys.argv[3])
    print(f"{sys.argv[3]}: final return {summary['final_mean']:.2f} ± {summary['final_se']:.2f}")
