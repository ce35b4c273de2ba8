"""Real processes and real signals: SIGINT and SIGTERM stop ``bpo train`` cleanly (a checkpoint,
how to resume, exit code 130 or 143) and the resumed run equals the uninterrupted one; after
SIGKILL or SIGTERM no child of ``bpo train`` (evaluation worker, async vector-env workers,
multiprocessing's resource tracker) is left alive."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from bpo.config.presets import get_preset
from bpo.infra import checkpoint as ckpt
from bpo.infra import processes

SHORT_CORRIDOR = ["train", "short_corridor", "--bpo", "--episodes", "600", "--eval-every", "10",
                  "--eval-episodes", "2", "--seeds", "2", "--no-progress"]
HOST = ["train", "cartpole_ppo", "--bpo", "--backend", "gymnasium", "--vector-mode", "async",
        "--eval-in-background", "--total-timesteps", "200000", "--eval-every", "1024", "--eval-episodes", "2",
        "--seeds", "1", "--no-progress"]


def bpo(args, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "experiments.cli", *args], capture_output=True, text=True, timeout=600,
                          **kw)


def start(args) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "experiments.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def wait_for(condition, proc: subprocess.Popen, seconds: float = 300):
    deadline = time.monotonic() + seconds
    while not condition():
        assert proc.poll() is None, "the run ended early:\n" + proc.stderr.read()
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def children(pid: int) -> set[int]:
    """Every live descendant of ``pid``, from /proc."""
    parent_of = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parent_of[int(entry.name)] = int(fields[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {p for p, ppid in parent_of.items() if ppid in frontier} - found
        found |= frontier
    return found


def alive(pid: int) -> bool:
    """Running, and not a zombie waiting to be reaped."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_stops_the_run_with_a_checkpoint_and_it_resumes_identically(tmp_path, signum):
    whole, stopped = tmp_path / "whole", tmp_path / "stopped"
    assert bpo([*SHORT_CORRIDOR, "--out", str(whole)]).returncode == 0
    proc = start([*SHORT_CORRIDOR, "--checkpoint-every", "5", "--out", str(stopped)])
    wait_for(lambda: ckpt.exists(stopped / "checkpoint"), proc)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signum, err
    assert f"stopped by {signal.Signals(signum).name} after loop iteration" in err
    assert f"bpo train --resume {stopped}" in err
    assert not (stopped / "summary.json").exists() and ckpt.exists(stopped / "checkpoint")
    resumed = bpo(["train", "--resume", str(stopped), "--no-progress"])
    assert resumed.returncode == 0, resumed.stderr
    for name in ("curve.csv", "train_metrics.csv"):
        assert (whole / name).read_bytes() == (stopped / name).read_bytes(), name


@pytest.mark.slow
@pytest.mark.mujoco
@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_no_child_outlives_a_host_run(tmp_path, signum):
    """The host runner with its evaluation worker and async vector-env workers (each with the
    resource tracker that multiprocessing starts): killed or stopped, all of them are gone."""
    proc = start([*HOST, "--out", str(tmp_path / "run")])
    # 8 training env workers, the resource tracker, the evaluation worker and its 2 env workers.
    wait_for(lambda: len(children(proc.pid)) >= 12, proc, 300)
    descendants = children(proc.pid)
    os.kill(proc.pid, signum)
    _, err = proc.communicate(timeout=120)
    if signum == signal.SIGTERM:
        assert proc.returncode == 143, err
        assert "stopped by SIGTERM after update" in err and "continue it with `bpo train --resume" in err
    deadline = time.monotonic() + 10
    while any(alive(p) for p in descendants) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [p for p in descendants if alive(p)]
    assert not left, [Path(f"/proc/{p}/cmdline").read_bytes()[:200] for p in left]


def blocked_signals(pid: int, tid: int | None = None) -> set[int]:
    """The signals a thread blocks (its process's main thread without ``tid``), from /proc."""
    path = Path(f"/proc/{pid}/task/{tid or pid}/status")
    mask = int(next(line.split()[1] for line in path.read_text().splitlines() if line.startswith("SigBlk:")), 16)
    return {n for n in range(1, 65) if mask >> (n - 1) & 1}


@pytest.mark.slow
@pytest.mark.mujoco
def test_no_thread_that_runs_compiled_code_takes_a_stop_signal(tmp_path):
    """A signal handler run on top of JIT-compiled kernels can corrupt the heap (bpo.infra.processes), so
    in ``bpo train`` every thread, XLA's included, blocks SIGINT and SIGTERM: one of them takes
    them with sigwait. Its child processes (evaluation worker, environment workers) block neither,
    and the run still stops with a checkpoint and exit code 143."""
    proc = start([*HOST, "--out", str(tmp_path / "run")])
    wait_for(lambda: len(children(proc.pid)) >= 12, proc, 300)
    threads = [int(t.name) for t in Path(f"/proc/{proc.pid}/task").iterdir()]
    assert len(threads) > 3  # the main thread, XLA's threads, the evaluation pool's, this module's
    stop = {signal.SIGINT, signal.SIGTERM}
    unblocked = [t for t in threads if not stop <= blocked_signals(proc.pid, t)]
    # The kernel lifts the mask of a thread while it waits in sigwait: that one thread takes them.
    waiting = [t for t in unblocked
               if Path(f"/proc/{proc.pid}/task/{t}/wchan").read_text().startswith("do_sigtimedwait")]
    assert len(waiting) == 1 and unblocked == waiting, f"threads taking SIGINT or SIGTERM: {unblocked} of {threads}"
    for child in children(proc.pid):
        with contextlib.suppress(OSError):  # a short-lived helper may be gone already
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
            if b"resource_tracker" not in cmdline:  # multiprocessing's: it ignores both signals anyway
                assert not stop & blocked_signals(child), cmdline[:200]
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    assert "stopped by SIGTERM after update" in err


