"""``bpo probe RUN`` (``bpo.training.probe_run``, ``experiments.probe``) on a real BPO-PPO run: one
entry per kept point and the final, the same numbers when run again, refusals before any work, and
the wiring checked against mu = pi, where the variance ratio's interval must contain 1."""

from __future__ import annotations

import json
import shutil

import jax
import numpy as np
import pytest
from flax import serialization

from bpo.config.presets import get_preset
from bpo.config.schema import replace, with_bpo
from bpo.instruments.probe import ProbeSettings
from bpo.training import run, write
from bpo.training.policies import FILE
from bpo.training.probe_run import probe_run
from experiments.cli import main

SMALL = ["--m", "8", "--k", "8", "--horizon", "32", "--ref-k", "16", "--ref-horizon", "64", "--yes"]


@pytest.fixture(scope="module")
def bpo_run(tmp_path_factory):
    """CartPole, BPO-PPO, 2 updates of 2 seeds, policies kept after every update."""
    size = get_preset("cartpole_ppo").rollout_size
    cfg = replace(with_bpo(get_preset("cartpole_ppo"), True), total_timesteps=size * 2, eval_every=size,
                  eval_episodes=2, seeds=2, save_policies_every=1)
    out_dir = tmp_path_factory.mktemp("runs") / "cartpole-bpo"
    write(run(cfg), out_dir)
    return out_dir


def _copy(run_dir, dest, change):
    """A copy of the run directory with its saved policies changed by ``change(payload)``."""
    shutil.copytree(run_dir, dest, ignore=shutil.ignore_patterns("probe"))  # not the probe of another test
    payload = serialization.msgpack_restore((dest / FILE).read_bytes())
    change(payload)
    (dest / FILE).write_bytes(serialization.msgpack_serialize(payload))
    return dest


def test_the_command_writes_every_point_and_repeats_its_numbers(bpo_run, capsys):
    assert main(["probe", str(bpo_run), *SMALL]) == 0
    out = capsys.readouterr().out
    assert "8 states x 8 segments x 32 steps" in out and "2 points probed x 2 seeds" in out and "Var ratio" in out
    first = json.loads((bpo_run / "probe" / "probe.json").read_text())
    assert [p["point"] for p in first["points"]] == [1, 2, "final"]
    assert [p["env_steps"] for p in first["points"]] == [256, 512, 512]
    assert first["points"][2]["seeds"] == first["points"][1]["seeds"]  # the final policies are those of update 2
    for p in first["points"]:
        assert set(p["seeds"]) == {"0", "1"} and p["pooled"]["states"] == 16
        assert p["pooled"]["var_ratio_lo"] <= p["pooled"]["var_ratio_median"] <= p["pooled"]["var_ratio_hi"]
    assert first["provenance"]["command"][:3] == ["bpo", "probe", str(bpo_run)]
    cfg = json.loads((bpo_run / "config.json").read_text())  # the run's own estimator settings
    assert first["returns"] == {"gamma": cfg["ppo"]["gamma"], "lambda": cfg["ppo"]["gae_lambda"],
                                "rho_bar": cfg["returns"]["rho_bar"], "c_bar": cfg["returns"]["c_bar"],
                                "traj": cfg["returns"]["traj"]}
    assert (bpo_run / "probe" / "probe.png").exists() and (bpo_run / "probe" / "probe.pdf").exists()
    assert main(["probe", str(bpo_run), *SMALL]) == 0
    again = json.loads((bpo_run / "probe" / "probe.json").read_text())
    assert again["points"] == first["points"]


def test_mu_replaced_by_pi_gives_ratios_around_one(bpo_run, tmp_path):
    """Independent check of the wiring: with mu's parameters replaced by pi's, every importance
    weight is 1 (ESS = K exactly) and the two sets of segments are exchangeable, so the median
    variance ratio's bootstrap interval contains 1, at the kept point and at the end."""
    def mu_is_pi(payload):
        for tree in (payload["final"], *payload["during"].values()):
            tree["mu_params"] = tree["actor_params"]

    copy = _copy(bpo_run, tmp_path / "mu-is-pi", mu_is_pi)
    result = probe_run(copy, ProbeSettings(m=16, k=16, horizon=32, ref_k=16, ref_horizon=64, n_boot=500),
                       points=["1", "final"])
    for p in result["points"]:
        q = p["pooled"]
        assert q["var_ratio_lo"] <= 1.0 <= q["var_ratio_hi"], q
        assert q["mse_ratio_lo"] <= 1.0 <= q["mse_ratio_hi"], q
        assert q["ess_min"] == pytest.approx(16.0, rel=1e-5)


