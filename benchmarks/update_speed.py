"""The BPO update's speed, this checkout beside an older commit, measured in one run.

    python benchmarks/update_speed.py [--baseline 8fd9e2f] [--seeds 1 10] [--repeats 5] [--core 0]
                                      [--run-steps 16384]

For each code version (the baseline commit, checked out as a git worktree in a temporary folder,
and this checkout) a child process, pinned to one core, imports that version's ``bpo`` and measures,
with the same measuring code (``benchmarks/flop_efficiency.py``'s, from this checkout):

* the HalfCheetah-v5 ``mujoco_default`` BPO (c̄ = 1.0, ρ̄ = 1.5) learner update of one 2,048-step
  rollout with D full (the host runner's per-rollout call, random rollout data): the median time
  of a call for S seeds vmapped, divided by S;
* the kernels XLA runs in one such call (1 seed), from XLA's profiler;
* a short ``bpo train`` run of the same configuration (1 seed, ``--run-steps`` steps, an evaluation
  every 8,192 steps): seed-steps per second of its wall time less its compile time.

The two versions alternate (baseline, new, for each measurement), so a change of load on the
machine falls on both; each printed ratio is new / baseline from this one run. State the machine
and whether it was idle with the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PRESET, ENV, VARIANT = "mujoco_default", "HalfCheetah-v5", "bpo_c1.0_rho1.5"


def child(code: Path, seeds: list[int], repeats: int, kernels: bool) -> None:
    """In a child process: ``code``'s bpo, this checkout's measuring helpers; one JSON line out."""
    sys.path.insert(0, str(code))
    sys.path.insert(1, str(HERE))
    import flop_efficiency as F  # noqa: PLC0415 - after the path names the version under test
    import jax  # noqa: PLC0415
    import jax.numpy as jnp  # noqa: PLC0415

    import bpo  # noqa: PLC0415

    assert Path(bpo.__file__).resolve().is_relative_to(code.resolve()), bpo.__file__
    fn, (state, key, rows) = F.host_update(PRESET, ENV, VARIANT)
    out = {"code": str(code)}
    for n in seeds:
        states = jax.tree.map(lambda x, n=n: jnp.stack([x] * n), state)
        call = jax.jit(jax.vmap(fn, in_axes=(0, 0, None)))
        args = (states, jax.random.split(key, n), rows)
        jax.block_until_ready(call(*args))
        out[f"ms_per_seed_{n}"] = 1e3 * F.timed(lambda call=call, args=args: call(*args), repeats) / n
    if kernels:
        call = jax.jit(fn)
        jax.block_until_ready(call(state, key, rows))
        out["kernels"] = F.kernel_counts(lambda: call(state, key, rows))["kernels"]
    print(json.dumps(out), flush=True)


def run_rate(code: Path, steps: int, core: int) -> float:
    """Seed-steps per second of a short ``bpo train`` of ``code``: steps / (wall - compile)."""
    with tempfile.TemporaryDirectory() as tmp:
        argv = ["bpo", "train", PRESET, "--env", ENV, "--variant", VARIANT, "--seeds", "1", "--total-timesteps",
                str(steps), "--eval-every", "8192", "--no-progress", "--out", f"{tmp}/run"]
        script = f"import sys; sys.argv = {argv!r}; from experiments.program import main; sys.exit(main())"
        env = {**os.environ, "PYTHONPATH": str(code), "BPO_COMPILE_CACHE": ""}
        done = subprocess.run(["taskset", "-c", str(core), sys.executable, "-c", script], cwd=code, env=env,
                              capture_output=True, text=True, check=True)
    m = re.search(r"wall ([\d.]+)s \(compile ([\d.]+)s\)", done.stdout + done.stderr)
    if m is None:
        raise SystemExit(f"no wall time in the output of {code}'s run:\n{done.stdout}\n{done.stderr}")
    return steps / (float(m.group(1)) - float(m.group(2)))


def measure(code: Path, args) -> dict:
    cmd = ["taskset", "-c", str(args.core), sys.executable, str(Path(__file__).resolve()), "child", "--code",
           str(code), "--seeds", *map(str, args.seeds), "--repeats", str(args.repeats), "--core", str(args.core)]
    done = subprocess.run(cmd + ["--kernels"], capture_output=True, text=True, check=True,
                          env={**os.environ, "BPO_COMPILE_CACHE": ""})
    return json.loads(done.stdout.strip().splitlines()[-1])


def worktree(commit: str, parent: Path) -> Path:
    path = parent / f"bpo-{commit}"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(path), commit], check=True)
    return path


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("mode", nargs="?", default="compare", choices=("compare", "child"))
    p.add_argument("--baseline", default="8fd9e2f")
    p.add_argument("--code", default=None, help="child: the checkout whose bpo to measure")
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 10])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--core", type=int, default=0)
    p.add_argument("--run-steps", type=int, default=16384)
    p.add_argument("--kernels", action="store_true")
    args = p.parse_args(argv)
    if args.mode == "child":
        child(Path(args.code), args.seeds, args.repeats, args.kernels)
        return
    new_commit = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty"], capture_output=True,
                                text=True).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        base = worktree(args.baseline, Path(tmp))
        try:
            results = {"baseline": measure(base, args), "new": measure(ROOT, args)}
            for name, code in (("baseline", base), ("new", ROOT)):
                results[name]["run_steps_per_s"] = run_rate(code, args.run_steps, args.core)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base)], check=False)
    rows = [(f"update, ms per seed ({n} seed{'s' if n > 1 else ''} vmapped)", f"ms_per_seed_{n}")
            for n in args.seeds] + [("kernels per update (1 seed)", "kernels"),
                                    (f"bpo train, seed-steps/s ({args.run_steps:,} steps, 1 seed)", "run_steps_per_s")]
    print(f"| HalfCheetah BPO (1.0, 1.5), one core | {args.baseline} | {new_commit} | new / baseline |")
    print("| --- | --- | --- | --- |")
    for label, key in rows:
        b, n = results["baseline"][key], results["new"][key]
        print(f"| {label} | {b:,.1f} | {n:,.1f} | {n / b:.2f} |")


if __name__ == "__main__":
    main()
