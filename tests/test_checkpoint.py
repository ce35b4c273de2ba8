"""Checkpoint and resume: runs killed with SIGKILL (real subprocesses) continue from their last
checkpoint to the same results as uninterrupted runs; simulator snapshots; the NaN guard."""

import json
import os
import pickle
import re
import signal
import subprocess
import sys
import time
import zlib
from pathlib import Path
from types import SimpleNamespace

import jax
import numpy as np
import pytest

from bpo.config.presets import get_preset
from bpo.config.schema import ConfigError, from_dict, replace, to_dict, with_bpo
from bpo.infra import checkpoint as ckpt
from bpo.training import driver, run
from bpo.training.job import check_outputs, resume_job
from envs.gymnasium_envs import make_vector_env

SHORT_CORRIDOR = ["train", "short_corridor", "--bpo", "--episodes", "200", "--eval-every", "10",
                  "--eval-episodes", "3", "--seeds", "2", "--checkpoint-every", "2", "--no-progress"]
CARTPOLE_HOST = ["train", "cartpole_ppo", "--bpo", "--backend", "gymnasium", "--total-timesteps", "4096",
                 "--eval-every", "1024", "--eval-episodes", "2", "--seeds", "2", "--checkpoint-every", "2",
                 "--no-progress"]
HOPPER_THREADS = ["train", "mujoco_default", "--env", "Hopper-v5", "--backend", "threads", "--total-timesteps", "1024",
                  "--ppo.n-steps", "256", "--eval-every", "256", "--eval-episodes", "2", "--seeds", "2",
                  "--bpo.n-qvf-epochs", "1", "--bpo.n-mu-epochs", "1", "--checkpoint-every", "2", "--no-progress"]


def bpo(args, **kw):
    return subprocess.run([sys.executable, "-m", "experiments.cli", *args], capture_output=True, text=True, timeout=600,
                          **kw)


