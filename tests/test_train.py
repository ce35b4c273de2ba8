"""End-to-end: tiny runs of both algorithms, determinism, the run directory, and traced
hyperparameters (bad inputs: tests/test_bad_inputs.py)."""

import csv
import json
import platform
import subprocess
from pathlib import Path

import jax
import mujoco
import numpy as np
import pytest

from bpo.config.presets import get_preset
from bpo.config.schema import from_dict, replace, to_dict, traced_hyperparams, with_bpo
from bpo.runners.seeds import seed_keys
from bpo.training import make_train, run, summarize
from experiments.cli import _parse_train_args, main

ROOT = Path(__file__).resolve().parent.parent
TINY = dict(episodes=20, eval_every=10, eval_episodes=3, seeds=3)


def tiny(algo, **kw):
    return replace(with_bpo(get_preset("short_corridor"), algo == "bpo"), **{**TINY, **kw})


@pytest.mark.parametrize("algo", ["reinforce", "bpo"])
def test_tiny_run_is_finite_and_deterministic(algo):
    out1 = run(tiny(algo), seed_chunk=2)
    out2 = run(tiny(algo), seed_chunk=2)
    jax.tree.map(np.testing.assert_array_equal, out1.metrics, out2.metrics)
    ev = out1.metrics["eval"]
    assert ev["eval_return"].shape == (3, 3)
    assert np.all(np.isfinite(ev["eval_return"])) and np.all(ev["eval_return"] < 0)
    assert list(ev["eval_episode"][0]) == [0, 10, 20]
    # Different seeds are different runs.
    assert not np.array_equal(out1.metrics["train"]["train_return"][0], out1.metrics["train"]["train_return"][1])
    if algo == "bpo":
        for name in ("q_loss", "q_hat_loss", "mu_loss"):
            assert np.all(np.isfinite(out1.metrics["train"][name]))
        # mu starts identical to pi and then moves away from it.
        np.testing.assert_allclose(ev["mu_probs"][:, 0], ev["pi_probs"][:, 0], rtol=1e-6)
        assert np.any(np.abs(ev["mu_probs"][:, -1] - ev["pi_probs"][:, -1]) > 1e-3)
    else:
        np.testing.assert_array_equal(ev["mu_probs"], ev["pi_probs"])


def test_seed_results_do_not_depend_on_seed_count():
    a = run(tiny("reinforce", seeds=2), seed_chunk=0).metrics["eval"]["eval_return"]
    b = run(tiny("reinforce", seeds=3), seed_chunk=0).metrics["eval"]["eval_return"]
    np.testing.assert_allclose(a, b[:2], rtol=1e-6)


def test_cli_train_writes_run_directory(tmp_path):
    out = tmp_path / "run"
    code = main(["train", "short_corridor", "--bpo", "--seeds", "2", "--episodes", "20", "--eval-every", "10",
                 "--returns.c-bar", "1.5", "--out", str(out), "--no-progress"])
    assert code == 0
    config = json.loads((out / "config.json").read_text())
    assert config["returns"]["c_bar"] == 1.5 and config["bpo"] is not None and config["seeds"] == 2
    with open(out / "curve.csv") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0])[:3] == ["step", "seed", "eval_return"]
    assert len(rows) == 2 * 3
    summary = json.loads((out / "summary.json").read_text())
    for key in ("preset", "algo", "env", "seeds", "final_eval_returns", "final_mean", "final_se", "wall_time_s",
                "compile_time_s", "train_steps_per_s"):
        assert key in summary
    assert len(summary["final_eval_returns"]) == 2
    assert summary["final_mean"] == pytest.approx(np.mean(summary["final_eval_returns"]))
    assert summary["final_sd"] == pytest.approx(np.std(summary["final_eval_returns"], ddof=1))
    assert summary["final_se"] == pytest.approx(summary["final_sd"] / np.sqrt(2))
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]
    # Provenance: this checkout's commit, the package versions, the device.
    prov = summary["provenance"]
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    assert prov["code_version"].removesuffix("-dirty") == head
    assert prov["packages"]["jax"] == jax.__version__ and prov["packages"]["mujoco"] == mujoco.__version__
    assert prov["backend"] == "cpu" and prov["device"] and prov["python"] == platform.python_version()


def test_bpo_train_over_a_finished_run_says_it_replaces_it(tmp_path, capsys):
    """A sweep skips a finished run; ``bpo train --out`` redoes it, and now says so on stderr."""
    out = tmp_path / "run"
    argv = ["train", "short_corridor", "--no-bpo", "--seeds", "1", "--episodes", "10", "--out", str(out),
            "--no-progress"]
    assert main(argv) == 0
    assert "replacing" not in capsys.readouterr().err
    assert main(argv) == 0
    assert (f"replacing the finished run in {str(out)!r} (reinforce on ShortCorridor-v0, 1 seed(s)) when this one is "
            "written") in capsys.readouterr().err


def test_summary_fields_from_run():
    out = run(tiny("reinforce", seeds=2))
    s = summarize(out)
    assert s["seeds"] == 2 and s["step_unit"] == "episode" and s["train_steps_per_s"] > 0


