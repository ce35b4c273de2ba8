"""The results store of a sweep: ``RESULTS/<run-id>/`` run directories, ``sweep.json`` (the
expanded runs) and ``index.json`` (one entry per run, what the analysis commands read).

A run is first written whole to ``.staging/`` and then renamed to its final name, so a run
directory either is complete or does not exist: a sweep killed at any moment leaves no
half-written run behind, and the next sweep deletes the staging leftovers and redoes those runs.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
from pathlib import Path

from bpo import results
from bpo.config import to_dict
from experiments.sweep import RunSpec

STAGING = ".staging"
CHECKPOINTS = ".checkpoints"  # runs in progress; kept across invocations, unlike .staging


def write_sweep_file(sweep_dir: Path, name: str, specs: list[RunSpec]) -> None:
    results.atomic_write_json(Path(sweep_dir) / "sweep.json",
                              {"sweep": name, "runs": [s.to_json() for s in specs]})


def read_specs(sweep_dir: Path) -> list[RunSpec]:
    path = Path(sweep_dir) / "sweep.json"
    if not path.exists():
        return []
    return [RunSpec.from_json(d) for d in json.loads(path.read_text())["runs"]]


def is_finished(sweep_dir: Path, spec: RunSpec) -> bool:
    """A complete run directory (summary.json exists) holding the same configuration."""
    run_dir = Path(sweep_dir) / spec.run_id
    try:
        stored = json.loads((run_dir / "config.json").read_text())
        expected = json.loads(json.dumps(to_dict(spec.config())))
        return (run_dir / "summary.json").exists() and same_result_config(stored, expected)
    except (OSError, ValueError):
        return False


EXECUTION_ONLY = ("vector_mode", "eval_in_background")


def same_result_config(stored: dict, expected: dict) -> bool:
    """Whether a stored run computed what ``expected`` asks for. Fields that only change how a run
    executes are ignored (sync or async vector envs, evaluation inline or in a worker give identical
    results, tests/test_host_runner.py), and so are fields added to the code after the run was
    written (they did not exist, so the run used the behaviour they default to)."""
    for key, want in expected.items():
        if key in EXECUTION_ONLY or key not in stored:
            continue
        have = stored[key]
        if isinstance(want, dict) and isinstance(have, dict):
            if not same_result_config(have, want):
                return False
        elif have != want:
            return False
    return True


def clear_staging(sweep_dir: Path) -> None:
    """Remove what killed runs left half-written (nothing outside .staging is ever partial)."""
    shutil.rmtree(Path(sweep_dir) / STAGING, ignore_errors=True)


def remove_empty_staging(sweep_dir: Path) -> None:
    """Remove the staging and checkpoint folders once nothing is in them."""
    for name in (STAGING, CHECKPOINTS):
        try:
            (Path(sweep_dir) / name).rmdir()
        except OSError:  # absent, or a run of this or another submission is still using it
            pass


def publish(sweep_dir: Path, spec: RunSpec, write_run) -> dict:
    """Write a run with ``write_run(staging_dir) -> summary`` and move it into place in one rename."""
    sweep_dir = Path(sweep_dir)
    staging = sweep_dir / STAGING / f"{spec.run_id}.{socket.gethostname()}.{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    summary = write_run(staging)
    results.atomic_write_json(staging / "spec.json", spec.to_json())
    final = sweep_dir / spec.run_id
    if final.exists():  # an older configuration under the same id: replaced by the one just run
        shutil.rmtree(final)
    os.replace(staging, final)
    fd = os.open(sweep_dir, os.O_RDONLY)
    try:
        os.fsync(fd)  # the rename itself survives a crash
    finally:
        os.close(fd)
    return summary


def _entry(run_dir: Path, root: Path) -> dict | None:
    try:
        summary = results.read_summary(run_dir)
        config = json.loads((run_dir / "config.json").read_text())
    except (OSError, ValueError):
        return None
    spec_path = run_dir / "spec.json"
    row = None
    if spec_path.exists():
        row = RunSpec.from_json(json.loads(spec_path.read_text())).row
    variant = config.get("variant") or ""
    return {
        "run_id": str(run_dir.relative_to(root)),
        "status": "finished",
        "preset": config["preset"],
        "env": config["env"],
        "algo": config["algo"],
        "variant": variant,
        "row": row or variant or config["algo"],
        "seeds": summary["seeds"],
        "step_unit": summary["step_unit"],
        "final_mean": summary["final_mean"],
        "final_se": summary["final_se"],
        "final_eval_returns": summary["final_eval_returns"],
        "wall_time_s": summary["wall_time_s"],
    }


def build_index(results_dir: Path, failed: dict[str, str] | None = None) -> dict:
    """Index every finished run under ``results_dir`` (sweep runs, and any other run directories such
    as ``bpo reproduce`` writes), plus the sweep's runs not finished yet (pending or failed)."""
    root = Path(results_dir)
    entries = []
    for summary_path in sorted(root.rglob("summary.json")):
        run_dir = summary_path.parent
        parts = run_dir.relative_to(root).parts
        if STAGING in parts or CHECKPOINTS in parts or not (run_dir / "config.json").exists():
            continue
        entry = _entry(run_dir, root)
        if entry is not None:
            entries.append(entry)
    done = {e["run_id"] for e in entries}
    for spec in read_specs(root):
        if spec.run_id not in done:
            status = "failed" if failed and spec.run_id in failed else "pending"
            entries.append({"run_id": spec.run_id, "status": status, "preset": spec.preset, "row": spec.row,
                            **({"error": failed[spec.run_id]} if status == "failed" else {})})
    name = json.loads((root / "sweep.json").read_text())["sweep"] if (root / "sweep.json").exists() else root.name
    return {"sweep": name, "runs": entries}


def refresh_index(results_dir: Path, failed: dict[str, str] | None = None) -> dict:
    """Rebuild ``index.json`` from the run directories (cheap: a few small files per run) and write
    it when the folder is writable; the analysis commands call this, so the index is never stale
    (Slurm jobs finish after the submitting command has exited)."""
    index = build_index(results_dir, failed)
    if not index["runs"]:
        raise FileNotFoundError(f"no finished runs (summary.json + config.json) under {results_dir}")
    try:
        results.atomic_write_json(Path(results_dir) / "index.json", index)
    except OSError:
        pass
    return index


def finished_runs(results_dir: Path) -> list[dict]:
    return [e for e in refresh_index(results_dir)["runs"] if e["status"] == "finished"]
