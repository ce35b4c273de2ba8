"""A run's progress where people read it (issue 46, items 2 and 3): in a log, lines at every
evaluation and at least every ``BPO_LOG_EVERY_S`` seconds; and the progress reported from the
host, so that a run with it on reuses its compiled program from the persistent cache."""

import os
import re
import subprocess
import sys

import pytest

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
    counts = [int(re.search(r" (\d+)/14 evaluations", line).group(1)) for line in lines]
    # 7 evaluations of 2 seeds: a line when each is done, the last one full
    assert {2, 4, 6, 8, 10, 12, 14} <= set(counts) and counts[-1] == 14 and counts == sorted(counts)
    # while it compiled (seconds, no evaluation yet) the run was not silent
    assert counts[0] == 0 and "elapsed" in lines[0]
    assert "eval return" in lines[-1] and "\x1b[" not in proc.stdout  # plain lines, no terminal codes


def test_a_bad_log_interval_is_refused_before_any_work(tmp_path):
    proc = bpo([*SHORT, "--out", str(tmp_path / "run")], {"BPO_LOG_EVERY_S": "0"}, tmp_path)
    assert proc.returncode == 2
    assert "error: BPO_LOG_EVERY_S: must be a number of seconds from 0.1 to 86400, got '0'" in proc.stderr
    assert not (tmp_path / "run").exists()


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
