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
docs/choices.md, and tested as such), warnings when the runs come from different code or MuJoCo
versions, and notes on what the numbers leave out: columns without a baseline row, seeds whose
final return is not finite, run directories skipped.

What a cell may hold, so that no number in the table is silently wrong:

* one configuration (``check_cells``): runs of one (environment, preset, row) that differ in their
  budget, backend, evaluation protocol or any other field that changes the results are refused,
  and so are two runs with the same seeds;
* each column is tested against its own baseline row (``column_baselines``), so a run of another
  preset cannot change another column's baseline; a column without one is shown untested;
* a seed whose final return is NaN or infinite (a run that diverged) is shown in its cell and
  left out of the statistics; the JSON files hold null for it, and stay valid for strict parsers.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from pathlib import Path

import numpy as np

from bpo.config.presets import PAPER_TABLE1, PRESETS, paper_setting
from bpo.config.schema import to_dict
from bpo.infra import results
from bpo.instruments.stats import describe
from experiments.aggregates import GAMMA, normalised_runs, runs_used_note, strict_json, write_aggregates
from experiments.common import (
    OPTIMAL_RETURNS,
    SETTING_NAMES,
    format_p,
    holm,
    provenance_counts,
    report_provenance,
    row_label,
    setting_label,
    sort_rows,
    sort_settings,
    welch_interval,
    welch_p,
    welch_p_from_stats,
)
from experiments.reader import Run, Skipped, read_json_object
from experiments.store import EXECUTION_ONLY

PAPER_RUNS = 10
"""Runs per cell of the paper's Table 1; its ± is their standard deviation (docs/choices.md)."""
FEW_SEEDS = 10
"""Fewer seeds per cell than this (the paper's 10) and the note under the table says plainly that
the marks are weak evidence."""
WORSE = "†"


def mark(mean: float, baseline_mean: float, p: float, alpha: float, p_worse: float | None = None) -> str:
    """'bold' (higher mean, ``p`` < ``alpha``), 'italic' (higher mean, ``p`` >= ``alpha``), 'worse' (lower
    mean, and ``p_worse``, the test for a lower mean, is below ``alpha``) or ''. Each is the cell's own
    test, unadjusted for the others (``multiple_comparisons`` counts what survives Holm's). No test
    (``p`` nan: a single seed, or two samples without spread) gives no mark: italic says the test
    found p >= alpha, which it did not."""
    if p is None or math.isnan(p):
        return ""
    if mean > baseline_mean:
        return "bold" if p < alpha else "italic"
    if mean < baseline_mean and p_worse is not None and p_worse < alpha:
        return "worse"
    return ""


DEFAULT_BASELINES = ("ppo", "a2c", "reinforce")
"""Without --baseline, each column is tested against its own PPO row, or else its A2C row, or else
its REINFORCE row."""
PROTOCOL = ("total_timesteps", "episodes", "backend", "eval_every", "eval_episodes", "eval_deterministic",
            "max_episode_steps")
"""The config fields that decide what a final return measures, beside the preset (part of the
column) and the row: the budget, the backend and the evaluation protocol. Checked first, so that a
refusal names them; every other field that changes the results must agree too."""
COMPARED = ("total_timesteps", "episodes", "eval_episodes", "eval_deterministic", "max_episode_steps")
"""What a row must share with its column's baseline row to be tested against it: the budget and
what the final evaluation measures. Not the backend, which a table may compare on purpose (the
rows of ``backend_check`` are the backends); a row that differs is left untested (``incomparable``)."""
POOLED = ("seed", "seeds", *EXECUTION_ONLY)
"""What may differ between runs pooled in one cell: their seeds (more seeds of one configuration),
and the fields that only change how a run executes, not its results."""


class MixedRuns(ValueError):
    """Runs that would share a cell but are not one configuration; one line naming them."""


def configuration(cfg) -> dict:
    """A run's config as {dotted field: value}, without the ``POOLED`` fields: what must be the
    same for two runs to share a cell."""
    flat = {}

    def walk(section: dict, prefix: str) -> None:
        for name, value in section.items():
            if isinstance(value, dict):
                walk(value, f"{prefix}{name}.")
            elif prefix or name not in POOLED:
                flat[prefix + name] = value

    walk(to_dict(cfg), "")
    return flat


