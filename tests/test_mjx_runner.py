"""``--backend mjx``: the MuJoCo v5 tasks inside the jitted on-policy runner (one program for the
whole run, seeds vmapped), through the command line; invalid backend/env pairs are rejected."""

import csv
import json
import math

import pytest

from bpo.agents.methods import validate
from bpo.config.presets import get_preset
from bpo.config.schema import ConfigError, replace
from experiments.cli import main

pytestmark = pytest.mark.mjx


@pytest.mark.slow
def test_cli_trains_bpo_on_an_mjx_task(tmp_path):
    out = tmp_path / "run"
    # HalfCheetah: its Euler integrator compiles in a fraction of the RK4 tasks' time on a CPU.
    assert main(["train", "mujoco_default", "--env", "HalfCheetah-v5", "--backend", "mjx",
                 "--variant", "bpo_c1.0_rho1.5", "--seeds", "2", "--total-timesteps", "256", "--ppo.n-steps", "128",
                 "--eval-every", "128",
                 "--eval-episodes", "2", "--bpo.n-qvf-epochs", "1", "--bpo.n-mu-epochs", "1", "--no-progress",
                 "--out", str(out)]) == 0
    from bpo.infra.results import read_curve, read_summary

    summary = read_summary(out)
    config = json.loads((out / "config.json").read_text())
    assert (config["backend"], config["env"], summary["algo"]) == ("mjx", "HalfCheetah-v5", "bpo")
    assert (summary["seeds"], summary["total_timesteps"]) == (2, 256)
    assert all(math.isfinite(r) for r in summary["final_eval_returns"])
    assert sorted({int(r["step"]) for r in read_curve(out)}) == [0, 128, 256]
    metrics = list(csv.DictReader((out / "train_metrics.csv").open()))
    # HalfCheetah never terminates and its episodes are 1000 steps: no episode ends in 256 steps.
    assert [int(float(m["train_episodes"])) for m in metrics] == [0, 0]
    assert all(math.isfinite(float(m["q_loss"])) and math.isfinite(float(m["mu_loss"])) for m in metrics)


@pytest.mark.parametrize("changes,message", [
    ({"backend": "mjx", "env": "CartPole-v1"}, "with backend mjx"),
    ({"backend": "mjx", "env": "Humanoid-v5"}, "with backend mjx"),
    ({"backend": "warp"}, "'mjx'"),
])
def test_invalid_mjx_configs_name_the_field(changes, message):
    with pytest.raises(ConfigError) as err:
        validate(replace(get_preset("mujoco_default"), **changes))
    assert err.value.field_name == ("env" if "env" in changes else "backend")
    assert message in str(err.value)


def test_the_mjx_solver_setting_reaches_the_model():
    from envs import make_env

    env = make_env("HalfCheetah-v5", "mjx", solver=(4, 8))
    assert (env.mj_model.opt.iterations, env.mj_model.opt.ls_iterations) == (4, 8)
    assert (env.model.opt.iterations, env.model.opt.ls_iterations) == (4, 8)  # what MJX steps with
    default = make_env("HalfCheetah-v5", "mjx")
    assert (default.mj_model.opt.iterations, default.mj_model.opt.ls_iterations) == (100, 50)  # the XML's
