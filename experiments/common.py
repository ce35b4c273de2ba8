"""What the table, the aggregates and the plots share: row and column labels, their order, known
optimal returns, Welch's t-test (from values or from summary statistics), Holm's adjustment, the
provenance check of a results folder, and writing a figure. It imports nothing else from
``experiments``, so they can all import it."""

from __future__ import annotations

import math
import sys
import warnings
from collections import Counter
from pathlib import Path

from matplotlib.figure import Figure
from scipy import stats

from bpo.agents.methods import get_method, method_names
from bpo.config.presets import ABLATIONS, METHOD_ROWS, PAPER_TABLE1, TABLE1_ROWS, paper_setting
from envs.short_corridor import expected_return, optimal_right_probability

ROW_LABELS = {
    "reinforce": ("REINFORCE", "REINFORCE"),
    "bpo": ("BPO", "BPO"),
    "bpo_c1.5_rho1.5": ("BPO (c̄, ρ̄ = 1.5, 1.5)", r"BPO ($\bar{c}, \bar{\rho} = 1.5, 1.5$)"),
    "bpo_c1.0_rho1.0": ("BPO (c̄, ρ̄ = 1.0, 1.0)", r"BPO ($\bar{c}, \bar{\rho} = 1.0, 1.0$)"),
    "bpo_c1.0_rho1.5": ("BPO (c̄, ρ̄ = 1.0, 1.5)", r"BPO ($\bar{c}, \bar{\rho} = 1.0, 1.5$)"),
    "bpo_traj_c1.0": ("BPO (traj c̄ = 1.0)", r"BPO (traj $\bar{c} = 1.0$)"),
    "bpo_no_qhat": ("BPO without Q̂", r"BPO without $\hat{Q}$"),
    "bpo_no_symlog": ("BPO without symlog", "BPO without symlog"),
    "bpo_no_symlog_target": ("BPO without symlog (target networks)", "BPO without symlog (target networks)"),
}
SETTING_NAMES = {"mujoco_gsde": "gSDE", "mujoco_default": "default",
                 "mujoco_default_authors": "default, authors' config",
                 "mujoco_authors_code": "default, authors' code",
                 "mujoco_gsde_authors": "gSDE, authors' config",
                 "mujoco_gsde_authors_code": "gSDE, authors' code", "cartpole_a2c": "A2C",
                 "pendulum_a2c": "A2C", "mujoco_a2c": "A2C"}
ROW_ORDER = ("reinforce", "bpo") + TABLE1_ROWS + tuple(METHOD_ROWS) + tuple(ABLATIONS)
# Known optimal expected returns by environment: a reference line in the plots, a note under the table.
OPTIMAL_RETURNS = {"ShortCorridor-v0": float(expected_return(optimal_right_probability()))}  # about -11.66


def row_label(row: str, latex: bool = False) -> str:
    """A row (variant or algorithm, then grid values) as the paper names it, in text or LaTeX."""
    head, _, rest = row.partition(" ")
    if head in ROW_LABELS:
        label = ROW_LABELS[head][int(latex)]
    elif head in method_names():  # a method alone: its own label (PPO, A2C, a plug-in's)
        label = get_method(head).label
        label = label.replace("_", r"\_") if latex else label
    else:
        label = head.replace("_", r"\_") if latex else head
    return f"{label} {rest.replace('_', chr(92) + '_') if latex else rest}".strip()


def setting_label(setting: tuple[str, str]) -> str:
    """An (environment, preset) column: 'Hopper-v5 (default)'."""
    env, preset = setting
    return f"{env} ({SETTING_NAMES.get(preset, preset)})"


def sort_rows(rows) -> list[str]:
    """Distinct rows in the paper's order (REINFORCE, BPO, PPO, Table 1's BPO rows, ablations), others after."""
    def key(row):
        head = row.partition(" ")[0]
        return (ROW_ORDER.index(head) if head in ROW_ORDER else len(ROW_ORDER), row)

    return sorted(set(rows), key=key)


def sort_settings(settings) -> list[tuple[str, str]]:
    """Distinct (environment, preset) columns in the order of the paper's Table 1 (a preset that runs
    a paper column with other settings right after it), others after."""
    paper = list(PAPER_TABLE1)

    def key(s):
        column = paper_setting(*s)
        return (paper.index(column) if column in paper else len(paper), column != s, s)

    return sorted(set(settings), key=key)


def format_p(p: float | None) -> str:
    """A p-value for a table: three decimals, '< 0.001', 'nan', or '–' where there is none."""
    return "–" if p is None else "nan" if math.isnan(p) else "< 0.001" if p < 0.0005 else f"{p:.3f}"


