"""``bpo train --track``: the scalars TensorBoard gets go to Weights & Biases too, here in its offline
mode (a real wandb run, its records read back from the file it writes); without the package the
flag is refused before any work."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

from wandb.proto import wandb_internal_pb2

BLOCK = 32768  # the record log's block size (LevelDB's log format, which the .wandb file uses)
HEADER = 7  # ":W&B", a 2-byte magic and a version byte, at the start of the file


def history_rows(path: Path) -> list[dict]:
    """The logged rows of an offline run's ``run-*.wandb`` file: its records are LevelDB log records
    (a 4-byte checksum, a 2-byte length, a type: full, first, middle or last fragment) holding
    protobuf ``Record``s; the rows are the ``history`` ones."""
    data, at, pieces, rows = path.read_bytes(), HEADER, b"", []
    while at + 7 <= len(data):
        if BLOCK - at % BLOCK < 7:  # a block's tail too short for a record header is padding
            at += BLOCK - at % BLOCK
            continue
        _, length, kind = struct.unpack("<IHB", data[at:at + 7])
        pieces += data[at + 7:at + 7 + length]
        at += 7 + length
        if kind in (1, 4):  # full, last
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pieces)
            pieces = b""
            if record.WhichOneof("record_type") == "history":
                rows.append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                             for item in record.history.item})
    return rows


def test_track_logs_the_run_s_scalars_to_an_offline_wandb_run(tmp_path):
    out = tmp_path / "run"
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    proc = subprocess.run([sys.executable, "-m", "experiments.cli", "train", "cartpole_ppo", "--bpo",
                           "--total-timesteps", "4096", "--eval-every", "1024", "--eval-episodes", "2", "--seeds", "2",
                           "--track", "--per-seed-scalars", "--no-progress", "--out", str(out)], env=env,
                          capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr
    files = list((out / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(files) == 1, sorted(p.name for p in (out / "wandb").rglob("*"))
    rows = history_rows(files[0])
    evals = [(r["env_steps"], r["eval/return"]) for r in rows if "eval/return" in r]
    curve = [line.split(",") for line in (out / "curve.csv").read_text().splitlines()[1:]]
    steps = sorted({int(float(c[0])) for c in curve})
    assert [s for s, _ in evals] == steps  # one row per evaluation, at its environment step
    summary = json.loads((out / "summary.json").read_text())
    assert evals[-1][1] == summary["final_mean"]  # the mean over seeds, as TensorBoard gets it
    assert any("train/pg_loss" in r for r in rows) and any("train/mu_loss" in r for r in rows)
    # --per-seed-scalars: each seed's evaluation beside the mean, as curve.csv has it
    for seed in (0, 1):
        mine = [(r["env_steps"], r[f"eval/return/seed{seed}"]) for r in rows if f"eval/return/seed{seed}" in r]
        assert mine == [(int(float(c[0])), float(c[2])) for c in curve if int(c[1]) == seed]
    assert any("train/pg_loss/seed1" in r for r in rows)


def test_track_without_wandb_is_refused_before_any_work(tmp_path):
    """A real interpreter in which ``import wandb`` fails (``sys.modules['wandb'] = None``, set by a
    sitecustomize on its path): exit 2 naming the flag, nothing created."""
    (tmp_path / "sitecustomize.py").write_text("import sys\nsys.modules['wandb'] = None\n")
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.run([sys.executable, "-m", "experiments.cli", "train", "cartpole_ppo", "--track",
                           "--out", str(tmp_path / "run")], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: --track: needs the wandb package"), proc.stderr
    assert not (tmp_path / "run" / "wandb").exists()


def test_track_without_a_wandb_key_is_refused_before_any_folder_is_made(tmp_path):
    """W&B installed, no key (no WANDB_API_KEY, no ~/.netrc, not a terminal): it raised when the run
    started, leaving empty checkpoint/ and wandb/ folders; now exit 2 saying how to log in, and no
    folder at all."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update(HOME=str(tmp_path / "home"), NETRC=str(tmp_path / "no-netrc"))
    proc = subprocess.run([sys.executable, "-m", "experiments.cli", "train", "cartpole_ppo", "--track",
                           "--out", str(tmp_path / "run")], env=env, capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: --track: W&B cannot log in") and "wandb login" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists()
