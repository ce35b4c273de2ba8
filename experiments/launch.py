"""Running a sweep's runs: locally in worker processes, or on Slurm as a submitit job array.

Both backends call ``execute`` for one run: take the run's lock (``experiments.store``; a run whose
lock another process holds is running there and is left to it), build the config from its spec,
train all its seeds (vmapped), and publish the run directory in one rename. Finished runs (same
config, summary written) are skipped, so re-running a sweep resumes it; a run interrupted half-way
continues from its last checkpoint, and what it left in ``.staging`` is deleted.

* Local: ``run_local`` locks each run before it starts the worker process for it (the worker
  inherits the lock), so two sweeps of one folder share its runs. SIGINT or SIGTERM to the sweep
  is forwarded to its workers, which stop at the end of their current loop iteration with a
  checkpoint; workers still running after ``STOP_GRACE_S`` are killed. Workers die with the sweep
  process, even when it is killed with SIGKILL (``PR_SET_PDEATHSIG``).
* Slurm: each job runs ``SlurmRun``, which follows submitit's checkpointing protocol: a job
  preempted or at its time limit is requeued by submitit, and a job requeued by anyone
  (``scontrol requeue``) continues from the run's last checkpoint when it starts again.

    python -m experiments.launch worker SWEEP_DIR RUN_ID   # what a local worker process runs
"""

from __future__ import annotations

import signal

if __name__ == "__main__":
    # The program itself: SIGINT and SIGTERM are blocked before the imports below start any thread
    # (NumPy's, XLA's), so that every thread inherits the mask and only the thread started by
    # ``worker_main`` takes them (bpo.infra.processes).
    signal.pthread_sigmask(signal.SIG_BLOCK, (signal.SIGINT, signal.SIGTERM))

import contextlib
import hashlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from bpo.agents import methods
from bpo.config import presets
from bpo.config.schema import ConfigError
from bpo.infra import checkpoint as ckpt
from bpo.infra import processes, results
from bpo.infra.plugins import load_plugins
from bpo.infra.progress import console
from bpo.infra.runtime import enable_compile_cache, report_crashes
from bpo.infra.stall import EXIT_STALLED
from bpo.training import default_checkpoint_every, program_key, run_rows, run_validated, write
from bpo.training.job import Job, continue_or_restart, train
from bpo.training.rows import can_share, group_config
from bpo.training.run_output import default_seed_chunk
from bpo.training.summary import final_return_text
from experiments import reader, store
from experiments.reader import BadFile
from experiments.sweep import RunSpec, SlurmResources

LOGS, SLURM = "logs", ".slurm"
"""The folders of a sweep's workers' logs and of its Slurm jobs' files, in the results folder."""
LOCK_FD_ENV = "BPO_RUN_LOCK_FD"
"""A local worker's inherited run lock: the file descriptor its sweep process locked for it."""
SWEEP_PID_ENV = "BPO_SWEEP_PID"
"""A local worker's sweep process, which the worker dies with."""
WORKER_CORE_ENV = "BPO_WORKER_CORE"
"""The core a local worker keeps to (``_LocalWorkers.core_for``), set by its sweep process."""
STALL_RETRIES = 2
"""How many times a local sweep starts a run again that the stall guard stopped (exit 75): the
stall is a lost wake-up in XLA:CPU, not the run's fault, and the run continues from its checkpoint."""
LOCKED_ELSEWHERE = 79
"""A worker's exit code when another process holds its run's lock. Not 75, ``bpo.infra.stall.EXIT_STALLED``:
with the two equal, a sweep reported runs the stall guard had stopped as "left to another process
that is running them", although nothing ran them."""
STOP_GRACE_S = 30.0
"""After SIGINT/SIGTERM, how long a local sweep waits for its workers to checkpoint and stop."""
SLURM_STOP_WAIT_S = 120.0
"""How long a Slurm job stopped by SIGTERM (with a checkpoint) waits for submitit's preemption
signal or Slurm's SIGKILL before it exits."""
SLURM_LOCK_WAIT_S = 180.0
"""How long a Slurm job waits for its run's lock: a requeued job may start while the lock of the
job it replaces is still being released (a network file system frees a dead node's locks late)."""


@dataclass
class Outcome:
    """What became of the runs given to a backend; the runs in none of the lists finished."""

    failed: dict[str, str] = field(default_factory=dict)
    """run id -> what went wrong."""
    elsewhere: list[str] = field(default_factory=list)
    """Runs another process was executing (it holds their lock): left to it."""
    interrupted: list[str] = field(default_factory=list)
    """Runs stopped by a signal; they continue from their checkpoints when the sweep runs again."""
    not_started: list[str] = field(default_factory=list)
    """Runs a signal kept from starting."""
    signal: int | None = None
    """The signal that stopped the sweep (local backend), or None."""


