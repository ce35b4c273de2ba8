"""Run the BPO authors' public code, as it is, and keep each seed's evaluations as data.

The reference implementation the paper links (github.com/sacktock/BPO, commit e20ea9b) is run
unmodified from a checkout: this script imports its ``run.py`` and calls its ``main`` with the
configuration blocks of its README, after wrapping its evaluation function
(``common.base_class.BaseAlgorithm.eval``) so that every evaluation's ten returns are recorded.
Nothing else of theirs is touched: the final return is what their evaluation function returned
at the last evaluation, not a number read from their console line.

Settings (the issue on the authors' code; ``docs/authors_code.md``):

- BPO: ``--configs mujoco_ppo ppo_bpo_zero1.0_1.5`` (their MuJoCo default BPO run, rho 1.5, c 1.0);
- PPO: ``--configs mujoco_ppo``;
- ``--env.env_id half_cheetah --run.seed SEED``: 1.5M steps (733 rollouts of 2,048), ten
  deterministic episodes every 8,192 steps, the last at step 1,499,136.

Their code has no checkpoint: a seed runs to its end in one process, and a seed whose process
ends early leaves only ``seedN.partial.json`` (its evaluations so far, marked unfinished), which
the next ``run`` replaces. A finished seed is written once, atomically, as ``seedN.json`` with its
provenance (their commit, the package versions, the CPU, the wall time) and is skipped
afterwards, so the same command continues a campaign.

This script imports nothing of ``bpo``: it runs in the authors' own environment. Recipe (Python
3.11, this machine's package index)::

    git clone https://github.com/sacktock/BPO ../authors-BPO   # commit e20ea9b
    python3.11 -m venv ../authors-venv
    ../authors-venv/bin/pip install jax==0.4.30 jaxlib==0.4.30 tensorflow-cpu==2.17.0 \\
        tensorflow-probability==0.22.1 numpy==1.26.4 "gymnasium[mujoco]>=1.1.1" \\
        "tensorboard>=2.17.1" "tqdm>=4.66.5" "optax>=0.1.9" "flax>=0.9.0" "ml-dtypes>=0.4.1" \\
        "ruamel.yaml<0.18.0" tensorstore==0.1.65
    ../authors-venv/bin/pip install --no-deps tf-keras==2.17.0

Usage (one core each, in the background, at nice 10)::

    nice -n 10 ../authors-venv/bin/python benchmarks/authors_reference.py run \\
        --checkout ../authors-BPO --algo bpo --seeds 0 2 4 6 8 \\
        --out results/authors_reference/their_code/bpo

    python benchmarks/authors_reference.py summary --out results/authors_reference/their_code/bpo
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
from importlib import metadata
from pathlib import Path

CONFIGS = {"bpo": ["mujoco_ppo", "ppo_bpo_zero1.0_1.5"], "ppo": ["mujoco_ppo"]}
ENV_IDS = {"HalfCheetah-v5": "half_cheetah", "Hopper-v5": "hopper", "Walker2d-v5": "walker_2d", "Ant-v5": "ant"}
PACKAGES = ("jax", "jaxlib", "flax", "optax", "numpy", "gymnasium", "mujoco", "tensorflow-cpu",
            "tensorflow-probability", "ml-dtypes", "ruamel.yaml")
FORMAT = "bpo-authors-reference-seed/1"


def _write_json(path: Path, obj: dict) -> None:
    """Write ``obj`` to ``path`` atomically (a temporary file beside it, then a rename)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as f:
        json.dump(obj, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _versions(names=PACKAGES) -> dict:
    out = {"python": platform.python_version()}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


def _commit(checkout: Path) -> str:
    head = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
    dirty = subprocess.run(["git", "-C", str(checkout), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True, check=True)
    if dirty.stdout.strip():
        raise SystemExit(f"checkout {checkout} has local changes; their code must run as published")
    return head.stdout.strip()


def their_argv(algo: str, env: str, seed: int, logdir: str, total_timesteps: int | None) -> list[str]:
    """The command line of their ``run.py`` for one seed (their README's form)."""
    argv = ["--configs", *CONFIGS[algo], "--env.env_id", ENV_IDS[env], "--run.seed", str(seed), "--run.logdir", logdir]
    if total_timesteps is not None:
        argv += ["--run.total_timesteps", str(total_timesteps)]
    return argv


def run_seed(checkout: Path, algo: str, env: str, seed: int, out: Path, total_timesteps: int | None) -> dict:
    """Train one seed of their code in this process and return its record (also written to ``out``)."""
    commit = _commit(checkout)
    sys.path.insert(0, str(checkout))
    os.chdir(checkout)  # their run.py reads configs.yaml beside itself; their envs import by module path
    import common.base_class as base  # noqa: PLC0415 - their package, importable only once the checkout is on the path
    import run as their_run  # noqa: PLC0415

    partial = out / f"seed{seed}.partial.json"
    logdir = tempfile.mkdtemp(prefix=f"authors-{algo}-seed{seed}-")
    argv = their_argv(algo, env, seed, logdir, total_timesteps)
    record = {"format": FORMAT, "algo": algo, "env": env, "seed": seed, "finished": False,
              "their_commit": commit, "their_argv": argv, "versions": _versions(), "cpu": _cpu_model(),
              "host": platform.node(), "evaluations": []}
    original_eval = base.BaseAlgorithm.eval
    start = time.time()

    def recorded_eval(self, num_episodes, seed=None, logger=None):
        returns = original_eval(self, num_episodes, seed=seed, logger=logger)
        # their train() passes the step count as the evaluation's seed argument
        record["evaluations"].append({"step": int(seed), "returns": [float(r) for r in returns],
                                      "wall_s": round(time.time() - start, 1)})
        _write_json(partial, record)
        return returns

    base.BaseAlgorithm.eval = recorded_eval
    their_run.main(argv)
    if not record["evaluations"]:
        raise SystemExit("their run made no evaluation; nothing to record")
    last = record["evaluations"][-1]
    record.update(finished=True, wall_s=round(time.time() - start, 1), final_step=last["step"],
                  final_return=sum(last["returns"]) / len(last["returns"]))
    _write_json(out / f"seed{seed}.json", record)
    partial.unlink(missing_ok=True)
    return record


def finished_seeds(out: Path) -> dict[int, dict]:
    """The finished seed records under ``out``; a file that is not one is refused by name."""
    done = {}
    for path in sorted(out.glob("seed*.json")):
        if path.name.endswith(".partial.json"):
            continue
        try:
            rec = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            raise SystemExit(f"{path}: not a readable seed record ({e}); move it away and run the seed again") from e
        if rec.get("format") != FORMAT or not rec.get("finished"):
            raise SystemExit(f"{path}: not a finished seed record of this script (format {FORMAT})")
        done[int(rec["seed"])] = rec
    return done


def cmd_run(args) -> None:
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    checkout = Path(args.checkout).resolve()
    for seed in args.seeds:
        if seed in finished_seeds(out):
            print(f"seed {seed}: finished already, kept", flush=True)
            continue
        # one process per seed: their modules keep global state, and a crash costs one seed only
        cmd = [sys.executable, str(Path(__file__).resolve()), "one", "--checkout", str(checkout), "--algo", args.algo,
               "--env", args.env, "--seed", str(seed), "--out", str(out)]
        if args.total_timesteps is not None:
            cmd += ["--total-timesteps", str(args.total_timesteps)]
        with open(out / f"seed{seed}.log", "w") as log:
            rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT).returncode
        if rc != 0:
            raise SystemExit(f"seed {seed}: their run exited {rc}; see {out / f'seed{seed}.log'}")
        rec = finished_seeds(out)[seed]
        print(f"seed {seed}: final return {rec['final_return']:.1f} at step {rec['final_step']} "
              f"({rec['wall_s'] / 3600:.2f} h)", flush=True)


def cmd_one(args) -> None:
    # one thread each: two seeds share the two cores of the machine that made the committed runs
    os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")
    os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "1")
    os.environ.setdefault("TF_NUM_INTEROP_THREADS", "1")
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    rec = run_seed(Path(args.checkout).resolve(), args.algo, args.env, args.seed, Path(args.out).resolve(),
                   args.total_timesteps)
    print(json.dumps({k: rec[k] for k in ("seed", "final_step", "final_return", "wall_s")}), flush=True)


