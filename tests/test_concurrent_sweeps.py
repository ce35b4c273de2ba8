"""Several processes on one results folder share its runs: a run's lock (``fcntl.flock`` on
``SWEEP/.locks/RUN-ID.lock``) is held by the process executing it and dies with that process, the
staging clean-up spares runs whose lock is held, and two real ``bpo sweep`` processes started
together on the same folder execute every run exactly once and leave a complete index."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from experiments import store
from experiments.cli import main
from experiments.sweep import Grid, Sweep, expand

HOLD = """
import sys, time
from experiments import store
lock = store.try_lock_run(sys.argv[1], sys.argv[2])
print("locked" if lock is not None else "busy", flush=True)
time.sleep(120)
"""


def _hold_lock(sweep_dir: Path, run_id: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(sweep_dir), run_id], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "locked"
    return proc


def test_a_run_lock_keeps_other_processes_out_and_dies_with_its_holder(tmp_path):
    specs = expand(Sweep(name="s", grids=(Grid(preset="short_corridor", variants=("reinforce", "bpo"), seeds=2),)))
    store.write_sweep_file(tmp_path, "s", specs)
    busy, free = (s.run_id for s in specs)
    for run_id in (busy, free):  # what killed runs would have left half-written
        (tmp_path / store.STAGING / run_id / "host.123").mkdir(parents=True)
    holder = _hold_lock(tmp_path, busy)
    try:
        assert store.try_lock_run(tmp_path, busy) is None
        assert store.run_is_locked(tmp_path, busy) and not store.run_is_locked(tmp_path, free)
        # A second holder in another process is refused too.
        other = subprocess.run([sys.executable, "-c", HOLD.replace("time.sleep(120)", ""), str(tmp_path), busy],
                               capture_output=True, text=True, timeout=60)
        assert other.stdout.strip() == "busy"
        assert store.clear_staging(tmp_path) == [free]  # the running run's staging folder is kept
        assert (tmp_path / store.STAGING / busy / "host.123").is_dir()
        statuses = {e["run_id"]: e["status"] for e in store.build_index(tmp_path)["runs"]}
        assert statuses == {busy: "running", free: "pending"}
        store.remove_empty_staging(tmp_path)  # a run is being executed: everything stays
        assert (tmp_path / store.LOCKS / f"{busy}.lock").exists()
    finally:
        holder.kill()  # SIGKILL: no clean-up in the holder, the kernel releases the lock
        holder.wait()
    assert not store.run_is_locked(tmp_path, busy)
    lock = store.try_lock_run(tmp_path, busy)
    assert lock is not None
    lock.release()
    assert not (tmp_path / store.LOCKS).exists()  # lock files are removed by whoever releases them
    assert store.clear_staging(tmp_path) == [busy] and not (tmp_path / store.STAGING).exists()


def test_bpo_train_into_a_run_a_sweep_is_training_is_refused_and_takes_the_sweeps_lock(tmp_path, capsys):
    """``bpo train --out SWEEP/RUN-ID`` takes the lock the sweep's worker holds for that run: refused,
    naming --out, while a sweep process trains it; holding it while it trains, so that a sweep
    started meanwhile leaves the run to it instead of both publishing into the same folder."""
    specs = expand(Sweep(name="s", grids=(Grid(preset="short_corridor", variants=("reinforce",), seeds=1),)))
    store.write_sweep_file(tmp_path, "s", specs)
    run_dir = tmp_path / specs[0].run_id
    argv = ["train", "short_corridor", "--episodes", "10", "--eval-every", "10", "--eval-episodes", "2",
            "--no-progress", "--out", str(run_dir)]
    holder = _hold_lock(tmp_path, specs[0].run_id)
    try:
        assert main(argv) == 2
    finally:
        holder.kill()
        holder.wait()
    err = capsys.readouterr().err
    assert "error: --out:" in err and "a sweep process is training it" in err, err
    assert not run_dir.exists()
    sweep_dir, lock = store.lock_as_sweep_run(run_dir)  # what _train holds for the whole run
    assert sweep_dir == tmp_path and lock is not None
    try:
        assert store.run_is_locked(tmp_path, specs[0].run_id)
        other = subprocess.run([sys.executable, "-c", HOLD.replace("time.sleep(120)", ""), str(tmp_path),
                                specs[0].run_id], capture_output=True, text=True, timeout=60)
        assert other.stdout.strip() == "busy"
    finally:
        lock.release()
    assert store.lock_as_sweep_run(tmp_path / "elsewhere" / "run") == (None, None)
    assert main(argv) == 0  # lock free: trained, and the sweep's lock released with the run
    assert (run_dir / "summary.json").is_file() and not store.run_is_locked(tmp_path, specs[0].run_id)


RUN_IDS = [f"ShortCorridor-v0-short_corridor-reinforce-reinforce.lr_start={lr}-episodes=40-eval_episodes=2"
           for lr in (0.1, 0.05, 0.02, 0.01)]  # grid values, then the --set values that change the run


@pytest.mark.slow
def test_two_sweeps_on_one_folder_execute_each_run_once(tmp_path):
    out = tmp_path / "sweep"
    cmd = [sys.executable, "-m", "experiments.cli", "sweep", "--preset", "short_corridor", "--variants", "reinforce",
           "--grid", "reinforce.lr_start=0.1,0.05,0.02,0.01", "--set", "episodes=40", "eval_every=10",
           "eval_episodes=2", "--seeds", "2", "--workers", "1", "--no-progress", "--out", str(out)]
    env = {**os.environ, "COLUMNS": "250"}  # one line per run in the sweeps' reports
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
             for _ in range(2)]
    try:
        outputs = [p.communicate(timeout=600)[0] for p in procs]
    finally:
        for p in procs:
            p.kill()
            p.wait()
    assert [p.returncode for p in procs] == [0, 0], "\n".join(outputs)
    for run_id in RUN_IDS:
        assert (out / run_id / "summary.json").exists()
        # Trained by exactly one worker of one of the two sweeps: one start, one result in its log
        # (logs are appended to, so a second training would show), one "done" across both sweeps.
        log = (out / "logs" / f"{run_id}.log").read_text()
        assert log.count("training in process") == 1 and log.count(f"{run_id}: final return") == 1, log
        assert sum(o.count(f"done {run_id}: final return") for o in outputs) == 1, outputs
    # The runs were shared: at least one sweep found a run being executed by the other and left it.
    assert any("runs left to another process that is running them" in o for o in outputs), outputs
    # Whichever finished last wrote an index of every run, each once and finished.
    index = json.loads((out / "index.json").read_text())
    assert sorted(e["run_id"] for e in index["runs"]) == sorted(RUN_IDS)
    assert {e["status"] for e in index["runs"]} == {"finished"}
    assert index == store.build_index(out)
    assert sorted(p.name for p in out.iterdir()) == sorted([*RUN_IDS, "index.json", "logs", "sweep.json"])
