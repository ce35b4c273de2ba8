"""A method of one's own is one file, and the package does not change: ``examples/vpg.py`` defines
a small policy-gradient method (VPG), registers it with a preset and defines a sweep of it, and the
tests train it alone and with BPO through ``bpo train``, check its update by hand, run the sweep
and tabulate it with ``bpo table``, with ``BPO_PLUGINS`` naming that file (docs/methods.md).
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from bpo.agents.learner import bpo_ppo_batch, make_learner
from bpo.agents.methods import get_method, register_method, validate
from bpo.config.presets import PRESETS, apply_variant, register_preset
from bpo.config.schema import ConfigError, traced_hyperparams, with_bpo
from bpo.core import distributions
from bpo.infra.plugins import load_plugins
from envs import make_env
from experiments.cli import main
from experiments.sweep import Grid, Sweep, expand

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "vpg.py"
load_plugins({"BPO_PLUGINS": str(EXAMPLE)})  # as every bpo command does with BPO_PLUGINS naming it
_vpg = sys.modules["bpo_plugin_vpg"]
VPG, vpg_actor_loss = _vpg.VPG, _vpg.vpg_actor_loss


@pytest.fixture
def plugin(monkeypatch):
    """``BPO_PLUGINS`` naming examples/vpg.py, as a user sets it; the commands' workers inherit it."""
    monkeypatch.setenv("BPO_PLUGINS", str(EXAMPLE))


def _summary(run: Path) -> dict:
    return json.loads((run / "summary.json").read_text())


def test_bpo_train_runs_the_method_alone_and_with_bpo(plugin, tmp_path):
    for algo in ("vpg", "bpo"):
        out = tmp_path / algo
        switch = "--bpo" if algo == "bpo" else "--no-bpo"
        assert main(["train", "cartpole_vpg", switch, "--seeds", "2", "--out", str(out), "--no-progress"]) == 0
        config = json.loads((out / "config.json").read_text())
        assert (config["method"], config["bpo"] is None, _summary(out)["algo"]) == ("vpg", algo == "vpg", algo)
        assert np.all(np.isfinite(_summary(out)["final_eval_returns"]))
        metrics = (out / "train_metrics.csv").read_text().splitlines()[0].split(",")
        assert {"pg_loss", "value_loss"} <= set(metrics)  # the method's own metrics, reduced like any other
        assert ("mu_loss" in metrics) == (algo == "bpo")


def test_the_method_runs_on_the_gymnasium_backend_with_its_evaluation_worker(plugin, tmp_path):
    """The Gymnasium backend evaluates in a spawned worker process, which builds the run's learner:
    it must load BPO_PLUGINS too (it did not, and the run ended in BrokenProcessPool)."""
    out = tmp_path / "gym"
    assert main(["train", "cartpole_vpg", "--backend", "gymnasium", "--seeds", "1", "--out", str(out),
                 "--no-progress"]) == 0
    assert json.loads((out / "config.json").read_text())["eval_in_background"] is True
    assert np.all(np.isfinite(_summary(out)["final_eval_returns"]))


def test_the_learner_runs_the_registered_update_and_its_bpo_weights():
    """The learner's update, against the method's loss evaluated by hand on the same rollout: one
    VPG step of pi's parameters with the weights min(rho_bar, pi_old/mu) computed here."""
    cfg = validate(with_bpo(PRESETS["cartpole_vpg"], True))
    spec = make_env(cfg.env).spec
    learner = make_learner(cfg, spec)
    hp = traced_hyperparams(cfg)
    key = jax.random.PRNGKey(3)
    obs0 = jax.random.normal(key, (cfg.ppo.n_envs, spec.obs_dim))
    state = learner.init(jax.random.split(key, 3), hp, obs0)
    # mu unlike pi, so that the weights are not all 1
    state = state._replace(behaviour=state.behaviour._replace(
        mu_params=jax.tree.map(lambda x: x * 1.5, state.behaviour.mu_params)))
    T, n = cfg.ppo.n_steps, cfg.ppo.n_envs
    ks = jax.random.split(jax.random.PRNGKey(4), 4)
    obs = jax.random.normal(ks[0], (T, n, spec.obs_dim))
    action = jax.random.randint(ks[1], (T, n), 0, 2)
    mu_dist = learner.dist_fn(state.behaviour.mu_params)(obs)
    rows = {"obs": obs, "raw_obs": obs, "action": action, "log_prob": distributions.log_prob(mu_dist, action, True),
            "reward": jnp.ones((T, n)), "terminated": jnp.zeros((T, n)),
            "truncated": jnp.zeros((T, n)).at[-1].set(1.0), "next_obs": obs, "raw_next_obs": obs}
    new, metrics = learner.update(state, ks[2], ks[3], rows, hp)

    pi_old = learner.dist_fn(state.target.actor_params)(obs)
    log_pi = distributions.log_prob(pi_old, action, True)
    weight = np.minimum(float(hp.rho_bar), np.exp(np.asarray(log_pi - rows["log_prob"])))
    assert weight.std() > 0.01
    values = learner.critic_apply(state.target.critic_params, obs)
    batch, _ = bpo_ppo_batch(rows, values, values, learner.dist_fn(state.target.actor_params),
                             learner.dist_fn(state.behaviour.mu_params), hp, cfg.returns, True)
    flat = {k: v.reshape((T * n,) + v.shape[2:]) for k, v in batch.items()}
    flat["adv_weight"] = jnp.asarray(weight.reshape(-1))
    grads = jax.grad(vpg_actor_loss)(state.target.actor_params, learner.actor.apply, flat, True)
    tx = learner.tx(hp.learning_rate)
    updates, _ = tx.update(grads, tx.init(state.target.actor_params), state.target.actor_params)
    expected = optax.apply_updates(state.target.actor_params, updates)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7), new.target.actor_params, expected)
    assert np.isfinite(float(metrics["pg_loss"])) and "mu_loss" in metrics


