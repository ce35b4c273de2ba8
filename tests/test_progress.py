"""`bpo sweep --dry-run` on a folder in use: each run's state and progress, and the worker time
spent and left, against a hand computation. The checkpoints are written by the checkpoint writer
itself (only their progress is read), the lock is a real flock, and the finished runs are published
by the store, each with a known wall time."""

import json
from pathlib import Path

import numpy as np

from bpo.config.schema import replace
from bpo.infra import checkpoint as ckpt
from bpo.training.run_output import default_seed_chunk
from experiments import launch, store
from experiments.cli import main
from experiments.commands import SweepArgs, build_sweep
from experiments.sweep import expand, load_sweep

from synthetic_results import fake_run

SWEEP = """from experiments.sweep import Grid, Sweep

FIXED = (("eval_every", 10), ("eval_episodes", 3))
SWEEP = Sweep(name="progress", grids=(
    Grid(preset="short_corridor", variants=("reinforce",), grid=(("episodes", (20, 40, 60, 80, 100)),), fixed=FIXED,
         seeds=2),
    Grid(preset="short_corridor", variants=("reinforce",), fixed=(("episodes", 20), *FIXED), seeds=3),
))
"""


def _listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def _checkpoint(sweep_dir: Path, run_id: str, config, done: int, total: int, wall_s: float,
                unit: str = "episode") -> None:
    info = {"iterations_done": done, "iterations": total, "checkpoint_every": 1, "unit": unit,
            "iteration_name": "loop iteration",
            "elapsed": {"wall_time_s": wall_s}, "seed_chunk": default_seed_chunk()}
    ckpt.save(sweep_dir / store.CHECKPOINTS / run_id, {"x": np.zeros(2)}, {}, info, config)