def welch_p(row_values, baseline_values, alternative: str = "greater") -> float:
    """Welch's t-test p-value of row mean vs baseline mean; 'greater' is one-sided (row > baseline).

    Seeds that all end at the same return (CartPole's cap of 500) leave no spread: with both
    samples constant Welch's degrees of freedom are 0/0 and the test is undefined (nan), whether
    the two constants are equal or not (SciPy gives p = 0 from t = inf for unequal ones, a certainty
    no test of two spreadless samples supports). Its precision-loss warning is silenced."""
    if len(row_values) < 2 or len(baseline_values) < 2 or (_constant(row_values) and _constant(baseline_values)):
        return math.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(stats.ttest_ind(row_values, baseline_values, equal_var=False, alternative=alternative).pvalue)


def _constant(values) -> bool:
    finite = [float(v) for v in values]
    return max(finite) == min(finite)


def welch_p_from_stats(mean: float, sd: float, n: int, baseline_mean: float, baseline_sd: float, baseline_n: int,
                       alternative: str = "greater") -> float:
    """Welch's t-test from summary statistics, as a table of mean ± SD allows (each SE is sd / sqrt(n));
    the same p as ``welch_p`` on values with these means, sample SDs and counts (nan for two SDs of 0)."""
    if n < 2 or baseline_n < 2 or sd == baseline_sd == 0:
        return math.nan
    return float(stats.ttest_ind_from_stats(mean, sd, n, baseline_mean, baseline_sd, baseline_n, equal_var=False,
                                            alternative=alternative).pvalue)


def _welch_se_df(sd: float, n: int, baseline_sd: float, baseline_n: int) -> tuple[float, float]:
    """The standard error of a difference of two means and its Welch-Satterthwaite degrees of freedom
    (nan when both SDs are 0: 0/0, and no interval or power exists)."""
    va, vb = sd**2 / n, baseline_sd**2 / baseline_n
    if va + vb == 0:
        return 0.0, math.nan
    return math.sqrt(va + vb), (va + vb) ** 2 / (va**2 / (n - 1) + vb**2 / (baseline_n - 1))


def welch_interval(mean: float, sd: float, n: int, baseline_mean: float, baseline_sd: float, baseline_n: int,
                   confidence: float = 0.95) -> tuple[float, float, float]:
    """(difference of the means, low, high): Welch's two-sided ``confidence`` interval of
    mean - baseline_mean from summary statistics (the interval that ``welch_p_from_stats``'s
    two-sided test inverts)."""
    if n < 2 or baseline_n < 2:
        return mean - baseline_mean, math.nan, math.nan
    se, df = _welch_se_df(sd, n, baseline_sd, baseline_n)
    half = stats.t.ppf(0.5 + confidence / 2, df) * se
    return mean - baseline_mean, mean - baseline_mean - half, mean - baseline_mean + half


def one_sample_t(values, null: float = 0.0, confidence: float = 0.95) -> tuple[float, float, float, float]:
    """(mean, low, high, p): Student's one-sample t-test of the mean of ``values`` against ``null``,
    two-sided, with its ``confidence`` interval (n - 1 degrees of freedom; the interval is the one
    the test inverts). Fewer than two values, or values with no spread, give NaN for what needs a
    spread (the mean is still returned)."""
    n = len(values)
    mean = math.fsum(values) / n if n else math.nan
    if n < 2:
        return mean, math.nan, math.nan, math.nan
    se = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1) / n)
    if se == 0 or not math.isfinite(se):
        return mean, math.nan, math.nan, math.nan
    half = float(stats.t.ppf(0.5 + confidence / 2, n - 1)) * se
    p = 2 * float(stats.t.sf(abs(mean - null) / se, n - 1))
    return mean, mean - half, mean + half, min(1.0, p)


def welch_power(gap: float, sd: float, n: int, baseline_sd: float, baseline_n: int, alpha: float = 0.05,
                alternative: str = "greater") -> float:
    """The probability that Welch's test at level ``alpha`` rejects when the true difference of the
    means is ``gap`` and the SDs are ``sd`` and ``baseline_sd``: the noncentral t distribution with
    Welch's degrees of freedom and noncentrality gap / SE. One-sided ('greater') or two-sided.
    This is the usual approximation (G*Power's): it takes the degrees of freedom at the true SDs,
    where the test uses the sample SDs, and reads about 0.02 high at 5 seeds per arm against a
    simulation (``tests/test_table.py``)."""
    if n < 2 or baseline_n < 2:
        return math.nan
    se, df = _welch_se_df(sd, n, baseline_sd, baseline_n)
    if math.isnan(df):
        return math.nan
    ncp = gap / se
    if alternative == "greater":
        return float(stats.nct.sf(stats.t.ppf(1 - alpha, df), df, ncp))
    crit = stats.t.ppf(1 - alpha / 2, df)
    return float(stats.nct.sf(crit, df, ncp) + stats.nct.cdf(-crit, df, ncp))