def cmd_summary(args) -> None:
    done = finished_seeds(Path(args.out))
    if not done:
        raise SystemExit(f"{args.out}: no finished seed")
    finals = [done[s]["final_return"] for s in sorted(done)]
    n = len(finals)
    mean = sum(finals) / n
    sd = (sum((x - mean) ** 2 for x in finals) / (n - 1)) ** 0.5 if n > 1 else float("nan")
    print(f"{args.out}: n = {n}, final return mean {mean:.1f}, SD {sd:.1f} (seeds {sorted(done)})")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("run", "one"):
        s = sub.add_parser(name)
        s.add_argument("--checkout", required=True, help="a clean checkout of the authors' repository")
        s.add_argument("--algo", choices=sorted(CONFIGS), required=True)
        s.add_argument("--env", choices=sorted(ENV_IDS), default="HalfCheetah-v5")
        s.add_argument("--out", required=True)
        s.add_argument("--total-timesteps", type=int, default=None, help="their config's (1.5M) unless given")
        if name == "run":
            s.add_argument("--seeds", type=int, nargs="+", required=True)
        else:
            s.add_argument("--seed", type=int, required=True)
    s = sub.add_parser("summary")
    s.add_argument("--out", required=True)
    args = p.parse_args(argv)
    {"run": cmd_run, "one": cmd_one, "summary": cmd_summary}[args.cmd](args)


if __name__ == "__main__":
    main()
