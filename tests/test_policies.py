"""Trained policies saved with every run and loaded back in one line (``bpo.training.policies``):
each seed's pi and mu, saved and loaded, act as the run's own parameters do; damaged or missing
files are refused with a message naming them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import gymnasium as gym
import imageio.v3 as iio
import jax
import numpy as np
import pytest
from flax import serialization

from bpo.agents.learner import make_learner
from bpo.config.presets import get_preset
from bpo.config.schema import replace, with_bpo
from bpo.training import driver, run, write
from bpo.training.policies import FILE, NoPolicies, load_policies, load_policy
from envs.gymnasium_envs import gym_spec
from experiments.cli import main


@pytest.fixture(scope="module")
def cartpole_run(tmp_path_factory):
    cfg = replace(with_bpo(get_preset("cartpole_ppo"), True), total_timesteps=4096, eval_every=1024, eval_episodes=3,
                  seeds=2)
    out_dir = tmp_path_factory.mktemp("runs") / "cartpole"
    out = run(cfg)
    write(out, out_dir)
    return cfg, out_dir, out.metrics["final"]


def test_a_loaded_policy_acts_as_the_trained_one(cartpole_run):
    """Saved and loaded, each seed's pi (and mu) chooses the actions the run's own parameters
    choose, on observations of real Gymnasium episodes, with the normaliser applied."""
    cfg, out_dir, final = cartpole_run
    saved = load_policies(out_dir)
    assert saved.seeds == 2 and {"actor_params", "critic_params", "obs_stats", "mu_params", "key"} <= set(saved.final)
    learner = make_learner(cfg, gym_spec(cfg.env))
    env = gym.make(cfg.env)
    obs = np.stack([env.reset(seed=i)[0] for i in range(64)]).astype(np.float32)
    for seed in range(2):
        own = jax.tree.map(lambda x, s=seed: x[s], final)
        stats = own["obs_stats"]
        for which, params in (("pi", own["actor_params"]), ("mu", own["mu_params"])):
            want = np.asarray(learner.greedy_with(params, stats, obs))
            np.testing.assert_array_equal(load_policy(out_dir, seed=seed, which=which)(obs), want)
    act, total = load_policy(out_dir, seed=0), 0.0
    obs, _ = env.reset(seed=0)
    for _ in range(500):  # the README's loop: a loaded policy drives a Gymnasium environment
        obs, reward, terminated, truncated, _ = env.step(int(act(obs)))
        total += reward
        if terminated or truncated:
            break
    assert total >= 1.0


def test_mu_and_sampled_actions_are_available(cartpole_run):
    _, out_dir, _ = cartpole_run
    obs = np.zeros((5, 4), np.float32)
    assert load_policy(out_dir, which="mu")(obs).shape == (5,)
    sampled = load_policy(out_dir, deterministic=False, key=3)
    draws = np.stack([sampled(obs) for _ in range(20)])
    assert set(np.unique(draws)) <= {0, 1} and len(np.unique(draws)) == 2  # a stochastic policy, both actions


def test_missing_or_damaged_policies_are_refused_naming_the_file(cartpole_run, tmp_path):
    _, out_dir, _ = cartpole_run
    with pytest.raises(NoPolicies, match="no saved policies"):
        load_policy(tmp_path)
    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / "config.json").write_text((out_dir / "config.json").read_text())
    (copy / FILE).write_bytes((out_dir / FILE).read_bytes()[:100])
    with pytest.raises(NoPolicies, match=f"{FILE}.*cannot be read"):
        load_policy(copy)
    with pytest.raises(ValueError, match="seed: must be in"):
        load_policy(out_dir, seed=2)
    payload = serialization.msgpack_restore((out_dir / FILE).read_bytes())
    for damaged in ({k: v for k, v in payload.items() if k != "kind"}, {**payload, "kind": "ppo"},
                    {**payload, "during": {"after": payload["final"]}}, {**payload, "during": [1]}):
        (copy / FILE).write_bytes(serialization.msgpack_serialize(damaged))
        with pytest.raises(NoPolicies, match=f"{FILE}.*not a bpo-policies"):
            load_policy(copy)
    parts = tmp_path / "rescued"  # a run rescued in parts over a file-size limit (bpo.infra.results)
    parts.mkdir()
    (parts / "config.json").write_text((out_dir / "config.json").read_text())
    data = (out_dir / FILE).read_bytes()
    (parts / f"{FILE}.part000").write_bytes(data[:1000])
    (parts / f"{FILE}.part001").write_bytes(data[1000:])
    with pytest.raises(NoPolicies, match=r"is in parts: join them first with `cat policies.msgpack.part\* >"):
        load_policy(parts)
    (parts / FILE).write_bytes((parts / f"{FILE}.part000").read_bytes() + (parts / f"{FILE}.part001").read_bytes())
    assert load_policy(parts, seed=1) is not None  # joined as the message says, it loads


def test_bpo_evaluate_repeats_the_recorded_final_returns(cartpole_run, capsys):
    """With the defaults the episodes are the run's final evaluation's: the same numbers, per seed."""
    _, out_dir, _ = cartpole_run
    assert main(["evaluate", str(out_dir)]) == 0
    written = sorted((out_dir / "evaluations").glob("*.json"))
    assert len(written) == 1
    result = json.loads(written[0].read_text())
    summary = json.loads((out_dir / "summary.json").read_text())
    assert result["per_seed_mean"] == summary["final_eval_returns"]
    assert result["mean"] == pytest.approx(summary["final_mean"], rel=1e-12)
    assert np.shape(result["lengths"]) == (2, 3)
    assert main(["evaluate", str(out_dir), "--which", "mu", "--stochastic", "--seed", "5", "--episodes", "4"]) == 0
    other = json.loads((out_dir / "evaluations" / "mu-stochastic-4ep-run-seed5.json").read_text())
    assert np.shape(other["returns"]) == (2, 4) and other["se"] > 0


def test_bpo_evaluate_does_not_set_another_run_s_recorded_mean_beside_its_own(cartpole_run, tmp_path, capsys):
    """A summary.json copied from another run (its config digest another config's) was shown as
    "recorded", the run's own final evaluation (adversarial audit, session 62): it is not shown,
    and a warning says why."""
    _, out_dir, _ = cartpole_run
    run = tmp_path / "copied"
    shutil.copytree(out_dir, run, ignore=shutil.ignore_patterns("evaluations"))
    summary = json.loads((run / "summary.json").read_text())
    assert main(["evaluate", str(run)]) == 0
    assert "recorded" in capsys.readouterr().out
    (run / "summary.json").write_text(json.dumps({**summary, "config_sha256": "0" * 64, "final_mean": 9999.0}))
    assert main(["evaluate", str(run), "--out", str(tmp_path / "ev")]) == 0
    out, err = capsys.readouterr()
    assert "recorded" not in out and "9999" not in out
    assert "summary.json: its config_sha256 is not the digest of config.json" in err


def test_bpo_evaluate_refuses_a_folder_without_policies(tmp_path, capsys):
    assert main(["evaluate", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: run: ") and "no saved policies" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "evaluations").exists()
    assert main(["evaluate", str(tmp_path / "mistyped")]) == 2  # not "train the run again"
    assert "error: run: " in (err := capsys.readouterr().err) and "is not a folder" in err


@pytest.mark.mujoco
@pytest.mark.slow
def test_a_mujoco_policy_is_re_evaluated_on_threads_and_rendered_headless(tmp_path, capsys):
    """A Hopper run on the threads backend: `bpo evaluate` repeats its final returns, and
    `--video` renders episodes offscreen (EGL, no display) into frames that change."""
    out = tmp_path / "hopper"
    assert main(["train", "mujoco_default", "--env", "Hopper-v5", "--backend", "threads", "--total-timesteps", "1024",
                 "--ppo.n-steps", "256", "--eval-every", "512", "--eval-episodes", "2", "--seeds", "2",
                 "--bpo.n-qvf-epochs", "1", "--bpo.n-mu-epochs", "1", "--no-progress", "--out", str(out)]) == 0
    video = tmp_path / "hopper.gif"
    assert main(["evaluate", str(out), "--video", str(video), "--video-frames", "12"]) == 0
    result = json.loads(next((out / "evaluations").glob("*.json")).read_text())
    summary = json.loads((out / "summary.json").read_text())
    assert result["per_seed_mean"] == summary["final_eval_returns"] and result["backend"] == "threads"
    frames = iio.imread(video, index=None)
    assert frames.shape == (12, 320, 480, 3)
    assert frames.std() > 10  # a scene, not a blank image
    assert np.abs(frames[-1].astype(float) - frames[0]).mean() > 0.5  # the hopper moves
    assert "video: 12 frames" in capsys.readouterr().out


def test_a_video_format_that_cannot_be_written_is_refused_first(cartpole_run, tmp_path, capsys):
    _, out_dir, _ = cartpole_run
    assert main(["evaluate", str(out_dir), "--video", str(tmp_path / "v.avi")]) == 2
    assert capsys.readouterr().err.startswith("error: video: ")
    assert not (tmp_path / "v.avi").exists()


def test_a_classic_control_video_is_written_without_audio_errors(cartpole_run, tmp_path):
    """Gymnasium draws CartPole with pygame, which started its audio too: on a machine without a
    sound card ALSA printed eight error lines around the video. The renderer now runs without audio
    (``SDL_AUDIODRIVER=dummy``), and without a window (``SDL_VIDEODRIVER=dummy``: with no
    ``XDG_RUNTIME_DIR`` SDL printed an error line; newcomer's walkthrough, session 62). A real
    process: the lines came from C, past Python's streams."""
    pytest.importorskip("pygame")
    _, out_dir, _ = cartpole_run
    env = {k: v for k, v in os.environ.items() if k not in ("SDL_AUDIODRIVER", "SDL_VIDEODRIVER", "XDG_RUNTIME_DIR")}
    proc = subprocess.run([sys.executable, "-m", "experiments.cli", "evaluate", str(out_dir), "--episodes", "1",
                           "--video", str(tmp_path / "v.gif"), "--video-frames", "20", "--out", str(tmp_path / "ev")],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "v.gif").stat().st_size > 0
    assert "ALSA" not in proc.stdout + proc.stderr and "XDG_RUNTIME_DIR" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("flags, field", [(["--video-episodes", "0"], "video_episodes"),
                                          (["--video-frames", "0"], "video_frames"), ([], "video")])
def test_video_settings_that_cannot_make_a_video_are_refused_before_the_evaluation(cartpole_run, tmp_path, capsys,
                                                                                   flags, field):
    """``--video-episodes 0`` and ``--video`` naming an existing folder raised after the evaluation
    was written; each is refused first, with nothing written."""
    _, out_dir, _ = cartpole_run
    folder = tmp_path / "a-folder.gif"
    folder.mkdir()
    video = folder if field == "video" else tmp_path / "v.gif"
    before = sorted((out_dir / "evaluations").glob("*")) if (out_dir / "evaluations").exists() else []
    assert main(["evaluate", str(out_dir), "--seed", "11", "--video", str(video), *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {field}: ") and len(err.strip().splitlines()) == 1, err
    after = sorted((out_dir / "evaluations").glob("*")) if (out_dir / "evaluations").exists() else []
    assert after == before and not (tmp_path / "v.gif").exists() and list(folder.iterdir()) == []


@pytest.mark.parametrize("episodes", ["0", "3000000000"])
def test_an_episode_count_outside_int32_is_refused_before_the_evaluation(cartpole_run, capsys, episodes):
    """3e9 episodes ended in XLA's RESOURCE_EXHAUSTED allocating their keys."""
    _, out_dir, _ = cartpole_run
    assert main(["evaluate", str(out_dir), "--episodes", episodes, "--out", str(out_dir / "never")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: episodes: must be an integer in [1, 2,147,483,647] (counted in 32 bits), "
                          f"got {episodes}") and not (out_dir / "never").exists(), err


def test_policies_kept_during_training_survive_a_resume(tmp_path):
    """``save_policies_every``: the policies after every update are kept, the same whether the run
    was stopped and resumed or not; the first kept differs from the final ones."""
    size = get_preset("cartpole_ppo").rollout_size
    cfg = replace(with_bpo(get_preset("cartpole_ppo"), True), total_timesteps=size * 3, eval_every=size,
                  eval_episodes=2, seeds=2, save_policies_every=1)
    whole = tmp_path / "whole"
    write(run(cfg), whole)
    saved = load_policies(whole)
    # 4 loop iterations (3 updates, then the final evaluation): kept after iterations 1-3, the final separately.
    assert sorted(saved.during) == [1, 2, 3]
    changed = jax.tree.map(lambda a, b: not np.array_equal(a, b), saved.during[1]["actor_params"],
                           saved.final["actor_params"])
    assert any(jax.tree.leaves(changed))  # later updates changed pi (the last has learning rate 0: SB3's schedule)
    real_save, stops = driver.ckpt.save, []

    def stop_after_second(*args, **kw):
        real_save(*args, **kw)
        stops.append(1)
        if len(stops) == 2:
            raise KeyboardInterrupt  # killed right after the checkpoint of update 2

    resumed = tmp_path / "resumed"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(driver.ckpt, "save", stop_after_second)
        with pytest.raises(KeyboardInterrupt):
            run(cfg, checkpoint_dir=resumed / "checkpoint", checkpoint_every=1)
    write(run(cfg, checkpoint_dir=resumed / "checkpoint", checkpoint_every=1), resumed)
    again = load_policies(resumed)
    jax.tree.map(np.testing.assert_array_equal, again.during, saved.during)
    jax.tree.map(np.testing.assert_array_equal, again.final, saved.final)
    with pytest.raises(ValueError, match="no policies kept after iteration 7"):
        load_policy(whole, at=7)
    assert load_policy(whole, at=2)(np.zeros(4, np.float32)).shape == ()


@pytest.mark.parametrize("change", ["another run's policies", "wider networks in the config", "more seeds",
                                    "another run's policies of the same shapes"])
def test_policies_that_are_not_the_run_s_are_refused_by_evaluate_and_probe(cartpole_run, tmp_path, capsys, change):
    """A run folder whose policies.msgpack cannot be its run's (copied from another run, or a config
    edited since): ``bpo evaluate`` and ``bpo probe`` exit 2 with one line naming the file, before
    any episode."""
    cfg, out_dir, _ = cartpole_run
    copy = tmp_path / "run"
    copy.mkdir()
    config = json.loads((out_dir / "config.json").read_text())
    policies = (out_dir / FILE).read_bytes()
    if change == "another run's policies":
        other = replace(with_bpo(cfg, False), total_timesteps=1024, eval_every=512, eval_episodes=1)
        write(run(other), tmp_path / "other")
        policies = (tmp_path / "other" / FILE).read_bytes()  # PPO's: no mu
    elif change == "another run's policies of the same shapes":  # only the config digest in the file tells
        other = replace(cfg, seed=cfg.seed + 1, total_timesteps=1024, eval_every=512, eval_episodes=1)
        write(run(other), tmp_path / "other")
        policies = (tmp_path / "other" / FILE).read_bytes()
    elif change == "wider networks in the config":
        config["ppo"]["pi_hidden"] = [128, 128]
    else:
        config["seeds"] = 3
    if change in ("wider networks in the config", "more seeds"):  # a file of before the digest: its shapes tell
        payload = serialization.msgpack_restore(policies)
        del payload["config_sha256"]
        policies = serialization.msgpack_serialize(payload)
    digest = "its config digest is not that of the run's config.json"
    why = {"another run's policies": digest, "another run's policies of the same shapes": digest,
           "wider networks in the config": "its networks' shapes differ",
           "more seeds": "it holds [2] seeds, the run has 3"}
    (copy / "config.json").write_text(json.dumps(config))
    (copy / FILE).write_bytes(policies)
    for argv in (["evaluate", str(copy)], ["probe", str(copy)]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith(f"error: run: '{copy / FILE}': does not belong to the run"), err
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
        assert why[change] in err, err
    assert sorted(p.name for p in copy.iterdir()) == ["config.json", FILE]


@pytest.mark.parametrize("given", ["summary.json", "checkpoint.json", "empty.json"])
def test_a_file_given_as_a_run_s_config_must_be_one(cartpole_run, tmp_path, capsys, given):
    """``bpo train FILE`` replays a run's config.json; a summary, a checkpoint's progress file or
    ``{}`` trained a default run before (``from_dict`` fills what is missing with defaults)."""
    _, out_dir, _ = cartpole_run
    path = tmp_path / given
    if given == "summary.json":
        path.write_text((out_dir / "summary.json").read_text())
    elif given == "checkpoint.json":
        path.write_text(json.dumps({"iterations_done": 2, "config": json.loads((out_dir / "config.json").read_text())}))
    else:
        path.write_text("{}")
    out = tmp_path / "out"
    assert main(["train", str(path), "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    kind = {"summary.json": "is a run's summary.json", "checkpoint.json": "is a checkpoint's checkpoint.json",
            "empty.json": "is not a run's config.json"}[given]
    assert err.startswith(f"error: config: '{path}' {kind}") and "allowed: the config.json in a run's folder" in err
    assert not out.exists()


def test_bpo_evaluate_out_leaves_a_committed_run_as_it_is(tmp_path, capsys):
    """``--out DIR``: the evaluation goes to DIR; the run's folder (here a committed result) gains no
    ``evaluations/`` and no file changes."""
    from pathlib import Path

    run_dir = Path(__file__).resolve().parent.parent / "results" / "a2c" / "CartPole-v1-cartpole_a2c-a2c"
    before = {p.relative_to(run_dir): p.stat().st_mtime_ns for p in run_dir.rglob("*")}
    assert main(["evaluate", str(run_dir), "--episodes", "2", "--seed", "1", "--out", str(tmp_path / "ev")]) == 0
    assert {p.relative_to(run_dir): p.stat().st_mtime_ns for p in run_dir.rglob("*")} == before
    written = list((tmp_path / "ev").glob("*.json"))
    assert len(written) == 1 and np.shape(json.loads(written[0].read_text())["returns"]) == (5, 2)
    assert str(written[0]) in capsys.readouterr().out
