"""The paper's Table 1 from a results folder: mean ± SE of the final evaluation over seeds per
(environment, preset) column and algorithm row, each row tested against the baseline row with
Welch's t-test, in Markdown, LaTeX and JSON; beside it rliable's aggregates across tasks.

Marks, as in the paper's Table 1: **bold** when the row's mean is above the baseline's and the
test is significant (p < alpha), *italic* when the mean is above but the test is not significant.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from bpo import results
from bpo.presets import PAPER_TABLE1
from experiments.aggregates import write_aggregates
from experiments.common import (
    OPTIMAL_RETURNS,
    SETTING_NAMES,
    row_label,
    setting_label,
    sort_rows,
    sort_settings,
    welch_p,
)
from experiments.store import finished_runs


def mark(mean: float, baseline_mean: float, p: float, alpha: float) -> str:
    """'bold' (significant improvement), 'italic' (improvement, not significant) or ''."""
    if not mean > baseline_mean:
        return ""
    return "bold" if p < alpha else "italic"


def default_baseline(rows) -> str:
    for candidate in ("ppo", "reinforce"):
        if candidate in rows:
            return candidate
    raise FileNotFoundError(f"no baseline row ('ppo' or 'reinforce') among {sorted(rows)}; pass --baseline")


def collect(runs: list[dict]) -> dict[tuple[str, str], dict[str, list[float]]]:
    """{(env, preset): {row: final evaluation returns, one per seed}}."""
    cells: dict = {}
    for r in runs:
        cells.setdefault((r["env"], r["preset"]), {}).setdefault(r["row"], []).extend(r["final_eval_returns"])
    return cells


def compute_table(cells: dict, baseline: str, alpha: float = 0.05, alternative: str = "greater") -> dict:
    """Every cell's mean, SE, n, p against the baseline of its column, and its mark."""
    table = {}
    for setting, rows in cells.items():
        base = rows.get(baseline)
        for row, values in rows.items():
            v = np.asarray(values, dtype=float)
            cell = {"mean": float(v.mean()), "se": float(v.std(ddof=1) / np.sqrt(len(v))) if len(v) > 1 else math.nan,
                    "n": len(v), "p": None, "mark": ""}
            if base is not None and row != baseline:
                cell["p"] = welch_p(v, base, alternative)
                cell["mark"] = mark(cell["mean"], float(np.mean(base)), cell["p"], alpha)
            table[(setting, row)] = cell
    return table


def _number(x: float, like: float | None = None) -> str:
    """0 decimals for returns in the hundreds and more (the paper's style), 2 below; an SE takes
    the precision of its mean."""
    return f"{x:.0f}" if abs(x if like is None else like) >= 100 else f"{x:.2f}"


def _cell_text(cell: dict | None, latex: bool) -> str:
    if cell is None:
        return "–" if not latex else "--"
    mean, se = cell["mean"], cell["se"]
    text = f"{_number(mean)} ± {_number(se, like=mean)}" if not math.isnan(se) else _number(mean)
    if latex:
        text = text.replace("±", r"\pm")
        return {"bold": rf"$\bm{{{text}}}$", "italic": rf"$\mathit{{{text}}}$"}.get(cell["mark"], f"${text}$")
    return {"bold": f"**{text}**", "italic": f"*{text}*"}.get(cell["mark"], text)


