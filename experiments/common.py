"""What the table, the aggregates and the plots share: row and column labels, their order, known
optimal returns, Welch's t-test, and writing a figure. It imports nothing else from
``experiments``, so they can all import it."""

from __future__ import annotations

import math
from pathlib import Path

from matplotlib.figure import Figure
from scipy import stats

from bpo.presets import ABLATIONS, PAPER_TABLE1, TABLE1_ROWS
from envs.short_corridor import expected_return, optimal_right_probability

ROW_LABELS = {
    "reinforce": ("REINFORCE", "REINFORCE"),
    "bpo": ("BPO", "BPO"),
    "ppo": ("PPO", "PPO"),
    "bpo_c1.5_rho1.5": ("BPO (c̄, ρ̄ = 1.5, 1.5)", r"BPO ($\bar{c}, \bar{\rho} = 1.5, 1.5$)"),
    "bpo_c1.0_rho1.0": ("BPO (c̄, ρ̄ = 1.0, 1.0)", r"BPO ($\bar{c}, \bar{\rho} = 1.0, 1.0$)"),
    "bpo_c1.0_rho1.5": ("BPO (c̄, ρ̄ = 1.0, 1.5)", r"BPO ($\bar{c}, \bar{\rho} = 1.0, 1.5$)"),
    "bpo_traj_c1.0": ("BPO (traj c̄ = 1.0)", r"BPO (traj $\bar{c} = 1.0$)"),
    "bpo_no_qhat": ("BPO without Q̂", r"BPO without $\hat{Q}$"),
    "bpo_no_symlog": ("BPO without symlog", "BPO without symlog"),
}
SETTING_NAMES = {"mujoco_gsde": "gSDE", "mujoco_default": "default"}
ROW_ORDER = ("reinforce", "bpo") + TABLE1_ROWS + tuple(ABLATIONS)
# Known optimal expected returns by environment: a reference line in the plots, a note under the table.
OPTIMAL_RETURNS = {"ShortCorridor-v0": float(expected_return(optimal_right_probability()))}  # about -11.66


def row_label(row: str, latex: bool = False) -> str:
    """A row (variant or algorithm, then grid values) as the paper names it, in text or LaTeX."""
    head, _, rest = row.partition(" ")
    label = ROW_LABELS.get(head, (head, head.replace("_", r"\_")))[int(latex)]
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
    """Distinct (environment, preset) columns in the order of the paper's Table 1, others after."""
    paper = list(PAPER_TABLE1)
    return sorted(set(settings), key=lambda s: (paper.index(s) if s in paper else len(paper), s))


def welch_p(row_values, baseline_values, alternative: str = "greater") -> float:
    """Welch's t-test p-value of row mean vs baseline mean; 'greater' is one-sided (row > baseline)."""
    if len(row_values) < 2 or len(baseline_values) < 2:
        return math.nan
    return float(stats.ttest_ind(row_values, baseline_values, equal_var=False, alternative=alternative).pvalue)


def save_figure(fig: Figure, out: Path, stem: str, **savefig_kwargs) -> list[Path]:
    """``OUT/STEM.png`` and ``OUT/STEM.pdf``, each written to a temporary name and renamed, so a
    reader never sees half a figure. ``fig`` is a ``matplotlib.figure.Figure`` made without pyplot
    (no GUI backend, nothing global to close)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{stem}.png", out / f"{stem}.pdf"]
    for p in paths:
        tmp = p.with_name(f".{p.name}.tmp{p.suffix}")
        try:
            fig.savefig(tmp, **savefig_kwargs)
            tmp.replace(p)
        finally:
            tmp.unlink(missing_ok=True)
    return paths