def test_a_sweep_and_bpo_table_of_the_method(plugin, tmp_path):
    """The sweep this module defines, run by worker processes (which import this file through the
    inherited BPO_PLUGINS), then tabulated: a VPG row and a BPO row, BPO tested against VPG."""
    out = tmp_path / "sweep"
    assert main(["sweep", str(EXAMPLE), "--out", str(out), "--workers", "1", "--no-progress"]) == 0
    runs = sorted(p.name for p in out.iterdir() if (p / "summary.json").exists())
    assert runs == ["CartPole-v1-cartpole_vpg-bpo", "CartPole-v1-cartpole_vpg-vpg"]
    assert main(["table", str(out), "--baseline", "vpg", "--bootstrap-reps", "100"]) == 0
    table = (out / "table1.md").read_text().splitlines()
    assert [line.split(" |")[0] for line in table[2:4]] == ["| BPO", "| VPG"]  # the method's own label
    assert "Welch's t-test (one-sided) of each row against VPG" in "\n".join(table)
    data = json.loads((out / "table1.json").read_text())
    assert data["baseline"] == "vpg" and data["multiple_comparisons"]["tests"] == 1


def test_a_sweep_runs_the_method_alone_without_its_presets_bpo_row(monkeypatch):
    """A preset that carries a BPO row as its variant (as the MuJoCo presets carry BPO (1.0, 1.5)):
    the sweep's run of the method alone is labelled by the method, not by that row, and its BPO
    run keeps the row."""
    row = apply_variant(with_bpo(PRESETS["cartpole_vpg"], True), "bpo_c1.0_rho1.5")
    carrying = replace(row, preset="cartpole_vpg_row")
    monkeypatch.setitem(PRESETS, "cartpole_vpg_row", carrying)
    specs = expand(Sweep(name="rows", grids=(Grid(preset="cartpole_vpg_row", variants=("vpg", "bpo"), seeds=1),)))
    alone, bpo = (spec.config() for spec in specs)
    assert (alone.variant, alone.algo, bpo.variant, bpo.algo) == ("", "vpg", "bpo_c1.0_rho1.5", "bpo")
    assert [spec.row for spec in specs] == ["vpg", "bpo"]


def test_a_sweep_runs_the_method_alone_on_another_methods_preset_in_its_column():
    """``--variants ppo vpg`` on ``cartpole_ppo`` (as ``bpo sweep --help`` says a plug-in's name is
    a variant of on-policy presets): VPG alone with that preset's settings, in the same column as
    PPO, so the table tests one against the other; it was refused as an unknown variant, leaving
    the method only its own preset, a column of its own."""
    specs = expand(Sweep(name="side", grids=(Grid(preset="cartpole_ppo", variants=("ppo", "vpg"), seeds=1),)))
    ppo, vpg = (spec.config() for spec in specs)
    assert (vpg.method, vpg.algo, vpg.bpo, vpg.variant, vpg.preset) == ("vpg", "vpg", None, "", "cartpole_ppo")
    assert replace(vpg, method="ppo", variant="ppo") == ppo  # the preset's settings, the method alone changed
    assert [(c.env, c.preset, s.row) for c, s in zip((ppo, vpg), specs, strict=True)] == [
        ("CartPole-v1", "cartpole_ppo", "ppo"), ("CartPole-v1", "cartpole_ppo", "vpg")]  # one column
    with pytest.raises(ConfigError, match=r"unknown variant 'vpgg'; allowed: \['bpo', 'ppo', .*'vpg'\] \(a plug-in"):
        expand(Sweep(name="typo", grids=(Grid(preset="cartpole_ppo", variants=("vpgg",), seeds=1),)))


