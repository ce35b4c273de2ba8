"""A run's progress where people read it (issue 46, items 2 and 3): in a log, lines at every
evaluation and at least every ``BPO_LOG_EVERY_S`` seconds; and the progress reported from the
host, so that a run with it on reuses its compiled program from the persistent cache."""

import os
import re
import subprocess
import sys
import threading
import time
from io import StringIO

import jax
import pytest
from jax._src import lru_cache
from rich.console import Console

from bpo.infra import progress
from bpo.infra.runtime import enable_compile_cache

SHORT = ["train", "short_corridor", "--seeds", "2", "--episodes", "60", "--eval-every", "10"]


def bpo(args, env: dict, cwd) -> subprocess.CompletedProcess:
    """``bpo ARGS`` in a process of its own, its output a pipe (a log, not a terminal)."""
    return subprocess.run([sys.executable, "-m", "experiments.cli", *args], capture_output=True, text=True,
                          timeout=600, env={**os.environ, **env}, cwd=cwd)


def test_a_run_whose_output_is_a_log_writes_a_line_at_each_evaluation_and_between(tmp_path):
    proc = bpo([*SHORT, "--out", str(tmp_path / "run")], {"BPO_LOG_EVERY_S": "0.2", "BPO_COMPILE_CACHE": ""},
               tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.startswith("short_corridor/ShortCorridor-v0/bpo ")]
    counts = [int(re.search(r" (\d+)/7 evaluations", line).group(1)) for line in lines]
    # 7 evaluations (of 2 seeds each): a line when each is done, the last one full
    assert set(range(1, 8)) <= set(counts) and counts[-1] == 7 and counts == sorted(counts)
    # while it compiled (seconds, no evaluation yet) the run was not silent, and said why
    assert counts[0] == 0 and "elapsed" in lines[0] and "compiling" in lines[0]
    assert "eval return" in lines[-1] and "(mean of 2 seeds)" in lines[-1]
    assert "\x1b[" not in proc.stdout  # plain lines, no terminal codes


def test_a_bad_log_interval_is_refused_before_any_work(tmp_path):
    proc = bpo([*SHORT, "--out", str(tmp_path / "run")], {"BPO_LOG_EVERY_S": "0"}, tmp_path)
    assert proc.returncode == 2
    assert "error: BPO_LOG_EVERY_S: must be a number of seconds from 0.1 to 86400, got '0'" in proc.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("columns,width", [("100", 100), ("abc", progress.LOG_WIDTH), ("0", progress.LOG_WIDTH),
                                           ("-5", progress.LOG_WIDTH), ("", progress.LOG_WIDTH)])
def test_a_log_is_columns_wide_and_a_columns_that_is_no_width_is_ignored(monkeypatch, columns, width):
    """``COLUMNS=abc`` stopped every run writing to a log with a traceback, after its folders were
    made; like the shell's tools, the console now ignores a value that is no width."""
    monkeypatch.setenv("COLUMNS", columns)
    assert progress.console().width == width


CARTPOLE = ["train", "cartpole_ppo", "--seeds", "1", "--total-timesteps", "512", "--eval-every", "256",
            "--eval-episodes", "2"]


@pytest.mark.parametrize("args", [SHORT, CARTPOLE], ids=["episodic", "on-policy"])
def test_a_second_run_with_its_progress_on_takes_its_program_from_the_compile_cache(tmp_path, args):
    """Another seed of the same configuration, the progress reported both times: the loop
    iteration's program is compiled and stored by the first run and read back by the second
    (JAX logs each persistent-cache hit with JAX_LOG_COMPILES, each miss with JAX_EXPLAIN_CACHE_MISSES)."""
    env = {"BPO_COMPILE_CACHE": str(tmp_path / "cache"), "JAX_LOG_COMPILES": "1", "JAX_EXPLAIN_CACHE_MISSES": "1"}
    first = bpo([*args, "--out", str(tmp_path / "a")], env, tmp_path)
    assert first.returncode == 0, first.stderr
    second = bpo([*args, "--seed", "7", "--out", str(tmp_path / "b")], env, tmp_path)
    assert second.returncode == 0, second.stderr
    assert "evaluations" in first.stdout and "evaluations" in second.stdout  # the progress was on
    miss = re.compile(r"PERSISTENT COMPILATION CACHE MISS for 'jit__iteration_all'")
    hit = re.compile(r"Persistent compilation cache hit for 'jit__iteration_all'")
    assert miss.search(first.stderr) and not hit.search(first.stderr), first.stderr[-3000:]
    assert hit.search(second.stderr) and not miss.search(second.stderr), second.stderr[-3000:]


WRITER = """
import os, sys
os.environ["BPO_COMPILE_CACHE"] = sys.argv[1]
from bpo.infra.runtime import enable_compile_cache
enable_compile_cache()
from jax._src import lru_cache
cache = lru_cache.LRUCache(sys.argv[1], max_size=-1)
value = b"x" * (256 << 20)
print("writing", flush=True)
cache.put("entry", value)
print("written", flush=True)
"""


def test_a_compile_cache_entry_is_whole_or_absent_when_its_writer_is_killed(tmp_path):
    """JAX writes a cache entry in place; a process killed mid-write left a truncated entry, and the
    next process to read it segfaulted deserialising it (this suite, after its SIGKILL tests).
    ``bpo.infra.runtime`` writes each entry under a temporary name and renames it into place."""
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "writing"
    time.sleep(0.05)  # inside the write of 256 MiB
    proc.kill()
    proc.wait()
    entry = tmp_path / "entry-cache"
    assert not entry.exists() or entry.stat().st_size == 256 << 20
    finished = subprocess.run([sys.executable, "-c", WRITER, str(tmp_path)], capture_output=True, text=True)
    assert finished.stdout.split() == ["writing", "written"], finished.stderr
    assert entry.stat().st_size == 256 << 20
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".entry-cache.") and p.name.endswith(".tmp")
                and p.stat().st_size == 256 << 20]  # a whole temporary file is always renamed