def to_markdown(table: dict, settings, rows, baseline: str, alpha: float, alternative: str,
                runs: list[dict] = ()) -> str:
    """The table with its p-values; then, where they apply, the optimal return of a column's
    environment, the paper's Table 1 for the same cells, and ``runs`` (``run_lines``)."""
    lines = ["| | " + " | ".join(setting_label(s) for s in settings) + " |",
             "| --- |" + " --- |" * len(settings)]
    for row in rows:
        lines.append(f"| {row_label(row)} | " + " | ".join(_cell_text(table.get((s, row)), False) for s in settings)
                     + " |")
    side = "one-sided" if alternative == "greater" else "two-sided"
    lines += ["", f"Mean ± SE of the final evaluation return over seeds. Welch's t-test ({side}) of each row against "
              f"{row_label(baseline)}: **bold** = improvement with p < {alpha}, *italic* = improvement with "
              f"p ≥ {alpha}.", "", "p-values:", "",
              "| | " + " | ".join(setting_label(s) for s in settings) + " |", "| --- |" + " --- |" * len(settings)]
    for row in rows:
        if row == baseline:
            continue
        ps = [table.get((s, row), {}).get("p") for s in settings]
        lines.append(f"| {row_label(row)} | " + " | ".join("–" if p is None else f"{p:.3f}" for p in ps) + " |")
    ns = sorted({c["n"] for c in table.values()})
    lines += ["", f"Seeds per cell: {', '.join(map(str, ns))}."]
    optima = [f"{env} {OPTIMAL_RETURNS[env]:.2f}" for env in dict.fromkeys(s[0] for s in settings)
              if env in OPTIMAL_RETURNS]
    if optima:
        lines += ["", f"Optimal expected return: {', '.join(optima)}."]
    paper = [s for s in settings if s in PAPER_TABLE1]
    if paper:
        lines += ["", "The paper's Table 1 (1.5M/2M steps, 10 seeds) for the same cells:", "",
                  "| | " + " | ".join(setting_label(s) for s in paper) + " |", "| --- |" + " --- |" * len(paper)]
        for row in rows:
            vals = [PAPER_TABLE1[s].get(row) for s in paper]
            if any(vals):
                lines.append(f"| {row_label(row)} | " + " | ".join("–" if v is None else f"{v[0]} ± {v[1]}"
                                                                   for v in vals) + " |")
    if runs:
        lines += ["", "Runs:", "", "| run | row | seeds | budget | wall s | env steps/s |",
                  "| --- | --- | --- | --- | --- | --- |"]
        lines += run_lines(runs)
    return "\n".join(lines)


def run_lines(runs: list[dict]) -> list[str]:
    """One Markdown line per run: its budget, wall time and training throughput (from its summary)."""
    lines = []
    for r in sorted(runs, key=lambda r: r["run_id"]):
        s = r["summary"]
        budget = (f"{s['total_timesteps']:.0f} steps" if "total_timesteps" in s else
                  f"{s['episodes']} episodes" if "episodes" in s else "–")
        steps_per_s = s.get("train_steps_per_s")
        lines.append(f"| {r['run_id']} | {row_label(r['row'])} | {r['seeds']} | {budget} | {s['wall_time_s']:.0f} "
                     f"| {'–' if steps_per_s is None else f'{steps_per_s:.0f}'} |")
    return lines


def to_latex(table: dict, settings, rows) -> str:
    envs = " & ".join(s[0] for s in settings)
    names = " & ".join(f"({SETTING_NAMES.get(s[1], s[1]).replace('_', chr(92) + '_')})" for s in settings)
    lines = [r"\begin{tabular}{l" + "c" * len(settings) + "}", r"\toprule", f" & {envs} \\\\", f" & {names} \\\\",
             r"\midrule"]
    for row in rows:
        lines.append(f"{row_label(row, latex=True)} & " + " & ".join(_cell_text(table.get((s, row)), True)
                                                                     for s in settings) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    return "\n".join(lines)


def write_tables(results_dir: Path, out: Path, baseline: str | None = None, alpha: float = 0.05,
                 alternative: str = "greater", reps: int = 2000) -> list[Path]:
    out = Path(out)
    runs = finished_runs(results_dir)
    cells = collect(runs)
    all_rows = {row for rows in cells.values() for row in rows}
    baseline = baseline or default_baseline(all_rows)
    if baseline not in all_rows:
        raise FileNotFoundError(f"baseline row {baseline!r} not found; rows: {sort_rows(all_rows)}")
    table = compute_table(cells, baseline, alpha, alternative)
    settings, rows = sort_settings(cells), sort_rows(all_rows)
    details = [{**r, "summary": results.read_summary(Path(results_dir) / r["run_id"])} for r in runs]
    results.atomic_write_text(out / "table1.md",
                              to_markdown(table, settings, rows, baseline, alpha, alternative, details) + "\n")
    results.atomic_write_text(out / "table1.tex", to_latex(table, settings, rows) + "\n")
    results.atomic_write_json(out / "table1.json", {
        "baseline": baseline, "alpha": alpha, "alternative": alternative,
        "cells": [{"env": s[0], "preset": s[1], "row": r, **c} for (s, r), c in sorted(table.items())]})
    paths = [out / "table1.md", out / "table1.tex", out / "table1.json"]
    return paths + write_aggregates(cells, baseline, out, reps)
