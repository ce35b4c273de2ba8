"""The paper's Table 1 from a results folder: mean ± SE of the final evaluation over seeds per
(environment, preset) column and algorithm row, with the SD over seeds beside it, each row tested
against the baseline row with Welch's t-test, in Markdown, LaTeX and JSON; beside it rliable's
aggregates across tasks.

Marks, as in the paper's Table 1: **bold** when the row's mean is above the baseline's and the
test is significant (p < alpha), *italic* when the mean is above but the test is not significant.
One more, which the paper does not have: † when the row's mean is below the baseline's and the
test in that direction is significant (a loss).

Under the table: the p-values (one-sided and two-sided), Holm's adjustment over all tested cells
and the number of significant cells expected by chance, a plain warning when there are few seeds,
the paper's own numbers for the same cells (its ± read as a standard deviation over 10 runs, see
docs/choices.md, and tested as such), and warnings when the runs come from different code or
MuJoCo versions.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from bpo import results
from bpo.presets import PAPER_TABLE1, paper_setting
from experiments.aggregates import normalised_runs, runs_used_note, write_aggregates
from experiments.common import (
    OPTIMAL_RETURNS,
    SETTING_NAMES,
    holm,
    provenance_counts,
    report_provenance,
    row_label,
    setting_label,
    sort_rows,
    sort_settings,
    welch_p,
    welch_p_from_stats,
)
from experiments.store import finished_runs

PAPER_RUNS = 10
"""Runs per cell of the paper's Table 1; its ± is their standard deviation (docs/choices.md)."""
FEW_SEEDS = 10
"""Fewer seeds per cell than this (the paper's 10) and the note under the table says plainly that
the marks are weak evidence."""
WORSE = "†"


def mark(mean: float, baseline_mean: float, p: float, alpha: float, p_worse: float | None = None) -> str:
    """'bold' (significant improvement), 'italic' (improvement, not significant), 'worse' (lower
    mean, and ``p_worse``, the test for a lower mean, is significant) or ''."""
    if mean > baseline_mean:
        return "bold" if p < alpha else "italic"
    if mean < baseline_mean and p_worse is not None and p_worse < alpha:
        return "worse"
    return ""


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


def describe(values) -> dict:
    """Mean, sample SD (ddof 1), SE = SD / sqrt(n), n and the values themselves."""
    v = np.asarray(values, dtype=float)
    sd = float(v.std(ddof=1)) if len(v) > 1 else math.nan
    return {"mean": float(v.mean()), "sd": sd, "se": sd / math.sqrt(len(v)), "n": len(v), "values": v.tolist()}


def _tests(p_greater: float, p_less: float, p_two: float, alternative: str) -> dict:
    """A cell's p-values: ``p`` decides bold/italic (one-sided for a higher mean, or two-sided),
    ``p_worse`` decides † (one-sided for a lower mean, or two-sided)."""
    one_sided = alternative == "greater"
    return {"p": p_greater if one_sided else p_two, "p_worse": p_less if one_sided else p_two,
            "p_greater": p_greater, "p_less": p_less, "p_two_sided": p_two}


_UNTESTED = {"p": None, "p_worse": None, "p_greater": None, "p_less": None, "p_two_sided": None, "p_holm": None,
             "p_worse_holm": None, "mark": ""}


def _adjust(table: dict) -> dict:
    """Holm-adjusted ``p`` and ``p_worse`` over every tested cell of the table (each direction its
    own family of the same cells)."""
    tested = [k for k, c in table.items() if c["p"] is not None]
    for key, name in (("p", "p_holm"), ("p_worse", "p_worse_holm")):
        for k, adjusted in zip(tested, holm([table[k][key] for k in tested]), strict=True):
            table[k][name] = adjusted
    return table


def compute_table(cells: dict, baseline: str, alpha: float = 0.05, alternative: str = "greater") -> dict:
    """Every cell's mean, SD, SE, n and values; against the baseline of its column, its p-values
    (one-sided both ways, two-sided, and their Holm adjustments) and its mark."""
    table = {}
    for setting, rows in cells.items():
        base = rows.get(baseline)
        for row, values in rows.items():
            cell = {**describe(values), **_UNTESTED}
            if base is not None and row != baseline:
                cell.update(_tests(welch_p(values, base, "greater"), welch_p(values, base, "less"),
                                   welch_p(values, base, "two-sided"), alternative))
                cell["mark"] = mark(cell["mean"], float(np.mean(base)), cell["p"], alpha, cell["p_worse"])
            table[(setting, row)] = cell
    return _adjust(table)


