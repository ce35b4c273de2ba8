"""Reproduce the XLA:CPU stall: two JAX processes at once, spread over the same cores or kept to one
core each (docs/runtime.md, "A stalled XLA call").

    python benchmarks/xla_stall.py --trials 3            # the two arms, 3 pairs each
    python benchmarks/xla_stall.py --trials 3 --arm spread

Each trial starts two ``bpo train`` processes at the same moment: a one-update HalfCheetah-v5 BPO
run of 10 seeds each (Table 1's rows ``bpo_c1.5_rho1.5`` and ``bpo_c1.0_rho1.0``, the Gymnasium
backend), with the stall guard off. In the arm ``spread`` both may use every core of this process;
in ``pinned`` each keeps to one core (``os.sched_setaffinity``, round robin), as sweep workers do.
A process counts as stalled when it is alive after ``--timeout`` seconds having used under 1 % of a
core over its last ``--window`` seconds. Prints the stalled processes of each arm; a finished run's
files are compared byte for byte between the arms (the pinning must not change a result).

Seen on the 2-core development machine (AMD EPYC, another process busy on one core), 2026-11-26:
spread, 5 of 6 processes stalled in 3 trials (all in their first compiled calls); pinned, 0 of 12
in 6 trials (3 with both on one core, 3 with a core each). Run the arms on an otherwise idle
machine and with the compile cache warm (a first trial compiles), and say so with the numbers.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROWS = ("bpo_c1.5_rho1.5", "bpo_c1.0_rho1.0")
FILES = ("curve.csv", "train_metrics.csv", "policies.msgpack")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of the process (all threads), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start(row: str, out: Path, core: int | None) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "experiments.cli", "train", "mujoco_default", "--env", "HalfCheetah-v5", "--variant",
           row, "--seeds", "10", "--total-timesteps", "2048", "--eval-episodes", "1", "--out", str(out),
           "--no-progress"]
    # the child keeps to the core from its first instruction on, before XLA sizes its thread pools
    pre = (lambda: os.sched_setaffinity(0, {core})) if core is not None else None
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, preexec_fn=pre,
                            env={**os.environ, "BPO_STALL_MINUTES": "0"})


def trial(arm: str, root: Path, timeout: float, window: float) -> tuple[int, list[Path]]:
    """One pair of processes; returns how many stalled and the folders of the finished runs."""
    cores = sorted(os.sched_getaffinity(0))
    procs = [start(row, root / row, cores[i % len(cores)] if arm == "pinned" else None) for i, row in enumerate(ROWS)]
    time.sleep(timeout - window)
    before = {p.pid: cpu_seconds(p.pid) for p in procs if p.poll() is None}
    time.sleep(window)
    stalled = sum(1 for p in procs if p.poll() is None and cpu_seconds(p.pid) - before.get(p.pid, 0.0) < 0.01 * window)
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()
    return stalled, [root / row for row, p in zip(ROWS, procs, strict=True) if p.returncode == 0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--arm", choices=("spread", "pinned", "both"), default="both")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds a pair may take (compile included)")
    parser.add_argument("--window", type=float, default=30.0, help="seconds of idleness that count as a stall")
    args = parser.parse_args()
    arms = ("spread", "pinned") if args.arm == "both" else (args.arm,)
    finished: dict[str, list[Path]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for arm in arms:
            stalled = 0
            for i in range(args.trials):
                n, done = trial(arm, Path(tmp) / f"{arm}{i}", args.timeout, args.window)
                stalled += n
                finished.setdefault(arm, []).extend(done)
                print(f"{arm} trial {i + 1}: {n} of 2 stalled", flush=True)
            print(f"{arm}: {stalled} of {2 * args.trials} processes stalled")
        by_row = {row: [d for ds in finished.values() for d in ds if d.name == row] for row in ROWS}
        for row, dirs in by_row.items():
            same = all(filecmp.cmp(dirs[0] / f, d / f, shallow=False) for d in dirs[1:] for f in FILES)
            print(f"{row}: {len(dirs)} finished runs, files identical: {same}")


if __name__ == "__main__":
    main()