def holm(pvalues) -> list[float]:
    """Holm's step-down adjustment of a family of p-values: the k-th smallest of m is multiplied by
    m - k + 1, capped at 1 and made non-decreasing in that order. Rejecting where the adjusted p is
    below alpha keeps the chance of any false positive in the family at most alpha. NaN or None (an
    untested cell) stays NaN and is not counted in m."""
    pvalues = [math.nan if p is None else float(p) for p in pvalues]
    tested = sorted((p, i) for i, p in enumerate(pvalues) if not math.isnan(p))
    adjusted = [math.nan] * len(pvalues)
    running = 0.0
    for k, (p, i) in enumerate(tested):
        running = max(running, min(1.0, (len(tested) - k) * p))
        adjusted[i] = running
    return adjusted


UNKNOWN = "unknown"
NO_PROVENANCE = "runs have no provenance record"
PROVENANCE_FIELDS = {"code_version": "code versions", "mujoco": "MuJoCo versions"}


def _provenance_values(summary: dict) -> dict[str, str] | None:
    """A run's code version and MuJoCo version from its summary's ``provenance``; None without one."""
    prov = summary.get("provenance")
    if not isinstance(prov, dict):
        return None
    packages = prov.get("packages") if isinstance(prov.get("packages"), dict) else {}
    mujoco = packages.get("mujoco", UNKNOWN)
    return {"code_version": str(prov.get("code_version") or UNKNOWN),
            "mujoco": "not installed" if mujoco is None else str(mujoco)}


def provenance_counts(summaries) -> dict[str, dict[str, int]]:
    """{"code_version": {version: runs}, "mujoco": {version: runs}} over run summaries; a run without
    a provenance record counts as "unknown"."""
    counts = {field: Counter() for field in PROVENANCE_FIELDS}
    for summary in summaries:
        values = _provenance_values(summary) or {}
        for field in PROVENANCE_FIELDS:
            counts[field][values.get(field, UNKNOWN)] += 1
    return {field: dict(sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))) for field, c in counts.items()}


def provenance_notes(summaries) -> list[str]:
    """What a results folder's runs say about where they came from, for ``bpo table`` and ``bpo plot``:
    one "Warning: ..." per field (the code version, ``packages["mujoco"]``) on which the runs differ,
    naming each version and how many runs have it (runs without a provenance record count as
    "unknown"); a single "Note: runs have no provenance record ..." when none has one; nothing when
    they all agree."""
    summaries = list(summaries)
    if not summaries:
        return []
    if all(_provenance_values(s) is None for s in summaries):
        return [f"Note: {NO_PROVENANCE} ({_runs(len(summaries))}, written before summaries recorded the code and "
                "package versions), so whether they all come from the same code and MuJoCo version cannot be checked."]
    notes = []
    for field, counts in provenance_counts(summaries).items():
        if len(counts) > 1:
            listed = ", ".join(f"{version} ({_runs(n)})" for version, n in counts.items())
            unknown = f" ({UNKNOWN}: no provenance record)" if UNKNOWN in counts else ""
            notes.append(f"Warning: this results folder mixes runs from different {PROVENANCE_FIELDS[field]}: "
                         f"{listed}{unknown}. Their numbers may not be comparable.")
    return notes


def _runs(n: int) -> str:
    return f"{n} run" if n == 1 else f"{n} runs"


def report_provenance(summaries, command: str) -> list[str]:
    """``provenance_notes`` of the runs, each printed to stderr (prefixed with ``command``); returned
    for the caller to put beside its output."""
    notes = provenance_notes(summaries)
    for note in notes:
        print(f"{command}: {note}", file=sys.stderr)
    return notes


def save_figure(fig: Figure, out: Path, stem: str, **savefig_kwargs) -> list[Path]:
    """``OUT/STEM.png`` and ``OUT/STEM.pdf``, each written to a temporary name and renamed, so a
    reader never sees half a figure. ``fig`` is a ``matplotlib.figure.Figure`` made without pyplot
    (no GUI backend, nothing global to close). The files hold no creation date, so redrawing the
    same results gives the same bytes (a committed figure redrawn leaves the tree clean)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{stem}.png", out / f"{stem}.pdf"]
    for p in paths:
        tmp = p.with_name(f".{p.name}.tmp{p.suffix}")
        metadata = {"CreationDate": None} if p.suffix == ".pdf" else {}
        try:
            fig.savefig(tmp, **{"metadata": metadata, **savefig_kwargs})
            tmp.replace(p)
        finally:
            tmp.unlink(missing_ok=True)
    return paths