def paper_columns(settings) -> list[tuple[str, str]]:
    """The paper's Table 1 columns that ``settings`` are compared with, once each, in their order
    (a run of ``mujoco_default_authors`` is compared with the paper's ``mujoco_default`` column)."""
    columns = dict.fromkeys(paper_setting(*s) for s in settings)
    return [c for c in columns if c in PAPER_TABLE1]


def compute_paper_table(settings, baseline: str, alpha: float = 0.05, alternative: str = "greater") -> dict:
    """The paper's Table 1 for ``settings`` as a table like ``compute_table``'s: its ± read as the SD
    over ``PAPER_RUNS`` runs (SE = SD / sqrt(10)), each row tested against ``baseline`` by Welch's
    t-test from these summary statistics. With alpha 0.05, one-sided, the marks are the paper's own."""
    table = {}
    for setting in settings:
        rows = PAPER_TABLE1.get(setting, {})
        base = rows.get(baseline)
        for row, (mean, sd) in rows.items():
            cell = {"mean": float(mean), "sd": float(sd), "se": sd / math.sqrt(PAPER_RUNS), "n": PAPER_RUNS,
                    **_UNTESTED}
            if base is not None and row != baseline:
                stats = (mean, sd, PAPER_RUNS, base[0], base[1], PAPER_RUNS)
                cell.update(_tests(welch_p_from_stats(*stats, "greater"), welch_p_from_stats(*stats, "less"),
                                   welch_p_from_stats(*stats, "two-sided"), alternative))
                cell["mark"] = mark(mean, base[0], cell["p"], alpha, cell["p_worse"])
            table[(setting, row)] = cell
    return _adjust(table)


def format_number(x: float, like: float | None = None) -> str:
    """0 decimals for returns in the hundreds and more (the paper's style), 2 below; an SE or SD
    takes the precision of its mean."""
    return f"{x:.0f}" if abs(x if like is None else like) >= 100 else f"{x:.2f}"


def _cell_text(cell: dict | None, latex: bool, paper: bool = False) -> str:
    """Ours: 'mean ± SE (SD sd)'; the paper's (``paper``): 'mean (SD sd)'. Bold or italic on the
    mean (and SE), † after the cell."""
    if cell is None:
        return "–" if not latex else "--"
    mean, se, sd = cell["mean"], cell["se"], cell["sd"]
    if math.isnan(sd):
        text, extra = format_number(mean), ""
    elif paper:
        text, extra = format_number(mean), f" (SD {format_number(sd, like=mean)})"
    else:
        text, extra = f"{format_number(mean)} ± {format_number(se, like=mean)}", f" (SD {format_number(sd, like=mean)})"
    if latex:
        text = text.replace("±", r"\pm")
        text = {"bold": rf"$\bm{{{text}}}$", "italic": rf"$\mathit{{{text}}}$"}.get(cell["mark"], f"${text}$")
        return text + extra + (r"$^{\dagger}$" if cell["mark"] == "worse" else "")
    text = {"bold": f"**{text}**", "italic": f"*{text}*"}.get(cell["mark"], text)
    return text + extra + (f" {WORSE}" if cell["mark"] == "worse" else "")


def format_p(p: float | None) -> str:
    return "–" if p is None else "nan" if math.isnan(p) else "< 0.001" if p < 0.0005 else f"{p:.3f}"


