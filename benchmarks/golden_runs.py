"""Fingerprints of a fixed set of short runs, to show that a refactor changes no result.

    python benchmarks/golden_runs.py record golden.json     # before the change
    python benchmarks/golden_runs.py check golden.json      # after it: every run bit-identical?

Each run goes through the ``bpo train`` command (the interface a refactor keeps) into a temporary
folder; its fingerprint is the SHA-256 of ``curve.csv`` and of ``train_metrics.csv`` (every
evaluation return, diagnostic and training metric, printed with full float precision) and the
final returns. Timings and provenance are not part of it.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TINY_BPO = ["--bpo.n-qvf-epochs", "1", "--bpo.n-mu-epochs", "1"]
RUNS = {
    "short_corridor_reinforce": ["short_corridor", "--no-bpo", "--seeds", "3", "--episodes", "60"],
    "short_corridor_bpo": ["short_corridor", "--bpo", "--seeds", "3", "--episodes", "60"],
    "cartpole_ppo": ["cartpole_ppo", "--no-bpo", "--seeds", "2", "--total-timesteps", "4096"],
    "cartpole_bpo": ["cartpole_ppo", "--bpo", "--seeds", "2", "--total-timesteps", "4096"],
    "cartpole_a2c": ["cartpole_a2c", "--no-bpo", "--seeds", "2", "--total-timesteps", "4096"],
    "cartpole_bpo_a2c": ["cartpole_a2c", "--bpo", "--seeds", "2", "--total-timesteps", "4096"],
    "pendulum_bpo_gsde": [  # the preset explores with gSDE
        "pendulum_ppo", "--bpo", "--seeds", "2", "--total-timesteps", "8192"],
    "halfcheetah_host_bpo": ["mujoco_default", "--env", "HalfCheetah-v5", "--variant", "bpo_c1.0_rho1.5",
                             "--seeds", "2", "--total-timesteps", "512", "--ppo.n-steps", "256", "--eval-every",
                             "256", "--eval-episodes", "1", *TINY_BPO],
    "halfcheetah_mjx_bpo": ["mujoco_default", "--env", "HalfCheetah-v5", "--backend", "mjx", "--variant",
                            "bpo_c1.0_rho1.5", "--seeds", "2", "--total-timesteps", "256", "--ppo.n-steps", "128",
                            "--eval-every", "128", "--eval-episodes", "2", *TINY_BPO],
}


def fingerprint(name: str, args: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / name
        start = time.perf_counter()
        subprocess.run(["bpo", "train", *args, "--no-progress", "--out", str(out)], check=True,
                       stdout=subprocess.DEVNULL)
        summary = json.loads((out / "summary.json").read_text())
        return {
            "curve_sha256": hashlib.sha256((out / "curve.csv").read_bytes()).hexdigest(),
            "train_metrics_sha256": hashlib.sha256((out / "train_metrics.csv").read_bytes()).hexdigest(),
            "final_eval_returns": summary["final_eval_returns"],
            "seconds": round(time.perf_counter() - start, 1),
        }


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] not in ("record", "check"):
        print(__doc__)
        return 2
    mode, path, names = argv[0], Path(argv[1]), argv[2:] or list(RUNS)
    if mode == "record":
        prints = json.loads(path.read_text()) if path.exists() else {}  # adds to, or replaces in, a record
        for name in names:
            prints[name] = fingerprint(name, RUNS[name])
            print(name, prints[name], flush=True)
            path.write_text(json.dumps(prints, indent=1))
        return 0
    stored, failures = json.loads(path.read_text()), 0
    for name in names:
        now = fingerprint(name, RUNS[name])
        same = all(now[k] == stored[name][k] for k in ("curve_sha256", "train_metrics_sha256"))
        failures += not same
        print(f"{name}: {'identical' if same else 'DIFFERENT'}"
              + ("" if same else f" (final returns {stored[name]['final_eval_returns']}"
                                 f" -> {now['final_eval_returns']})"),
              flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
