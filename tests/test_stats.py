"""``bpo.instruments.stats.describe``, the one computation of mean, SD and SE over seeds, against hand
computations."""

import math

import pytest

from bpo.instruments.stats import describe


def test_mean_sd_se_by_hand_and_non_finite_seeds_left_out():
    d = describe([1.0, 2.0, 6.0, float("nan")])
    # mean 3; deviations -2, -1, 3: sum of squares 14, SD sqrt(14 / 2) = sqrt(7), SE sqrt(7) / sqrt(3)
    assert (d["mean"], d["n"], d["not_finite"]) == (3.0, 3, 1)
    assert d["sd"] == pytest.approx(math.sqrt(7.0), rel=1e-15)
    assert d["se"] == pytest.approx(math.sqrt(7.0 / 3.0), rel=1e-15)
    assert d["values"] == [1.0, 2.0, 6.0, None]


def test_kept_non_finite_values_make_the_mean_infinite_and_the_spread_undefined():
    d = describe([1.0, float("inf")], drop_non_finite=False)
    assert d["mean"] == math.inf and math.isnan(d["sd"]) and math.isnan(d["se"]) and d["n"] == 2
    d = describe([1.0, float("nan")], drop_non_finite=False)
    assert math.isnan(d["mean"]) and d["not_finite"] == 1


@pytest.mark.parametrize("values", [[], [5.0], [float("nan")]])
def test_too_few_values_give_nan_not_an_error(values):
    d = describe(values)
    assert math.isnan(d["sd"]) and math.isnan(d["se"])
    assert (d["mean"] == 5.0) if values == [5.0] else math.isnan(d["mean"])