def execute(sweep_dir: str | Path, run_id: str, lock: store.Lock | None = None) -> dict | None:
    """Train one run of the sweep in ``sweep_dir`` and publish its run directory; its summary, or
    None when another process holds the run's lock (it is executing the run, which is left to it).
    ``lock``: the run's lock when the caller took it already (released here in any case).

    The run checkpoints into ``SWEEP/.checkpoints/RUN-ID`` about ten times, and an interrupted run
    continues from its last checkpoint (unless its configuration changed since). SIGINT and SIGTERM
    stop it at the end of the current loop iteration, with a checkpoint: ``bpo.infra.processes.Interrupted``."""
    sweep_dir = Path(sweep_dir)
    lock = lock or store.try_lock_run(sweep_dir, run_id)
    if lock is None:
        print(f"{run_id}: running in another process (it holds {store.run_lock_path(sweep_dir, run_id)}); "
              "left to it", flush=True)
        return None
    with lock:
        spec = {s.run_id: s for s in store.read_specs(sweep_dir)}[run_id]
        if store.is_finished(sweep_dir, spec):  # by another process, after this one was told to run it
            print(f"{run_id}: finished by another process; nothing to do", flush=True)
            return results.read_summary(sweep_dir / run_id)
        print(f"{run_id}: training in process {os.getpid()} on {socket.gethostname()}", flush=True)
        enable_compile_cache()
        cfg = spec.build()  # validated by the planner (experiments.sweep.expand) before any worker started
        directory = sweep_dir / store.CHECKPOINTS / run_id
        done = continue_or_restart(directory, cfg, default_seed_chunk())
        if done is not None:
            print(f"{run_id}: {done}", flush=True)
        job = Job(cfg, sweep_dir / run_id, default_checkpoint_every(cfg), checkpoints=directory)
        with processes.stop_requests():
            def train_and_publish():
                return store.publish(sweep_dir, spec, lambda staging: write(train(job, take_stop_signals=False),
                                                                            staging))
            summary = _starting_over(train_and_publish, directory, run_id)
        ckpt.remove(directory)
    return summary


def _starting_over(train_run, directory: Path, label: str):
    """``train_run()``, and once more from nothing when the checkpoint in ``directory`` does not fit
    the run's state: its arrays are only checked once the program is built
    (``bpo.training.driver.resume_point``), after ``continue_or_restart`` took it. A sweep starts such
    a run over, as it does one of another configuration; it failed on every rerun instead."""
    try:
        return train_run()
    except ckpt.UnreadableCheckpoint as e:
        if not ckpt.exists(directory):
            raise
        print(f"{label}: {e}: starting over", flush=True)
        ckpt.remove(directory)
        return train_run()


WORKERS_KNOW = ("import json; from bpo.infra.plugins import load_plugins; load_plugins(); "
                "from bpo.config.presets import PRESETS; from bpo.agents.methods import method_names; "
                "print(json.dumps({'preset': sorted(PRESETS), 'method': method_names()}))")
"""What a sweep's worker process (or Slurm job) can build: the presets and methods it has once it
has imported ``BPO_PLUGINS``, printed as JSON."""


def check_sweep_folders(sweep_dir: Path) -> None:
    """The folders a sweep writes into besides its runs' (``logs``, ``.slurm``, and the store's
    ``.locks``, ``.checkpoints`` and ``.staging``): each, where it exists, a folder this user can
    write, else a ``ConfigError`` naming ``--out`` before any work. A file in their place failed with
    a traceback, at the checkpoint or the publication after a whole run's training."""
    for name in (LOGS, SLURM, store.LOCKS, store.CHECKPOINTS, store.STAGING):
        path = Path(sweep_dir) / name
        if os.path.lexists(path) and not path.is_dir():
            raise ConfigError("--out", f"{str(path)!r} is not a folder, and the sweep keeps its {name} there; allowed: "
                                       "a folder (move the file away)")
        if path.is_dir() and not os.access(path, os.W_OK | os.X_OK):
            raise ConfigError("--out", f"{str(path)!r} cannot be written by this user; allowed: a folder it can write")


def check_run_paths(sweep_dir: Path, specs: list[RunSpec]) -> None:
    """Each run's place in the sweep's folders (``check_sweep_folders``), where it exists: its log
    and lock files, its checkpoint, staging and run folders (a run folder may be a link to one,
    followed as ``store.publish`` follows it), else a ``ConfigError`` naming ``--out`` before any
    work: a folder where a file goes, a file where a folder goes or a loop of links failed with a
    traceback, some after the run's whole training."""
    for spec in specs:
        _check_run_paths(Path(sweep_dir), spec.run_id)


