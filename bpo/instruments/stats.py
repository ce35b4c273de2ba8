"""Statistics over seeds: the one place that computes a mean, its SD and its SE, for
``summary.json`` (``bpo.training.summary``), ``bpo evaluate`` (``bpo.training.evaluate``), the
tables (``experiments.table``, ``experiments.report``), the probe's summary
(``experiments.probe_summary``) and the variance check (``experiments.verify_variance``)."""

from __future__ import annotations

import math

import numpy as np


def describe(values, *, drop_non_finite: bool = True) -> dict:
    """Mean, sample SD (ddof 1), SE = SD / sqrt(n) and n of ``values`` (one per seed).

    Args:
        values: one number per seed.
        drop_non_finite: leave NaN and infinite values out of n and every statistic (a diverged
            seed has no return to average, and one NaN would make every statistic NaN), counting
            them in ``not_finite``; False keeps them, so that an infinite value makes the mean
            infinite (an infinite variance is a finding) and the SD and SE NaN.
    Returns:
        ``mean``, ``sd``, ``se`` (NaN where undefined: no value, or one), ``n``, ``not_finite`` and
        ``values``, every seed's value with None for a non-finite one."""
    v = np.asarray(values, dtype=float)
    finite = np.isfinite(v)
    kept = v[finite] if drop_non_finite else v
    n = len(kept)
    sd = float(kept.std(ddof=1)) if n > 1 and (drop_non_finite or finite.all()) else math.nan
    return {"mean": float(kept.mean()) if n else math.nan, "sd": sd, "se": sd / math.sqrt(n) if n else math.nan,
            "n": n, "not_finite": int(len(v) - finite.sum()),
            "values": [float(x) if math.isfinite(x) else None for x in v]}