def test_threads_writing_one_compile_cache_entry_each_publish_it_whole(monkeypatch, tmp_path, request):
    """Two threads that compile the same program both write its entry. With one temporary name per
    process they wrote into one file and the second rename found it gone (FileNotFoundError),
    while the first had published a file still being written; each write now has a name of its own."""
    monkeypatch.setenv("BPO_COMPILE_CACHE", str(tmp_path / "cache"))
    # the suite's own cache folder (tests/conftest.py) back for the tests after this one
    request.addfinalizer(lambda before=jax.config.jax_compilation_cache_dir:
                         jax.config.update("jax_compilation_cache_dir", before))
    enable_compile_cache()
    value, errors = os.urandom(16 << 20), []

    def write(cache):
        try:
            cache.put("entry", value)
        except Exception as e:  # noqa: BLE001 (collected, asserted below)
            errors.append(repr(e))

    for trial in range(5):
        folder = tmp_path / f"trial{trial}"
        folder.mkdir()
        cache = lru_cache.LRUCache(str(folder), max_size=-1)
        threads = [threading.Thread(target=write, args=(cache,)) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert cache.get("entry") == value
        assert [p.name for p in folder.iterdir()] == ["entry-cache"]  # no temporary file left
    assert errors == []


def test_a_log_line_gives_the_time_left_at_the_pace_since_the_first_evaluation(monkeypatch):
    """Two seeds, three evaluations (6 calls): the first evaluation (t = 10 s) starts the clock; after
    the second (t = 30 s) one evaluation of 2 calls took 20 s, so the last one is 20 s away."""
    now = [0.0]
    monkeypatch.setattr(progress.time, "perf_counter", lambda: now[0])
    bar = progress.EvalProgress("run", total_calls=6, enabled=False, seeds=2)
    lines = progress.LogLines(bar, Console(file=StringIO()))
    assert bar.seconds_left() is None
    now[0] = 10.0
    bar.update(0, 1.0), bar.update(0, 2.0)
    assert bar.seconds_left() is None and "eta" not in lines.line()  # no pace yet
    now[0] = 30.0
    bar.update(1, 3.0), bar.update(1, 4.0)
    assert bar.seconds_left() == pytest.approx(20.0)
    assert lines.line() == "run 2/3 evaluations, elapsed 0:00:30, eval return 3.50 (mean of 2 seeds), eta 0:00:20"
    bar.update(2, 5.0), bar.update(2, 6.0)
    assert bar.seconds_left() is None


def test_the_throughput_counts_from_the_segment_s_first_evaluation(monkeypatch):
    """Two seeds, four evaluations (8 calls) over 1,000 steps, continued after two: the first
    evaluation after the resume only starts the clock (its calls come together: counted as work
    done, they gave tens of millions of steps/s); the next, 10 s later, ends one of the run's three
    stretches of training (the first evaluation comes before any), so 333 steps in 10 s. The return
    shown is the mean of the last evaluation's seeds; the bar counts evaluations, not calls."""
    now = [0.0]
    monkeypatch.setattr(progress.time, "perf_counter", lambda: now[0])
    bar = progress.EvalProgress("run", total_calls=8, enabled=False, total_env_steps=1000.0, seeds=2)
    lines = progress.LogLines(bar, Console(file=StringIO()))
    bar.resume(4)
    assert lines.line() == ("run 2/4 evaluations, elapsed 0:00:00, continued from its checkpoint: compiling, "
                            "then the next evaluation")
    now[0] = 5.0
    bar.update(2, 1.0)
    now[0] = 5.001
    bar.update(2, 3.0)
    assert bar.rate == 0.0 and bar.latest == 2.0
    now[0] = 15.0
    bar.update(3, 5.0), bar.update(3, 7.0)
    assert bar.rate == pytest.approx(1000 / 3 / 10) and bar.latest == 6.0
    (task,) = bar._progress.tasks
    assert (task.completed, task.total) == (4, 4)


def test_a_fresh_run_s_throughput_is_its_steps_over_the_time_after_its_first_evaluation(monkeypatch):
    """One seed, three evaluations over 1,000 steps at 50 steps/s: the first at t = 0 before any
    training, the others at 10 s and 20 s; the rate shown is 50 at each (it was 33.3 when the
    evaluation before training was counted as a share of the training)."""
    now = [0.0]
    monkeypatch.setattr(progress.time, "perf_counter", lambda: now[0])
    bar = progress.EvalProgress("run", total_calls=3, enabled=False, total_env_steps=1000.0)
    for t in (0.0, 10.0, 20.0):
        now[0] = t
        bar.update(0, 1.0)
    assert bar.rate == pytest.approx(50.0)


def test_a_log_line_shows_a_nan_return_once_an_evaluation_is_done(monkeypatch):
    """A run whose return became NaN says so in its log lines (they once left the return out, as if
    no evaluation had finished); before the segment's first evaluation of every seed, none is shown."""
    monkeypatch.setattr(progress.time, "perf_counter", lambda: 0.0)
    bar = progress.EvalProgress("run", total_calls=8, enabled=False, seeds=2)
    lines = progress.LogLines(bar, Console(file=StringIO()))
    bar.update(0, 1.0)
    assert "eval return" not in lines.line()  # one seed of two: the evaluation is under way
    bar.update(0, 3.0)
    assert "eval return 2.00 (mean of 2 seeds)" in lines.line()
    bar.update(1, 1.0), bar.update(1, float("nan"))
    assert "eval return nan (mean of 2 seeds)" in lines.line()