def _check_run_paths(sweep_dir: Path, run_id: str) -> None:
    for path, folder in ((sweep_dir / LOGS / run_log_name(run_id), False),
                         (store.run_lock_path(sweep_dir, run_id), False),
                         (sweep_dir / store.CHECKPOINTS / run_id, True), (sweep_dir / store.STAGING / run_id, True),
                         (sweep_dir / run_id, True)):
        if not os.path.lexists(path):
            continue
        try:
            target = path.resolve(strict=False)
        except (RuntimeError, OSError) as e:  # a loop of links
            raise ConfigError("--out", f"{str(path)!r} cannot be followed ({e}); allowed: a folder, or a link to "
                                       "one") from None
        if target.exists() and target.is_dir() != folder:
            what = "a folder" if folder else "a file"
            raise ConfigError("--out", f"{str(path)!r} is not {what}, and the sweep keeps run {run_id}'s "
                                       f"{path.parent.name if path.parent != sweep_dir else 'results'} there; "
                                       f"allowed: {what} (move it away)")


def check_workers_know(specs: list[RunSpec], sweep: str | None) -> None:
    """Before anything is written: the presets and methods of ``specs`` that are not built in
    (a plug-in's) are known to a fresh process of this environment, as each worker is; a
    ``ConfigError`` naming the first that is not. Workers import ``BPO_PLUGINS`` only, not the
    sweep file, which may register them in the sweeping process alone: every worker then failed
    (newcomer's walkthrough, session 62)."""
    needed = {("preset", s.preset) for s in specs if s.preset not in presets.BUILT_IN}
    needed |= {("method", m) for s in specs
               if (m := getattr(s.build(), "method", None)) not in methods.BUILT_IN | set(methods.RESERVED)}
    if not needed:
        return
    try:
        found = subprocess.run([sys.executable, "-c", WORKERS_KNOW], capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        raise ConfigError("BPO_PLUGINS", "a sweep's worker took over 600 s to import it; allowed: plug-ins that "
                                         "import in less") from None
    if found.returncode != 0:
        last = (found.stderr.strip().splitlines() or ["no message"])[-1]
        raise ConfigError("BPO_PLUGINS", f"a sweep's worker could not start with it: {last}")
    known = json.loads(found.stdout.strip().splitlines()[-1])
    missing = sorted(((kind, name) for kind, name in needed if name not in known[kind]),
                     key=lambda k: (k[0] != "preset", k))  # an unknown preset first: nothing of it builds
    if missing:
        kind, name = missing[0]
        plugin = str(Path(sweep).resolve()) if sweep and sweep.endswith(".py") else "PATH/OF/THE/PLUGIN.py"
        raise ConfigError("sweep", f"the runs' {kind} {name!r} is registered by the sweep file (or another module "
                                   f"this process imported) but not by BPO_PLUGINS, which is all the workers "
                                   f"import; allowed: BPO_PLUGINS naming the module that registers it, e.g. "
                                   f"BPO_PLUGINS={plugin} (docs/methods.md)")


def run_log_name(run_id: str) -> str:
    """The name of a local worker's log in the sweep's ``logs/``."""
    return f"{run_id}.log"


def group_specs(specs: list[RunSpec]) -> list[list[RunSpec]]:
    """Runs that can share one compiled program (JAX, MJX or threads runs that differ only in traced
    hyperparameters, ``bpo.training.rows``: a Table 1 column's per-decision BPO rows), grouped in
    the order they come; every other run is a group of its own."""
    groups: dict[str, list[RunSpec]] = {}
    for spec in specs:
        cfg = spec.build()
        groups.setdefault(program_key(cfg) if can_share(cfg) else f"alone:{spec.run_id}", []).append(spec)
    return list(groups.values())


def execute_group(sweep_dir: Path, specs: list[RunSpec]) -> tuple[dict[str, dict], list[str]]:
    """Train the runs of one group as one program and publish each run's directory, as ``execute``
    does for one run: (summaries by run id, runs left to another process that holds their lock).
    The group is checkpointed in a folder of its own (``group_checkpoint_dir``), so a stopped
    group continues where it stopped when the same runs are grouped again; a checkpoint there that
    cannot continue it (another configuration, a damaged file) is removed and the group starts
    over, as ``execute`` does for one run."""
    with contextlib.ExitStack() as held:
        todo, elsewhere = [], []
        for spec in specs:
            lock = store.try_lock_run(sweep_dir, spec.run_id)
            if lock is None:
                elsewhere.append(spec.run_id)
                continue
            held.enter_context(lock)
            if not store.is_finished(sweep_dir, spec):
                todo.append(spec)
        if not todo:
            return {}, elsewhere
        enable_compile_cache()
        cfgs = [spec.build() for spec in todo]
        folder = group_checkpoint_dir(sweep_dir, todo)
        done = continue_or_restart(folder, group_config(cfgs), default_seed_chunk())  # a foreign one: start over
        if done is not None:
            print(f"{', '.join(s.run_id for s in todo)}: {done}", flush=True)
        every = default_checkpoint_every(cfgs[0])
        outputs = _starting_over(lambda: run_rows(cfgs, checkpoint_dir=folder, checkpoint_every=every) if len(cfgs) > 1
                                 else [run_validated(cfgs[0], checkpoint_dir=folder, checkpoint_every=every)], folder,
                                 ", ".join(s.run_id for s in todo))
        summaries = {}
        for spec, out in zip(todo, outputs, strict=True):
            summaries[spec.run_id] = store.publish(sweep_dir, spec, lambda staging, out=out: write(out, staging))
            ckpt.remove(sweep_dir / store.CHECKPOINTS / spec.run_id)  # of an earlier, ungrouped attempt
        ckpt.remove(folder)
    return summaries, elsewhere


def group_checkpoint_dir(sweep_dir: Path, specs: list[RunSpec]) -> Path:
    """The checkpoint folder of a group of runs trained as one program: named by its runs, in
    order, so that another grouping of them (some finished meanwhile) never continues it; a run
    alone uses its own run's folder, as ``execute`` does."""
    if len(specs) == 1:
        return sweep_dir / store.CHECKPOINTS / specs[0].run_id
    digest = hashlib.sha256("\n".join(s.run_id for s in specs).encode()).hexdigest()[:16]
    return sweep_dir / store.CHECKPOINTS / f"group-{digest}"


def run_groups(sweep_dir: Path, specs: list[RunSpec], show_progress: bool = True) -> Outcome:
    """The local backend with ``--group-rows``: each group of runs that can share a program
    (``group_specs``) trained as one program in this process, one group after another (on one
    accelerator, one program at a time uses it best)."""
    outcome = Outcome()
    groups = group_specs(specs)
    with _progress(show_progress) as bar, processes.stop_requests():
        task = bar.add_task(f"sweep {sweep_dir.name} ({len(groups)} programs)", total=len(specs))
        for group in groups:
            if processes.requested() is not None:  # SIGINT or SIGTERM between two programs: no new one
                outcome.signal = processes.requested()
                break
            bar.update(task, description=f"sweep {sweep_dir.name}: " + ", ".join(s.run_id for s in group))
            try:
                summaries, elsewhere = execute_group(sweep_dir, group)
            except processes.Interrupted as e:  # the group continues from its checkpoint next time
                outcome.signal = e.signum
                outcome.interrupted += [s.run_id for s in group]
                break
            except Exception as e:  # noqa: BLE001 -- recorded as the group's runs' failure, the sweep goes on
                summaries, elsewhere = {}, []
                outcome.failed.update({s.run_id: f"{type(e).__name__}: {e}" for s in group})
            outcome.elsewhere += elsewhere
            for spec in group:
                if spec.run_id in summaries:
                    _report(bar.console, spec, summaries[spec.run_id], None)
                elif spec.run_id in outcome.failed:
                    _report(bar.console, spec, None, outcome.failed[spec.run_id])
                else:
                    _report_elsewhere(bar.console, spec.run_id)
            store.refresh_index(sweep_dir, outcome.failed)
            bar.advance(task, len(group))
    return outcome


class SlurmRun:
    """What each Slurm job of a sweep runs: ``execute(sweep_dir, run_id)``, with submitit's
    checkpointing protocol. When Slurm signals a preemption or the coming time limit (SIGUSR2,
    ``--signal=USR2@90``), submitit calls ``checkpoint`` and requeues the job with the call it
    returns, the same one: the job starts again and ``execute`` continues from the run's last
    checkpoint. SIGTERM (``scontrol requeue``, a preemption, ``scancel``) stops the run at the end
    of its loop iteration with a checkpoint; a requeued job continues from it. The run's lock died
    with the stopped job's process, so the requeued job takes it at once."""

    def __call__(self, sweep_dir: str, run_id: str) -> dict | None:
        # Before XLA starts its threads: every signal Slurm or submitit sends the job reaches a Python
        # handler through a thread of its own, never on top of compiled code (bpo.infra.processes).
        # Threads started while submitit loaded this call (NumPy's) run no compiled XLA code.
        preemption = getattr(signal, "SIG" + os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2"))  # as submitit reads it
        processes.receive_signals_on_a_thread(also=(preemption, signal.SIGCONT))
        load_plugins()  # the job's methods and presets: BPO_PLUGINS, inherited from the submitting shell
        deadline = time.monotonic() + SLURM_LOCK_WAIT_S
        while (lock := store.try_lock_run(sweep_dir, run_id)) is None and time.monotonic() < deadline:
            time.sleep(5.0)
        try:
            return execute(sweep_dir, run_id, lock)
        except processes.Interrupted as e:
            # SIGTERM: Slurm is requeueing, preempting or cancelling the job, and the checkpoint is
            # written. A preemption may follow with submitit's signal (SIGUSR2), on which submitit
            # calls ``checkpoint`` and requeues the job, so wait for it (or for Slurm's SIGKILL).
            # Then leave no result: to submitit, SystemExit is not the job failing.
            print(f"{run_id}: {e}", flush=True)
            deadline = time.monotonic() + SLURM_STOP_WAIT_S
            while time.monotonic() < deadline:
                time.sleep(1.0)
            raise SystemExit(e.exit_code) from None

    def checkpoint(self, *args, **kwargs):
        import submitit  # see run_slurm

        return submitit.helpers.DelayedSubmission(self, *args, **kwargs)


def worker_main(sweep_dir: str, run_id: str) -> int:
    """A local worker process: ``execute`` with the run lock its sweep took for it; the exit code."""
    report_crashes()
    if WORKER_CORE_ENV in os.environ:  # before the first computation: XLA sizes its pools by it
        core = int(os.environ.pop(WORKER_CORE_ENV))
        os.sched_setaffinity(0, {core})
        print(f"{run_id}: keeps to core {core}", flush=True)
    if SWEEP_PID_ENV in os.environ:
        # Not SIGINT: the sweep forwards it (a Ctrl-C reaches a worker once, through the sweep).
        processes.die_with_parent(int(os.environ.pop(SWEEP_PID_ENV)), keep_sigint=True)
    processes.receive_signals_on_a_thread()
    load_plugins()  # the sweep's methods and presets: BPO_PLUGINS, inherited from the sweep's process
    lock = None
    if LOCK_FD_ENV in os.environ:
        lock = store.adopt_run_lock(sweep_dir, run_id, int(os.environ.pop(LOCK_FD_ENV)))
    try:
        summary = execute(sweep_dir, run_id, lock)
    except processes.Interrupted as e:
        print(f"{run_id}: {e}", flush=True)
        return e.exit_code
    except KeyboardInterrupt:  # SIGINT before training started (nothing to keep), or a second one
        print(f"{run_id}: interrupted", flush=True)
        return 128 + signal.SIGINT
    if summary is None:
        return LOCKED_ELSEWHERE
    print(f"{run_id}: final return {final_return_text(summary)}", flush=True)
    return 0


def default_workers() -> int:
    """One worker per core this process may use (its affinity, which Slurm and taskset restrict)."""
    return max(1, len(os.sched_getaffinity(0)))


def _progress(show: bool) -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    TextColumn("eta"), TimeRemainingColumn(), disable=not show, transient=False, console=console())


def _report(console, spec: RunSpec, summary: dict | None, error: str | None) -> None:
    if summary is not None:
        console.print(f"[green]done[/] {spec.run_id}: final return {final_return_text(summary)}, "
                      f"{summary['wall_time_s']:.0f} s")
    else:
        console.print(f"[red]failed[/] {spec.run_id}: {error}")


def _report_elsewhere(console, run_id: str) -> None:
    console.print(f"[yellow]left[/] {run_id}: running in another process")


def _log_tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _start_worker(sweep_dir: Path, spec: RunSpec, lock: store.Lock, log, core: int | None) -> subprocess.Popen:
    log.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')}: worker for {spec.run_id}, started by process "
              f"{os.getpid()} on {socket.gethostname()}\n")
    log.flush()
    cmd = [sys.executable, "-m", "experiments.launch", "worker", str(sweep_dir), spec.run_id]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", LOCK_FD_ENV: str(lock.fd), SWEEP_PID_ENV: str(os.getpid())}
    # Workers share the machine's accelerator: JAX's default of taking 75 % of its memory at start
    # would let only the first of them run (a user's own setting is kept).
    env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    if core is not None:
        env[WORKER_CORE_ENV] = str(core)
    # Its own session: a Ctrl-C in the terminal reaches the sweep alone, which forwards it once.
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, pass_fds=(lock.fd,),
                            start_new_session=True)