def _refused(argv, capsys, *needles):
    assert main(["probe", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    for needle in needles:
        assert needle in err, err


def test_a_ppo_run_and_a_folder_without_policies_are_refused(bpo_run, tmp_path, capsys, monkeypatch):
    def as_ppo(payload):
        for tree in (payload["final"], *payload["during"].values()):
            del tree["mu_params"]
        del payload["config_sha256"]  # as a file of before the digest: the config below is edited

    ppo = _copy(bpo_run, tmp_path / "ppo", as_ppo)
    cfg = json.loads((ppo / "config.json").read_text())
    (ppo / "config.json").write_text(json.dumps({**cfg, "algo": "ppo"}))
    compiled = []
    monkeypatch.setattr(jax, "jit", lambda *a, **k: compiled.append(a))  # nothing may compile before refusing
    _refused([str(ppo), "--yes"], capsys, "run:", "ppo", "no behaviour policy mu")
    (tmp_path / "empty").mkdir()
    _refused([str(tmp_path / "empty"), "--yes"], capsys, "run:", "no saved policies")
    _refused([str(tmp_path / "mistyped"), "--yes"], capsys, "run:", "is not a folder")  # not "train it again"
    assert compiled == [] and not (ppo / "probe").exists()


@pytest.mark.parametrize("flag, value, field", [("--m", "0", "m must be >= 1"), ("--k", "1", "k must be >= 2"),
                                                ("--horizon", "0", "horizon must be >= 1"),
                                                ("--ref-k", "1", "ref_k must be >= 2"),
                                                ("--points", "7", "points:"),
                                                ("--points", "last", "points: must be update counts"),
                                                ("--seeds", "2", "seeds:"),
                                                ("--rho-bar", "0", "returns.rho_bar"),
                                                ("--c-bar", "-1", "returns.c_bar"),
                                                ("--name", "../elsewhere", "name: must be a plain folder name"),
                                                # the run's own folder: dropped with TensorBoard's when the
                                                # run was replaced (adversarial audit)
                                                ("--name", "tb", "name: 'tb' is a folder of the run's own"),
                                                ("--name", "checkpoint", "name: 'checkpoint' is a folder of the"),
                                                # beyond int32: it failed in JAX after the cost line
                                                ("--m", "100000000", "m x horizon (the start states' steps) must "
                                                                     "be <= 2,147,483,647"),
                                                ("--k", "100000000", "2 x m x k x horizon (the segments' steps)")])
def test_bad_values_name_the_field(bpo_run, capsys, flag, value, field):
    _refused([str(bpo_run), flag, value, "--yes"], capsys, field)


@pytest.mark.parametrize("backend", ["mjx", "threads"])
def test_a_backend_without_the_runs_task_is_refused_before_the_probe_folder(backend, bpo_run, tmp_path, capsys):
    """It was refused after the cost line and RUN/probe/ were made, naming env: with MuJoCo's tasks."""
    copy = _copy(bpo_run, tmp_path / "run", lambda payload: None)
    _refused([str(copy), "--backend", backend, "--yes"], capsys,
             f"backend: {backend} does not have the run's task CartPole-v1; allowed: ['jax']")
    assert not (copy / "probe").exists()


def test_a_seed_given_twice_and_an_unbounded_write_setting_are_refused_before_any_work(bpo_run, capsys,
                                                                                      monkeypatch):
    """A seed listed twice would be pooled twice and narrow every interval; BPO_WRITE_RETRY_S=inf
    would pass a probe's whole computation and then break its write."""
    _refused([str(bpo_run), "--seeds", "0", "0", "--yes"], capsys, "seeds: must name each seed once, got [0, 0]")
    # A point given twice was probed twice and shown twice by probe-summary.
    _refused([str(bpo_run), "--points", "final", "final", "--yes"], capsys,
             "points: must name each point once, got ['final', 'final']")
    monkeypatch.setenv("BPO_WRITE_RETRY_S", "inf")
    _refused([str(bpo_run), "--yes"], capsys, "BPO_WRITE_RETRY_S: must be a number from 0 to 3600, got 'inf'")


def test_settings_are_checked_before_the_run_is_read(tmp_path, capsys):
    _refused([str(tmp_path), "--m", "-3"], capsys, "m must be >= 1, got -3")
    np.testing.assert_equal(list(tmp_path.iterdir()), [])


def test_other_truncation_probes_the_same_policies_into_another_folder(bpo_run, tmp_path, capsys):
    """--rho-bar/--c-bar change only the probe's estimator: the run's own values give the default
    probe's numbers, no truncation (inf) gives other numbers, each in its --name folder, and
    `bpo probe-summary --name` summarises that folder's probes. mu is made far sharper than pi (its
    logits x 20), so that pi/mu exceeds the run's truncation levels."""
    def sharp_mu(payload):
        for tree in (payload["final"], *payload["during"].values()):
            tree["mu_params"] = jax.tree.map(lambda x: np.asarray(x) * 20.0, tree["actor_params"])

    bpo_run = _copy(bpo_run, tmp_path / "runs" / "sharp-mu", sharp_mu)
    cfg = json.loads((bpo_run / "config.json").read_text())["returns"]
    one = [*SMALL, "--points", "1"]
    runs = [(["--name", "probe-default"], "probe-default"),
            (["--rho-bar", str(cfg["rho_bar"]), "--c-bar", str(cfg["c_bar"]), "--name", "probe-own"], "probe-own"),
            (["--rho-bar", "inf", "--c-bar", "inf", "--name", "probe-untruncated"], "probe-untruncated")]
    for extra, _ in runs:
        assert main(["probe", str(bpo_run), *one, *extra]) == 0
    got = {name: json.loads((bpo_run / name / "probe.json").read_text()) for _, name in runs}
    assert got["probe-own"]["points"] == got["probe-default"]["points"]
    assert got["probe-own"]["returns"] == got["probe-default"]["returns"]
    untruncated = got["probe-untruncated"]
    assert (untruncated["returns"]["rho_bar"], untruncated["returns"]["c_bar"]) == (float("inf"), float("inf"))
    assert cfg["rho_bar"] == cfg["c_bar"] == 1.5  # so the weights above 1.5 are no longer cut
    assert untruncated["points"][0]["pooled"] != got["probe-default"]["points"][0]["pooled"]
    capsys.readouterr()
    assert main(["probe-summary", str(bpo_run.parent), "--name", "probe-untruncated"]) == 0
    text = (bpo_run.parent / "probe-untruncated_summary.md").read_text()
    assert "ρ̄ = inf, c̄ = inf" in text and not (bpo_run.parent / "probe_summary.md").exists()


def test_a_run_rewritten_in_place_loses_the_probe_of_its_old_policies(bpo_run, tmp_path, capsys):
    """``bpo train ... --out RUN`` over a probed run: the probe described the old policies, so it goes
    with them (a user's own folder stays); ``bpo probe-summary`` then finds no probe to report."""
    folder = tmp_path / "sweep"
    shutil.copytree(bpo_run, folder / "run", ignore=shutil.ignore_patterns("probe"))
    assert main(["probe", str(folder / "run"), *SMALL]) == 0
    assert (folder / "run" / "probe" / "probe.json").is_file()
    (folder / "run" / "mine").mkdir()
    (folder / "run" / "mine" / "notes.txt").write_text("kept")
    size = get_preset("cartpole_ppo").rollout_size
    assert main(["train", "cartpole_ppo", "--bpo", "--total-timesteps", str(size), "--eval-every", str(size),
                 "--eval-episodes", "1", "--seed", "7", "--no-progress", "--out", str(folder / "run")]) == 0
    assert not (folder / "run" / "probe").exists()
    assert (folder / "run" / "mine" / "notes.txt").read_text() == "kept"
    capsys.readouterr()
    assert main(["probe-summary", str(folder)]) != 0
    assert "probe" in capsys.readouterr().err