def test_a_dry_run_says_where_each_run_stands_and_the_worker_time_spent_and_left(tmp_path, capsys):
    sweep_file = _write(tmp_path, SWEEP)
    out = tmp_path / "out"
    out.mkdir()
    specs = expand(load_sweep(str(sweep_file)))
    finished, resumes, restarts, running, redo, other_seeds = specs
    store.write_sweep_file(out, "progress", specs)
    store.publish(out, finished, lambda d: fake_run(d, finished.config(), [1.0, 2.0]))
    summary = out / finished.run_id / "summary.json"
    summary.write_text(json.dumps({**json.loads(summary.read_text()), "wall_time_s": 36000.0}))
    _checkpoint(out, resumes.run_id, resumes.config(), 3, 4, 7200.0)
    _checkpoint(out, restarts.run_id, finished.config(), 1, 4, 60.0)  # another run's: not continued
    (out / redo.run_id).mkdir()  # a directory without a finished run in it
    lock = store.try_lock_run(out, running.run_id)
    try:
        before = _listing(out)
        assert main(["sweep", str(sweep_file), "--out", str(out), "--dry-run"]) == 0
        assert _listing(out) == before  # a dry run writes nothing
    finally:
        lock.release()
    lines = capsys.readouterr().out.strip().splitlines()
    state = {line.split()[1]: line for line in lines[:6]}
    assert state[finished.run_id].startswith("finished  ")
    assert state[finished.run_id].endswith("eval_episodes=3  10.00 h")
    assert state[resumes.run_id].startswith(" resumes  ")
    assert state[resumes.run_id].endswith("eval_episodes=3  3/4 loop iterations at its last checkpoint (2.00 h)")
    assert state[restarts.run_id].startswith("restarts  ")
    assert state[restarts.run_id].endswith("its checkpoint is not used: the checkpoint was written by a different "
                                           "configuration")
    assert state[running.run_id].startswith(" running  ")
    assert state[running.run_id].endswith("eval_episodes=3  no checkpoint yet")
    assert state[redo.run_id].startswith("    redo  ") and state[other_seeds.run_id].startswith("     new  ")
    assert lines[6] == f"6 runs, 1 finished, 1 running, 1 to resume from a checkpoint -> {out}"
    # Left, at the finished run's 36000 s / 20 episodes = 1800 s an episode (the seeds=3 run has no
    # finished run like it): 40 x 1/4 + 60 + 80 + 100 episodes = 250 episodes, 450000 s = 125.0 h.
    assert lines[7] == ("worker time: 10.00 h in the finished runs, 2.00 h in the unfinished ones' checkpoints; "
                        "left, at the measured rates of the runs most like them: about 125.0 h for 4 runs, and 1 "
                        "without a measured run like them to price them by")
    # A damaged checkpoint is not half-read: the run starts over, and the dry run says so and why.
    (out / store.CHECKPOINTS / resumes.run_id / ckpt.STATE_FILE).write_bytes(b"\x00 not msgpack")
    assert main(["sweep", str(sweep_file), "--out", str(out), "--dry-run"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if f"  {resumes.run_id}  " in x)
    assert line.startswith("restarts  ") and "its checkpoint is not used: checkpoint: " in line
    assert "cannot be used" in line
    # A checkpoint whose progress is not a count is not used either, and the dry run does not crash on it.
    info = {"iterations_done": "x", "iterations": 4, "elapsed": [1], "seed_chunk": default_seed_chunk()}
    ckpt.save(out / store.CHECKPOINTS / resumes.run_id, {"x": np.zeros(2)}, {}, info, resumes.config())
    assert main(["sweep", str(sweep_file), "--out", str(out), "--dry-run"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if f"  {resumes.run_id}  " in x)
    assert line.startswith("restarts  ") and "is not a count of the run's iterations" in line


def test_the_time_left_prices_each_run_by_the_measured_runs_most_like_it(tmp_path, capsys):
    # Table 1's gSDE cells cost several times the default ones per step: a run is priced by finished
    # runs of its setting, else its own checkpoint, else its setting's or its preset's checkpoints,
    # and only then by any run of its algorithm (session 57's dry run priced the gSDE cells at the
    # default cells' rates, about 35 h left where 112 were).
    specs = {s.run_id: s for s in expand(build_sweep(SweepArgs(sweep="table1")))}
    store.write_sweep_file(tmp_path, "table1", list(specs.values()))
    ppo = specs["HalfCheetah-v5-mujoco_default-ppo"]
    store.publish(tmp_path, ppo, lambda d: fake_run(d, ppo.config(), [1.0] * ppo.seeds))
    summary = tmp_path / ppo.run_id / "summary.json"
    summary.write_text(json.dumps({**json.loads(summary.read_text()), "wall_time_s": 3600.0}))
    for run_id, wall in (("Ant-v5-mujoco_gsde-ppo", 7200.0), ("Ant-v5-mujoco_gsde-bpo_c1.5_rho1.5", 36000.0)):
        _checkpoint(tmp_path, run_id, specs[run_id].config(), 49, 245, wall, unit="update")  # a fifth done
    assert main(["sweep", "table1", "--out", str(tmp_path), "--dry-run"]) == 0
    # Hand computation, in seconds: Ant PPO's and Ant BPO (1.5, 1.5)'s last four fifths at their own
    # rates, 28800 + 144000; the three other Ant BPO rows at that checkpoint's (same setting), 3 x
    # 180000; HalfCheetah (gSDE) PPO and its four BPO rows at the Ant checkpoints' (same preset),
    # 36000 + 4 x 180000; Hopper and Walker2d (default) PPO at the finished HalfCheetah (default) PPO's
    # (same preset), 2 x 3600; the twelve default BPO rows, with no BPO run of their preset, at the Ant
    # BPO checkpoint's rate per step, 12 x 36000 / 400000 x 1500000. In all 3096000 s = 860.0 h.
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line == ("worker time: 1.00 h in the finished runs, 12.00 h in the unfinished ones' checkpoints; left, "
                    "at the measured rates of the runs most like them: about 860.0 h (12 of them priced by runs of "
                    "another preset, which may be far off)")  # the twelve default BPO rows


def test_with_group_rows_a_run_s_progress_is_its_group_s_checkpoint_counted_once(tmp_path, capsys):
    args = ["sweep", "table1", "--set", "backend=threads", "--group-rows", "--out", str(tmp_path)]
    specs = expand(build_sweep(SweepArgs(sweep="table1", set=("backend=threads",), group_rows=True)))
    group = next(g for g in launch.group_specs(specs) if len(g) == 3)  # a column's per-decision BPO rows
    config = replace(group[0].config(), seeds=sum(s.seeds for s in group))
    info = {"iterations_done": 100, "iterations": 733, "checkpoint_every": 73, "unit": "update",
            "iteration_name": "loop iteration", "elapsed": {"wall_time_s": 3600.0}, "seed_chunk": default_seed_chunk()}
    ckpt.save(launch.group_checkpoint_dir(tmp_path, group), {"x": np.zeros(2)}, {}, info, config)
    done = next(g for g in launch.group_specs(specs) if len(g) == 3 and g != group)  # another column's, finished
    for spec in done:  # each run of a group records the group's wall time: 3 h for the three
        store.publish(tmp_path, spec, lambda d, spec=spec: fake_run(d, spec.config(), [1.0] * spec.seeds))
        summary = tmp_path / spec.run_id / "summary.json"
        summary.write_text(json.dumps({**json.loads(summary.read_text()), "wall_time_s": 10800.0,
                                       "configs_in_program": 3}))
    assert main([*args, "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    for spec in group:
        line = next(x for x in lines if f"  {spec.run_id}  " in x)
        assert line.startswith(" resumes  ")
        assert line.endswith("100/733 loop iterations at its group's (3 runs in one program) last checkpoint (1.00 h)")
    for spec in done:
        assert next(x for x in lines if f"  {spec.run_id}  " in x).endswith("  1.00 h")  # its share
    assert sum(x.startswith("     new  ") for x in lines) == 19
    assert next(x for x in lines if x.startswith("worker time")).startswith(
        "worker time: 3.00 h in the finished runs, 1.00 h in the unfinished ones' checkpoints")
    # Without --group-rows the runs would not continue the group's checkpoint, and the dry run says so.
    assert main([*args[:-3], "--out", str(tmp_path), "--dry-run"]) == 0
    assert not any(x.startswith(" resumes") for x in capsys.readouterr().out.splitlines())


def test_a_grouped_sweep_starts_over_from_a_checkpoint_the_dry_run_says_it_cannot_continue(tmp_path, capsys):
    out = tmp_path / "out"
    args = ["sweep", "--preset", "short_corridor", "--variants", "bpo", "--set", "episodes=20", "eval_every=10",
            "eval_episodes=2", "--seeds", "2", "--group-rows", "--no-progress", "--out", str(out)]
    assert main([*args, "--dry-run"]) == 0
    run_id = capsys.readouterr().out.split()[1]
    other = expand(load_sweep(str(_write(tmp_path, SWEEP))))[0]  # another run's configuration
    _checkpoint(out, run_id, other.config(), 1, 4, 60.0)
    assert main([*args, "--dry-run"]) == 0
    assert capsys.readouterr().out.startswith(f"restarts  {run_id}  ")
    assert main(args) == 0  # it used to fail here for good: the group's runner refused the foreign checkpoint
    assert "the checkpoint was written by a different configuration" in capsys.readouterr().out
    assert store.is_finished(out, next(s for s in store.read_specs(out) if s.run_id == run_id))


def _write(folder: Path, text: str) -> Path:
    path = folder / "progress_sweep.py"
    path.write_text(text)
    return path