def _same_configuration(first: Run, other: Run, where: str) -> None:
    mine, theirs = configuration(first.config), configuration(other.config)
    names = [n for n in PROTOCOL if n in mine or n in theirs] + [n for n in {**mine, **theirs} if n not in PROTOCOL]
    for name in names:
        if mine.get(name, "absent") != theirs.get(name, "absent"):
            raise MixedRuns(f"{where}: runs {first.run_id!r} and {other.run_id!r} differ in {name} "
                            f"({mine.get(name, 'absent')} vs {theirs.get(name, 'absent')}); a cell pools the seeds of "
                            "one configuration: move one of them to another results folder")


def check_cells(runs: list[Run]) -> None:
    """One cell is one configuration. Runs of one (environment, preset, row) that differ in a
    ``PROTOCOL`` field (their budget, backend or evaluation protocol) or in any other field that
    changes the results, or that share their base seed (so their seeds are the same random
    streams, counted twice), are a ``MixedRuns`` naming the runs and the field.

    Refused rather than split into cells of their own: a row of the table is one row of the
    paper's, tested against one baseline cell, and cells labelled by whatever field happened to
    differ would leave it unclear which cell to test against which. Runs that differ on purpose
    belong in separate folders, or in rows of their own (a swept value is part of the row)."""
    by_cell: dict = {}
    for r in runs:
        by_cell.setdefault((r.env, r.preset, r.row), []).append(r)
    for (env, preset, row), group in by_cell.items():
        where = f"{setting_label((env, preset))} {row_label(row)}"
        seeds: dict[int, Run] = {}
        for r in group:
            _same_configuration(group[0], r, where)
            if r.config.seed in seeds:
                raise MixedRuns(f"{where}: runs {seeds[r.config.seed].run_id!r} and {r.run_id!r} have the same seed "
                                f"({r.config.seed}), so the same seeds: pooled, each would count twice")
            seeds[r.config.seed] = r


def collect(runs: list[Run]) -> dict[tuple[str, str], dict[str, list[float]]]:
    """{(env, preset): {row: final evaluation returns, one per seed}}, once ``check_cells`` has
    made sure each cell holds one configuration."""
    check_cells(runs)
    cells: dict = {}
    for r in runs:
        cells.setdefault((r.env, r.preset), {}).setdefault(r.row, []).extend(r.summary["final_eval_returns"])
    return cells


def incomparable(runs: list[Run], baselines: dict) -> dict:
    """{(setting, row): how it differs}: the cells whose budget or evaluation (``COMPARED``) is not
    their column's baseline row's, so that no test of one against the other measures the method."""
    by_cell = {((r.env, r.preset), r.row): configuration(r.config) for r in runs}
    out = {}
    for (setting, row), mine in by_cell.items():
        base = baselines.get(setting)
        if base is None or row == base or (setting, base) not in by_cell:
            continue
        theirs = by_cell[(setting, base)]
        differ = [f"{n} {mine.get(n, 'absent')} vs {theirs.get(n, 'absent')}" for n in COMPARED
                  if mine.get(n, "absent") != theirs.get(n, "absent")]
        if differ:
            out[(setting, row)] = ", ".join(differ)
    return out


def incomparable_note(differ: dict, baselines: dict) -> str | None:
    """Which cells ``incomparable`` left untested, and why."""
    if not differ:
        return None
    parts = [f"{row_label(row)} in {setting_label(setting)} ({why}, against {row_label(baselines[setting])})"
             for (setting, row), why in sorted(differ.items())]
    return ("Not tested against their column's baseline, whose budget or evaluation differs, and left out of "
            "rliable's aggregates: " + "; ".join(parts) + ".")


def column_baselines(cells: dict, baseline: str | None = None) -> dict:
    """{(env, preset): the row its cells are tested against, or None}. ``baseline`` where the
    column has it; without one, the column's own PPO row, else its REINFORCE row. Per column, so a
    run of another preset (an episodic column beside PPO ones) cannot change the other columns'
    baseline; a column without its baseline row stays untested (``untested_note``)."""
    candidates = (baseline,) if baseline else DEFAULT_BASELINES
    return {s: next((c for c in candidates if c in rows), None) for s, rows in cells.items()}


def main_baseline(baselines: dict) -> str | None:
    """The baseline of the most columns (the first in the paper's row order on a tie): the one the
    JSON names, the paper's table is tested against and rliable's aggregates use."""
    named = [b for b in baselines.values() if b is not None]
    return max(sort_rows(named), key=named.count) if named else None


