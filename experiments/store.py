"""The results store of a sweep: ``RESULTS/<run-id>/`` run directories, ``sweep.json`` (the
expanded runs) and ``index.json`` (one entry per run, for people and other tools: rebuilt from
the run directories, each read and checked by ``experiments.reader``, whenever a command looks, and
never read back).

A run is first written whole to ``.staging/`` and then renamed to its final name, so a run
directory either is complete or does not exist: a sweep killed at any moment leaves no
half-written run behind, and the next sweep deletes the staging leftovers and redoes those runs.

Several processes may work on one results folder at once (two ``bpo sweep`` of the same folder,
a rerun on the login node while Slurm jobs still run). They share the work through file locks
(``fcntl.flock``, which the kernel releases when the process holding it ends, however it ends):

* ``.locks/RUN-ID.lock`` is held by the process that executes the run, for the whole run; a
  process that finds it held leaves the run to its holder, so no run is executed twice at once,
  and staging leftovers are deleted only for runs whose lock is free;
* ``.locks/index.lock`` is held for a moment around each rebuild of ``index.json`` and around the
  staging clean-up, so the index is always rebuilt from the run directories as they are and
  written whole, whoever writes it last.

A lock file is removed by its holder when it releases it (and ``.locks`` once empty); whoever
takes a lock checks that the file it locked is still the one at that path, so a removal never
lets two processes hold the same lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

from bpo.config.schema import EXECUTION_ONLY, current_config, to_dict
from bpo.infra import results
from bpo.infra.locks import Lock, acquire, same_file
from bpo.infra.publish import publish_run_dir, replace_dir
from bpo.training.policies import policies_problem
from experiments import reader
from experiments.sweep import RunSpec

STAGING = ".staging"
CHECKPOINTS = ".checkpoints"  # runs in progress; kept across invocations, unlike .staging
LOCKS = ".locks"  # RUN-ID.lock: held by the process executing the run; index.lock: around index and staging
INDEX_LOCK = "index.lock"  # never a run's (run ids always contain a '-')


def _acquire(path: Path, blocking: bool) -> Lock | None:
    """A lock in ``SWEEP/.locks`` (``bpo.infra.locks.acquire``), which goes once its last lock is released."""
    return acquire(path, blocking, tidy_parent=True)


def run_lock_path(sweep_dir: Path, run_id: str) -> Path:
    return Path(sweep_dir) / LOCKS / f"{run_id}.lock"


def try_lock_run(sweep_dir: Path, run_id: str) -> Lock | None:
    """The run's lock, or None when another process holds it (it is executing the run)."""
    lock = _acquire(run_lock_path(sweep_dir, run_id), blocking=False)
    if lock is None:
        # The clean-ups and the index hold a run's lock for a moment, under the folder lock: once they
        # are done, a lock still held is held by a process executing the run.
        with folder_lock(sweep_dir):
            lock = _acquire(run_lock_path(sweep_dir, run_id), blocking=False)
    return lock


def lock_as_sweep_run(run_dir: Path) -> tuple[Path | None, Lock | None]:
    """For ``bpo train --out SWEEP/NAME`` (or ``--resume``) into a sweep's folder: (the sweep
    folder, the lock a sweep holds while it executes run NAME), the lock None when a sweep process
    holds it; (None, None) where ``run_dir`` is not in a sweep's folder (no ``sweep.json`` beside
    it). Without it the train and a sweep's worker took different locks, trained the same run at
    once and published over each other. OSError when the sweep's ``.locks`` cannot be written."""
    sweep_dir = Path(run_dir).parent
    if not (sweep_dir / "sweep.json").is_file() or Path(run_dir).name == Path(INDEX_LOCK).stem:
        return None, None
    return sweep_dir, try_lock_run(sweep_dir, Path(run_dir).name)