@pytest.mark.slow
def test_a_run_killed_by_a_fatal_signal_prints_every_thread_s_python_stack(tmp_path):
    """A crash in native code (glibc aborting on a corrupted heap, a segfault) has no Python
    traceback; ``bpo`` prints each thread's Python stack first (``bpo.infra.runtime.report_crashes``),
    so a log says what was running. The real process, killed by a real SIGABRT mid-training."""
    proc = start([*SHORT_CORRIDOR, "--checkpoint-every", "5", "--out", str(tmp_path / "run")])
    wait_for(lambda: ckpt.exists(tmp_path / "run" / "checkpoint"), proc)
    proc.send_signal(signal.SIGABRT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGABRT, err
    assert "Fatal Python error: Aborted" in err, err
    main_thread = err.split("most recent call first", 1)[1]
    assert "bpo/training/driver.py" in main_thread and "experiments/cli.py" in main_thread, err
    assert err.count("Thread 0x") >= 2, err  # the main thread and the stall guard, at least


def test_stop_requests_take_the_first_signal_and_a_second_ctrl_c_aborts(monkeypatch):
    # The KeyboardInterrupt path. The watcher that ends a process whose main thread does not leave
    # within GRACE_S is tested in a process of its own below; here, in a pytest worker on a loaded
    # machine, its 1 s grace ran out twice and ended the worker.
    monkeypatch.setattr(processes, "GRACE_S", 120.0)
    with processes.stop_requests():
        assert processes.requested() is None
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGTERM)  # a scheduler's repeated SIGTERM: still one stop request
        assert processes.requested() == signal.SIGTERM
    assert processes.requested() is None and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    with pytest.raises(KeyboardInterrupt), processes.stop_requests():
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)


LONG_CALL = """
import jax, jax.numpy as jnp
from bpo.infra import processes
spin = jax.jit(lambda x: jax.lax.fori_loop(0, 2_000_000_000, lambda i, a: jnp.sin(a) * 1.0000001 + 1e-9, x))
with processes.stop_requests():
    print("in", flush=True)
    spin(jnp.float32(1.0)).block_until_ready()  # minutes of one compiled call, no Python in between
print("returned", flush=True)
"""


def test_a_second_ctrl_c_ends_a_run_inside_a_long_compiled_call_at_once():
    proc = subprocess.Popen([sys.executable, "-c", LONG_CALL], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    assert proc.stdout.readline().strip() == "in"
    time.sleep(2)  # inside the compiled call
    proc.send_signal(signal.SIGINT)  # a stop request: waits for the iteration, which here never ends
    time.sleep(1)
    assert proc.poll() is None
    start = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "stopped at once by a second SIGINT" in err and "returned" not in out
    assert time.monotonic() - start < 10


def test_a_checkpoint_s_progress_travels_with_its_state(tmp_path):
    """The restart point is read from the state file, so a kill between the state file's rename and
    checkpoint.json's leaves a consistent checkpoint."""
    state = {"w": np.arange(3.0)}
    cfg = get_preset("short_corridor")
    ckpt.save(tmp_path, state, {}, {"iterations_done": 4}, cfg)
    ckpt.save(tmp_path, {"w": np.arange(3.0) + 1}, {}, {"iterations_done": 8}, cfg)
    (tmp_path / ckpt.INFO_FILE).write_text(json.dumps({"iterations_done": 4}))  # as if killed in between
    loaded, _, info = ckpt.load(tmp_path, lambda _: state)
    assert info["iterations_done"] == 8 and info["config"]["preset"] == "short_corridor"
    np.testing.assert_array_equal(loaded["w"], np.arange(3.0) + 1)


@pytest.mark.parametrize("command, signum", [("evaluate", signal.SIGINT), ("verify-variance", signal.SIGTERM)])
def test_a_long_evaluation_stops_within_seconds_of_a_signal_and_writes_nothing(tmp_path, command, signum):
    """``bpo evaluate`` and ``bpo verify-variance`` spend their time in one compiled computation,
    written at its end: a stop signal inside it ends the process within seconds, saying nothing
    was written, with exit 128 + the signal (they ran on to the end, then printed a traceback)."""
    import shutil

    if command == "evaluate":
        run = tmp_path / "run"
        results = Path(__file__).resolve().parent.parent / "results"
        shutil.copytree(results / "a2c" / "CartPole-v1-cartpole_a2c-a2c", run)
        argv, out = ["evaluate", str(run), "--episodes", "100000", "--seed", "3"], run / "evaluations"
    else:
        out = tmp_path / "variance"
        argv = ["verify-variance", "--out", str(out), "--episodes", "10000000"]
    proc = subprocess.Popen([sys.executable, "-m", "experiments.cli", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    assert "Ctrl-C stops it" in line, line + proc.stderr.read()
    time.sleep(3)  # compiling or computing: a single call of the compiled program
    assert proc.poll() is None
    sent = time.monotonic()
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=60)
    assert time.monotonic() - sent < 10
    assert proc.returncode == 128 + signum, err
    assert f"stopped by {signal.Signals(signum).name}: nothing written" in err and "Traceback" not in err, err
    assert not out.exists() or not [p for p in out.rglob("*") if p.is_file()]
