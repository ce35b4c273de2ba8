"""Try to reproduce the XLA:CPU stall: two JAX processes at once, spread over the same cores or kept
to one core each (docs/runtime.md, "A stalled XLA call").

    python benchmarks/xla_stall.py --trials 3 --nice 19      # the two arms, 3 pairs each
    python benchmarks/xla_stall.py --trials 3 --arm spread

Each trial starts two ``bpo train`` processes at the same moment: a one-update HalfCheetah-v5 BPO
run of 10 seeds each (Table 1's rows ``bpo_c1.5_rho1.5`` and ``bpo_c1.0_rho1.0``, the Gymnasium
backend), with the stall guard off, at ``--nice``. In the arm ``spread`` both may use every core of
this process; in ``pinned`` each keeps to one core (``os.sched_setaffinity``, round robin), as
sweep workers do. The processes are watched every ``--window`` seconds: one that used under 1 % of
a core over a window has stalled and is killed. Prints, per trial, the stalled, finished and still
busy processes, and whether the finished runs' files are byte-identical across the arms (the
pinning must not change a result). A stall is rare and timing-dependent: 0 stalls in a few trials
is not evidence that the hazard is gone.

Seen on the 2-core development machine (AMD EPYC), 2026-11-26, beside two Table 1 campaign workers
at nice 10 (one on each core), with a warm compile cache:

    python benchmarks/xla_stall.py --trials 2 --nice 19
    spread: 2 of 4 processes stalled
    pinned: 0 of 4 processes stalled
    bpo_c1.5_rho1.5: 3 finished runs, files identical: True
    bpo_c1.0_rho1.0: 3 finished runs, files identical: True

One process stalled in each spread trial. Four processes an arm make a weak test (Fisher's exact
test of 2/4 against 0/4: p = 0.43); the sweep workers' stalls in docs/runtime.md are the rest of
the evidence.
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


def start(row: str, out: Path, core: int | None, nice: int) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "experiments.cli", "train", "mujoco_default", "--env", "HalfCheetah-v5", "--variant",
           row, "--seeds", "10", "--total-timesteps", "2048", "--eval-episodes", "1", "--out", str(out),
           "--no-progress"]
    def pre() -> None:  # in the child, before its first instruction: XLA sizes its thread pools later
        os.nice(nice)
        if core is not None:
            os.sched_setaffinity(0, {core})

    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / f"{out.name}.log", "w") as log:
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, preexec_fn=pre,
                                env={**os.environ, "BPO_STALL_MINUTES": "0"})


def trial(arm: str, root: Path, limit: float, window: float, nice: int) -> tuple[int, int, list[Path]]:
    """One pair of processes, watched every ``window`` seconds until each has exited or stalled (under
    1 % of a core over a window; killed then) or ``limit`` seconds have passed. Returns how many
    stalled, how many were still busy at the limit, and the folders of the finished runs."""
    cores = sorted(os.sched_getaffinity(0))
    procs = [start(row, root / row, cores[i % len(cores)] if arm == "pinned" else None, nice)
             for i, row in enumerate(ROWS)]
    stalled, begin = 0, time.monotonic()
    used = {p.pid: 0.0 for p in procs}
    while any(p.poll() is None for p in procs) and time.monotonic() - begin < limit:
        time.sleep(window)
        for p in procs:
            if p.poll() is None:
                now = cpu_seconds(p.pid)
                if now - used[p.pid] < 0.01 * window:
                    stalled += 1
                    p.kill()
                used[p.pid] = now
    busy = sum(1 for p in procs if p.poll() is None)
    for row, p in zip(ROWS, procs, strict=True):
        if p.poll() not in (None, 0, -9):
            raise SystemExit(f"{row} failed (exit {p.returncode}):\n" + (root / f"{row}.log").read_text()[-2000:])
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()
    return stalled, busy, [root / row for row, p in zip(ROWS, procs, strict=True) if p.returncode == 0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--arm", choices=("spread", "pinned", "both"), default="both")
    parser.add_argument("--limit", type=float, default=900.0, help="seconds a pair may take (compile included)")
    parser.add_argument("--window", type=float, default=30.0, help="seconds of idleness that count as a stall")
    parser.add_argument("--nice", type=int, default=0, help="niceness of the processes (a campaign runs at 10-19)")
    args = parser.parse_args()
    arms = ("spread", "pinned") if args.arm == "both" else (args.arm,)
    finished: dict[str, list[Path]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for arm in arms:
            stalled = 0
            for i in range(args.trials):
                n, busy, done = trial(arm, Path(tmp) / f"{arm}{i}", args.limit, args.window, args.nice)
                stalled += n
                finished.setdefault(arm, []).extend(done)
                print(f"{arm} trial {i + 1} (nice {args.nice}): {n} of 2 stalled, {len(done)} finished, {busy} still "
                      f"busy at {args.limit:g} s", flush=True)
            print(f"{arm}: {stalled} of {2 * args.trials} processes stalled")
        by_row = {row: [d for ds in finished.values() for d in ds if d.name == row] for row in ROWS}
        for row, dirs in by_row.items():
            same = len(dirs) > 1 and all(filecmp.cmp(dirs[0] / f, d / f, shallow=False)
                                         for d in dirs[1:] for f in FILES)
            print(f"{row}: {len(dirs)} finished runs, files identical: {same}")


if __name__ == "__main__":
    main()
