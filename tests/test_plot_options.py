"""`bpo plot --metric/--per-seed/--smooth`: any per-evaluation column of the runs, each seed's curve,
and a trailing mean, checked against plain loops and on a copy of committed results."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from experiments.cli import main
from experiments.plotting import trailing_mean

RESULTS = Path(__file__).parents[1] / "results"


@pytest.mark.parametrize("window", [1, 2, 3, 7])
def test_trailing_mean_is_the_mean_of_the_window(window):
    rng = np.random.default_rng(0)
    values = rng.normal(size=(3, 12))
    values[1, 4] = np.nan  # a diverged evaluation is left out of its windows
    got = trailing_mean(values, window)
    for s in range(3):
        for i in range(12):
            window_values = values[s, max(0, i - window + 1):i + 1]
            finite = window_values[np.isfinite(window_values)]
            want = finite.mean() if finite.size else np.nan
            np.testing.assert_allclose(got[s, i], want, rtol=1e-12, equal_nan=True)


def test_a_diagnostic_is_plotted_per_seed_and_smoothed(tmp_path, capsys):
    results = tmp_path / "table1_small"
    shutil.copytree(RESULTS / "table1_small", results)
    assert main(["plot", str(results), "--metric", "ess_frac", "--per-seed", "--smooth", "3", "--out",
                 str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "curves-ess_frac.png").stat().st_size > 10_000
    assert main(["plot", str(results), "--metric", "nope", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "error: metric: no run's curve.csv has 'nope'; allowed: [" in err and "'ess_frac'" in err
    assert main(["plot", str(results), "--smooth", "0", "--out", str(tmp_path / "out")]) == 2
