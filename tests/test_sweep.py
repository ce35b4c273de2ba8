"""Sweeps: expansion and validation of the grid, the staged results store, a sweep killed with
SIGKILL and resumed, its workers dying with it, a sweep stopped by SIGTERM (real subprocesses),
output folders checked before any work, learning-curve plots, and `bpo reproduce` (a sweep, then
its plot and table) with its default output folder under runs/."""

import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bpo.config.presets import TABLE1_ROWS, get_preset
from bpo.config.schema import ConfigError, replace, with_bpo
from bpo.infra.publish import name_max
from bpo.infra.stall import EXIT_STALLED
from experiments import launch, store
from experiments.cli import main
from experiments.commands import SweepArgs, _report_outcome, build_sweep
from experiments.launch import Outcome
from experiments.sweep import Grid, RunSpec, Sweep, apply_overrides, expand, load_sweep, parse_assignment
from experiments.verify_variance import VerifyVarianceArgs

from synthetic_results import fake_run, synthetic_results

TINY_SC = (("episodes", 20), ("eval_every", 10), ("eval_episodes", 3))


def test_expand_is_the_product_with_ids_and_validated_configs():
    sweep = Sweep(name="t", grids=(
        Grid(preset="cartpole_ppo", variants=("bpo_c1.5_rho1.5", "bpo_c1.0_rho1.5"),
             grid=(("returns.c_bar", (1.0, 2.0)),), fixed=(("total_timesteps", 4096),), seeds=3),
        Grid(preset="short_corridor", variants=("reinforce", "bpo"), seeds=2),
    ))
    specs = expand(sweep)
    assert [s.run_id for s in specs] == [
        "CartPole-v1-cartpole_ppo-bpo_c1.5_rho1.5-returns.c_bar=1.0",
        "CartPole-v1-cartpole_ppo-bpo_c1.5_rho1.5-returns.c_bar=2.0",
        "CartPole-v1-cartpole_ppo-bpo_c1.0_rho1.5-returns.c_bar=1.0",
        "CartPole-v1-cartpole_ppo-bpo_c1.0_rho1.5-returns.c_bar=2.0",
        "ShortCorridor-v0-short_corridor-reinforce", "ShortCorridor-v0-short_corridor-bpo"]
    cfg = specs[3].config()
    # The grid value wins over the variant's c_bar (overrides come after the variant).
    assert (cfg.algo, cfg.variant, cfg.returns.c_bar, cfg.returns.rho_bar, cfg.total_timesteps, cfg.seeds) == \
        ("bpo", "bpo_c1.0_rho1.5", 2.0, 1.5, 4096, 3)
    assert specs[3].row == "bpo_c1.0_rho1.5 returns.c_bar=2.0"
    assert specs[4].config().algo == "reinforce" and specs[4].row == "reinforce"
    # A spec survives its JSON form (how workers and Slurm jobs get it).
    assert RunSpec.from_json(json.loads(json.dumps(specs[3].to_json()))) == specs[3]


def test_sweep_files_expand():
    sizes = {"fig2": 2, "classic": 4, "mujoco_small": 4, "table1": 25, "ablations": 20, "table1_small": 10}
    for name, n in sizes.items():
        specs = expand(load_sweep(name))
        assert len(specs) == n, name
    # classic: PPO and BPO-PPO each with the preset's own settings (variant 'bpo' keeps them), 10 seeds.
    for spec in expand(load_sweep("classic")):
        assert spec.config() == replace(with_bpo(get_preset(spec.preset), spec.variant == "bpo"), seeds=10,
                                        variant="ppo" if spec.variant == "ppo" else "")
    assert {s.preset for s in expand(load_sweep("classic"))} == {"cartpole_ppo", "pendulum_ppo"}
    small = [s.config() for s in expand(load_sweep("mujoco_small"))]
    assert {(c.env, c.variant, c.algo, c.returns.c_bar, c.returns.rho_bar) for c in small} == {
        (env, v, a, 1.0, 1.5) for env in ("HalfCheetah-v5", "Hopper-v5")
        for v, a in (("ppo", "ppo"), ("bpo_c1.0_rho1.5", "bpo"))}
    assert {(c.preset, c.backend, c.seeds, c.total_timesteps) for c in small} == {
        ("mujoco_default", "gymnasium", 3, 300_000)}
    table1 = expand(load_sweep("table1"))
    assert {s.variant for s in table1} == set(TABLE1_ROWS) and all(s.seeds == 10 for s in table1)
    assert {(s.config().env, s.preset) for s in table1} == {
        ("Ant-v5", "mujoco_gsde"), ("HalfCheetah-v5", "mujoco_gsde"), ("HalfCheetah-v5", "mujoco_default"),
        ("Hopper-v5", "mujoco_default"), ("Walker2d-v5", "mujoco_default")}
    # The campaign's column order: whole columns, the default ones first, so each can be committed.
    columns = [(s.env, s.preset) for s in table1[::5]]
    assert columns == [("HalfCheetah-v5", "mujoco_default"), ("Hopper-v5", "mujoco_default"),
                       ("Walker2d-v5", "mujoco_default"), ("Ant-v5", "mujoco_gsde"), ("HalfCheetah-v5", "mujoco_gsde")]
    assert all(len({(s.env, s.preset) for s in table1[i:i + 5]}) == 1 for i in range(0, 25, 5))
    assert {s.config().total_timesteps for s in table1 if s.preset == "mujoco_gsde"} == {2_000_000}
    assert {s.config().total_timesteps for s in table1 if s.preset == "mujoco_default"} == {1_500_000}
    # Table 5's override reaches the sweep's configs.
    ant = next(s for s in table1 if s.env == "Ant-v5")
    assert ant.config().ppo.normalize_observations is False