def _per_column(baseline, settings) -> dict:
    """A baseline given as one row for every column, or already per column."""
    return dict(baseline) if isinstance(baseline, dict) else {s: baseline for s in settings}


def _main(baseline: str | dict | None) -> str | None:
    return main_baseline(baseline) if isinstance(baseline, dict) else baseline


def finite(values) -> list[float]:
    return [float(x) for x in values if math.isfinite(x)]


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


def compute_table(cells: dict, baseline: str | dict, alpha: float = 0.05, alternative: str = "greater",
                  untested: Collection = ()) -> dict:
    """Every cell's mean, SD, SE, n and values; against the baseline of its column (``baseline``:
    one row for all, or {column: row or None}), its p-values (one-sided both ways, two-sided, and
    their Holm adjustments) and its mark. Only finite final returns enter the tests. The
    (setting, row) cells in ``untested`` (``incomparable``) get no test."""
    baselines, table = _per_column(baseline, cells), {}
    for setting, rows in cells.items():
        base_row = baselines.get(setting)
        base = finite(rows[base_row]) if base_row in rows else None
        for row, values in rows.items():
            cell = {**describe(values), **_UNTESTED}
            if base is not None and row != base_row and (setting, row) not in untested:
                ok = finite(values)
                cell.update(_tests(welch_p(ok, base, "greater"), welch_p(ok, base, "less"),
                                   welch_p(ok, base, "two-sided"), alternative))
                base_mean = float(np.mean(base)) if base else math.nan
                cell["mark"] = mark(cell["mean"], base_mean, cell["p"], alpha, cell["p_worse"])
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


def at_paper_budget(runs: list[Run]) -> set:
    """The cells ``((env, preset), row)`` whose runs all train for the budget their preset holds for
    the paper's Table 1 (1.5M steps, 2M with gSDE): only those are set against the paper's cells."""
    ok: dict = {}
    for r in runs:
        preset = PRESETS.get(r.preset)
        key = ((r.env, r.preset), r.row)
        budget = getattr(preset, "total_timesteps", None)  # the paper's Table 1 has no episodic column
        ok[key] = ok.get(key, True) and budget is not None and getattr(r.config, "total_timesteps", None) == budget
    return {key for key, same in ok.items() if same}


def against_paper(table: dict, cells_at_budget: set) -> dict:
    """Each of our cells at the paper's budget against the paper's same cell (a
    ``mujoco_default_authors`` cell against the paper's default column): ``{((env, preset), row):
    {difference, low, high, p_two_sided}}``, our mean minus the paper's, by Welch's two-sided test
    from the two SDs (ours over n seeds, the paper's ± read as the SD over ``PAPER_RUNS`` runs)."""
    out = {}
    for (setting, row), c in table.items():
        paper = PAPER_TABLE1.get(paper_setting(*setting), {}).get(row)
        if paper is None or (setting, row) not in cells_at_budget or c["n"] < 2:
            continue
        stats = (c["mean"], c["sd"], c["n"], float(paper[0]), float(paper[1]), PAPER_RUNS)
        diff, low, high = welch_interval(*stats)
        out[(setting, row)] = {"difference": diff, "low": low, "high": high,
                               "p_two_sided": welch_p_from_stats(*stats, "two-sided")}
    return out