def adopt_run_lock(sweep_dir: Path, run_id: str, fd: int) -> Lock | None:
    """The run's lock from an inherited file descriptor (a sweep locks a run before it starts the
    worker process for it, which inherits the lock); None if ``fd`` is not that lock."""
    path = run_lock_path(sweep_dir, run_id)
    try:
        if not same_file(path, fd):
            return None
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # already ours (the same open file): succeeds at once
    except OSError:
        return None
    return Lock(path, fd, tidy_parent=True)


def run_is_locked(sweep_dir: Path, run_id: str) -> bool:
    """Whether a process (this one included) holds the run's lock; creates nothing. (It holds a
    shared lock for a moment: call it under ``folder_lock``, see ``try_lock_run``.)"""
    try:
        fd = os.open(run_lock_path(sweep_dir, run_id), os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


@contextlib.contextmanager
def folder_lock(sweep_dir: Path) -> Iterator[None]:
    """Held around each read-modify-write of ``index.json`` and the staging clean-up (a moment);
    a folder this user cannot write is read without it (nothing will be written there)."""
    try:
        lock = _acquire(Path(sweep_dir) / LOCKS / INDEX_LOCK, blocking=True) if Path(sweep_dir).is_dir() else None
    except OSError:
        lock = None
    try:
        yield
    finally:
        if lock is not None:
            lock.release()


def write_sweep_file(sweep_dir: Path, name: str, specs: list[RunSpec], baseline: str | None = None,
                     alternative: str = "greater") -> None:
    """``sweep.json``: this sweep's runs, after those of earlier sweeps of the folder that it does
    not redo (other ids: other ``--set`` values, another grid), so the file describes every run the
    folder holds or was asked for; and the test its table asks for (``baseline``, ``alternative``),
    which ``bpo table FOLDER`` uses unless told otherwise (``reader.sweep_test``). An unreadable old
    file is replaced, with a warning."""
    with folder_lock(sweep_dir):
        try:
            earlier = read_specs(sweep_dir)
        except (OSError, ValueError, KeyError, TypeError) as e:
            print(f"warning: {Path(sweep_dir) / 'sweep.json'} could not be read ({type(e).__name__}: {e}); "
                  "replaced by this sweep's", file=sys.stderr)
            earlier = []
        ids = {s.run_id for s in specs}
        runs = [s for s in earlier if s.run_id not in ids] + list(specs)
        results.atomic_write_json(Path(sweep_dir) / "sweep.json", {"sweep": name, "baseline": baseline,
                                                                   "alternative": alternative,
                                                                   "runs": [s.to_json() for s in runs]})


def read_specs(sweep_dir: Path) -> list[RunSpec]:
    """The runs of a sweep folder's ``sweep.json`` ([] where there is none); a damaged one is a
    ``reader.BadFile`` naming it."""
    found = reader.read_sweep_file(sweep_dir)
    return [] if found is None else found[1]


def is_finished(sweep_dir: Path, spec: RunSpec) -> bool:
    """A complete run directory (one that ``reader.read_run`` accepts, as every table and plot reads
    it: a damaged file, or files of different runs, would be skipped by all of them, so the run is
    done again) holding the same configuration, recorded by code that had every field of today's
    config (or only lacked ``COMPATIBLE_ADDITIONS``), and its saved policies, where it has them,
    sound (``policies_problem``)."""
    run_dir = Path(sweep_dir) / spec.run_id
    try:
        reader.read_run(run_dir, Path(sweep_dir))
        recorded = current_config(json.loads((run_dir / "config.json").read_text()))
        if recorded is None:
            return False  # stale: recorded before a field existed whose default may change the results
        # Compared in today's layout: a run written before a field moved section, or before the bpo
        # section was optional, reads as it meant (bpo.config.schema.from_dict).
        stored = json.loads(json.dumps(to_dict(recorded)))
        expected = json.loads(json.dumps(to_dict(spec.config())))
        # a damaged or foreign policies.msgpack: bpo probe and bpo evaluate would refuse it for good
        return same_result_config(stored, expected) and policies_problem(run_dir) is None
    except (OSError, ValueError, TypeError, AttributeError):
        return False


def same_result_config(stored: dict, expected: dict) -> bool:
    """Whether a stored run computed what ``expected`` asks for: equal but for the fields that only
    change how a run executes (``bpo.config.schema.EXECUTION_ONLY``)."""
    for key, want in expected.items():
        if key in EXECUTION_ONLY:
            continue
        have = stored.get(key)
        if isinstance(want, dict) and isinstance(have, dict):
            if not same_result_config(have, want):
                return False
        elif have != want:
            return False
    return True


def clear_staging(sweep_dir: Path) -> list[str]:
    """Remove what killed runs left half-written (nothing outside .staging is ever partial): the
    staging folders of runs whose lock is free. A run being executed by another process (its lock
    is held) keeps its staging folder. Returns the names removed."""
    staging, removed = Path(sweep_dir) / STAGING, []
    if not staging.is_dir():
        return removed
    with folder_lock(sweep_dir):
        for entry in sorted(staging.iterdir()):
            try:
                # staging/RUN-ID/HOST.PID (older versions: RUN-ID.HOST.PID, whose lock is always free)
                lock = _acquire(run_lock_path(sweep_dir, entry.name), blocking=False)
            except OSError:
                lock = None
            if lock is None:
                continue
            with lock:
                shutil.rmtree(entry, ignore_errors=True)
                removed.append(entry.name)
        with contextlib.suppress(OSError):
            staging.rmdir()
    return removed


def remove_empty_staging(sweep_dir: Path) -> None:
    """Remove the staging, checkpoint and lock folders once nothing is in them, unless a run is
    being executed (by this or another process): it may be about to write there. Lock files that
    no process holds (left by a killed one) are removed first."""
    locks = Path(sweep_dir) / LOCKS
    with folder_lock(sweep_dir):
        for path in sorted(locks.glob("*.lock")) if locks.is_dir() else []:
            if path.name == INDEX_LOCK:
                continue
            try:
                lock = _acquire(path, blocking=False)
            except OSError:
                return
            if lock is None:
                return
            lock.release()
        for name in (STAGING, CHECKPOINTS):
            try:
                (Path(sweep_dir) / name).rmdir()
            except OSError:  # absent, or not empty (a checkpoint of an interrupted run)
                pass


def publish(sweep_dir: Path, spec: RunSpec, write_run) -> dict:
    """Write a run with ``write_run(staging_dir) -> summary`` and move it into place whole
    (``bpo.infra.publish.replace_dir``: an older run under the same id is replaced, never mixed with
    it; the user's own files in its folder are kept, as ``bpo train --out`` keeps them). A run
    folder that is a symbolic link (runs gathered by hand) is redone in the folder it points to,
    staged beside that folder (``publish_run_dir``, on its file system), as ``bpo train --out LINK``
    is: the link stays a link. The caller holds the run's lock (``try_lock_run``)."""
    sweep_dir, final = Path(sweep_dir), Path(sweep_dir) / spec.run_id

    def write(folder: Path) -> dict:
        summary = write_run(folder)
        results.atomic_write_json(folder / "spec.json", spec.to_json())
        return summary

    if final.is_symlink():
        return publish_run_dir(final.resolve(), write)
    staging = sweep_dir / STAGING / spec.run_id / f"{socket.gethostname()}.{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    summary = write(staging)
    replace_dir(staging, final, trash=staging.with_name(staging.name + ".replaced"), keep_others=True)
    with contextlib.suppress(OSError):
        staging.parent.rmdir()
    return summary


def _index(root: Path, sweep: tuple[str, list[RunSpec]] | None, runs: list[reader.Run],
           skipped: list[reader.Skipped], failed: dict[str, str] | None) -> dict:
    """The index: the finished runs, the run directories skipped (status ``skipped``, with the file
    and the reason), then the sweep's runs not finished yet: running (a process holds its lock),
    failed (in ``failed``), pending, or unbuildable (an earlier sweep's run this code cannot build,
    such as a plug-in's preset without its plug-in loaded: listed with the reason, never fatal to
    the sweep that rebuilds the index)."""
    entries = [r.entry() for r in runs]
    entries += [{"run_id": s.run_id, "status": "skipped", "file": s.file, "error": s.reason} for s in skipped]
    done = {e["run_id"] for e in entries}
    for spec in sweep[1] if sweep is not None else []:
        if spec.run_id not in done:
            status = ("running" if run_is_locked(root, spec.run_id) else
                      "failed" if failed and spec.run_id in failed else "pending")
            try:
                row, error = reader.spec_row(spec, root / "sweep.json"), failed.get(spec.run_id) if failed else None
            except reader.BadFile as e:
                status, row, error = "unbuildable", None, e.reason
            entries.append({"run_id": spec.run_id, "status": status, "preset": spec.preset, "row": row,
                            **({"error": error} if status in ("failed", "unbuildable") else {})})
    return {"sweep": sweep[0] if sweep is not None else root.name, "runs": entries}


def build_index(results_dir: Path, failed: dict[str, str] | None = None) -> dict:
    """Index every run directory under ``results_dir`` (sweep runs, and any other run directories
    such as ``bpo reproduce`` writes), each read and checked by ``experiments.reader``, plus the
    sweep's runs not finished yet. A damaged ``sweep.json`` is a ``reader.BadFile``."""
    root = Path(results_dir)
    return _index(root, reader.read_sweep_file(root), *reader.scan(root), failed)


def _refresh(results_dir: Path, failed: dict[str, str] | None) -> tuple[dict, list[reader.Run], list[reader.Skipped]]:
    """``refresh_index``, also returning the runs it read and the run directories it skipped."""
    root = Path(results_dir)
    sweep = reader.read_sweep_file(root)
    if sweep is None:
        runs, skipped = reader.scan(root)
        return _nonempty(_index(root, None, runs, skipped, failed), root), runs, skipped
    with folder_lock(root):
        runs, skipped = reader.scan(root)
        index = _nonempty(_index(root, sweep, runs, skipped, failed), root)
        try:
            # unchanged, untouched: `bpo table FOLDER --out ELSEWHERE` only reads FOLDER
            results.atomic_write_json(root / "index.json", index, keep_if_same=True)
        except OSError:
            pass
    return index, runs, skipped


def refresh_index(results_dir: Path, failed: dict[str, str] | None = None) -> dict:
    """Rebuild ``index.json`` from the run directories (cheap: a few small files per run) and write
    it when the folder is writable; the analysis commands call this, so the index is never stale
    (Slurm jobs finish after the submitting command has exited), and it is never read: a damaged
    one is replaced. Rebuilt and written under the folder's index lock, so concurrent sweeps never
    interleave their reads and writes: whichever writes last writes what the folder holds then. A
    folder that is not a sweep's (no sweep.json: run directories gathered by hand) is only read."""
    return _refresh(results_dir, failed)[0]


def _nonempty(index: dict, results_dir: Path) -> dict:
    if not index["runs"]:
        raise FileNotFoundError(f"no finished runs (summary.json + config.json) under {results_dir}")
    return index


class NoRuns(FileNotFoundError):
    """No run directory of a results folder can be used; ``skipped`` says why for each one found."""

    def __init__(self, message: str, skipped: list[reader.Skipped]):
        super().__init__(message)
        self.skipped = skipped


def load_runs(results_dir: Path) -> tuple[list[reader.Run], list[reader.Skipped]]:
    """What ``bpo table`` and ``bpo plot`` read: the finished runs of ``results_dir``, each read and
    checked once (``experiments.reader``), and the run directories skipped, each with its file and
    reason, for the commands to list (refreshing ``index.json`` on the way). ``NoRuns`` when there is
    no run to use; ``reader.BadFile`` for a damaged ``sweep.json``."""
    _, runs, skipped = _refresh(results_dir, None)
    if not runs:
        raise NoRuns(f"no finished runs (summary.json + config.json) under {results_dir}"
                     + (f" that can be read ({len(skipped)} skipped)" if skipped else ""), skipped)
    return runs, skipped