@pytest.mark.parametrize("grid, field, text", [
    (Grid(preset="nope"), "preset", "allowed"),
    (Grid(preset="cartpole_ppo", variants=("bpo_c9",)), "variant", "allowed"),
    (Grid(preset="short_corridor", variants=("ppo",)), "variant", "['bpo', 'reinforce']"),
    (Grid(preset="cartpole_ppo", grid=(("bpo.c_barr", (1.0,)),)), "bpo.c_barr", "no such field"),
    (Grid(preset="cartpole_ppo", grid=(("ppo.n_steps.x", (1,)),)), "ppo.n_steps.x", "not a nested config"),
    (Grid(preset="cartpole_ppo", fixed=(("total_timesteps", "many"),)), "total_timesteps", "type int"),
    (Grid(preset="cartpole_ppo", fixed=(("ppo.normalize_advantage", 1),)), "ppo.normalize_advantage", "true or false"),
    (Grid(preset="cartpole_ppo", fixed=(("returns.c_bar", -1.0),)), "returns.c_bar", "> 0"),
    (Grid(preset="cartpole_ppo", seeds=0), "seeds", ">= 1"),
])
def test_bad_grids_fail_with_the_field_named(grid, field, text):
    with pytest.raises(ConfigError) as err:
        expand(Sweep(name="bad", grids=(grid,)))
    assert err.value.field_name == field and text in str(err.value)


def test_duplicate_run_ids_are_rejected():
    grid = Grid(preset="short_corridor", variants=("bpo",), seeds=1)
    with pytest.raises(ConfigError, match="share the id"):
        expand(Sweep(name="dup", grids=(grid, grid)))


def test_cli_values_and_overrides():
    assert parse_assignment("returns.c_bar=1.0,1.5", many=True) == ("returns.c_bar", (1.0, 1.5))
    assert parse_assignment("ppo.pi_hidden=[(64, 64), (256, 256)]", many=True) == \
        ("ppo.pi_hidden", ((64, 64), (256, 256)))
    assert parse_assignment("backend=mjx", many=False) == ("backend", "mjx")
    assert parse_assignment("returns.rho_bar=inf", many=False) == ("returns.rho_bar", float("inf"))
    cfg = apply_overrides(get_preset("cartpole_ppo"), {"returns.c_bar": 2, "ppo.pi_hidden": [32], "ppo.use_sde": True})
    assert cfg.returns.c_bar == 2.0 and isinstance(cfg.returns.c_bar, float) and cfg.ppo.pi_hidden == (32,)
    with pytest.raises(ConfigError, match="set: expected KEY=VALUE"):
        parse_assignment("total_timesteps", many=False)


@pytest.mark.parametrize("name", [launch.LOGS, store.LOCKS, store.CHECKPOINTS, store.STAGING, launch.SLURM])
def test_a_file_where_a_sweep_keeps_its_own_folder_is_refused_before_any_work(tmp_path, capsys, name):
    """A plain file at ``logs``, ``.locks``, ``.checkpoints``, ``.staging`` or ``.slurm`` of the
    results folder: exit 2 naming it, dry run included, and nothing is written or trained (adversarial
    audit: a traceback, for ``.checkpoints`` and ``.staging`` only after the run's training)."""
    (tmp_path / name).write_text("a user's file")
    sweep = ["sweep", "--preset", "short_corridor", "--variants", "reinforce", "--set", "episodes=20", "--seeds", "1",
             "--workers", "1", "--no-progress", "--out", str(tmp_path)]
    for dry_run in ([], ["--dry-run"]):
        assert main([*sweep, *dry_run]) == 2
        assert capsys.readouterr().err == (f"error: --out: {str(tmp_path / name)!r} is not a folder, and the sweep "
                                           f"keeps its {name} there; allowed: a folder (move the file away)\n")
        assert [p.name for p in tmp_path.iterdir()] == [name] and (tmp_path / name).read_text() == "a user's file"


RUN = "ShortCorridor-v0-short_corridor-reinforce-episodes=20"