def _against_paper_lines(vs_paper: dict, table: dict, paper_table: dict, settings, rows, alpha: float) -> list:
    """The grid of ``against_paper`` and the count of marks in ours and in the paper's same cells."""
    if not vs_paper:
        return []
    lines = ["", "Ours against the paper, cell by cell (our cells at the paper's budget): our mean − the paper's, its "
             f"95 % Welch interval and the two-sided p of Welch's test from the two SDs (ours over n seeds, the "
             f"paper's over {PAPER_RUNS} runs):", ""]
    columns = [s for s in settings if any((s, r) in vs_paper for r in rows)]
    lines += _grid(vs_paper, columns, [r for r in rows if any((s, r) in vs_paper for s in columns)],
                   lambda c: "–" if c is None else f"{_signed(c['difference'])} [{_signed(c['low'])}, "
                                                   f"{_signed(c['high'])}], p {format_p(c['p_two_sided'])}")
    tested = [k for k in vs_paper if table[k]["p"] is not None and not math.isnan(table[k]["p"])]
    ours = [table[k]["mark"] for k in tested]
    paper = [c["mark"] for c in (paper_table.get((paper_setting(*s), r)) for s, r in tested) if c is not None]
    kept = sum(table[k]["mark"] == "bold" and table[k]["p_holm"] < alpha for k in tested)
    above, below = (sum(c["p_two_sided"] < alpha and sign * c["difference"] > 0 for c in vs_paper.values())
                    for sign in (1, -1))
    marks = (f"ours {ours.count('bold')} bold ({kept} after Holm) and {ours.count('worse')} {WORSE}; the paper's "
             f"same cells {paper.count('bold')} bold and {paper.count('worse')} {WORSE}")
    counted = (f"Of these {_count(len(tested), 'cell')} tested against their column's baseline: {marks} (the paper's "
               "marks by the same test on its SDs). ") if tested else ""
    lines += ["", f"{counted}Against the paper's own cells: of our {len(vs_paper)}, {above} significantly higher and "
              f"{below} significantly lower (two-sided, p < {alpha}, unadjusted)."]
    return lines


def _signed(x: float) -> str:
    """A difference of returns with its sign, to the unit; no '-0' for a difference that rounds to 0."""
    return f"{round(x) or 0:+d}" if math.isfinite(x) else str(x)


def format_number(x: float, like: float | None = None) -> str:
    """0 decimals for returns in the hundreds and more (the paper's style), 2 below; an SE or SD
    takes the precision of its mean."""
    return f"{x:.0f}" if abs(x if like is None else like) >= 100 else f"{x:.2f}"


def _cell_text(cell: dict | None, latex: bool, paper: bool = False) -> str:
    """Ours: 'mean ± SE (SD sd)'; the paper's (``paper``): 'mean (SD sd)'. Bold or italic on the
    mean (and SE), † after the cell."""
    if cell is None:
        return "–" if not latex else "--"
    if cell["n"] == 0:
        return f"all {cell['not_finite']} seeds NaN"
    return _marked_text(cell, latex, paper) + _not_finite_text(cell)


def _not_finite_text(cell: dict) -> str:
    """' [k of n seeds NaN]' after a cell with seeds whose final return is not finite."""
    lost = cell.get("not_finite", 0)
    return f" [{lost} of {cell['n'] + lost} seeds NaN]" if lost else ""


def _marked_text(cell: dict, latex: bool, paper: bool) -> str:
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


