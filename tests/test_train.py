"""End-to-end: tiny runs of both algorithms, determinism, the run directory, and bad inputs
rejected before anything compiles."""

import csv
import json
import logging

import jax
import numpy as np
import pytest

from bpo.cli import main
from bpo.config import replace
from bpo.presets import get_preset
from bpo.train import run, summarize

TINY = dict(episodes=20, eval_every=10, eval_episodes=3, seeds=3)


def tiny(algo, **kw):
    return replace(get_preset("short_corridor"), algo=algo, **{**TINY, **kw})


@pytest.mark.parametrize("algo", ["reinforce", "bpo"])
def test_tiny_run_is_finite_and_deterministic(algo):
    out1 = run(tiny(algo), seed_chunk=2)
    out2 = run(tiny(algo), seed_chunk=2)
    for a, b in zip(jax.tree.leaves(out1.metrics), jax.tree.leaves(out2.metrics)):
        np.testing.assert_array_equal(a, b)
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
    code = main(["train", "short_corridor", "--algo", "bpo", "--seeds", "2", "--episodes", "20", "--eval-every", "10",
                 "--bpo.c-bar", "1.5", "--out", str(out), "--no-progress"])
    assert code == 0
    config = json.loads((out / "config.json").read_text())
    assert config["bpo"]["c_bar"] == 1.5 and config["algo"] == "bpo" and config["seeds"] == 2
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
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]


BAD_INPUTS = [
    (["train", "short_corridor", "--reinforce.lr-start", "-0.1"], "reinforce.lr_start", "> 0"),
    (["train", "short_corridor", "--bpo.q-lr", "0"], "bpo.q_lr", "> 0"),
    (["train", "short_corridor", "--bpo.lam", "1.5"], "bpo.lam", "[0, 1]"),
    (["train", "short_corridor", "--bpo.lam", "-0.1"], "bpo.lam", "[0, 1]"),
    (["train", "short_corridor", "--bpo.rho-bar", "0"], "bpo.rho_bar", "> 0"),
    (["train", "short_corridor", "--bpo.c-bar", "-1"], "bpo.c_bar", "> 0"),
    (["train", "short_corridor", "--bpo.replay-size", "128"], "bpo.replay_size", "at least one batch"),
    (["train", "short_corridor", "--seeds", "0"], "seeds", ">= 1"),
    (["train", "no_such_preset"], "preset", "short_corridor"),
    (["train", "short_corridor", "--env", "CartPole-v9"], "env", "ShortCorridor-v0"),
    (["train", "short_corridor", "--eval-every", "7"], "eval_every", "divide"),
    (["train", "short_corridor", "--total-timesteps", "1000"], "total_timesteps", "--episodes"),
    (["train", "short_corridor", "--reinforce.gamma", "1.2"], "reinforce.gamma", "[0, 1]"),
    (["frobnicate"], "command", "train"),
]


@pytest.mark.parametrize("argv,field,allowed", BAD_INPUTS, ids=[b[1] + ":" + b[0][-1] for b in BAD_INPUTS])
def test_bad_input_fails_before_compiling(argv, field, allowed, capsys, caplog):
    with jax.log_compiles(True), caplog.at_level(logging.DEBUG):
        code = main(argv)
    assert code == 2
    err = capsys.readouterr().err
    assert field in err and allowed in err, err
    assert not [r for r in caplog.records if "Compiling" in r.getMessage()]


@pytest.mark.parametrize("argv", [["train", "short_corridor", "--algo", "ppo_typo"], ["reproduce", "fig9"]])
def test_bad_choice_is_rejected_by_the_parser(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "reinforce" in err or "fig2" in err


def test_summary_fields_from_run():
    out = run(tiny("reinforce", seeds=2))
    s = summarize(out)
    assert s["seeds"] == 2 and s["step_unit"] == "episode" and s["train_steps_per_s"] > 0


def test_traced_hyperparameters_vmap_like_seeds():
    """Two c_bar values in one vmapped call equal two separate runs with those values."""
    from bpo.config import traced_hyperparams
    from bpo.runners.episodic import make_train
    from bpo.train import seed_keys

    cfg = tiny("bpo", episodes=10, eval_every=5)
    key = seed_keys(0, 1)[0]
    hp = traced_hyperparams(cfg)
    c_bars = jax.numpy.array([1.0, 1.5])
    axes = type(hp)(*[0 if name == "c_bar" else None for name in hp._fields])
    batched = jax.jit(jax.vmap(make_train(cfg), in_axes=(None, axes)))(key, hp._replace(c_bar=c_bars))
    for i, c in enumerate((1.0, 1.5)):
        single = jax.jit(make_train(replace(cfg, **{"bpo.c_bar": c})))(key, traced_hyperparams(replace(cfg, **{"bpo.c_bar": c})))
        np.testing.assert_allclose(batched["eval"]["eval_return"][i], single["eval"]["eval_return"], rtol=1e-5)
        np.testing.assert_allclose(batched["train"]["train_return"][i], single["train"]["train_return"], rtol=1e-5)