@pytest.mark.parametrize("place, make, what", [
    (f"{launch.LOGS}/{RUN}.log", "folder", "is not a file, and the sweep keeps run {run}'s logs there"),
    (f"{store.LOCKS}/{RUN}.lock", "folder", "is not a file, and the sweep keeps run {run}'s .locks there"),
    (f"{store.CHECKPOINTS}/{RUN}", "file", "is not a folder, and the sweep keeps run {run}'s .checkpoints there"),
    (f"{store.STAGING}/{RUN}", "file", "is not a folder, and the sweep keeps run {run}'s .staging there"),
    (RUN, "file", "is not a folder, and the sweep keeps run {run}'s results there"),
    (RUN, "loop", "cannot be followed"),
])
def test_a_run_s_path_of_the_wrong_kind_is_refused_before_any_work(tmp_path, capsys, place, make, what):
    """A folder where a run's log or lock file goes, a file where its checkpoint, staging or run
    folder goes, or a run folder that is a loop of links: exit 2 naming it, dry run included, and
    nothing trained (adversarial audit: tracebacks, some after the run's whole training)."""
    path = tmp_path / place
    path.parent.mkdir(parents=True, exist_ok=True)
    if make == "folder":
        path.mkdir()
    elif make == "file":
        path.write_text("a user's file")
    else:
        path.symlink_to(path.name)
    sweep = ["sweep", "--preset", "short_corridor", "--variants", "reinforce", "--set", "episodes=20", "--seeds", "1",
             "--workers", "1", "--no-progress", "--out", str(tmp_path)]
    for dry_run in ([], ["--dry-run"]):
        assert main([*sweep, *dry_run]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: --out: {str(path)!r} {what.format(run=RUN)}"), err
        assert not (tmp_path / "sweep.json").exists() and not (tmp_path / store.CHECKPOINTS / RUN).is_dir()


def test_cli_rejects_bad_sweeps_before_running(tmp_path, capsys):
    assert main(["sweep", "nosuch", "--out", str(tmp_path)]) == 2
    assert "sweep: no sweep file" in capsys.readouterr().err
    assert main(["sweep", "--preset", "cartpole_ppo", "--grid", "returns.c_bar=1,-1", "--out", str(tmp_path)]) == 2
    assert "returns.c_bar: must be" in capsys.readouterr().err
    assert main(["sweep", "fig2", "--workers", "0", "--out", str(tmp_path)]) == 2
    assert "workers: must be an integer >= 1" in capsys.readouterr().err
    assert main(["sweep", "fig2", "--preset", "cartpole_ppo"]) == 2
    assert "not both" in capsys.readouterr().err
    broken = tmp_path.parent / f"{tmp_path.name}_broken_sweep.py"
    broken.write_text("SWEEP = (\n")
    assert main(["sweep", str(broken), "--out", str(tmp_path / "out")]) == 2
    assert f"sweep: {broken} could not be read (line 1): SyntaxError" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())  # nothing was written
    assert main(["sweep", "table1", "--dry-run", "--out", str(tmp_path / "t1")]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 27 and lines[-2].startswith("25 runs, 0 finished, 0 running")
    assert lines[-1] == "worker time: 0.00 h in the finished runs, 0.00 h in the unfinished ones' checkpoints; left: " \
                        "25 runs, none with a measured run like it to price it by"
    assert "HalfCheetah-v5-mujoco_default-ppo" in lines[0] and "10 seeds, 1500000 steps" in lines[0]
    # Grouped, Table 1 is 15 programs: per column PPO, the three per-decision BPO rows, the traj row.
    assert main(["sweep", "table1", "--set", "backend=threads", "--group-rows", "--dry-run", "--out",
                 str(tmp_path / "t1")]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == (
        "--group-rows: 25 runs in 15 programs (5 of them shared by rows that differ only in traced hyperparameters)")


@pytest.mark.parametrize("content,why", [('{"a": ', "not valid JSON"), ("[1, 2]", "holds a JSON array"),
                                         ('{"run": 5}', "holds a job id that is not a string")])
@pytest.mark.parametrize("dry_run", [True, False])
def test_a_damaged_record_of_slurm_jobs_is_refused_by_name(tmp_path, capsys, content, why, dry_run):
    jobs = tmp_path / ".slurm" / "jobs.json"
    jobs.parent.mkdir()
    jobs.write_text(content)
    argv = ["sweep", "--preset", "short_corridor", "--variants", "reinforce", "--out", str(tmp_path)]
    assert main(argv + ["--dry-run"] * dry_run) == 2
    err = capsys.readouterr().err
    assert err == f"error: {jobs}: {why}" + err.split(why, 1)[1] and len(err.strip().splitlines()) == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == [".slurm"]  # nothing started


def test_an_earlier_sweeps_run_this_code_cannot_build_is_listed_not_fatal(tmp_path):
    """sweep.json keeps an earlier sweep's runs; one of a plug-in's preset, run now without the
    plug-in, cannot be built. Rebuilding the index (after every run a sweep reaps) lists it with
    the reason instead of raising, which once stopped the sweep and killed its other workers."""
    spec = expand(Sweep(name="s", grids=(Grid(preset="short_corridor", variants=("bpo",), fixed=TINY_SC,
                                                seeds=2),)))[0]
    foreign = RunSpec(run_id="CartPole-v1-my_plugin_preset-ppo", preset="my_plugin_preset", env="CartPole-v1",
                      variant=None, overrides=(), label_overrides=(), seeds=1)  # its row is its method's
    store.write_sweep_file(tmp_path, "s", [foreign])
    store.write_sweep_file(tmp_path, "s", [spec])
    store.publish(tmp_path, spec, lambda d: fake_run(d, spec.config(), [1.0, 2.0]))
    entries = {e["run_id"]: e for e in store.refresh_index(tmp_path)["runs"]}
    assert entries[spec.run_id]["status"] == "finished"
    assert entries[foreign.run_id]["status"] == "unbuildable" and entries[foreign.run_id]["row"] is None
    assert "unknown preset 'my_plugin_preset'" in entries[foreign.run_id]["error"]
    assert json.loads((tmp_path / "index.json").read_text())["runs"] == list(entries.values())


def test_a_redone_run_replaces_the_run_files_and_keeps_the_users_own(tmp_path):
    """A sweep's redo goes through the same swap as ``bpo train --out`` (docs/runs.md): the old run's
    files go together, the user's notes and folders beside them stay."""
    spec = expand(Sweep(name="s", grids=(Grid(preset="short_corridor", variants=("bpo",), fixed=TINY_SC,
                                                seeds=2),)))[0]
    store.write_sweep_file(tmp_path, "s", [spec])
    store.publish(tmp_path, spec, lambda d: fake_run(d, spec.config(), [1.0, 2.0]))
    run = tmp_path / spec.run_id
    (run / "notes.txt").write_text("mine")
    (run / "my_analysis").mkdir()
    (run / "my_analysis" / "fit.csv").write_text("a,b")
    store.publish(tmp_path, spec, lambda d: fake_run(d, spec.config(), [3.0, 4.0]))
    assert (run / "notes.txt").read_text() == "mine" and (run / "my_analysis" / "fit.csv").read_text() == "a,b"
    assert json.loads((run / "summary.json").read_text())["final_eval_returns"] == [3.0, 4.0]
    assert store.is_finished(tmp_path, spec)
    # Files every table would skip (another run's summary, a damaged spec) are not a finished run.
    summary = json.loads((run / "summary.json").read_text())
    (run / "summary.json").write_text(json.dumps({**summary, "env": "CartPole-v1"}))
    assert not store.is_finished(tmp_path, spec)
    (run / "summary.json").write_text(json.dumps(summary))
    (run / "spec.json").write_text("garbage")
    assert not store.is_finished(tmp_path, spec)


@pytest.mark.parametrize("link_home", ["beside", "another file system"], indirect=True)
def test_a_redone_run_whose_folder_is_a_link_is_written_into_the_folder_it_points_to(tmp_path, link_home):
    """A run folder linked into the sweep by hand (relatively, on this file system or another):
    redone, the run lands in the folder the link points to with the user's files kept, the link
    stays a link and nothing is left in the sweep's .staging or beside the target (adversarial
    audit: the link was swapped into .staging, dangling, and the target kept the old run)."""
    spec = expand(Sweep(name="s", grids=(Grid(preset="short_corridor", variants=("bpo",), fixed=TINY_SC,
                                                seeds=2),)))[0]
    sweep_dir, target = tmp_path / "sweep", link_home / spec.run_id
    store.write_sweep_file(sweep_dir, "s", [spec])
    store.publish(sweep_dir, spec, lambda d: fake_run(d, spec.config(), [1.0, 2.0]))
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(sweep_dir / spec.run_id, target)
    (target / "notes.txt").write_text("mine")
    link = sweep_dir / spec.run_id
    beside = link_home.parent == tmp_path
    link.symlink_to(os.path.relpath(target, sweep_dir) if beside else target, target_is_directory=True)
    assert store.is_finished(sweep_dir, spec)
    store.publish(sweep_dir, spec, lambda d: fake_run(d, spec.config(), [3.0, 4.0]))
    assert link.is_symlink() and link.resolve() == target.resolve()
    assert json.loads((target / "summary.json").read_text())["final_eval_returns"] == [3.0, 4.0]
    assert (target / "notes.txt").read_text() == "mine" and store.is_finished(sweep_dir, spec)
    assert not list((sweep_dir / store.STAGING).iterdir())  # the sweep's end removes the empty folder
    assert sorted(p.name for p in sweep_dir.iterdir()) == sorted([spec.run_id, "sweep.json", store.STAGING])
    assert [p.name for p in link_home.iterdir()] == [spec.run_id]


def test_publish_is_all_or_nothing_and_finished_means_same_config(tmp_path, monkeypatch):
    spec = expand(Sweep(name="s", grids=(Grid(preset="short_corridor", variants=("bpo",), fixed=TINY_SC,
                                                seeds=2),)))[0]
    store.write_sweep_file(tmp_path, "s", [spec])
    assert not store.is_finished(tmp_path, spec)

    def crash(staging):
        (staging / "config.json").parent.mkdir(parents=True)
        (staging / "config.json").write_text("{")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        store.publish(tmp_path, spec, crash)
    assert not (tmp_path / spec.run_id).exists()  # the half-written run stayed in .staging
    store.clear_staging(tmp_path)
    assert not (tmp_path / store.STAGING).exists()

    store.publish(tmp_path, spec, lambda d: fake_run(d, spec.config(), [1.0, 2.0]))
    assert store.is_finished(tmp_path, spec)
    changed = RunSpec.from_json({**spec.to_json(), "overrides": [["episodes", 30]]})
    assert not store.is_finished(tmp_path, changed)
    # An execution-only field does not change what a run computed; any other does.
    config = json.loads((tmp_path / spec.run_id / "config.json").read_text())
    assert store.same_result_config(config, {**config, "vector_mode": "x"})
    assert not store.same_result_config(config, {**config, "returns": {**config["returns"], "rho_bar": 2.0}})
    # A run recorded before a field existed is stale, unless the field's default is the old behaviour.
    path = tmp_path / spec.run_id / "config.json"
    recorded = json.loads(json.dumps(config))
    del recorded["bpo"]["q_init"]
    path.write_text(json.dumps(recorded))
    assert not store.is_finished(tmp_path, spec)
    monkeypatch.setattr("bpo.config.schema.COMPATIBLE_ADDITIONS", ("bpo.q_init",))
    assert store.is_finished(tmp_path, spec)
    path.write_text(json.dumps(config))
    index = store.refresh_index(tmp_path)
    assert [(e["run_id"], e["status"], e["row"]) for e in index["runs"]] == [(spec.run_id, "finished", "bpo")]
    assert json.loads((tmp_path / "index.json").read_text()) == index


def _read_all(root: Path) -> None:
    """Every results file parses whole (a torn write would not)."""
    for path in root.rglob("*.json"):
        json.loads(path.read_text())
    for path in root.rglob("*.csv"):
        with open(path) as f:
            rows = list(csv.reader(f))
        assert rows and all(len(r) == len(rows[0]) for r in rows), path


@pytest.mark.slow
def test_sweep_killed_with_sigkill_resumes_without_redoing_runs(tmp_path):
    out = tmp_path / "sweep"
    cmd = [sys.executable, "-m", "experiments.cli", "sweep", "--preset", "short_corridor", "--variants", "reinforce",
           "--grid", "reinforce.lr_start=0.1,0.05,0.02", "--set", "episodes=20", "eval_episodes=3", "--seeds", "2",
           "--workers", "1", "--no-progress", "--out", str(out)]
    env = {**os.environ, "BPO_COMPILE_CACHE": ""}
    proc = subprocess.Popen(cmd, env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 300
    # Kill the whole sweep (driver and worker, as a preemption would) while its second run trains.
    while not (len(list(out.glob("*/summary.json"))) == 1 and len(list((out / "logs").glob("*.log"))) == 2):
        assert proc.poll() is None, proc.stdout.read().decode()
        assert time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(1.5)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    finished = [p.parent for p in out.glob("*/summary.json")]
    assert len(finished) == 1
    first = finished[0]
    before = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in first.iterdir()}
    _read_all(out)
    assert not [p for p in out.iterdir() if p.is_dir() and p.name not in (first.name, "logs", store.STAGING,
                                                                        store.CHECKPOINTS, store.LOCKS)]

    rerun = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert "3 runs, 1 finished or in flight, 2 to run" in rerun.stdout
    after = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in first.iterdir()}
    assert after == before  # the finished run was not redone
    index = json.loads((out / "index.json").read_text())
    assert sorted(e["status"] for e in index["runs"]) == ["finished"] * 3
    assert not (out / store.STAGING).exists() or not any((out / store.STAGING).iterdir())
    assert not (out / store.LOCKS).exists()  # the killed sweep's stale lock file was removed
    _read_all(out)
    # A third invocation has nothing left to do.
    again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert "3 runs, 3 finished or in flight, 0 to run" in again.stdout


def _ppid(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rindex(")") + 2:].split()[1])


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (from /proc/*/stat), but multiprocessing's resource
    tracker, which every ``bpo`` program starts first (``bpo.infra.processes.receive_signals_on_a_thread``)."""
    def tracker(child: int) -> bool:
        try:
            return b"resource_tracker" in Path(f"/proc/{child}/cmdline").read_bytes()
        except OSError:
            return False
    return [int(p.name) for p in Path("/proc").iterdir()
            if p.name.isdigit() and _ppid(int(p.name)) == pid and not tracker(int(p.name))]


def _alive(pid: int) -> bool:
    """Running, not a zombie waiting to be reaped."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def _wait_for(condition, proc, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert proc.poll() is None, f"the sweep ended before {what}: " + proc.stdout.read()
        assert time.monotonic() < deadline, f"no {what} after {seconds} s"
        time.sleep(0.1)


def _sweep_cmd(out: Path, episodes: str) -> list[str]:
    return [sys.executable, "-m", "experiments.cli", "sweep", "--preset", "short_corridor", "--variants", "bpo",
            "--grid", f"episodes={episodes}", "--set", "eval_every=10", "eval_episodes=2", "--seeds", "2",
            "--workers", "1", "--no-progress", "--out", str(out)]


def _dry_run_line(cmd: list[str], run_id: str) -> str:
    """The line of ``run_id`` in the dry run of the sweep ``cmd`` starts."""
    dry = subprocess.run([*cmd, "--dry-run"], capture_output=True, text=True, timeout=120, check=True)
    return next(line for line in dry.stdout.splitlines() if f"  {run_id}  " in line)


def test_a_sweep_killed_with_sigkill_takes_its_worker_with_it(tmp_path):
    out = tmp_path / "sweep"
    proc = subprocess.Popen(_sweep_cmd(out, "3000"), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        log = out / "logs" / "ShortCorridor-v0-short_corridor-bpo-episodes=3000-eval_episodes=2.log"
        _wait_for(lambda: log.exists() and "training in process" in log.read_text(), proc, 120, "training worker")
        workers = _children(proc.pid)
        assert len(workers) == 1 and _alive(workers[0])
        proc.kill()
        proc.wait()
        deadline = time.monotonic() + 5
        while _alive(workers[0]):
            assert time.monotonic() < deadline, "the worker outlived its sweep by 5 s"
            time.sleep(0.05)
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_stops_a_sweep_with_checkpoints_and_a_rerun_completes_it(tmp_path, sig):
    out = tmp_path / "sweep"
    cmd = _sweep_cmd(out, "2000,40")
    long_run, short_run = (f"ShortCorridor-v0-short_corridor-bpo-episodes={n}-eval_episodes=2" for n in (2000, 40))
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        # The signal comes once the first run has written a checkpoint (201 loop iterations, a checkpoint every 20).
        _wait_for((out / store.CHECKPOINTS / long_run / "checkpoint.json").exists, proc, 180, "checkpoint")
        assert _dry_run_line(cmd, long_run).startswith(f" running  {long_run}  ")  # its worker holds its lock
        workers = _children(proc.pid)
        assert len(workers) == 1
        start = time.monotonic()
        proc.send_signal(sig)  # to the sweep process alone, as `kill` does
        output, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
        proc.wait()
    name = signal.Signals(sig).name
    assert proc.returncode == 128 + sig, output
    assert time.monotonic() - start < 35
    assert f"stopped by {name} (1 interrupted: ['{long_run}']); run the same command again: finished runs are " \
           "kept, interrupted runs continue from their checkpoints" in output
    assert not _alive(workers[0])
    log = (out / "logs" / f"{long_run}.log").read_text()
    assert f"{long_run}: stopped by {name} after loop iteration" in log  # the worker got the signal: checkpointed
    assert not (out / long_run).exists() and not (out / short_run).exists()  # the second run never started
    index = json.loads((out / "index.json").read_text())
    assert sorted((e["run_id"], e["status"]) for e in index["runs"]) == [(long_run, "pending"), (short_run, "pending")]
    assert re.search(r"eval_episodes=2  \d+/201 loop iterations at its last checkpoint \(0\.\d\d h\)$",
                     _dry_run_line(cmd, long_run))
    assert _dry_run_line(cmd, long_run).startswith(f" resumes  {long_run}  ")
    assert _dry_run_line(cmd, short_run).startswith(f"     new  {short_run}  ")
    if sig == signal.SIGINT:
        return  # the rest is the same for both signals

    rerun = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    log = (out / "logs" / f"{long_run}.log").read_text()
    assert f"{long_run}: continuing from checkpoint" in log and log.count("training in process") == 2
    index = json.loads((out / "index.json").read_text())
    assert sorted(e["status"] for e in index["runs"]) == ["finished"] * 2
    assert not any((out / d).exists() for d in (store.STAGING, store.CHECKPOINTS, store.LOCKS))
    _read_all(out)


FORBIDDEN = "/proc/forbidden/x"  # /proc accepts no new folders, whoever runs the tests (root too)


@pytest.mark.parametrize("argv", [
    ["sweep", "--preset", "short_corridor", "--variants", "bpo", "--set", "episodes=40", "--seeds", "2"],
    ["reproduce", "fig2"],
    ["plot", "results"],
    ["table", "results"],
], ids=lambda argv: argv[0])
def test_an_unwritable_out_stops_sweeps_and_analyses_before_any_work(argv, tmp_path, monkeypatch, capsys):
    import experiments.commands  # noqa: F401 - what experiments.cli imports on first use (matplotlib, rliable), beforehand

    synthetic_results(tmp_path / "results", {("Hopper-v5", "mujoco_default"): {"ppo": [1, 2],
                                                                                "bpo_c1.0_rho1.5": [3, 4]}})
    monkeypatch.chdir(tmp_path)
    before = sorted(tmp_path.rglob("*"))
    assert main([*argv, "--out", FORBIDDEN]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --out: cannot write to '{FORBIDDEN}' ("), err
    assert err.rstrip().endswith("); allowed: a folder this user can create and write"), err
    assert sorted(tmp_path.rglob("*")) == before  # nothing was written (no runs/, no index.json)


def test_plots_are_written_and_not_empty(tmp_path):
    import matplotlib.image

    synthetic_results(tmp_path, {
        ("Hopper-v5", "mujoco_default"): {"ppo": [100, 200, 300], "bpo_c1.0_rho1.5": [300, 400, 500]},
        ("Ant-v5", "mujoco_gsde"): {"ppo": [10, 20, 30], "bpo_c1.0_rho1.5": [30, 40, 50]},
    })
    assert main(["plot", str(tmp_path), "--out", str(tmp_path / "plots")]) == 0
    png, pdf = tmp_path / "plots" / "curves.png", tmp_path / "plots" / "curves.pdf"
    assert pdf.stat().st_size > 5000 and pdf.read_bytes().startswith(b"%PDF")
    image = matplotlib.image.imread(png)[..., :3]
    # Two panels with two coloured lines each: many pixels are neither white nor grey.
    colourful = (image.max(axis=-1) - image.min(axis=-1)) > 0.3
    assert colourful.mean() > 0.005
    assert image.shape[1] > 2 * image.shape[0]  # side by side


def test_plot_and_table_reject_a_missing_folder(tmp_path, capsys):
    assert main(["plot", str(tmp_path / "none")]) == 2
    assert "results_dir: " in capsys.readouterr().err
    assert main(["table", str(tmp_path)]) == 2
    assert "no finished runs" in capsys.readouterr().err


def _tiny_sweep_file(folder: Path) -> Path:
    """One REINFORCE run of 2 seeds x 20 episodes: a worker process in a few seconds."""
    path = folder / "tiny.py"
    path.write_text("from experiments.sweep import Grid, Sweep\n\n"
                    "SWEEP = Sweep(name='tiny', grids=(Grid(preset='short_corridor', variants=('reinforce',),\n"
                    f"             fixed={TINY_SC!r}, seeds=2),))\n")
    return path


def test_reproduce_is_sweep_then_plot_and_table_and_writes_under_runs(tmp_path, monkeypatch, capsys):
    sweep_file = _tiny_sweep_file(tmp_path)
    monkeypatch.chdir(tmp_path)
    run_id = "ShortCorridor-v0-short_corridor-reinforce"
    # Without --out: runs/NAME under the working directory (git-ignored), never results/.
    assert main(["sweep", str(sweep_file), "--dry-run"]) == 0
    summary, worker_time = capsys.readouterr().out.strip().splitlines()[-2:]
    assert summary.endswith(f"-> {Path('runs') / 'tiny'}") and worker_time.startswith("worker time: ")
    assert VerifyVarianceArgs().out == Path("runs/variance")
    assert main(["reproduce", str(sweep_file), "--no-progress"]) == 0
    assert "| REINFORCE |" in capsys.readouterr().out
    reproduced = tmp_path / "runs" / "tiny"
    assert not (tmp_path / "results").exists()
    # The same sweep by hand, elsewhere: bpo sweep, bpo plot, bpo table.
    by_hand = tmp_path / "by_hand"
    assert main(["sweep", str(sweep_file), "--no-progress", "--out", str(by_hand)]) == 0
    assert main(["plot", str(by_hand)]) == 0
    assert main(["table", str(by_hand)]) == 0
    assert (reproduced / run_id / "curve.csv").read_bytes() == (by_hand / run_id / "curve.csv").read_bytes()
    for name in ("config.json", "spec.json"):
        assert (reproduced / run_id / name).read_text() == (by_hand / run_id / name).read_text()
    assert json.loads((reproduced / "table1.json").read_text()) == json.loads((by_hand / "table1.json").read_text())
    for name in ("curves.png", "curves.pdf", "table1.md", "table1.tex", "aggregates.json", "iqm.png"):
        assert (reproduced / name).stat().st_size > 0, name
    assert json.loads((reproduced / "aggregates.json").read_text())["bootstrap_reps"] == 2000
    # Run again: every run is finished, so only the plot and the table are redone (fewer resamples).
    assert main(["reproduce", str(sweep_file), "--no-progress", "--bootstrap-reps", "100"]) == 0
    assert "1 runs, 1 finished or in flight, 0 to run" in capsys.readouterr().out
    assert json.loads((reproduced / "aggregates.json").read_text())["bootstrap_reps"] == 100


def test_reproduce_rejects_bad_arguments_before_running(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["reproduce", "fig9"]) == 2
    assert "sweep: no sweep file" in capsys.readouterr().err
    assert main(["reproduce", "fig2", "--seeds", "0"]) == 2
    assert "seeds: must be an integer >= 1" in capsys.readouterr().err
    assert main(["reproduce", "fig2", "--set", "episodes=7"]) == 2
    assert "eval_every: must divide" in capsys.readouterr().err
    assert main(["reproduce", "fig2", "--bootstrap-reps", "5"]) == 2
    assert "bootstrap_reps: must be an integer in [100, 100,000], got 5" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_set_values_that_change_a_run_are_part_of_its_id(capsys):
    """Two sweeps of one folder with different --set values never claim each other's runs; a value
    equal to the preset's, or one that only changes how a run executes, leaves the id alone."""
    def ids(*values):
        sweep = build_sweep(SweepArgs(preset="cartpole_ppo", variants=("ppo",), set=values))
        return [s.run_id for s in expand(sweep)]

    assert ids() == ["CartPole-v1-cartpole_ppo-ppo"]
    assert ids("total_timesteps=50000") == ["CartPole-v1-cartpole_ppo-ppo-total_timesteps=50000"]
    assert ids("total_timesteps=100000", "vector_mode=async") == ids()  # the preset's budget; execution only
    assert ids("ppo.gamma=0.97") == ["CartPole-v1-cartpole_ppo-ppo-ppo.gamma=0.97"]
    # returns.* is BPO's: PPO alone does not read it (test_a_setting_of_bpo_s_returns_names_only_the_runs_with_bpo)


@pytest.mark.parametrize(("value", "use"), [("seeds=3", "--seeds"), ("env=Acrobot-v1", "--envs"),
                                            ("preset=pendulum_ppo", "--preset"), ("algo=bpo", "--variants"),
                                            ("bpo=None", "--variants")])
def test_fields_a_sweep_sets_itself_cannot_be_set(value, use, tmp_path, capsys):
    assert main(["sweep", "--preset", "cartpole_ppo", "--set", value, "--out", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: set: {value.split('=')[0]} cannot be set this way; use {use}"), err
    assert not (tmp_path / "s").exists()


def test_sweep_json_keeps_the_runs_of_earlier_sweeps_of_the_folder(tmp_path):
    first = expand(build_sweep(SweepArgs(preset="cartpole_ppo", variants=("ppo",), set=("total_timesteps=50000",))))
    second = expand(build_sweep(SweepArgs(preset="cartpole_ppo", variants=("ppo",), set=("total_timesteps=60000",))))
    store.write_sweep_file(tmp_path, "a", first)
    store.write_sweep_file(tmp_path, "b", second)
    store.write_sweep_file(tmp_path, "b", second)  # again: no duplicates
    assert [s.run_id for s in store.read_specs(tmp_path)] == [first[0].run_id, second[0].run_id]
    (tmp_path / "sweep.json").write_text("{not json")
    store.write_sweep_file(tmp_path, "b", second)  # a damaged file is replaced (with a warning)
    assert [s.run_id for s in store.read_specs(tmp_path)] == [second[0].run_id]


def test_a_signal_that_stopped_nothing_does_not_fail_the_sweep(tmp_path, capsys):
    assert _report_outcome(Outcome(signal=signal.SIGINT), tmp_path) == 0
    assert "arrived when every run had finished" in capsys.readouterr().err
    assert _report_outcome(Outcome(signal=signal.SIGINT, not_started=["a"]), tmp_path) == 130
    assert _report_outcome(Outcome(signal=signal.SIGTERM, interrupted=["a"]), tmp_path) == 143


def test_a_worker_s_exit_codes_each_mean_one_thing():
    """A sweep reads its worker's exit code: a run locked elsewhere must not read as one the stall
    guard stopped (both were 75, and four stopped runs were reported as running elsewhere)."""
    codes = {"locked elsewhere": launch.LOCKED_ELSEWHERE, "stalled": EXIT_STALLED, "failed": 1, "bad input": 2,
             "SIGINT": 128 + signal.SIGINT, "SIGTERM": 128 + signal.SIGTERM}
    assert len(set(codes.values())) == len(codes), codes


STALL_PLUGIN = Path(__file__).with_name("stall_once_plugin.py")


def test_workers_keep_to_a_core_each_and_a_stalled_run_is_started_again(tmp_path, monkeypatch):
    """Two workers of Gymnasium-backend runs keep to different cores (two such processes spread over
    the same cores can each leave a compiled call waiting forever: docs/runtime.md); the JAX runner's
    runs are left to spread their seed shards. A worker the stall guard stops (exit 75;
    here a host callback that waits, with no CPU, in the first process to reach it) is started again
    and its run finishes; the sweep exits 0."""
    monkeypatch.setenv("BPO_PLUGINS", str(STALL_PLUGIN))
    monkeypatch.setenv("BPO_TEST_STALL_MARKER", str(tmp_path / "stalled"))
    monkeypatch.setenv("BPO_STALL_MINUTES", "0.05")  # four idle windows of 0.75 s
    out = tmp_path / "sweep"
    proc = subprocess.run([sys.executable, "-m", "experiments.cli", "sweep", "--preset", "cartpole_stall_once",
                           "--grid", "ppo.gamma=0.98,0.99", "--set", "backend=gymnasium", "eval_in_background=false",
                           "--seeds", "1", "--workers", "2", "--out", str(out), "--no-progress"],
                          capture_output=True, text=True, timeout=900)
    printed = " ".join((proc.stdout + proc.stderr).split())  # the console wraps its lines
    assert proc.returncode == 0, printed
    assert printed.count("starting it again from its checkpoint (1 of 2)") == 1, printed
    assert len(list(out.glob("*/summary.json"))) == 2, printed
    logs = "".join(p.read_text() for p in (out / "logs").glob("*.log"))
    assert logs.count("the run has used no CPU for") == 1, logs  # the guard's message, in the stalled run's log
    cores = {int(line.rsplit(" ", 1)[1]) for line in logs.splitlines() if ": keeps to core " in line}
    assert len(cores) == min(2, len(os.sched_getaffinity(0))), logs


@pytest.mark.parametrize(("variants", "setting"), [
    (("ppo",), "bpo.q_lr=0.01"),  # PPO alone has no behaviour step
    (("ppo",), "returns.c_bar=2.0"),  # nor its off-policy returns: it was taken, and named the run after it
    (("a2c", "bpo_c1.0_rho1.5"), "ppo.learning_rate=0.01"),  # A2C's runs read the a2c section
])
def test_a_setting_that_changes_no_run_of_the_sweep_is_refused(variants, setting, capsys):
    preset = "cartpole_a2c" if "a2c" in variants else "cartpole_ppo"
    code = main(["sweep", "--preset", preset, "--variants", *variants, "--set", setting, "--dry-run"])
    name = setting.partition("=")[0]
    assert code == 2 and f"error: {name}: sets the {name.partition('.')[0]} section, which no run of the grid" in \
        capsys.readouterr().err


def test_a_setting_of_bpo_s_returns_names_only_the_runs_with_bpo():
    """``--set returns.c_bar=2.0`` over PPO and BPO runs changes the BPO run, whose id says so; the
    PPO run does not read it, and its id and config are those of PPO without the setting (its config
    once held c_bar 2.0 under the plain id, so a finished PPO run of the folder was redone)."""
    specs = expand(build_sweep(SweepArgs(preset="cartpole_ppo", variants=("ppo", "bpo"), set=("returns.c_bar=2.0",))))
    assert [s.run_id for s in specs] == ["CartPole-v1-cartpole_ppo-ppo",
                                         "CartPole-v1-cartpole_ppo-bpo-returns.c_bar=2.0"]
    plain = expand(build_sweep(SweepArgs(preset="cartpole_ppo", variants=("ppo", "bpo"))))
    assert specs[0] == plain[0] and specs[0].config() == plain[0].config()
    assert specs[1].config().returns.c_bar == 2.0 != plain[1].config().returns.c_bar


def test_a_slurm_job_counts_as_ended_only_in_a_final_state_or_forgotten_on_two_checks():
    """``launch._QueueWatch`` on sequences of squeue answers, against what each should decide: a
    requeue's passage (COMPLETING, REQUEUED, PENDING) and a job that may come back (PREEMPTED) never
    end it; two final answers in a row do, naming the state; a failed squeue (None) is no evidence."""
    requeue = ["RUNNING", "COMPLETING", "REQUEUED", "REQUEUED", "PENDING", "PENDING", "RUNNING", "PREEMPTED",
               "PREEMPTED", "PENDING"]
    watch = launch._QueueWatch()
    assert not any(watch.ended("7", {"7": state}) for state in requeue)
    for answers, ended_at, state in [
        ([{"7": "RUNNING"}, {"7": "CANCELLED"}, {"7": "CANCELLED"}], 2, "CANCELLED"),
        ([{"7": "COMPLETED"}, None, {"7": "COMPLETED"}, {"7": "COMPLETED"}], 3, "COMPLETED"),
        ([{"7": "RUNNING"}, {}, {"7": "PENDING"}, {}, {}], 4, "no longer known to the controller, last seen PENDING"),
        ([{}, {}], 1, "no longer known to the controller, last seen never"),
    ]:
        watch = launch._QueueWatch()
        decisions = [watch.ended("7", answer) for answer in answers]
        assert decisions == [i == ended_at for i in range(len(answers))], (answers, decisions)
        assert watch.state["7"] == state


def test_only_runs_the_chosen_runs_and_a_later_sweep_the_rest(tmp_path, capsys):
    """``--only RUN-ID`` (one Table 1 cell, say) runs that run in the sweep's folder and leaves the
    others; the sweep's record still lists them all, so the same command without ``--only`` then
    runs just the rest. An id that is not the sweep's is refused before anything is written."""
    out = tmp_path / "s"
    argv = ["sweep", "--preset", "short_corridor", "--variants", "reinforce", "bpo", "--seeds", "2",
            "--set", *[f"{k}={v}" for k, v in TINY_SC], "--out", str(out), "--no-progress"]
    ids = [s.run_id for s in expand(build_sweep(SweepArgs(preset="short_corridor", variants=("reinforce", "bpo"),
                                                          set=tuple(f"{k}={v}" for k, v in TINY_SC))))]
    assert len(ids) == 2
    assert main([*argv, "--only", "ShortCorridor-v0-nosuch"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: only: 'ShortCorridor-v0-nosuch' is not a run of sweep sweep-short_corridor; "
                          f"allowed: its run ids, as `--dry-run` lists them (2: {ids[0]}, {ids[1]})"), err
    assert main([*argv, "--only", ids[1], ids[1]]) == 2
    assert "error: only: a run id is given twice" in capsys.readouterr().err
    for dry in (["--dry-run"], []):  # `--only $UNSET`: no id at all ran the whole sweep (adversarial audit)
        assert main([*argv, "--only", *dry]) == 2
        assert capsys.readouterr().err.startswith("error: only: no run id given; allowed: one or more of sweep ")
    assert not out.exists()
    assert main([*argv, "--only", ids[1], "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:7] == ["new", ids[1], "[bpo,", "2", "seeds,", "20", "episodes]"]
    assert lines[1].startswith("1 runs, 0 finished"), lines
    assert main([*argv, "--only", ids[1]]) == 0
    assert "sweep sweep-short_corridor: 1 runs chosen by --only, 0 finished or in flight, 1 to run" in \
        capsys.readouterr().out
    assert sorted(p.name for p in out.glob("*/summary.json") for p in [p.parent]) == [ids[1]]
    assert [s.run_id for s in store.read_specs(out)] == ids
    assert main(argv) == 0
    assert "2 runs, 1 finished or in flight, 1 to run" in capsys.readouterr().out
    assert sorted(p.parent.name for p in out.glob("*/summary.json")) == sorted(ids)


def test_a_run_id_longer_than_the_file_system_holds_is_refused_before_anything_is_written(tmp_path, capsys):
    """A long grid value made a run id that passed the dry run, then failed at its lock file with a
    traceback after sweep.json was written (adversarial audit, session 62)."""
    long_value = "[" + ", ".join(["2"] * 110) + "]"
    argv = ["sweep", "--preset", "cartpole_ppo", "--grid", f"bpo.q_hidden=[{long_value}, [64, 64]]",
            "--out", str(tmp_path / "s"), "--no-progress"]
    for dry in (["--dry-run"], []):
        assert main([*argv, *dry]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: grid: run id 'CartPole-v1-cartpole_ppo-bpo-bpo.q_hidden=2x2x2") and \
            f"over the {name_max(tmp_path)} the file system holds" in err, err
        assert not (tmp_path / "s").exists()