def _count(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _grid(table: dict, settings, rows, text) -> list[str]:
    """A Markdown table with a row label column and one column per setting; ``text(cell)`` per cell."""
    lines = ["| | " + " | ".join(setting_label(s) for s in settings) + " |", "| --- |" + " --- |" * len(settings)]
    for row in rows:
        lines.append(f"| {row_label(row)} | " + " | ".join(text(table.get((s, row))) for s in settings) + " |")
    return lines


def against(baseline: str | dict) -> str:
    """What the rows are tested against: the baseline row's name, or, when columns have different
    baseline rows, each with its columns."""
    if not isinstance(baseline, dict):
        return row_label(baseline)
    columns: dict = {}
    for setting, row in baseline.items():
        if row is not None:
            columns.setdefault(row, []).append(setting)
    if not columns:
        return "its column's baseline row (none here: see the notes)"
    if len(columns) == 1:
        return row_label(next(iter(columns)))
    return "the baseline row of its column (" + "; ".join(
        f"{row_label(row)} in {', '.join(setting_label(s) for s in sort_settings(columns[row]))}"
        for row in sort_rows(columns)) + ")"


def _compared(table: dict, settings, rows, baseline: str | dict) -> list[str]:
    """The rows that are not the baseline of every column they are in: the rows of the p-value grids."""
    baselines = _per_column(baseline, settings)
    return [r for r in rows if any((s, r) in table and baselines.get(s) != r for s in settings)]


def legend(baseline: str | dict, alpha: float, alternative: str, markdown: bool = True,
           mc: dict | None = None) -> str:
    """What the cells and the marks mean: each mark is its cell's own test, unadjusted; with ``mc``
    (``multiple_comparisons``), how many marked cells stay significant after Holm's adjustment."""
    bold, italic = ("**bold**", "*italic*") if markdown else ("bold", "italic")
    side = "one-sided" if alternative == "greater" else "two-sided"
    loss = "one-sided test for a lower mean" if alternative == "greater" else "two-sided test"
    text = (f"Mean ± SE of the final evaluation return over seeds (SE = SD / √n), with the SD over seeds in "
            f"parentheses. Welch's t-test ({side}) of each row against {against(baseline)}: {bold} = higher mean "
            f"with unadjusted p < {alpha} (each cell's own Welch test), {italic} = higher mean with p ≥ {alpha}, "
            f"{WORSE} = lower mean with unadjusted p < {alpha} (each cell's own Welch test, {loss}).")
    if mc is not None and mc["tests"]:
        over = f"Holm's adjustment over the {_count(mc['tests'], 'tested cell')}"
        kept = [f"{mc[f'{name}_after_holm']} of {mc[name]} {shown} cell{'' if mc[name] == 1 else 's'}"
                for name, shown in (("bold", "bold"), ("worse", WORSE)) if mc[name]]
        verb = "stays" if mc["bold"] + mc["worse"] == 1 else "stay"
        text += (f" After {over}, {' and '.join(kept)} {verb} significant at {alpha}." if kept else
                 f" No cell is marked before {over}, so none after it.")
    return text


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


def _multiple_comparison_lines(table: dict, settings, rows, baseline: str | dict, alpha: float,
                               alternative: str) -> list:
    mc = multiple_comparisons(table, alpha, alternative)
    m = mc["tests"]
    if m == 0:
        return []
    expected = f"{alpha} × {m} = {mc['expected_false_positives']:.2f}"
    chance = (f"about {expected} cells would be marked bold by chance alone if no row differed from "
              f"{against(baseline)}, and as many †" if alternative == "greater" else
              f"about {expected} cells would be marked bold or † by chance alone if no row differed from "
              f"{against(baseline)}")
    holm_text = ("Holm's step-down correction over all {m} tested cells, which keeps the chance of any false "
                 "positive at α" if m > 1 else "with a single test Holm's correction changes nothing").format(m=m)
    lines = ["", f"Multiple comparisons: {_count(m, 'test')} at α = {alpha}, so {chance}. Holm-adjusted p-values "
             f"({holm_text}):", ""]
    lines += _grid(table, settings, _compared(table, settings, rows, baseline),
                   lambda c: "–" if c is None or c["p_holm"] is None else format_p(c["p_holm"]))
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
    return (f"Few seeds: only {count} per cell (the paper's Table 1 used 10 runs per cell). A t-test on so few "
            "values has little power and relies on them being roughly normal; a single bold or † cell is weak "
            "evidence, and a missing mark is no evidence of no difference.")


def to_markdown(table: dict, settings, rows, baseline: str | dict, alpha: float, alternative: str,
                runs: list[Run] = (), notes: list[str] = (), vs_paper: dict | None = None) -> str:
    """The table with its p-values and the multiple-comparison note; then, where they apply, the
    few-seeds warning, the optimal return of a column's environment, the paper's Table 1 for the
    same cells and ours against it (``vs_paper``, ``against_paper``'s cells), ``notes`` (the
    provenance warnings) and ``runs`` (``run_lines``)."""
    lines = _grid(table, settings, rows, lambda c: _cell_text(c, False))
    side = "one-sided p for a higher mean than" if alternative == "greater" else "two-sided p against"
    lines += ["", legend(baseline, alpha, alternative, mc=multiple_comparisons(table, alpha, alternative)), "",
              f"p-values ({side} {against(baseline)}; two-sided p in parentheses):", ""]
    lines += _grid(table, settings, _compared(table, settings, rows, baseline),
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
    paper_table = compute_paper_table(paper, _main(baseline), alpha, alternative) if paper else {}
    paper_rows = [r for r in rows if any((s, r) in paper_table for s in paper)]
    if paper_rows:  # a column the paper has, but none of its rows (e.g. other backends): no empty table
        lines += ["", f"The paper's Table 1 for the same cells (1.5M/2M steps): mean (SD) over {PAPER_RUNS} runs. "
                  "The paper prints mean ± SD without saying which; its bold and italic marks show it is the SD "
                  "(docs/choices.md). Marks: the same Welch test on these summary statistics (SE = SD / √10), "
                  "which at α = 0.05, one-sided, gives the paper's own marks.", ""]
        lines += _grid(paper_table, paper, paper_rows, lambda c: _cell_text(c, False, paper=True))
        lines += _against_paper_lines(vs_paper or {}, table, paper_table, settings, rows, alpha)
    for note in notes:
        lines += ["", f"**{note}**"]
    if runs:
        lines += ["", "Runs:", "", "| run | row | seeds | budget | wall s | env steps/s |",
                  "| --- | --- | --- | --- | --- | --- |"]
        lines += run_lines(runs)
    return "\n".join(lines)


def run_lines(runs: list[Run]) -> list[str]:
    """One Markdown line per run: its budget, wall time and training throughput (from its summary)."""
    lines = []
    for r in sorted(runs, key=lambda r: r.run_id):
        s = r.summary
        budget = (f"{s['total_timesteps']:.0f} steps" if "total_timesteps" in s else
                  f"{s['episodes']} episodes" if "episodes" in s else "–")
        steps_per_s = s.get("train_steps_per_s")
        lines.append(f"| {r.run_id} | {row_label(r.row)} | {r.seeds} | {budget} | {s['wall_time_s']:.0f} "
                     f"| {'–' if steps_per_s is None else f'{steps_per_s:.0f}'} |")
    return lines


_LATEX_ESCAPES = (("\\", r"\textbackslash{}"), ("_", r"\_"), ("&", r"\&"), ("%", r"\%"), ("#", r"\#"),
                  ("$", r"\$"), ("c̄", r"$\bar{c}$"), ("ρ̄", r"$\bar{\rho}$"), ("Q̂", r"$\hat{Q}$"),
                  ("α", r"$\alpha$"), ("×", r"$\times$"), ("−", "-"))
r"""Plain text of the legend (row and setting names, field names such as ``bpo.use_q_hat``) as LaTeX
reads it outside math mode; applied before the legend's own replacements, which bring ``$`` and ``\``."""


def to_latex(table: dict, settings, rows, baseline: str | dict = "ppo", alpha: float = 0.05,
             alternative: str = "greater") -> str:
    """A booktabs tabular, then the legend as a footnote-size paragraph."""
    envs = " & ".join(s[0] for s in settings)
    names = " & ".join(f"({SETTING_NAMES.get(s[1], s[1]).replace('_', chr(92) + '_')})" for s in settings)
    lines = [r"\begin{tabular}{l" + "c" * len(settings) + "}", r"\toprule", f" & {envs} \\\\", f" & {names} \\\\",
             r"\midrule"]
    for row in rows:
        lines.append(f"{row_label(row, latex=True)} & " + " & ".join(_cell_text(table.get((s, row)), True)
                                                                     for s in settings) + r" \\")
    text = legend(baseline, alpha, alternative, markdown=False, mc=multiple_comparisons(table, alpha, alternative))
    for plain, tex in (*_LATEX_ESCAPES, ("±", r"$\pm$"), ("√n", r"$\sqrt{n}$"), ("≥", r"$\geq$"), ("<", "$<$"),
                       (WORSE, r"$^{\dagger}$"), ("bold =", r"\textbf{bold} ="), ("italic =", r"\textit{italic} =")):
        text = text.replace(plain, tex)
    lines += [r"\bottomrule", r"\end{tabular}", "", r"{\footnotesize " + text + r"\par}"]
    return "\n".join(lines)


def _json_cells(table: dict) -> list[dict]:
    return [{"env": s[0], "preset": s[1], "row": r, **c} for (s, r), c in sorted(table.items())]


def untested_note(settings, baselines: dict, baseline: str | None) -> str | None:
    """Which columns have no baseline row, so that their cells carry no test."""
    missing = [s for s in settings if baselines.get(s) is None]
    if not missing:
        return None
    wanted = row_label(baseline) if baseline else " or ".join(row_label(b) for b in DEFAULT_BASELINES)
    return (f"Not tested: no {wanted} row in {', '.join(setting_label(s) for s in missing)}, so "
            f"{'its cells carry' if len(missing) == 1 else 'the cells of these columns carry'} no p-value and no mark "
            "(`bpo table --baseline ROW` tests them against another of their rows).")


def left_out_note(settings, baselines: dict, primary: str | None) -> str | None:
    """The columns rliable's aggregates leave out: those tested against another row, or untested."""
    out = [s for s in settings if baselines.get(s) != primary]
    if primary is None or not out:
        return None
    why = [f"{setting_label(s)} (" + ("no baseline row" if baselines.get(s) is None else
                                      f"tested against {row_label(baselines[s])}") + ")" for s in out]
    return (f"rliable's IQM and probability of improvement compare rows with {row_label(primary)} across the columns "
            f"tested against it; left out: {', '.join(why)}.")


def not_finite_note(table: dict) -> str | None:
    """The cells with seeds whose final return is NaN or infinite, and what was done with them."""
    bad = [(k, c) for k, c in sorted(table.items()) if c.get("not_finite")]
    if not bad:
        return None
    listed = "; ".join(f"{setting_label(s)} {row_label(r)}: {c['not_finite']} of {c['n'] + c['not_finite']}"
                       for (s, r), c in bad)
    return ("Seeds whose final return is NaN or infinite (a run that diverged) are counted in their cells and left "
            f"out of the means, SDs, SEs, tests and rliable's aggregates (n counts the other seeds): {listed}.")


def skipped_note(skipped: list[Skipped]) -> str | None:
    if not skipped:
        return None
    return (f"Skipped: {len(skipped)} run director{'y' if len(skipped) == 1 else 'ies'} whose files could not be "
            "used: " + "; ".join(f"{s.run_id} ({s.file}: {s.reason})" for s in skipped) + ".")


def aggregate_cells(cells: dict, baselines: dict, primary: str | None, untested: Collection = ()) -> dict:
    """What rliable's aggregates are computed from: the columns tested against ``primary``, with
    each cell's finite final returns only (a row left with none is dropped from its column), less
    the (setting, row) cells in ``untested`` (``incomparable``: another budget or evaluation)."""
    return {s: {r: ok for r, v in rows.items() if (s, r) not in untested and (ok := finite(v))}
            for s, rows in cells.items() if primary is not None and baselines[s] == primary}


def _notes(table, settings, rows, cells, baselines, baseline, skipped, untested) -> list[str]:
    """The notes under the table beside the provenance warnings, in the order they are printed."""
    primary = main_baseline(baselines)
    used_cells = aggregate_cells(cells, baselines, primary, untested)
    used = runs_used_note(used_cells, rows, *normalised_runs(used_cells, primary, rows), ran=cells,
                          untested=untested)
    return [n for n in (used, untested_note(settings, baselines, baseline), left_out_note(settings, baselines, primary),
                        not_finite_note(table), skipped_note(skipped)) if n]


def _json(table, baselines, alpha, alternative, notes, runs, skipped, paper, vs_paper) -> dict:
    primary = main_baseline(baselines)
    return {
        "baseline": primary, "alpha": alpha, "alternative": alternative,
        "baselines": [{"env": s[0], "preset": s[1], "baseline": b} for s, b in sorted(baselines.items())],
        "dispersion": "mean ± SE over seeds (SE = SD / sqrt(n)); each cell also holds sd, n and the per-seed values",
        "null": "not tested, or no value: a p-value without a baseline row or with fewer than two finite values (or "
                "none of them spread); an SD of a single value; a seed's final return that is NaN or infinite",
        "marks": {"bold": "higher mean than the baseline, p < alpha", "italic": "higher mean, p >= alpha",
                  "worse": f"lower mean, p_worse < alpha ({WORSE} in Markdown and LaTeX)",
                  "p": "one-sided (higher mean) when alternative is greater, else two-sided",
                  "p_worse": "one-sided (lower mean) when alternative is greater, else two-sided",
                  "p_holm": "p adjusted by Holm over all tested cells; p_worse_holm likewise",
                  "not_finite": "seeds whose final return is NaN or infinite, left out of n and the statistics"},
        "multiple_comparisons": multiple_comparisons(table, alpha, alternative),
        "notes": notes, "skipped": [s.to_json() for s in skipped],
        "provenance": provenance_counts([r.summary for r in runs]),
        "cells": _json_cells(table),
        "paper_table1": {"dispersion": f"mean ± SD over {PAPER_RUNS} runs (the paper's ±, read as SD)",
                         "cells": _json_cells(compute_paper_table(paper, primary, alpha, alternative))},
        **_json_against_paper(vs_paper)}


def _json_against_paper(vs_paper: dict) -> dict:
    """table1.json's ``against_paper``, only where some cell is at the paper's budget."""
    if not vs_paper:
        return {}
    return {"against_paper": {
        "test": f"Welch, two-sided, from the SDs (the paper's over {PAPER_RUNS} runs); difference = ours - the "
                "paper's, low and high its 95 % interval; only our cells at the paper's budget",
        "cells": [{"env": s[0], "preset": s[1], "row": r, **c} for (s, r), c in sorted(vs_paper.items())]}}


def check_baseline(runs: list[Run], baseline: str | None) -> dict:
    """The runs' cells (``collect``), after a ``FileNotFoundError`` for a ``baseline`` that no
    column has (a typo, not a missing column): ``bpo table`` calls it before it makes ``--out``."""
    cells = collect(runs)
    all_rows = {row for rows in cells.values() for row in rows}
    if baseline is not None and baseline not in all_rows:
        raise FileNotFoundError(f"baseline row {baseline!r} not found; rows: {sort_rows(all_rows)}")
    return cells


def table_texts(runs: list[Run], baseline: str | None = None, alpha: float = 0.05, alternative: str = "greater",
                skipped: list[Skipped] = ()) -> dict[str, str]:
    """The text of table1.md, table1.tex and table1.json that ``write_tables`` writes of ``runs``
    (``bpo report`` compares a folder's files with them, so that a table edited by hand or left from
    other runs is never published)."""
    return _tables(runs, baseline, alpha, alternative, skipped)[0]


def _tables(runs: list[Run], baseline: str | None, alpha: float, alternative: str, skipped) -> tuple:
    """``table_texts``, and the cells, the columns' baselines and the untested cells that rliable's
    aggregates are made of."""
    cells = check_baseline(runs, baseline)
    baselines = column_baselines(cells, baseline)
    differ = incomparable(runs, baselines)
    table = compute_table(cells, baselines, alpha, alternative, untested=differ)
    settings, rows = sort_settings(cells), sort_rows({row for rows in cells.values() for row in rows})
    few = few_seeds_note(c["n"] for c in table.values())
    notes = report_provenance([r.summary for r in runs], "bpo table")
    notes += _notes(table, settings, rows, cells, baselines, baseline, list(skipped), differ)
    if note := incomparable_note(differ, baselines):
        notes.insert(0, note)
    vs_paper = against_paper(table, at_paper_budget(runs))
    data = _json(table, baselines, alpha, alternative, ([few] if few else []) + notes, runs, list(skipped),
                 paper_columns(settings), vs_paper)
    texts = {"table1.md": to_markdown(table, settings, rows, baselines, alpha, alternative, runs, notes, vs_paper)
             + "\n",
             "table1.tex": to_latex(table, settings, rows, baselines, alpha, alternative) + "\n",
             "table1.json": strict_json(data)}
    return texts, cells, baselines, differ


def write_tables(runs: list[Run], out: Path, baseline: str | None = None, alpha: float = 0.05,
                 alternative: str = "greater", reps: int = 2000, skipped: list[Skipped] = (),
                 gamma: float = GAMMA) -> list[Path]:
    """table1.md, table1.tex and table1.json of ``runs`` (``experiments.store.load_runs``), and
    rliable's aggregates beside them (``gamma``: the optimality gap's threshold), in ``out``;
    ``skipped``, the run directories left out, are listed in the notes. A ``MixedRuns`` when a cell
    would pool different configurations, a ``FileNotFoundError`` for a ``baseline`` that no column
    has (a typo, not a missing column)."""
    out = Path(out)
    texts, cells, baselines, differ = _tables(runs, baseline, alpha, alternative, skipped)
    for name, text in texts.items():
        results.atomic_write_text(out / name, text)
    primary = main_baseline(baselines)
    return [out / name for name in texts] + write_aggregates(
        aggregate_cells(cells, baselines, primary, differ), primary, out, reps, gamma=gamma, ran=cells,
        untested=differ)


def read_cells(folder: Path) -> tuple[dict, dict]:
    """The cells of the table1.json that ``write_tables`` wrote in ``folder``, keyed by ((env,
    preset), row), and the file's header fields."""
    data = read_json_object(Path(folder) / "table1.json")  # a BadFile naming it when it is not JSON
    # JSON's null for a number that does not exist (the SD of one seed, the mean of none) is nan
    # again, as the table computed with it.
    cells = [{**c, **{k: math.nan for k in ("mean", "sd", "se") if c.get(k) is None}} for c in data["cells"]]
    return {((c["env"], c["preset"]), c["row"]): c for c in cells}, data