def test_traced_hyperparameters_vmap_like_seeds():
    """Two c_bar values in one vmapped call equal two separate runs with those values."""
    cfg = tiny("bpo", episodes=10, eval_every=5)
    key = seed_keys(0, 1)[0]
    hp = traced_hyperparams(cfg)
    c_bars = jax.numpy.array([1.0, 1.5])
    axes = type(hp)(*[0 if name == "c_bar" else None for name in hp._fields])
    batched_train = jax.jit(jax.vmap(make_train(cfg), in_axes=(None, axes)))
    batched = batched_train(key, hp._replace(c_bar=c_bars))
    for i, c in enumerate((1.0, 1.5)):
        cfg_c = replace(cfg, **{"returns.c_bar": c})
        single = jax.jit(make_train(cfg_c))(key, traced_hyperparams(cfg_c))
        np.testing.assert_allclose(batched["eval"]["eval_return"][i], single["eval"]["eval_return"], rtol=1e-5)
        np.testing.assert_allclose(batched["train"]["train_return"][i], single["train"]["train_return"], rtol=1e-5)
    # c_bar = 1 cuts the traces where pi/mu > 1; c_bar = 1.5 cuts fewer of them, so pi learns differently.
    truncated = batched["train"]["c_truncated_frac"]
    assert np.all(truncated[0] >= truncated[1]) and np.sum(truncated[0]) > np.sum(truncated[1])
    for name in ("pg_loss", "q_loss", "mu_loss"):
        assert not np.array_equal(batched["train"][name][0], batched["train"][name][1]), name
    assert not np.array_equal(batched["eval"]["pi_probs"][0], batched["eval"]["pi_probs"][1])
    # Equal values in the same call give identical runs: the difference above is c_bar's.
    same = batched_train(key, hp._replace(c_bar=jax.numpy.array([1.5, 1.5])))
    jax.tree.map(np.testing.assert_array_equal, jax.tree.map(lambda x: x[0], same), jax.tree.map(lambda x: x[1], same))
    jax.tree.map(np.testing.assert_array_equal, jax.tree.map(lambda x: x[1], same),
                 jax.tree.map(lambda x: x[1], batched))


def test_a_one_seed_summary_is_strict_json_with_null_spread(tmp_path, capsys):
    """One seed has no SD or SE: summary.json says null (strict JSON has no NaN), and the last line
    says '(1 seed)'."""
    out = tmp_path / "one"
    assert main(["train", "short_corridor", "--seeds", "1", "--episodes", "20", "--eval-every", "10", "--no-progress",
                 "--out", str(out)]) == 0
    text = (out / "summary.json").read_text()

    def refuse(name):
        raise AssertionError(f"{name} in summary.json")

    summary = json.loads(text, parse_constant=refuse)
    assert summary["final_sd"] is None and summary["final_se"] is None
    assert summary["final_mean"] == summary["final_eval_returns"][0]
    assert "(1 seed)" in capsys.readouterr().out


@pytest.mark.parametrize("path,algo", [
    ("fig2/ShortCorridor-v0-short_corridor-reinforce", "reinforce"),
    ("fig2/ShortCorridor-v0-short_corridor-bpo", "bpo"),
    ("classic/CartPole-v1-cartpole_ppo-ppo", "ppo"),
    ("classic/CartPole-v1-cartpole_ppo-bpo", "bpo"),
    ("a2c/CartPole-v1-cartpole_a2c-a2c", "a2c"),
])
def test_a_config_json_written_with_algo_reads_as_the_bpo_section_it_meant(path, algo, tmp_path):
    """Committed runs recorded ``algo`` and always a bpo section; today the section is the switch:
    the method alone reads back without one, a BPO run with it, field for field."""
    data = json.loads((ROOT / "results" / path / "config.json").read_text())
    assert data["algo"] == algo and isinstance(data["bpo"], dict)  # the older layout
    cfg = from_dict(data)
    assert cfg.algo == algo and (cfg.bpo is None) == (algo != "bpo")
    if algo == "bpo":
        assert all(data["bpo"][k] == v for k, v in to_dict(cfg)["bpo"].items() if k in data["bpo"])
    again = to_dict(cfg)
    assert "algo" not in again and from_dict(again) == cfg
    # `bpo train RUN/config.json` replays that run: the same config, with or without the section
    assert _parse_train_args([str(ROOT / "results" / path / "config.json")]).config == cfg


def test_bpo_on_a_replayed_run_of_the_method_alone_takes_its_presets_behaviour_step():
    """``bpo train RUN/config.json --bpo`` of a PPO run: BPO as ``bpo train PRESET --bpo`` runs it
    (the preset's bpo section), not the schema's defaults (1 Q epoch where cartpole_ppo has 10)."""
    replayed = _parse_train_args([str(ROOT / "results/classic/CartPole-v1-cartpole_ppo-ppo/config.json"), "--bpo"])
    preset = get_preset("cartpole_ppo")
    assert replayed.config.bpo == preset.bpo and replayed.config.bpo.n_qvf_epochs == 10
    assert (replayed.config.algo, replayed.config.variant) == ("bpo", "")  # the PPO row names BPO no more


def test_without_out_a_run_goes_to_its_default_folder_made_from_nothing(tmp_path, monkeypatch):
    """The default folder runs/PRESET/ENV/ALGO is made, parents and all, in a folder that has none of
    them (the check that the run's staging sibling can be written once failed here: its parent did
    not exist yet)."""
    monkeypatch.chdir(tmp_path)
    assert main(["train", "short_corridor", "--no-bpo", "--episodes", "20", "--eval-every", "10",
                 "--no-progress"]) == 0
    run_dir = tmp_path / "runs" / "short_corridor" / "ShortCorridor-v0" / "reinforce"
    assert json.loads((run_dir / "config.json").read_text())["bpo"] is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs"]  # no staging or check files left beside