def run_local(sweep_dir: Path, specs: list[RunSpec], workers: int, show_progress: bool = True) -> Outcome:
    """Run ``specs`` in up to ``workers`` processes at once.

    Each run is locked here before its worker starts, and the worker inherits the lock: a run whose
    lock another process holds is left to it, and a run found finished once locked is not redone.
    Logs go to ``SWEEP/logs/RUN-ID.log`` (appended: an interrupted run's log keeps both parts).
    SIGINT or SIGTERM stops starting runs and is forwarded to the workers, which stop at the end of
    their loop iteration with a checkpoint; after ``STOP_GRACE_S`` (or a second signal) the ones
    still running are killed.

    With more than one worker, each worker of a Gymnasium-backend run keeps to one core of this
    process's affinity (the least busy one when it starts): two such processes spread over the same
    cores can each leave a compiled call waiting forever (docs/runtime.md, "A stalled XLA call");
    results are the same either way. A run the stall guard stopped is started again, up to
    ``STALL_RETRIES`` times."""
    sweep_dir = Path(sweep_dir)
    (sweep_dir / LOGS).mkdir(parents=True, exist_ok=True)
    queue = list(specs)
    with _caught_signals() as signals, _progress(show_progress) as bar:
        pool = _LocalWorkers(sweep_dir, bar, bar.add_task(f"sweep {sweep_dir.name}", total=len(specs)), queue,
                             pin=workers > 1)
        try:
            while queue or pool.running:
                if signals:
                    pool.stop(signals)
                while queue and len(pool.running) < workers:
                    pool.start(queue.pop(0))
                bar.update(pool.task, description=f"sweep {sweep_dir.name}: running " +
                           ", ".join(s.run_id for s, _, _ in pool.running.values()))
                time.sleep(0.2)
                pool.reap()
        finally:
            pool.kill_all()  # an error here: stop the workers, nothing of theirs is published
    return pool.out


