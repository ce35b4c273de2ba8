"""Outputs are checked before any work: a folder that cannot be created or written stops
``bpo train`` and ``bpo verify-variance`` with ``error: OPTION: ...`` and exit code 2 before
anything compiles; a write that fails after the work keeps the results and says
where they are."""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
import time
from pathlib import Path

import jax
import pytest

from bpo.agents.methods import validate
from bpo.config.presets import get_preset
from envs.gymnasium_envs import gym_spec
from experiments.cli import main

FORBIDDEN = "/proc/forbidden/run"  # /proc accepts no new folders, whoever runs the tests (root too)
TRAIN = ["train", "cartpole_ppo", "--bpo", "--total-timesteps", "4096", "--no-progress"]


def blocked_by_a_file(tmp_path: Path, name: str) -> Path:
    """A writable OUT in which NAME is a file, so OUT/NAME cannot be a folder."""
    out = tmp_path / "out"
    out.mkdir()
    (out / name).write_text("")
    return out


def main_compiling(argv: list[str], caplog) -> tuple[int, list[str]]:
    """``main(argv)``'s exit code and the programs JAX compiled meanwhile: "before any work" means
    before anything compiles (not a wall-time bound, which a loaded machine can break)."""
    with jax.log_compiles(True), caplog.at_level(logging.DEBUG):
        code = main(argv)
    return code, [r.getMessage() for r in caplog.records if "Compiling" in r.getMessage()]


def warm_up_imports():
    """Validating a config imports gymnax, Gymnasium's MuJoCo and the presets' modules once per
    process (about 2 s), before the commands below run."""
    for preset in ("cartpole_ppo", "short_corridor"):
        validate(get_preset(preset))
    gym_spec("HalfCheetah-v5")


@pytest.mark.parametrize(("argv", "option"), [
    ([*TRAIN, "--out", FORBIDDEN], "--out"),
    (["train", "short_corridor", "--bpo", "--out", FORBIDDEN], "--out"),
    (["train", "mujoco_default", "--env", "HalfCheetah-v5", "--out", FORBIDDEN], "--out"),
    (["verify-variance", "--out", FORBIDDEN], "--out"),
], ids=["train", "train-episodic", "train-host", "verify-variance"])
def test_an_unwritable_output_stops_the_command_before_any_work(argv, option, capsys, caplog):
    warm_up_imports()
    code, compiled = main_compiling(argv, caplog)
    assert code == 2
    err = capsys.readouterr().err
    assert re.match(rf"error: {re.escape(option)}: ", err), err
    assert not compiled, "compiled before the check"


@pytest.mark.parametrize(("flag", "blocked"), [("--tensorboard", "tb"), ("--checkpoint-every", "checkpoint")])
def test_run_folders_are_checked_before_any_work(tmp_path, capsys, caplog, flag, blocked):
    warm_up_imports()
    out = blocked_by_a_file(tmp_path, blocked)
    argv = [*TRAIN, "--out", str(out), flag] + (["5"] if flag == "--checkpoint-every" else [])
    code, compiled = main_compiling(argv, caplog)
    assert code == 2 and not compiled
    err = capsys.readouterr().err
    assert err.startswith(f"error: {flag}: cannot write to '{out / blocked}'"), err
    assert sorted(p.name for p in out.iterdir()) == [blocked]  # nothing else was written


def test_results_written_after_the_folder_went_away_are_kept_elsewhere(tmp_path):
    """The run directory is replaced by a file while the run trains: the results go to a new
    folder, the message names it, and the exit code is 1."""
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "experiments.cli", "train", "short_corridor", "--bpo",
                             "--episodes", "200", "--seeds", "2", "--checkpoint-every", "0", "--no-progress",
                             "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not out.is_dir():
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.01)
    time.sleep(1.0)  # past the check that created it (compiling and training take several seconds more)
    assert proc.poll() is None
    out.rename(tmp_path / "moved")
    out.write_text("not a folder")
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, err
    rescued = re.search(r"the results are in '([^']+)'", err)
    assert rescued and err.startswith("error: --out: writing"), err
    summary = json.loads((Path(rescued.group(1)) / "summary.json").read_text())
    assert summary["seeds"] == 2 and len(summary["final_eval_returns"]) == 2