def _count(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _grid(table: dict, settings, rows, text) -> list[str]:
    """A Markdown table with a row label column and one column per setting; ``text(cell)`` per cell."""
    lines = ["| | " + " | ".join(setting_label(s) for s in settings) + " |", "| --- |" + " --- |" * len(settings)]
    for row in rows:
        lines.append(f"| {row_label(row)} | " + " | ".join(text(table.get((s, row))) for s in settings) + " |")
    return lines


def legend(baseline: str, alpha: float, alternative: str, markdown: bool = True) -> str:
    """What the cells and the marks mean."""
    bold, italic = ("**bold**", "*italic*") if markdown else ("bold", "italic")
    side = "one-sided" if alternative == "greater" else "two-sided"
    loss = f"one-sided test for a lower mean, p < {alpha}" if alternative == "greater" else f"p < {alpha}"
    return (f"Mean ± SE of the final evaluation return over seeds (SE = SD / √n), with the SD over seeds in "
            f"parentheses. Welch's t-test ({side}) of each row against {row_label(baseline)}: {bold} = higher mean "
            f"with p < {alpha}, {italic} = higher mean with p ≥ {alpha}, {WORSE} = lower mean, significantly "
            f"({loss}).")


def multiple_comparisons(table: dict, alpha: float, alternative: str) -> dict:
    """The number of tests, the significant cells expected by chance alone (alpha x tests) and how
    many marked cells stay significant after Holm's adjustment."""
    tested = [c for c in table.values() if c["p"] is not None and not math.isnan(c["p"])]
    bold = [c for c in tested if c["mark"] == "bold"]
    worse = [c for c in tested if c["mark"] == "worse"]
    return {"method": "holm", "tests": len(tested), "alpha": alpha, "alternative": alternative,
            "expected_false_positives": alpha * len(tested),
            "bold": len(bold), "bold_after_holm": sum(c["p_holm"] < alpha for c in bold),
            "worse": len(worse), "worse_after_holm": sum(c["p_worse_holm"] < alpha for c in worse)}


def _multiple_comparison_lines(table: dict, settings, rows, baseline: str, alpha: float, alternative: str) -> list:
    mc = multiple_comparisons(table, alpha, alternative)
    m = mc["tests"]
    if m == 0:
        return []
    expected = f"{alpha} × {m} = {mc['expected_false_positives']:.2f}"
    chance = (f"about {expected} cells would be marked bold by chance alone if no row differed from "
              f"{row_label(baseline)}, and as many †" if alternative == "greater" else
              f"about {expected} cells would be marked bold or † by chance alone if no row differed from "
              f"{row_label(baseline)}")
    holm_text = ("Holm's step-down correction over all {m} tested cells, which keeps the chance of any false "
                 "positive at α" if m > 1 else "with a single test Holm's correction changes nothing").format(m=m)
    lines = ["", f"Multiple comparisons: {_count(m, 'test')} at α = {alpha}, so {chance}. Holm-adjusted p-values "
             f"({holm_text}):", ""]
    lines += _grid(table, settings, [r for r in rows if r != baseline],
                   lambda c: "–" if c is None else format_p(c["p_holm"]))
    after = []
    if mc["bold"]:
        after.append(f"bold cells {mc['bold_after_holm']} of {mc['bold']}")
    if mc["worse"]:
        after.append(f"† cells {mc['worse_after_holm']} of {mc['worse']} (their loss tests adjusted the same way)")
    lines += ["", f"Still significant at α = {alpha} after Holm's adjustment: {', '.join(after)}." if after else
              "No cell is marked bold or †."]
    return lines


def few_seeds_note(ns) -> str | None:
    """A plain warning when a cell has fewer than ``FEW_SEEDS`` seeds."""
    ns = sorted(set(ns))
    if not ns or ns[0] >= FEW_SEEDS:
        return None
    count = str(ns[0]) if len(ns) == 1 else f"{ns[0]} to {ns[-1]}"
    return (f"Few seeds: only {count} per cell (the paper used 10). A t-test on so few values has little power "
            "and relies on them being roughly normal; a single bold or † cell is weak evidence, and a missing mark "
            "is no evidence of no difference.")


def to_markdown(table: dict, settings, rows, baseline: str, alpha: float, alternative: str,
                runs: list[dict] = (), notes: list[str] = ()) -> str:
    """The table with its p-values and the multiple-comparison note; then, where they apply, the
    few-seeds warning, the optimal return of a column's environment, the paper's Table 1 for the
    same cells, ``notes`` (the provenance warnings) and ``runs`` (``run_lines``)."""
    lines = _grid(table, settings, rows, lambda c: _cell_text(c, False))
    side = "one-sided p for a higher mean than" if alternative == "greater" else "two-sided p against"
    lines += ["", legend(baseline, alpha, alternative), "",
              f"p-values ({side} {row_label(baseline)}; two-sided p in parentheses):", ""]
    lines += _grid(table, settings, [r for r in rows if r != baseline],
                   lambda c: "–" if c is None or c["p"] is None else
                   f"{format_p(c['p'])} ({format_p(c['p_two_sided'])})")
    lines += _multiple_comparison_lines(table, settings, rows, baseline, alpha, alternative)
    ns = sorted({c["n"] for c in table.values()})
    lines += ["", f"Seeds per cell: {', '.join(map(str, ns))}."]
    if (few := few_seeds_note(ns)) is not None:
        lines += ["", f"**{few}**"]
    optima = [f"{env} {OPTIMAL_RETURNS[env]:.2f}" for env in dict.fromkeys(s[0] for s in settings)
              if env in OPTIMAL_RETURNS]
    if optima:
        lines += ["", f"Optimal expected return: {', '.join(optima)}."]
    paper = paper_columns(settings)
    if paper:
        paper_table = compute_paper_table(paper, baseline, alpha, alternative)
        paper_rows = [r for r in rows if any((s, r) in paper_table for s in paper)]
        lines += ["", f"The paper's Table 1 for the same cells (1.5M/2M steps): mean (SD) over {PAPER_RUNS} runs. "
                  "The paper prints mean ± SD without saying which; its bold and italic marks show it is the SD "
                  "(docs/choices.md). Marks: the same Welch test on these summary statistics (SE = SD / √10), "
                  "which at α = 0.05, one-sided, gives the paper's own marks.", ""]
        lines += _grid(paper_table, paper, paper_rows, lambda c: _cell_text(c, False, paper=True))
    for note in notes:
        lines += ["", f"**{note}**"]
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


def to_latex(table: dict, settings, rows, baseline: str = "ppo", alpha: float = 0.05,
             alternative: str = "greater") -> str:
    """A booktabs tabular, then the legend as a footnote-size paragraph."""
    envs = " & ".join(s[0] for s in settings)
    names = " & ".join(f"({SETTING_NAMES.get(s[1], s[1]).replace('_', chr(92) + '_')})" for s in settings)
    lines = [r"\begin{tabular}{l" + "c" * len(settings) + "}", r"\toprule", f" & {envs} \\\\", f" & {names} \\\\",
             r"\midrule"]
    for row in rows:
        lines.append(f"{row_label(row, latex=True)} & " + " & ".join(_cell_text(table.get((s, row)), True)
                                                                     for s in settings) + r" \\")
    text = legend(baseline, alpha, alternative, markdown=False)
    for plain, tex in (("±", r"$\pm$"), ("√n", r"$\sqrt{n}$"), ("≥", r"$\geq$"), ("<", "$<$"), (WORSE, r"$^{\dagger}$"),
                       ("bold =", r"\textbf{bold} ="), ("italic =", r"\textit{italic} =")):
        text = text.replace(plain, tex)
    lines += [r"\bottomrule", r"\end{tabular}", "", r"{\footnotesize " + text + r"\par}"]
    return "\n".join(lines)


def _json_cells(table: dict) -> list[dict]:
    return [{"env": s[0], "preset": s[1], "row": r, **c} for (s, r), c in sorted(table.items())]


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
    summaries = [d["summary"] for d in details]
    notes = report_provenance(summaries, "bpo table")
    used = runs_used_note(*normalised_runs(cells, baseline, rows))
    notes = notes + ([used] if used else [])
    results.atomic_write_text(out / "table1.md", to_markdown(table, settings, rows, baseline, alpha, alternative,
                                                             details, notes) + "\n")
    results.atomic_write_text(out / "table1.tex", to_latex(table, settings, rows, baseline, alpha, alternative) + "\n")
    paper = paper_columns(settings)
    few = few_seeds_note(c["n"] for c in table.values())
    results.atomic_write_json(out / "table1.json", {
        "baseline": baseline, "alpha": alpha, "alternative": alternative,
        "dispersion": "mean ± SE over seeds (SE = SD / sqrt(n)); each cell also holds sd, n and the per-seed values",
        "marks": {"bold": "higher mean than the baseline, p < alpha", "italic": "higher mean, p >= alpha",
                  "worse": f"lower mean, p_worse < alpha ({WORSE} in Markdown and LaTeX)",
                  "p": "one-sided (higher mean) when alternative is greater, else two-sided",
                  "p_worse": "one-sided (lower mean) when alternative is greater, else two-sided",
                  "p_holm": "p adjusted by Holm over all tested cells; p_worse_holm likewise"},
        "multiple_comparisons": multiple_comparisons(table, alpha, alternative),
        "notes": ([few] if few else []) + notes,
        "provenance": provenance_counts(summaries),
        "cells": _json_cells(table),
        "paper_table1": {"dispersion": f"mean ± SD over {PAPER_RUNS} runs (the paper's ±, read as SD)",
                         "cells": _json_cells(compute_paper_table(paper, baseline, alpha, alternative))}})
    paths = [out / "table1.md", out / "table1.tex", out / "table1.json"]
    return paths + write_aggregates(cells, baseline, out, reps)
