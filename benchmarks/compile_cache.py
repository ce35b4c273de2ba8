"""First and second compile of a run, the persistent compile cache on and the progress on.

    python benchmarks/compile_cache.py [--cases cartpole_bpo halfcheetah_bpo ...]

Each case runs ``bpo train`` twice in processes of their own, with an empty compile cache
(``BPO_COMPILE_CACHE``, a temporary folder) before the first and a different seed in the second,
its output a pipe (progress lines, as in a log). It prints each run's compile time
(``summary.json``'s ``compile_time_s``: tracing, lowering and compiling the run's programs, or
reading them from the cache) and their ratio. A ratio near 1 means the second run compiled
again; the threads backend, whose physics is a host callback, cannot be cached. The last column
is how long XLA takes to load the largest compiled program (the one holding the update) from its
cache entry (``deserialize_executable``, timed in a fresh process): a part of the second run's
time that no change to the tracing can cut.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TINY_BPO = ["--bpo.n-qvf-epochs", "1", "--bpo.n-mu-epochs", "1"]
CASES = {
    "cartpole_ppo": ["cartpole_ppo", "--no-bpo", "--seeds", "1", "--total-timesteps", "2048"],
    "cartpole_bpo": ["cartpole_ppo", "--seeds", "1", "--total-timesteps", "2048"],
    "short_corridor_bpo": ["short_corridor", "--seeds", "10", "--episodes", "60"],
    "halfcheetah_bpo_gymnasium": ["mujoco_default", "--env", "HalfCheetah-v5", "--variant", "bpo_c1.0_rho1.5",
                                  "--seeds", "1", "--total-timesteps", "4096", "--eval-every", "2048",
                                  "--eval-episodes", "1", *TINY_BPO],
    "halfcheetah_bpo_threads": ["mujoco_default", "--env", "HalfCheetah-v5", "--backend", "threads", "--variant",
                                "bpo_c1.0_rho1.5", "--seeds", "1", "--total-timesteps", "4096", "--eval-every",
                                "2048", "--eval-episodes", "1", *TINY_BPO],
}


def compile_time(args: list[str], cache: Path, out: Path, seed: int) -> tuple[float, float]:
    """(compile_time_s from the run's summary, the command's wall time)."""
    env = {**os.environ, "BPO_COMPILE_CACHE": str(cache)}
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "experiments.cli", "train", *args, "--seed", str(seed), "--out",
                           str(out)], capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"bpo train {' '.join(args)} failed:\n{proc.stderr[-2000:]}")
    return json.loads((out / "summary.json").read_text())["compile_time_s"], wall


LOAD_ENTRY = """
import sys, time
import jax
from jax._src import compilation_cache as cc
raw = cc.decompress_executable(open(sys.argv[1], "rb").read())
executable, _ = cc.extract_executable_and_time(raw)
start = time.perf_counter()
jax.devices()[0].client.deserialize_executable(executable, jax.devices())
print(time.perf_counter() - start)
"""


def largest_load_time(cache: Path) -> float | None:
    """Seconds to load the largest cache entry (the update) into an executable; None if none was kept."""
    entries = list(cache.glob("*-cache"))
    if not entries:
        return None
    largest = max(entries, key=lambda p: p.stat().st_size)
    proc = subprocess.run([sys.executable, "-c", LOAD_ENTRY, str(largest)], capture_output=True, text=True, check=True)
    return float(proc.stdout.split()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    args = parser.parse_args()
    print(f"{platform.node()}, {os.cpu_count()} CPUs; compile s (wall s) of the first and the second run")
    print("| case | first | second | second / first | loading the largest program |")
    print("| --- | --- | --- | --- | --- |")
    for name in args.cases:
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            first, wall1 = compile_time(CASES[name], tmp / "cache", tmp / "a", 0)
            second, wall2 = compile_time(CASES[name], tmp / "cache", tmp / "b", 1)
            load = largest_load_time(tmp / "cache")
        load_text = "not cached" if load is None else f"{load:.2f}"
        print(f"| {name} | {first:.1f} ({wall1:.1f}) | {second:.1f} ({wall2:.1f}) | {second / first:.2f} "
              f"| {load_text} |", flush=True)


if __name__ == "__main__":
    main()