def kill_after_checkpoint(args, out: Path) -> int:
    """Start ``bpo`` and SIGKILL its process group once a checkpoint exists; how far it had got."""
    proc = subprocess.Popen([sys.executable, "-m", "experiments.cli", *args], start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    info, deadline = out / "checkpoint" / ckpt.INFO_FILE, time.monotonic() + 300
    while not info.exists():
        assert proc.poll() is None, "the run ended before its first checkpoint:\n" + proc.stdout.read().decode()
        assert time.monotonic() < deadline
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    return json.loads(info.read_text()).get("iterations_done") or json.loads(info.read_text())["updates_done"]


def assert_no_partial_results(out: Path):
    assert not (out / "summary.json").exists() and not (out / "curve.csv").exists()
    for path in out.rglob("*"):
        if path.suffix == ".json":
            json.loads(path.read_text())
    assert not list(out.rglob("*.tmp"))


def same_run_directories(a: Path, b: Path):
    for name in ("curve.csv", "train_metrics.csv"):
        assert (a / name).read_text() == (b / name).read_text(), name
    sa, sb = (json.loads((d / "summary.json").read_text()) for d in (a, b))
    assert sa["final_eval_returns"] == sb["final_eval_returns"]


@pytest.mark.slow
@pytest.mark.parametrize("args, whole_only, killed_only", [
    (SHORT_CORRIDOR, [], []), (CARTPOLE_HOST, [], []),
    # The threads backend's uninterrupted run on one physics thread, the killed and resumed one on
    # two: the same files also show that the number of physics threads changes no result.
    pytest.param(HOPPER_THREADS, ["--physics-threads", "1"], ["--physics-threads", "2"], marks=pytest.mark.mujoco),
], ids=["jax-runner", "gymnasium-host-runner", "threads-backend"])
def test_resume_after_sigkill_equals_the_uninterrupted_run(tmp_path, args, whole_only, killed_only):
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    done = bpo([*args, *whole_only, "--out", str(whole)])
    assert done.returncode == 0, done.stderr
    assert not (whole / "checkpoint" / ckpt.STATE_FILE).exists()  # removed once the results are written
    reached = kill_after_checkpoint([*args, *killed_only, "--out", str(killed)], killed)
    assert reached >= 2
    assert_no_partial_results(killed)
    resumed = bpo(["train", "--resume", str(killed), "--no-progress"])
    assert resumed.returncode == 0, resumed.stderr
    same_run_directories(whole, killed)
    if killed_only:  # each run records what ran it
        configs = [json.loads((d / "config.json").read_text()) for d in (whole, killed)]
        summaries = [json.loads((d / "summary.json").read_text()) for d in (whole, killed)]
        assert [(c["backend"], c["physics_threads"]) for c in configs] == [("threads", 1), ("threads", 2)]
        assert [s["backend"] for s in summaries] == ["threads+cpu", "threads+cpu"]


@pytest.mark.slow
def test_sweep_continues_an_interrupted_run_from_its_checkpoint(tmp_path):
    sweep = ["sweep", "--preset", "short_corridor", "--variants", "bpo", "--set", "episodes=200", "eval_every=10",
             "eval_episodes=3", "--seeds", "2", "--no-progress", "--workers", "1"]
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    assert bpo([*sweep, "--out", str(whole)]).returncode == 0
    run_id = "ShortCorridor-v0-short_corridor-bpo-episodes=200-eval_episodes=3"  # the --set values that change the run
    proc = subprocess.Popen([sys.executable, "-m", "experiments.cli", *sweep, "--out", str(killed)],
                            start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    info, deadline = killed / ".checkpoints" / run_id / ckpt.INFO_FILE, time.monotonic() + 300
    while not info.exists():
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (killed / run_id).exists()
    again = bpo([*sweep, "--out", str(killed)])
    assert again.returncode == 0, again.stderr
    log = (killed / "logs" / f"{run_id}.log").read_text()
    assert "continuing from checkpoint" in log
    same_run_directories(whole / run_id, killed / run_id)
    assert not (killed / ".checkpoints" / run_id / ckpt.STATE_FILE).exists()


def test_a_sweep_starts_over_a_run_whose_checkpoint_does_not_fit_its_state(tmp_path):
    """A checkpoint of the run's configuration whose arrays do not fit the run's state (here one
    output gone, under a digest that matches: what a change of the code part-way through a campaign
    leaves) is found only once the program is built; the sweep then starts the run over, as it does
    one of another configuration. It failed with a traceback on every rerun."""
    sweep = ["sweep", "--preset", "short_corridor", "--variants", "bpo", "--set", "episodes=20", "eval_every=10",
             "eval_episodes=3", "--seeds", "2", "--no-progress", "--workers", "1"]
    whole, damaged = tmp_path / "whole", tmp_path / "damaged"
    assert bpo([*sweep, "--out", str(whole)]).returncode == 0
    (run_id,) = [p.name for p in whole.glob("ShortCorridor-*")]
    spec = json.loads((whole / run_id / "spec.json").read_text())
    cfg = from_dict(json.loads((whole / run_id / "config.json").read_text()))
    assert spec["run_id"] == run_id
    folder = damaged / ".checkpoints" / run_id
    run(cfg, checkpoint_dir=folder, checkpoint_every=1)  # leaves its last checkpoint
    raw = ckpt.read_payload(folder)
    del raw["state"]["outputs"]["0"]["exact_return"]  # msgpack keeps the keys as strings
    ckpt.write_payload(folder, raw)
    again = bpo([*sweep, "--out", str(damaged)])
    assert again.returncode == 0, again.stdout + again.stderr
    log = (damaged / "logs" / f"{run_id}.log").read_text()
    assert "continuing from checkpoint" in log and "cannot be used" in log and ": starting over" in log, log
    same_run_directories(whole / run_id, damaged / run_id)
    assert not ckpt.exists(folder)


@pytest.mark.parametrize("preset, changes", [
    ("short_corridor", {"episodes": 60, "eval_every": 10, "eval_episodes": 2}),
    ("cartpole_ppo", {"total_timesteps": 4096, "eval_every": 1024, "eval_episodes": 2}),
], ids=["episodic", "on-policy"])
def test_checkpointing_does_not_change_a_jax_run(tmp_path, preset, changes):
    """Without checkpoints, and with a checkpoint every 1 or 4 iterations, the same program runs the
    same iterations: bit-identical metrics, so every command gives the same numbers."""
    cfg = replace(with_bpo(get_preset(preset), True), seeds=2, **changes)
    plain = run(cfg).metrics
    for every in (1, 4):
        saved = run(cfg, checkpoint_dir=tmp_path / str(every), checkpoint_every=every).metrics
        for part in ("eval", "train"):
            for name, value in plain[part].items():
                np.testing.assert_array_equal(saved[part][name], value, err_msg=f"{part}/{name}, every {every}")
    assert ckpt.exists(tmp_path / "4")  # the run saved (the command line deletes it once results are written)


def _continue_from_snapshots(env_id: str, convert=lambda blob: blob) -> None:
    """Env ``b``, started elsewhere, takes env ``a``'s snapshots (through ``convert``) and then
    steps exactly as ``a`` does."""
    a, b = make_vector_env(env_id, 3), make_vector_env(env_id, 3)
    a.reset(seed=[1, 2, 3])
    b.reset(seed=[7, 8, 9])
    a.action_space.seed(0)
    actions = [a.action_space.sample() for _ in range(80)]
    for x in actions[:30]:
        a.step(x)
    b.set_attr("snapshot", [convert(blob) for blob in a.call("take_snapshot")])
    for x in actions[30:]:  # episodes end and auto-reset in here: the random generators were restored too
        for ra, rb in zip(a.step(x)[:4], b.step(x)[:4], strict=True):
            np.testing.assert_array_equal(ra, rb)
    a.close()
    b.close()


@pytest.mark.parametrize("env_id", [pytest.param("Hopper-v5", marks=pytest.mark.mujoco),
                                    pytest.param("Ant-v5", marks=pytest.mark.mujoco), "CartPole-v1",
                                    "TruncationProbe-v0", "ShortCorridor-v0"])
def test_environment_snapshots_continue_identically(env_id):
    """ShortCorridor-v0 ends its own episodes (no TimeLimit wrapper): its snapshot once raised.
    Ant-v5's reward reads a body position the previous step left, not one of the integration state."""
    _continue_from_snapshots(env_id)


@pytest.mark.mujoco
def test_mujoco_snapshots_are_compressed_and_the_uncompressed_ones_of_older_checkpoints_restore():
    """A MuJoCo snapshot holds its MjData's pickle compressed (about 0.7 MB raw on Hopper-v5); one
    written before the compression (the pickle itself under "mjdata") restores as well."""
    env = make_vector_env("Hopper-v5", 1)
    env.reset(seed=[0])
    blob = env.call("take_snapshot")[0]
    raw = pickle.loads(zlib.decompress(pickle.loads(blob)["mjdata_zlib"]))
    assert len(blob) < 100_000 < len(pickle.dumps(raw)), (len(blob), len(pickle.dumps(raw)))
    env.close()

    def uncompressed(new: bytes) -> bytes:
        state = pickle.loads(new)
        state["mjdata"] = zlib.decompress(state.pop("mjdata_zlib"))
        return pickle.dumps(state)

    _continue_from_snapshots("Hopper-v5", uncompressed)


def test_a_nan_stops_the_run_naming_the_quantity_and_keeps_the_checkpoint(tmp_path, monkeypatch):
    cfg = replace(with_bpo(get_preset("short_corridor"), False), episodes=40, eval_every=10, eval_episodes=2, seeds=2)
    real_save = ckpt.save

    def stop_after_first(*args, **kw):
        real_save(*args, **kw)
        raise KeyboardInterrupt  # the process dies right after its first checkpoint

    monkeypatch.setattr(ckpt, "save", stop_after_first)
    with pytest.raises(KeyboardInterrupt):
        run(cfg, checkpoint_dir=tmp_path, checkpoint_every=2)
    monkeypatch.setattr(ckpt, "save", real_save)
    # Poison pi's parameters in the checkpoint, as a diverging update would.
    raw = ckpt.read_payload(tmp_path)
    theta = raw["state"]["carry"]["pi_params"]["params"]["theta"]
    raw["state"]["carry"]["pi_params"]["params"]["theta"] = np.full_like(theta, np.nan)
    ckpt.write_payload(tmp_path, raw)
    before = (tmp_path / ckpt.STATE_FILE).read_bytes()
    with pytest.raises(ckpt.NonFiniteError) as err:
        run(cfg, checkpoint_dir=tmp_path, checkpoint_every=2)
    message = str(err.value)
    # Iterations 0-1 (the first evaluation and block 0, episodes 1-10) were saved; block 1 starts at episode 11.
    assert "is not finite in episode 11" in message and "last good checkpoint is kept" in message
    assert message.startswith("pg_loss is not finite")
    assert (tmp_path / ckpt.STATE_FILE).read_bytes() == before  # nothing overwrote it


def test_non_finite_values_are_found_and_named():
    metrics = {"pg_loss": np.array([[0.1, 0.2, np.inf], [0.1, np.nan, 0.0]]), "train_return": np.full((2, 3), np.nan),
               "q_loss": np.zeros((2, 3))}
    assert ckpt.first_non_finite(metrics, offset=5) == ("pg_loss", 6)
    both = {**metrics, "ess_frac": np.array([[1.0, np.nan, 1.0]] * 2)}
    assert ckpt.first_non_finite(both) == ("pg_loss, ess_frac", 1)
    assert ckpt.first_non_finite({"q_loss": np.zeros((2, 3))}) is None
    tree = {"actor": {"w": np.ones(3), "b": np.array([0.0, np.nan])}}
    assert ckpt.non_finite_leaf(tree, "state") == "state['actor']['b']"


HOST_TINY = {"backend": "gymnasium", "total_timesteps": 512, "eval_every": 256, "eval_episodes": 1,
             "eval_in_background": False}


@pytest.mark.parametrize("preset, changes", [
    ("short_corridor", {"episodes": 20, "eval_every": 10, "eval_episodes": 2}),
    ("cartpole_ppo", HOST_TINY),
], ids=["jax-runner", "host-runner"])
def test_a_checkpoint_of_another_configuration_is_refused_before_compiling(tmp_path, preset, changes):
    cfg = replace(with_bpo(get_preset(preset), True), seeds=2, **changes)
    run(cfg, checkpoint_dir=tmp_path, checkpoint_every=1)  # leaves its last checkpoint (the CLI removes it)
    other = replace(cfg, seed=7)
    with pytest.raises(ConfigError, match="resume: the checkpoint was written by a different configuration"):
        run(other, checkpoint_dir=tmp_path, checkpoint_every=1)


@pytest.mark.parametrize("damage, why", [
    (lambda e: e["train"].update({k: v[:, :-1] for k, v in e["train"].items()}), "its training metrics have shapes"),
    (lambda e: e.update(updates_done=e["updates_done"] - 1), "it holds 1 updates' environments, its progress says 2"),
    (lambda e: e.update(eval_returns=e["eval_returns"][:-1]),
     "its curve has (3,) evaluation steps and returns of shape (2, 2)"),
    (lambda e: e.update(envs=e["envs"][:-1]), "its environments are not this run's 2 x"),
    (lambda e: e.pop("obs"), "it has no obs"),
], ids=["train", "updates", "curve", "envs", "missing"])
def test_a_host_checkpoint_whose_rollout_state_does_not_fit_its_progress_is_refused(tmp_path, damage, why):
    """The host runner keeps its training metrics, curve and environments beside the state; a
    checkpoint whose copies of them do not fit the updates it says were done (a file of another
    program; a digest-less one of an older version) is refused, naming the file, not half-used
    (it raised an IndexError from the restore, or ran on with a shorter curve)."""
    cfg = replace(with_bpo(get_preset("cartpole_ppo"), True), seeds=2, **HOST_TINY)
    run(cfg, checkpoint_dir=tmp_path, checkpoint_every=1)  # leaves its last checkpoint, after update 2 of 2
    raw = ckpt.read_payload(tmp_path)
    damage(raw["extra"])
    ckpt.write_payload(tmp_path, raw)
    with pytest.raises(ckpt.UnreadableCheckpoint, match=re.escape(why)):
        run(cfg, checkpoint_dir=tmp_path, checkpoint_every=1)


def _unfinished_run(tmp_path) -> tuple[Path, object]:
    """A run folder holding a real checkpoint, as a run killed mid-way leaves it."""
    cfg = replace(with_bpo(get_preset("short_corridor"), True), episodes=40, eval_every=10, eval_episodes=2, seeds=2)
    out = tmp_path / "run"
    run(cfg, checkpoint_dir=out / "checkpoint", checkpoint_every=2)
    assert ckpt.exists(out / "checkpoint")
    return out, cfg


@pytest.mark.parametrize("damage", ["garbage", "truncated", "foreign", "info without progress", "a changed byte",
                                    "progress past the end", "an array of another shape", "outputs of fewer iterations",
                                    "progress short of its outputs", "another seed count"])
def test_a_damaged_checkpoint_is_refused_with_one_line_naming_the_file(tmp_path, damage):
    out, _ = _unfinished_run(tmp_path)
    state = out / "checkpoint" / ckpt.STATE_FILE
    if damage == "garbage":
        state.write_bytes(b"\x00not msgpack at all\xff" * 10)
    elif damage == "a changed byte":  # still valid msgpack, with a parameter one bit off: only the digest sees it
        data = bytearray(state.read_bytes())
        theta = ckpt.read_payload(out / "checkpoint")["state"]["carry"]["pi_params"]["params"]["theta"]
        at = bytes(data).index(np.asarray(theta).tobytes())
        data[at] ^= 1
        state.write_bytes(bytes(data))
    elif damage in ("progress past the end", "an array of another shape", "outputs of fewer iterations",
                    "progress short of its outputs", "another seed count"):  # well-formed, with a digest that matches
        raw = ckpt.read_payload(out / "checkpoint")
        info = json.loads(raw["info"])
        if damage == "progress past the end":
            raw["info"] = json.dumps({**info, "iterations_done": info["iterations"] + 1})
        elif damage == "progress short of its outputs":  # it would run an iteration again, its outputs twice
            raw["info"] = json.dumps({**info, "iterations_done": info["iterations_done"] - 1})
        elif damage == "outputs of fewer iterations":
            raw["state"]["outputs"] = jax.tree.map(lambda x: x[:, :-1], raw["state"]["outputs"])
        elif damage == "another seed count":
            raw["state"]["carry"] = jax.tree.map(lambda x: x[:1], raw["state"]["carry"])
        else:
            params = raw["state"]["carry"]["pi_params"]["params"]
            params["theta"] = np.zeros(np.shape(params["theta"]) + (2,), np.float32)
        ckpt.write_payload(out / "checkpoint", raw)
    elif damage == "truncated":
        state.write_bytes(state.read_bytes()[:1000])
    elif damage == "foreign":
        from flax import serialization

        state.write_bytes(serialization.msgpack_serialize({"weights": np.zeros(3)}))
    else:
        raw = ckpt.read_payload(out / "checkpoint")
        raw["info"] = json.dumps({"config": json.loads(raw["info"])["config"]})  # no iterations_done
        ckpt.write_payload(out / "checkpoint", raw)
    done = bpo(["train", "--resume", str(out), "--no-progress"])
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert f"checkpoint: '{state}' cannot be used" in done.stderr and "remove the checkpoint folder" in done.stderr
    why = {"a changed byte": "its SHA-256 does not match its contents",
           "progress past the end": "is not a count of the run's iterations",
           "an array of another shape": "['theta'] is float32[2, 2, 2], the run's float32[2, 2]",
           "outputs of fewer iterations": "state['outputs'][0]['eval_episode'] is int32[2, 4], the run's int32[2, 5]",
           "progress short of its outputs": "state['outputs'][0]['eval_episode'] is int32[2, 5], the run's int32[2, 4]",
           "another seed count": "state['carry'].key is uint32[1, 2], the run's uint32[2, 2]"}
    assert why.get(damage, "") in done.stderr


@pytest.mark.parametrize("info, why", [
    ({"iterations_done": -1, "iterations": 4}, "-1 of 4 iterations, is not a count"),
    ({"iterations_done": "3", "iterations": 4}, "'3' of 4 iterations, is not a count"),
    ({"iterations_done": None}, "None of None iterations, is not a count"),
    ({"iterations_done": True, "iterations": 4}, "True of 4 iterations, is not a count"),
    ({"iterations_done": 1, "iterations": 4, "elapsed": "garbage"}, "its elapsed times, 'garbage', are not"),
    ({"iterations_done": 1, "elapsed": {"wall_time_s": "1"}}, "are not a mapping of names to seconds"),
    ({"iterations_done": 1, "options": [[[[[[[[[[[]]]]]]]]]]]}, "its settings nest 12 levels deep"),
])
def test_a_checkpoint_whose_progress_is_not_a_count_is_refused(tmp_path, info, why):
    cfg = get_preset("short_corridor")
    ckpt.save(tmp_path, {"x": np.zeros(2, np.float32)}, {}, info, cfg)
    template = {"x": np.zeros(2, np.float32)}
    for read in (lambda: ckpt.read_info(tmp_path), lambda: ckpt.load(tmp_path, lambda _: template)):
        with pytest.raises(ckpt.UnreadableCheckpoint, match=re.escape(why)):
            read()


@pytest.mark.parametrize("edit, why", [
    ({"config": []}, "holds no config of the run (an object)"),
    ({"options": [1]}, "its output options (an object) or seed chunk (a count) are not what `bpo train` writes"),
    ({"seed_chunk": "x"}, "its output options (an object) or seed chunk (a count) are not what `bpo train` writes"),
])
def test_a_checkpoint_whose_settings_are_not_bpo_train_s_is_refused_by_resume(tmp_path, edit, why):
    """A checkpoint is checked by its digest, and one of a version before the digest is read as it
    is: settings of the wrong type in it gave AttributeError and TypeError tracebacks at --resume."""
    where = tmp_path / "checkpoint"
    info = {"iterations_done": 1, "iterations": 2, "checkpoint_every": 1, "seed_chunk": None, "options": {}}
    ckpt.save(where, {"x": np.zeros(2, np.float32)}, {}, info, get_preset("short_corridor"))
    raw = ckpt.read_payload(where)
    raw["info"] = json.dumps({**json.loads(raw["info"]), **edit})
    ckpt.write_payload(where, raw)
    with pytest.raises(ConfigError, match=re.escape(why)):
        resume_job(tmp_path)


def test_a_resume_whose_checkpoint_went_before_the_folder_was_locked_is_refused(tmp_path):
    """``bpo train --resume`` reads the checkpoint, then locks the folder: where the run holding
    the lock published in between (its checkpoint removed), the resume is refused by name, leaving
    no lock behind, instead of training the run again from its start (second adversarial review)."""
    cfg = get_preset("short_corridor")
    info = {"iterations_done": 1, "iterations": 2, "checkpoint_every": 1, "seed_chunk": None, "options": {},
            "config": to_dict(cfg)}
    run = tmp_path / "run"
    ckpt.save(run / "checkpoint", {"x": np.zeros(2, np.float32)}, {}, info, cfg)
    job = resume_job(run)
    ckpt.remove(run / "checkpoint")
    with pytest.raises(ConfigError, match=re.escape("no longer holds the checkpoint to continue")):
        check_outputs(job)
    assert [p.name for p in tmp_path.iterdir()] == ["run"]


def test_a_checkpoint_is_checked_against_the_run_s_dtypes_and_axes_and_a_digest_less_one_still_loads(tmp_path):
    cfg, x = get_preset("short_corridor"), {"a": np.arange(3, dtype=np.float32), "b": np.zeros(2, np.uint32)}
    ckpt.save(tmp_path, x, {}, {"iterations_done": 1, "iterations": 4}, cfg)
    assert (tmp_path / ckpt.STATE_FILE).read_bytes()[-42:-32] == ckpt.TRAILER
    jax_tree_equal = lambda a, b: all(np.array_equal(a[k], b[k]) and a[k].dtype == b[k].dtype for k in a)  # noqa: E731
    dones = []
    assert jax_tree_equal(ckpt.load(tmp_path, lambda done: dones.append(done) or x)[0], x)
    assert dones == [1]  # the template is asked for the state after the iterations the checkpoint holds
    with pytest.raises(ckpt.UnreadableCheckpoint, match=re.escape("state['a'] is float32[3], the run's float32[3, 1]")):
        ckpt.load(tmp_path, lambda _: {**x, "a": np.zeros((3, 1), np.float32)})
    # Another length (outputs of fewer iterations than its progress says, another seed count) too.
    with pytest.raises(ckpt.UnreadableCheckpoint, match=re.escape("state['a'] is float32[3], the run's float32[4]")):
        ckpt.load(tmp_path, lambda _: {**x, "a": np.zeros(4, np.float32)})
    with pytest.raises(ckpt.UnreadableCheckpoint, match=re.escape("state['b'] is uint32[2], the run's int32[2]")):
        ckpt.load(tmp_path, lambda _: {**x, "b": np.zeros(2, np.int32)})
    # A file of a version before the digest (msgpack alone) loads as it did.
    path = tmp_path / ckpt.STATE_FILE
    path.write_bytes(path.read_bytes()[:-42])
    assert jax_tree_equal(ckpt.load(tmp_path, lambda _: x)[0], x) and ckpt.read_info(tmp_path)["iterations_done"] == 1


def test_a_new_run_may_not_start_over_an_unfinished_run_s_checkpoint(tmp_path):
    """The checkpoint would otherwise stay beside the new results, and a later --resume would
    replace them with the old run's."""
    out, _ = _unfinished_run(tmp_path)
    args = ["train", "short_corridor", "--no-bpo", "--episodes", "20", "--no-progress", "--out", str(out)]
    for extra in ([], ["--checkpoint-every", "2"]):  # not checkpointing; checkpointing another config
        done = bpo([*args, *extra])
        assert done.returncode == 2 and "holds the checkpoint of an unfinished run" in done.stderr, done.stderr
        assert f"bpo train --resume {out}" in done.stderr
    assert not (out / "summary.json").exists() and ckpt.exists(out / "checkpoint")


def test_a_checkpoint_of_another_seed_chunk_is_refused_before_the_run_starts(tmp_path):
    """The seed chunk is part of the compiled program: the same config with another chunk cannot
    continue the checkpoint, and says so before it continues or compiles anything."""
    out, _ = _unfinished_run(tmp_path)  # written with this machine's default chunk (10 on a CPU)
    done = bpo(["train", "short_corridor", "--bpo", "--episodes", "40", "--eval-every", "10", "--eval-episodes", "2",
                "--seeds", "2", "--checkpoint-every", "2", "--seed-chunk", "1", "--no-progress", "--out", str(out)])
    assert done.returncode == 2, done.stderr
    assert "holds the checkpoint of an unfinished run (the checkpoint was written with seed_chunk=10, this run " \
           "uses 1)" in done.stderr, done.stderr
    assert "continuing" not in done.stderr and ckpt.exists(out / "checkpoint")


def event_records(folder: Path) -> int:
    """Records in a folder's TensorBoard event files (TFRecord: length, its CRC, data, its CRC),
    read without TensorBoard: one per file is the file-version header, every other one is data."""
    count = 0
    for path in folder.glob("events.out.tfevents.*"):
        data, at = path.read_bytes(), 0
        while at + 12 <= len(data):
            at += 12 + int.from_bytes(data[at:at + 8], "little") + 4
            count += 1
    return count - len(list(folder.glob("events.out.tfevents.*")))


@pytest.mark.slow
def test_resume_keeps_tensorboard_and_counts_the_time_of_every_segment(tmp_path):
    """``--resume`` continues with the output options the run started with, and the summary's
    times are those of all its segments: at least the killed segment's up to its checkpoint."""
    out = tmp_path / "run"
    args = ["train", "cartpole_ppo", "--bpo", "--total-timesteps", "8192", "--eval-every", "1024",
            "--eval-episodes", "2", "--seeds", "2", "--checkpoint-every", "1", "--tensorboard", "--no-progress",
            "--out", str(out)]
    kill_after_checkpoint(args, out)
    before = ckpt.read_info(out / "checkpoint")
    assert before["options"]["tensorboard"] is True
    earlier = before["elapsed"]
    start = time.monotonic()
    resumed = bpo(["train", "--resume", str(out), "--no-progress"])
    segment = time.monotonic() - start
    assert resumed.returncode == 0, resumed.stderr
    assert event_records(out / "tb") >= 8  # the run's evaluations at least, logged when it ended
    summary = json.loads((out / "summary.json").read_text())
    assert earlier["wall_time_s"] < summary["wall_time_s"] < earlier["wall_time_s"] + segment
    assert summary["compile_time_s"] > earlier["compile_time_s"]  # compiled in both segments
    steps = summary["env_steps"]
    assert summary["train_steps_per_s"] == pytest.approx(
        steps / (summary["wall_time_s"] - summary["compile_time_s"] - summary["eval_time_s"]))


def test_a_non_finite_metric_names_its_update_counted_from_one():
    """Stop messages count updates from 1 ("after update 37 of 733"); the NaN stop said "update 0"
    for the first update's NaN (the row of train_metrics.csv)."""
    with pytest.raises(ckpt.NonFiniteError, match=r"^pg_loss is not finite in update 1$"):
        ckpt.raise_if_non_finite({"pg_loss": np.array([[np.nan, 1.0]])}, 0, "update")
    with pytest.raises(ckpt.NonFiniteError, match=r"^pg_loss is not finite in update 6$"):  # a block from update 4 on
        ckpt.raise_if_non_finite({"pg_loss": np.array([[1.0, 1.0, np.inf]])}, 3, "update")


def test_a_nan_before_any_checkpoint_names_no_checkpoint(tmp_path):
    """The state is checked where it would be saved: with no checkpoint written yet, the message
    does not point at one."""
    poisoned = {"theta": np.array([1.0, np.nan])}
    runner = SimpleNamespace(snapshot=lambda done: (poisoned, {}, poisoned), unit="update", n_iterations=4,
                             checkpoint_info={})
    with pytest.raises(ckpt.NonFiniteError) as err:
        driver.save(runner, get_preset("short_corridor"), tmp_path, 1, 1)
    assert str(err.value) == "state['theta'] is not finite after update 1"
    assert not ckpt.exists(tmp_path)


def interrupted_after_a_checkpoint(argv: list[str], out: Path) -> tuple[int, str, str]:
    """``bpo ARGV`` in a process of its own, sent SIGINT once it has written its first checkpoint
    into ``out``: (exit code, stdout, stderr)."""
    proc = subprocess.Popen([sys.executable, "-m", "experiments.cli", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    info, deadline = out / "checkpoint" / ckpt.INFO_FILE, time.monotonic() + 300
    while not info.exists():
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    return proc.returncode, stdout, stderr


@pytest.mark.slow
def test_ctrl_c_keeps_a_default_run_and_the_same_command_continues_it(tmp_path):
    """`bpo train` checkpoints by default (about ten per run): Ctrl-C keeps the run, and running the
    same command again continues it to the results of an uninterrupted run."""
    at = SHORT_CORRIDOR.index("--checkpoint-every")
    args = SHORT_CORRIDOR[:at] + SHORT_CORRIDOR[at + 2:]
    whole, stopped = tmp_path / "whole", tmp_path / "stopped"
    assert bpo([*args, "--out", str(whole)]).returncode == 0
    code, _, err = interrupted_after_a_checkpoint([*args, "--out", str(stopped)], stopped)
    assert code == 130, err
    assert f"bpo train --resume {stopped}" in err and ckpt.exists(stopped / "checkpoint")
    again = bpo([*args, "--out", str(stopped)])
    assert again.returncode == 0, again.stderr
    assert "continuing the interrupted run from its checkpoint" in again.stderr
    same_run_directories(whole, stopped)
    assert not (stopped / "checkpoint").exists()


def bar_count(stdout: str, label: str) -> tuple[int, int]:
    """(done, total) of the last frame of the progress bar labelled ``label`` in a command's
    output; off a terminal the bar writes whole lines (``bpo.infra.progress``)."""
    frames = [line for line in stdout.splitlines() if line.startswith(label)]
    assert frames, f"no progress line starting {label!r} in:\n{stdout}"
    done, total = re.search(r" (\d+)/(\d+) ", frames[-1]).groups()
    return int(done), int(total)


@pytest.mark.slow
@pytest.mark.parametrize("args, label, evaluations", [
    (SHORT_CORRIDOR, "short_corridor/ShortCorridor-v0/bpo", 21),  # 200 episodes / 10, and the one before training
    (CARTPOLE_HOST, "cartpole_ppo/CartPole-v1/bpo", 5),  # 4096 / 1024 steps, and the one before training
], ids=["jax-runner", "gymnasium-host-runner"])
def test_the_progress_bar_of_a_resumed_run_starts_where_it_stopped_and_ends_full(tmp_path, args, label, evaluations):
    """Stopped by Ctrl-C after a checkpoint and run again with the same command, the progress bar
    counts on from the evaluations made before (it ended at e.g. 4/21 before). The bar counts
    evaluations, each of every seed, not evaluations x seeds."""
    args = [a for a in args if a != "--no-progress"] + ["--out", str(tmp_path / "run")]
    code, out, err = interrupted_after_a_checkpoint(args, tmp_path / "run")
    assert code == 130, err
    stopped_at, total = bar_count(out, label)
    assert total == evaluations and 0 < stopped_at < evaluations
    again = bpo(args)
    assert again.returncode == 0, again.stderr
    assert "continuing the interrupted run from its checkpoint" in again.stderr
    assert bar_count(again.stdout, label) == (evaluations, evaluations)


def test_a_checkpoint_that_names_the_target_state_ppo_still_loads(tmp_path):
    """Checkpoints written before ``LearnerState.ppo`` became ``target`` load into this version
    (``bpo.agents.learner.migrate_state_dict``), values unchanged; without the migration they would not."""
    import jax
    from flax import serialization

    from bpo.agents.learner import make_learner, migrate_state_dict
    from bpo.config.schema import traced_hyperparams
    from envs import make_env

    cfg = with_bpo(get_preset("cartpole_ppo"), True)
    learner, hp = make_learner(cfg, make_env(cfg.env).spec), traced_hyperparams(cfg)
    keys = jax.random.split(jax.random.PRNGKey(0), 4)
    state = learner.init(tuple(keys[:3]), hp, jax.random.normal(keys[3], (cfg.ppo.n_envs, 4)))
    ckpt.save(tmp_path, {"carry": state}, {}, {"iterations_done": 1}, cfg)
    path = tmp_path / ckpt.STATE_FILE
    raw = ckpt.read_payload(tmp_path)
    learner_dict = raw["state"]["carry"]
    learner_dict["ppo"] = learner_dict.pop("target")  # as the older version wrote it
    path.write_bytes(serialization.msgpack_serialize(raw))

    loaded, _, _ = ckpt.load(tmp_path, lambda _: {"carry": state}, migrate_state_dict)
    jax.tree.map(np.testing.assert_array_equal, loaded, {"carry": state})
    with pytest.raises(Exception, match="target"):
        ckpt.load(tmp_path, lambda _: {"carry": state})


def test_a_checkpoint_continues_with_other_physics_threads_but_not_another_seed(tmp_path):
    """``physics_threads`` (and the other ``RESUMABLE_CHANGES``) change how the steps execute, not
    the run's state: a checkpoint written with 2 threads continues with 4; one written for another
    seed or budget is still refused."""
    cfg = replace(get_preset("mujoco_default", "Hopper-v5"), backend="threads", physics_threads=2)
    ckpt.save(tmp_path, {"x": np.zeros(2)}, {}, {"iterations_done": 1}, cfg)
    assert ckpt.mismatch(tmp_path, replace(cfg, physics_threads=4)) is None
    assert ckpt.mismatch(tmp_path, replace(cfg, physics_threads=0, eval_in_background=False)) is None
    for other in (replace(cfg, seed=1), replace(cfg, total_timesteps=cfg.total_timesteps * 2),
                  replace(cfg, save_policies_every=1)):
        assert ckpt.mismatch(tmp_path, other) == "the checkpoint was written by a different configuration"


def _rewrite_info_config(directory: Path, change) -> None:
    """The checkpoint in ``directory`` with its recorded config replaced by ``change(config)``, in the
    state file (where it is read from) as an older version would have written it."""
    from flax import serialization

    path = directory / ckpt.STATE_FILE
    raw = ckpt.read_payload(directory)
    info = json.loads(raw["info"])
    raw["info"] = json.dumps({**info, "config": change(info["config"])})
    path.write_bytes(serialization.msgpack_serialize(raw))


@pytest.mark.parametrize("algo", ["reinforce", "bpo"])
def test_a_checkpoint_written_with_algo_continues_the_run_it_belongs_to(tmp_path, algo):
    """Checkpoints written before the bpo section was optional recorded ``algo`` and always a bpo
    section; they continue the run they meant, and no other."""
    import jax

    from bpo.config.schema import EpisodicBehaviourConfig, to_dict

    cfg = replace(with_bpo(get_preset("short_corridor"), algo == "bpo"), episodes=40, eval_every=10,
                  eval_episodes=2, seeds=2)
    whole = run(cfg, checkpoint_dir=tmp_path, checkpoint_every=2).metrics  # leaves its last checkpoint
    old_section = to_dict(EpisodicBehaviourConfig())
    _rewrite_info_config(tmp_path, lambda c: {**c, "algo": algo, "bpo": c["bpo"] or old_section})
    assert ckpt.mismatch(tmp_path, cfg) is None
    assert ckpt.mismatch(tmp_path, with_bpo(cfg, algo != "bpo")) is not None  # the other algorithm: refused
    resumed = run(cfg, checkpoint_dir=tmp_path, checkpoint_every=1).metrics
    jax.tree.map(np.testing.assert_array_equal, resumed, whole)
    _rewrite_info_config(tmp_path, lambda c: {k: v for k, v in c.items() if k != "max_episode_steps"})
    assert ckpt.mismatch(tmp_path, cfg) is not None  # a field missing that is not a compatible addition


@pytest.mark.slow
def test_a_grouped_sweep_stopped_by_sigterm_continues_its_program_from_the_checkpoint(tmp_path):
    """`bpo sweep --group-rows` checkpoints each program of rows (issue 45, class 11): stopped by
    SIGTERM after a checkpoint, the same command continues the group, and every run directory is
    the one an uninterrupted grouped sweep writes."""
    rows = ["bpo_c1.5_rho1.5", "bpo_c1.0_rho1.5"]
    sweep = ["sweep", "--preset", "cartpole_ppo", "--variants", *rows, "--set", "total_timesteps=12800",
             "eval_every=2560", "eval_episodes=2", "--seeds", "2", "--group-rows", "--no-progress"]
    whole, stopped = tmp_path / "whole", tmp_path / "stopped"
    assert bpo([*sweep, "--out", str(whole)]).returncode == 0
    proc = subprocess.Popen([sys.executable, "-m", "experiments.cli", *sweep, "--out", str(stopped)],
                            start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 300
    while not list((stopped / ".checkpoints").glob(f"group-*/{ckpt.INFO_FILE}")):
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 128 + signal.SIGTERM, out
    assert "interrupted runs continue from their checkpoints" in out
    done = json.loads(next((stopped / ".checkpoints").glob(f"group-*/{ckpt.INFO_FILE}")).read_text())
    assert 0 < done["iterations_done"] < 51  # 50 updates and the last evaluation
    again = bpo([*sweep, "--out", str(stopped)])
    assert again.returncode == 0, again.stdout + again.stderr
    run_ids = [p.name for p in whole.iterdir() if p.name.startswith("CartPole")]
    assert len(run_ids) == 2
    for run_id in run_ids:
        same_run_directories(whole / run_id, stopped / run_id)
    assert not list((stopped / ".checkpoints").glob("group-*/*"))