@contextlib.contextmanager
def _caught_signals() -> Iterator[list[int]]:
    """In the block, SIGINT and SIGTERM neither raise KeyboardInterrupt nor end the sweep: they append
    their number to the list yielded, which the sweep loop reads to forward the signal to its workers
    (so they checkpoint before stopping) and to kill them on a second Ctrl-C. Handlers can only be
    set in the main thread; elsewhere the list stays empty."""
    signals: list[int] = []
    previous = {}
    if threading.current_thread() is threading.main_thread():
        previous = {s: signal.signal(s, lambda signum, frame: signals.append(signum))
                    for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield signals
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


class _LocalWorkers:
    """``run_local``'s worker processes (each with its run's spec, log file and lock) and what became
    of their runs so far."""

    def __init__(self, sweep_dir: Path, bar: Progress, task: int, queue: list[RunSpec], pin: bool) -> None:
        self.sweep_dir, self.logs, self.bar, self.task = sweep_dir, sweep_dir / LOGS, bar, task
        self.queue = queue
        self.running: dict[subprocess.Popen, tuple[RunSpec, IO[str], store.Lock]] = {}
        self.cores = sorted(os.sched_getaffinity(0)) if pin else []
        self.core_of: dict[subprocess.Popen, int] = {}
        self.stall_retries: dict[str, int] = {}
        self.out = Outcome()
        self.stopping_since: float | None = None

    def core_for(self, spec: RunSpec) -> int | None:
        """The core for a new worker of a Gymnasium-backend run: the one fewest running workers keep
        to. None (not pinned) for the JAX runner's runs, which spread their seed shards over every
        core: Figure 2's BPO run took 122 s on one core against 66 s on two."""
        if not self.cores or getattr(spec.build(), "backend", None) != "gymnasium":
            return None
        busy = list(self.core_of.values())
        return min(self.cores, key=busy.count)

    def stop(self, signals: list[int]) -> None:
        """The first signal: start no more runs and forward it to the workers, which checkpoint and stop.
        A second Ctrl-C, or the grace time, kills them; a repeated SIGTERM (schedulers send several)
        does not."""
        if self.stopping_since is None:
            self.out.signal, self.stopping_since = signals[0], time.monotonic()
            self.out.not_started = [s.run_id for s in self.queue]
            self.queue.clear()
            self.bar.console.print(f"[yellow]{signal.Signals(self.out.signal).name}[/]: stopping "
                                   f"{len(self.running)} running runs (each checkpoints at the end of its current "
                                   "iteration)")
            for proc in self.running:
                proc.send_signal(self.out.signal)
        if signal.SIGINT in signals[1:] or time.monotonic() - self.stopping_since > STOP_GRACE_S:
            for proc in self.running:
                proc.kill()

    def start(self, spec: RunSpec) -> None:
        """Lock the run and start its worker, which inherits the lock; a run locked by another process,
        or finished by one since the sweep was planned, is counted as done here without a worker."""
        lock = store.try_lock_run(self.sweep_dir, spec.run_id)
        if lock is None:
            self.out.elsewhere.append(spec.run_id)
            _report_elsewhere(self.bar.console, spec.run_id)
            self.bar.advance(self.task)
            return
        if store.is_finished(self.sweep_dir, spec):
            lock.release()
            self.bar.console.print(f"[green]done[/] {spec.run_id}: finished by another process")
            self.bar.advance(self.task)
            return
        log = open(self.logs / run_log_name(spec.run_id), "a")
        try:
            core = self.core_for(spec)
            proc = _start_worker(self.sweep_dir, spec, lock, log, core)
            self.running[proc] = (spec, log, lock)
            if core is not None:
                self.core_of[proc] = core
        except BaseException:  # no worker holds them: close and release them here
            log.close()
            lock.release()
            raise

    def reap(self) -> None:
        """Collect the workers that exited: release their locks, record their runs, update the index
        (so it is current whenever the sweep is stopped)."""
        for proc in [p for p in self.running if p.poll() is not None]:
            spec, log, lock = self.running.pop(proc)
            self.core_of.pop(proc, None)
            log.close()
            lock.release()
            settled = self._record_exit(spec, proc.returncode)
            store.refresh_index(self.sweep_dir, self.out.failed)
            self.bar.advance(self.task, 1 if settled else 0)

    def _record_exit(self, spec: RunSpec, returncode: int) -> bool:
        """Finished, left to another process (it took the lock first), stopped by the sweep's signal,
        stalled (queued again: returns False), or failed (with its log's tail)."""
        log_path = self.logs / run_log_name(spec.run_id)
        console = self.bar.console
        if returncode == 0 and store.is_finished(self.sweep_dir, spec):
            _report(console, spec, results.read_summary(self.sweep_dir / spec.run_id), None)
        elif returncode == LOCKED_ELSEWHERE:
            self.out.elsewhere.append(spec.run_id)
            _report_elsewhere(console, spec.run_id)
        elif self.out.signal is not None:
            self.out.interrupted.append(spec.run_id)
            how = (f"killed after {STOP_GRACE_S:.0f} s or a second Ctrl-C: it continues from its last checkpoint"
                   if returncode == -signal.SIGKILL else f"exit code {returncode}")
            console.print(f"[yellow]stopped[/] {spec.run_id} ({how}); log {log_path}")
        elif returncode == EXIT_STALLED and self.stall_retries.get(spec.run_id, 0) < STALL_RETRIES:
            self.stall_retries[spec.run_id] = tries = self.stall_retries.get(spec.run_id, 0) + 1
            console.print(f"[yellow]stalled[/] {spec.run_id} (a compiled call waited with no CPU; log {log_path}): "
                          f"starting it again from its checkpoint ({tries} of {STALL_RETRIES})")
            self.queue.insert(0, spec)
            return False
        else:
            self.out.failed[spec.run_id] = f"exit code {returncode}; log {log_path}:\n" + _log_tail(log_path)
            _report(console, spec, None, self.out.failed[spec.run_id])
        return True

    def kill_all(self) -> None:
        """Kill the workers still running and wait for them, then close their logs and release their locks."""
        for proc in self.running:
            proc.kill()
        for proc, (_, log, lock) in self.running.items():
            proc.wait()
            log.close()
            lock.release()


def _jobs_file(sweep_dir: Path) -> Path:
    return Path(sweep_dir) / SLURM / "jobs.json"



def recorded_jobs(sweep_dir: Path) -> dict[str, str]:
    """{run id: Slurm job id} of the sweep's earlier submissions ({} before any); a damaged record
    is a ``BadFile`` naming it (a job id is a string, '123_4' in an array)."""
    path = _jobs_file(sweep_dir)
    if not path.exists():
        return {}
    jobs = reader.read_json_object(path)
    if not all(isinstance(v, str) for v in jobs.values()):
        raise BadFile(path, "holds a job id that is not a string; remove the file if no job of this sweep is "
                            "queued or running (`squeue --me`)")
    return jobs


def slurm_in_flight(sweep_dir: Path) -> set[str]:
    """Runs whose Slurm job from an earlier submission is still queued or running: not resubmitted."""
    jobs = recorded_jobs(sweep_dir)
    if not jobs:
        return set()
    states = _queued(set(jobs.values())) or {}
    return {run_id for run_id, job_id in jobs.items() if states.get(job_id) in _LIVE_STATES}


def run_slurm(sweep_dir: Path, specs: list[RunSpec], resources: SlurmResources, wait: bool = True,
              show_progress: bool = True) -> Outcome:
    """Submit ``specs`` as one Slurm job array (one job per run, each running ``SlurmRun``); with
    ``wait``, follow the jobs to the end. Jobs are requeueable (``--requeue``) and append to their
    logs, so a requeued job's log keeps what its first start wrote."""
    # Imported here, the one import of experiments/ not at the top: importing submitit reconfigures
    # the logging module (logging.config.dictConfig, closing the handlers there were), which only the
    # Slurm backend should pay for.
    import submitit

    sweep_dir = Path(sweep_dir).resolve()
    executor = submitit.AutoExecutor(folder=sweep_dir / SLURM / "%j", cluster="slurm")
    executor.update_parameters(
        name=f"bpo-{sweep_dir.name}", timeout_min=resources.timeout_min, cpus_per_task=resources.cpus_per_task,
        mem_gb=resources.mem_gb, gpus_per_node=resources.gpus_per_node, tasks_per_node=1, nodes=1,
        slurm_partition=resources.partition, slurm_array_parallelism=resources.array_parallelism,
        slurm_additional_parameters={"requeue": True, "open_mode": "append", **dict(resources.additional)},
    )
    try:
        jobs = executor.map_array(SlurmRun(), [str(sweep_dir)] * len(specs), [s.run_id for s in specs])
    except (OSError, subprocess.SubprocessError, RuntimeError) as e:
        # sbatch present but no cluster to take the jobs (no slurmctld, no partition): one line, not
        # submitit's traceback. Nothing was submitted, so nothing is recorded.
        raise ConfigError("backend", f"Slurm refused the jobs ({_first_line(e)}); allowed: --backend slurm on a "
                                     "machine whose sbatch reaches a Slurm controller, or --backend local") from None
    with store.folder_lock(sweep_dir):  # another submission may be recording its jobs too
        recorded = recorded_jobs(sweep_dir)
        recorded.update({s.run_id: j.job_id for s, j in zip(specs, jobs, strict=True)})
        results.atomic_write_json(_jobs_file(sweep_dir), recorded)
    print(f"submitted {len(jobs)} Slurm jobs (array {jobs[0].job_id.split('_')[0]}); logs in {sweep_dir / SLURM}")
    return _follow_jobs(sweep_dir, dict(zip(jobs, specs, strict=True)), show_progress) if wait else Outcome()


def _follow_jobs(sweep_dir: Path, pending: dict, show_progress: bool) -> Outcome:
    """Follow submitted Slurm jobs ({job: its run's spec}) until each has ended, reporting each
    run and keeping the folder's index current."""
    out = Outcome()
    watch = _QueueWatch()
    with _progress(show_progress) as bar:
        task = bar.add_task(f"sweep {sweep_dir.name} (slurm)", total=len(pending))
        while pending:
            time.sleep(2.0)
            queued = _queued({j.job_id for j in pending})
            for job in list(pending):
                ended = watch.ended(job.job_id, queued)
                if not job.done() and not ended:
                    continue
                spec = pending.pop(job)
                try:
                    if not job.done():
                        raise RuntimeError(f"left the queue without a result (Slurm state: "
                                           f"{watch.state[job.job_id]}); see {job.paths.stderr}")
                    summary = job.result()
                    if summary is None:
                        out.elsewhere.append(spec.run_id)
                        _report_elsewhere(bar.console, spec.run_id)
                    else:
                        _report(bar.console, spec, summary, None)
                except Exception as e:  # the job's traceback, as submitit reports it
                    out.failed[spec.run_id] = f"Slurm job {job.job_id}: {e}"
                    _report(bar.console, spec, None, out.failed[spec.run_id])
                store.refresh_index(sweep_dir, out.failed)
                bar.advance(task)
    return out


def _first_line(error: BaseException) -> str:
    """The gist of a failed sbatch: the last non-empty line of what it printed, else the error."""
    text = "\n".join(str(x) for x in (getattr(error, "stderr", None), getattr(error, "output", None), error) if x)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    fallback = lines[-1] if lines else type(error).__name__
    return next((line for line in reversed(lines) if "sbatch" in line.lower()), fallback)


_LIVE_STATES = frozenset({
    "PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED",
    "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED", "SPECIAL_EXIT", "RESV_DEL_HOLD",
    "PREEMPTED", "NODE_FAIL", "BOOT_FAIL"})
"""Slurm job states from which a job may still run (``squeue`` man page, JOB STATE CODES): a
requeued job passes through COMPLETING and REQUEUED on its way back to PENDING, and our jobs are
requeueable, so a preempted job or one whose node failed may come back too; such a job that does
not is reported once the controller forgets it (``MinJobAge``), late rather than wrongly. The
others (COMPLETED, FAILED, CANCELLED, TIMEOUT, OUT_OF_MEMORY, DEADLINE) are final."""


class _QueueWatch:
    """Which jobs have left the queue without a result (time limit, node failure, ``scancel``):
    where sacct is off, submitit would find such a job unfinished forever. Two checks 2 s apart
    that find it ended (in a final state, or forgotten by the controller) decide."""

    def __init__(self):
        self.state: dict[str, str] = {}  # the last state seen, or why there is none
        self._seen: dict[str, str] = {}
        self._ended: dict[str, int] = {}

    def ended(self, job_id: str, queued: dict[str, str] | None) -> bool:
        """Record this check (``_queued``'s answer; None: squeue could not answer, which says nothing)."""
        if queued is None:
            self._ended[job_id] = 0
            return False
        if job_id in queued:
            self.state[job_id] = self._seen[job_id] = queued[job_id]
        else:
            self.state[job_id] = f"no longer known to the controller, last seen {self._seen.get(job_id, 'never')}"
        self._ended[job_id] = self._ended.get(job_id, 0) + 1 if self.state[job_id] not in _LIVE_STATES else 0
        return self._ended[job_id] >= 2


def _queued(job_ids: set[str]) -> dict[str, str] | None:
    """Each job id the controller still knows, with its state (all states, so a job between a
    requeue's stop and its next start counts too), or None when squeue cannot answer."""
    try:
        proc = subprocess.run(["squeue", "-h", "-r", "-t", "all", "-o", "%i %T", "-j", ",".join(sorted(job_ids))],
                              capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    # squeue exits non-zero when none of the ids is known any more: an empty queue, not an error.
    if proc.returncode != 0 and "Invalid job id" not in proc.stderr:
        return None
    return dict(line.split(maxsplit=1) for line in proc.stdout.splitlines() if len(line.split()) == 2)


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] != "worker":
        sys.exit("usage: python -m experiments.launch worker SWEEP_DIR RUN_ID")
    sys.exit(worker_main(sys.argv[2], sys.argv[3]))