def test_a_sweep_of_a_plugin_the_workers_would_not_import_is_refused_before_any_work(monkeypatch, tmp_path, capsys):
    """The sweep file registers the method and its preset in the sweeping process only; its workers
    import BPO_PLUGINS alone, so without it every worker failed with a traceback and the advice to
    run the sweep again (newcomer's walkthrough, session 62). Refused first, dry run included."""
    monkeypatch.delenv("BPO_PLUGINS", raising=False)
    for dry in ([], ["--dry-run"]):
        assert main(["sweep", str(EXAMPLE), "--out", str(tmp_path / "s"), "--workers", "1", "--no-progress", *dry]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: sweep: the runs' preset 'cartpole_vpg' is registered by the sweep file") and \
            f"BPO_PLUGINS={EXAMPLE}" in err
        assert not (tmp_path / "s").exists()
    monkeypatch.setenv("BPO_PLUGINS", str(EXAMPLE))
    assert main(["sweep", str(EXAMPLE), "--out", str(tmp_path / "s"), "--dry-run"]) == 0


def test_bad_methods_and_plugins_are_refused_with_the_name(monkeypatch, tmp_path, capsys):
    assert main(["train", "cartpole_vpg", "--method", "nosuch", "--no-bpo", "--no-progress",
                 "--out", str(tmp_path / "x")]) == 2
    assert "method: must be one of" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
    with pytest.raises(ConfigError, match="returns.weight_on_advantage"):  # BPO's weight would be applied twice
        validate(replace(with_bpo(PRESETS["cartpole_vpg"], True), returns=replace(
            PRESETS["cartpole_vpg"].returns, weight_on_advantage=True)))
    with pytest.raises(ConfigError, match="method: 'ppo' is already registered"):
        register_method(type("PPO", (VPG,), {"name": "ppo"})())
    with pytest.raises(ConfigError, match="other than"):
        register_method(type("Bad", (VPG,), {"name": "bpo"})())
    assert register_method(VPG()).name == "vpg"  # the same method again: in place
    # A preset's name is a folder of runs/ and a column of tables: the rule every run's config meets.
    for name in ("cartpole vpg+adam", "../elsewhere", "", None):
        with pytest.raises(ConfigError, match=r"preset: must be a name of letters, digits"):
            register_preset(replace(PRESETS["cartpole_vpg"], preset=name))
        assert name not in PRESETS
    assert get_method("vpg").label == "VPG"
    broken = tmp_path / "broken.py"
    broken.write_text("raise RuntimeError('half-written plug-in')\n")
    for value, said in ((str(broken), "half-written plug-in"), ("no.such.module", "No module named"),
                        ("not a name", "neither a module name"), (str(tmp_path / "missing.py"), "is not a file")):
        monkeypatch.setenv("BPO_PLUGINS", value)
        with pytest.raises(ConfigError, match=f"BPO_PLUGINS: .*{said}"):
            load_plugins()
        assert main(["table", str(tmp_path)]) == 2
        assert "BPO_PLUGINS" in capsys.readouterr().err


def test_a_method_whose_init_returns_no_state_is_named(tmp_path, capsys):
    """The skeleton of docs/methods.md with ``...`` as ``init``'s body returns None: the learner
    says which method and what its state needs, instead of failing later on a None attribute; and
    ``bpo train`` says it in one line (not a traceback) and leaves no empty run folder."""
    class Skeleton(VPG):
        name, label = "vpg_skeleton", "VPG skeleton"

        def init(self, ctx, actor_params, critic_params, hp):
            ...

    register_method(Skeleton())
    cfg = validate(replace(PRESETS["cartpole_vpg"], method="vpg_skeleton", bpo=None))
    spec = make_env(cfg.env).spec
    learner = make_learner(cfg, spec)
    obs0 = jnp.zeros((cfg.ppo.n_envs, spec.obs_dim))
    said = "method: 'vpg_skeleton': init returned NoneType, not a state with the fields actor_params and critic_params"
    with pytest.raises(ConfigError, match=said):
        learner.init(jax.random.split(jax.random.PRNGKey(0), 3), traced_hyperparams(cfg), obs0)
    out = tmp_path / "run"
    assert main(["train", "cartpole_vpg", "--method", "vpg_skeleton", "--no-bpo", "--total-timesteps", "512",
                 "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"error: {said}" in err and "Traceback" not in err, err
    assert not out.exists()
