"""Rows of Table 1 in one program (``bpo.training.rows``): every row's results equal the row run
alone to float tolerance; configs that differ in a static field are refused, naming it."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bpo.config.presets import apply_variant, get_preset
from bpo.config.schema import (
    METHOD_SECTIONS,
    ConfigError,
    EpisodicTrainConfig,
    OnPolicyTrainConfig,
    replace,
    traced_fields,
    traced_hyperparams,
    with_bpo,
)
from bpo.training import check_rows, run, run_rows, summarize
from experiments.cli import main

ROWS = ("bpo_c1.5_rho1.5", "bpo_c1.0_rho1.0", "bpo_c1.0_rho1.5")  # Table 1's per-decision rows


def tiny(variant: str, preset: str = "cartpole_ppo", **changes):
    cfg = apply_variant(get_preset(preset), variant)
    return replace(cfg, seeds=2, total_timesteps=1024, eval_every=512, eval_episodes=2, **changes)


def test_each_row_equals_the_row_run_alone():
    cfgs = [tiny(v) for v in ROWS]
    grouped = run_rows(cfgs)
    for cfg, out in zip(cfgs, grouped, strict=True):
        alone = run(cfg)
        for part in ("eval", "train"):
            for name, value in alone.metrics[part].items():
                np.testing.assert_allclose(out.metrics[part][name], value, rtol=2e-4, atol=1e-5,
                                           err_msg=f"{cfg.variant}: {part}/{name}")
        assert summarize(out)["configs_in_program"] == 3
    # The rows are different runs: c_bar and rho_bar reach the program as data.
    cut = [out.metrics["train"]["c_truncated_frac"] for out in grouped]
    assert not np.array_equal(cut[0], cut[1])


@pytest.mark.parametrize(("changes", "field"), [
    ({"returns.traj": "traj"}, "returns.traj"),  # the trajectory row is a program of its own
    ({"bpo": None}, "bpo"),  # the method alone
    ({"ppo.n_steps": 128}, "ppo.n_steps"),
])
def test_rows_that_differ_in_a_static_field_are_refused(changes, field):
    with pytest.raises(ConfigError, match=rf"rows: configurations differ in \['{field}'\]"):
        check_rows([tiny("bpo_c1.5_rho1.5"), tiny("bpo_c1.0_rho1.5", **changes)])


# The traced fields, listed by hand: the ``traced`` markers in bpo/config/schema.py must say the same.
ON_POLICY_TRACED = {"ppo.learning_rate", "ppo.gamma", "ppo.gae_lambda", "ppo.clip_range", "ppo.ent_coef",
                    "ppo.vf_coef", "returns.rho_bar", "returns.c_bar", "bpo.q_lr", "bpo.mu_lr", "bpo.symlog_reg_coef",
                    "bpo.polyak_tau", "bpo.ppo_ent_coef",
                    # A2C's section: the same hyperparameters, read from it in an A2C run (no clip range)
                    "a2c.learning_rate", "a2c.gamma", "a2c.gae_lambda", "a2c.ent_coef", "a2c.vf_coef"}
EPISODIC_TRACED = {"reinforce.lr_start", "reinforce.lr_end", "reinforce.gamma", "returns.rho_bar", "returns.c_bar",
                   "returns.lam", "bpo.q_lr", "bpo.mu_lr", "bpo.symlog_reg_coef", "bpo.polyak_tau"}


def test_each_traced_field_and_no_other_reaches_the_program_as_data():
    """One declaration (the ``traced`` marker) decides the hyperparameters a program receives and the
    fields rows of one program may differ in: each traced field changes its own leaf and nothing
    else, and may differ between rows; every other field is static."""
    assert set(traced_fields(OnPolicyTrainConfig)) == ON_POLICY_TRACED
    assert set(traced_fields(EpisodicTrainConfig)) == EPISODIC_TRACED
    base, a2c = tiny("bpo_c1.5_rho1.5"), tiny("bpo_c1.5_rho1.5", "cartpole_a2c")
    for name in sorted(ON_POLICY_TRACED - {"bpo.ppo_ent_coef"}):
        leaf, head = name.rpartition(".")[2], name.partition(".")[0]
        for cfg in (base, a2c):
            if head in METHOD_SECTIONS and getattr(cfg, head) is None:
                continue  # another method's section: refused (tests/test_a2c.py)
            before = traced_hyperparams(cfg)._asdict()
            changed = replace(cfg, **{name: float(before[leaf]) * 0.7 + 0.013})
            after = traced_hyperparams(changed)._asdict()
            assert [k for k in before if float(before[k]) != float(after[k])] == [leaf], name
            check_rows([cfg, changed])  # rows may differ in it
    before = traced_hyperparams(base)._asdict()
    # bpo.ppo_ent_coef replaces ppo.ent_coef in a BPO run, and only there.
    assert float(traced_hyperparams(replace(base, **{"bpo.ppo_ent_coef": 0.25})).ent_coef) == 0.25
    ppo = with_bpo(replace(base, **{"bpo.ppo_ent_coef": 0.25}), False)  # PPO alone: no section, no override
    assert float(traced_hyperparams(ppo).ent_coef) == float(before["ent_coef"])
    episodic = get_preset("short_corridor")
    assert set(traced_hyperparams(episodic)._fields) == {n.rpartition(".")[2] for n in EPISODIC_TRACED}


def test_host_runs_cannot_share_a_program():
    cfg = tiny("bpo_c1.5_rho1.5", backend="gymnasium")
    with pytest.raises(ConfigError, match="rows: Gymnasium runs"):
        check_rows([cfg, cfg])


def test_a_grouped_sweep_writes_one_run_directory_per_cell(tmp_path):
    """`bpo sweep --group-rows`: the three per-decision rows share a program, PPO runs alone; each
    cell gets its run directory, with the results of the cell run alone (to float tolerance)."""
    out = tmp_path / "sweep"
    argv = ["sweep", "--preset", "cartpole_ppo", "--variants", "ppo", *ROWS, "--set", "total_timesteps=1024",
            "eval_every=512", "eval_episodes=2", "--seeds", "2", "--group-rows", "--no-progress", "--out", str(out)]
    assert main(argv) == 0
    index = json.loads((out / "index.json").read_text())
    assert sorted(e["status"] for e in index["runs"]) == ["finished"] * 4
    for variant in ("ppo", *ROWS):
        run_dir = out / f"CartPole-v1-cartpole_ppo-{variant}-total_timesteps=1024-eval_every=512-eval_episodes=2"
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["configs_in_program"] == (1 if variant == "ppo" else 3)
        alone = run(tiny(variant))
        np.testing.assert_allclose(summary["final_eval_returns"], alone.metrics["eval"]["eval_return"][:, -1],
                                   rtol=2e-4)
    assert main([*argv[:-2], "--backend", "slurm", "--out", str(tmp_path / "x")]) == 2
