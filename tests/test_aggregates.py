"""The optimality gap and performance profiles of ``bpo table`` (Agarwal et al. 2021, Section 4):
against hand computations on small arrays, through ``bpo table`` on runs whose normalised scores
are known, and against rliable's own functions, bootstrap intervals included."""

import json

import numpy as np
import pytest

from experiments.aggregates import TAUS, bootstrap_estimates, optimality_gap, performance_profile
from experiments.cli import main

from synthetic_results import synthetic_results


def test_the_optimality_gap_of_three_runs_by_hand():
    scores = np.array([[0.2], [0.9], [1.0]])  # three runs of one task
    assert optimality_gap(scores) == pytest.approx((0.8 + 0.1 + 0.0) / 3)
    assert optimality_gap(scores, gamma=0.5) == pytest.approx((0.3 + 0.0 + 0.0) / 3)  # above gamma counts as gamma
    two_tasks = np.array([[0.0, 0.5], [1.0, 0.75]])
    assert optimality_gap(two_tasks) == pytest.approx((1.0 + 0.5 + 0.0 + 0.25) / 4)


def test_a_performance_profile_is_the_step_function_of_the_scores():
    scores = np.array([[0.0, 0.25], [0.5, 1.0]])  # two runs of two tasks
    profile = dict(zip(TAUS.tolist(), performance_profile(scores), strict=True))
    # Above tau, strictly: a score equal to tau is not counted.
    assert profile[0.0] == 3 / 4 and profile[0.24] == 3 / 4 and profile[0.25] == 2 / 4
    assert profile[0.49] == 2 / 4 and profile[0.5] == 1 / 4 and profile[0.99] == 1 / 4 and profile[1.0] == 0
    flat = scores.ravel()
    for tau, value in profile.items():  # and at every tau, a plain count
        assert value == sum(x > tau for x in flat) / len(flat)


def one_task(tmp_path, *extra) -> dict:
    """`bpo table` on one task: PPO's final returns 0, 10, 20 and BPO's 20, 40, 40, min-max
    normalised to 0, 0.25, 0.5 and 0.5, 1, 1; its aggregates.json."""
    synthetic_results(tmp_path / "res", {("CartPole-v1", "cartpole_ppo"): {"ppo": [0.0, 10.0, 20.0],
                                                                           "bpo_c1.0_rho1.5": [20.0, 40.0, 40.0]}})
    assert main(["table", str(tmp_path / "res"), "--bootstrap-reps", "500", *extra]) == 0
    return json.loads((tmp_path / "res" / "aggregates.json").read_text())


def test_bpo_table_writes_the_optimality_gap_and_the_profiles_of_known_scores(tmp_path):
    agg = one_task(tmp_path)
    gap = agg["optimality_gap"]
    assert gap["ppo"]["point"] == pytest.approx((1 + 0.75 + 0.5) / 3)
    assert gap["bpo_c1.0_rho1.5"]["point"] == pytest.approx((0.5 + 0 + 0) / 3)
    # Resampling BPO's runs gives gaps between 0 (all runs at 1) and 0.5 (all at 0.5).
    bpo_gap = gap["bpo_c1.0_rho1.5"]
    assert 0 <= bpo_gap["low"] <= bpo_gap["point"] <= bpo_gap["high"] <= 0.5
    profile = agg["performance_profile"]
    assert profile["tau"] == TAUS.tolist()
    ppo = dict(zip(profile["tau"], profile["rows"]["ppo"]["point"], strict=True))
    assert (ppo[0.0], ppo[0.25], ppo[0.3], ppo[0.5]) == pytest.approx((2 / 3, 1 / 3, 1 / 3, 0))
    bpo = profile["rows"]["bpo_c1.0_rho1.5"]
    at = profile["tau"].index(0.3)  # every BPO run is above 0.3, in every resample too
    assert (bpo["low"][at], bpo["point"][at], bpo["high"][at]) == (1, 1, 1)
    for row in profile["rows"].values():
        assert all(lo <= p <= hi for lo, p, hi in zip(row["low"], row["point"], row["high"], strict=True))
    for name in ("optimality_gap.png", "optimality_gap.pdf", "performance_profile.png", "performance_profile.pdf"):
        assert (tmp_path / "res" / name).stat().st_size > 5000


def test_the_new_figures_are_the_same_bytes_when_redrawn(tmp_path):
    one_task(tmp_path)
    first = {n: (tmp_path / "res" / n).read_bytes() for n in ("optimality_gap.pdf", "performance_profile.pdf",
                                                            "performance_profile.png", "aggregates.json")}
    assert main(["table", str(tmp_path / "res"), "--bootstrap-reps", "500"]) == 0
    assert all((tmp_path / "res" / n).read_bytes() == data for n, data in first.items())


def test_the_gap_threshold_is_an_option_and_a_bad_one_is_refused(tmp_path, capsys):
    agg = one_task(tmp_path, "--optimality-gap-gamma", "0.5")
    assert agg["optimality_gap_gamma"] == 0.5
    assert agg["optimality_gap"]["ppo"]["point"] == pytest.approx((0.5 + 0.25 + 0.0) / 3)
    for bad in ("0", "1.5", "-1"):
        assert main(["table", str(tmp_path / "res"), "--optimality-gap-gamma", bad]) == 2
        assert (f"error: optimality_gap_gamma: must be in (0, 1] (scores are min-max normalised to [0, 1]), got "
                f"{float(bad)}") in capsys.readouterr().err


def test_the_gap_and_the_profiles_equal_rliable_s_with_their_intervals():
    rly = pytest.importorskip("rliable.library")
    metrics = pytest.importorskip("rliable.metrics")
    rng = np.random.default_rng(3)
    scores = {"a": rng.uniform(size=(5, 3)), "b": rng.beta(2, 5, size=(5, 3))}
    for gamma in (1.0, 0.6):
        for x in scores.values():
            assert optimality_gap(x, gamma) == pytest.approx(metrics.aggregate_optimality_gap(x, gamma), abs=1e-15)
        ours = bootstrap_estimates(scores, lambda x, g=gamma: np.array([optimality_gap(x, g)]), 300, seed=4)
        np.random.seed(4)
        point, interval = rly.get_interval_estimates(
            scores, lambda x, g=gamma: np.array([metrics.aggregate_optimality_gap(x, g)]), reps=300)
        for r in scores:
            np.testing.assert_allclose([ours[r]["low"][0], ours[r]["point"][0], ours[r]["high"][0]],
                                       [interval[r][0, 0], point[r][0], interval[r][1, 0]], rtol=1e-12)
    ours = bootstrap_estimates(scores, performance_profile, 300, seed=5)
    np.random.seed(5)
    point, interval = rly.create_performance_profile(scores, TAUS, reps=300)
    for r in scores:
        np.testing.assert_array_equal(ours[r]["point"], point[r])
        np.testing.assert_allclose(ours[r]["low"], interval[r][0], rtol=1e-12)
        np.testing.assert_allclose(ours[r]["high"], interval[r][1], rtol=1e-12)
