"""``bpo report``: the numbers on the results pages, made from the committed results.

Every block of a page between ``<!-- results:NAME -->`` and ``<!-- /results -->`` is written from
the files under ``results/``: the table ``bpo table`` wrote for a sweep's folder, the table
``bpo verify-variance`` wrote, the headline cell beside the paper's numbers, and the one-line
summaries of the README. ``bpo report --check`` changes nothing and fails when a block differs from
what the results give (the test suite runs it), so a page cannot drift from its results.

Every results file a block reads is read and checked by ``experiments.reader`` (``read_json_object``,
``check_fields``, the run directories by ``scan``) for the fields the block uses: a damaged or
foreign one stops the command with one line naming the file and what is wrong with it (exit 2),
before any page is written, rather than a traceback or a page made from part of the results.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bpo.config.presets import PAPER_TABLE1, paper_setting
from bpo.config.schema import ConfigError
from bpo.infra.results import atomic_write_text
from bpo.instruments.stats import describe
from experiments.arguments import parse
from experiments.authors_verdict import authors_verdict_block
from experiments.common import (
    format_p,
    row_label,
    setting_label,
    sort_rows,
    sort_settings,
    welch_interval,
    welch_p_from_stats,
    welch_power,
)
from experiments.probe_summary import check_part, ratio_text, read_probe_summary
from experiments.probe_summary import stem as summary_stem
from experiments.reader import (
    COUNT,
    NAME,
    NUMBER,
    NUMBER_OR_NULL,
    BadFile,
    Check,
    check_fields,
    read_curve,
    read_json_object,
    read_text,
    scan,
)
from experiments.sweep import expand, load_sweep
from experiments.table import format_number, multiple_comparisons, read_cells, table_texts

PAGES = ("README.md", "docs/results.md", "docs/reproduction.md", "docs/backends.md", "docs/a2c.md")
BLOCK = re.compile(r"(<!-- results:(?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /results -->)", re.S)
# Sweep folders under results/, each made by ``bpo reproduce NAME --out results/NAME``; titles for the README.
SWEEPS = {"fig2": "Figure 2", "classic": "Classic control", "table1_small": "Table 1 at 100k steps",
          "mujoco_small": "HalfCheetah and Hopper at 300k steps", "headline": "The headline cell at 1.5M steps",
          "table1": "Table 1 at the paper's budget",
          "authors_code": "Our BPO with the authors' code's bugs, headline cell",
          "backend_check": "The threads backend against the Gymnasium host runner", "a2c": "A2C vs BPO-A2C",
          "probe": "The estimator probe's runs: BPO with and without Q̂"}
PROBE = "probe"
"""The sweep folder whose runs ``bpo reproduce probe`` also probes (its probe_summary.json)."""
PROBES = {"probe": "the run's own truncation", "probe-untruncated": "untruncated, ρ̄ = c̄ = ∞"}
"""The probes of that folder's runs (``bpo probe --name``), each summarised in NAME_summary.*."""
A2C_REFERENCE = ("a2c", "sb3_cartpole.json", "CartPole-v1-cartpole_a2c-a2c")
"""The folder, the reference's curves (``benchmarks/sb3_a2c_reference.py``) and our A2C run beside them."""
REFERENCE_STEPS = (100_000, 200_000, 300_000, 400_000, 500_000)


@dataclass(frozen=True)
class ReportArgs:
    """Rewrite the results blocks of README.md, docs/results.md, docs/reproduction.md,
    docs/backends.md and docs/a2c.md from results/ (or, with --check, only say which differ)."""

    results: Path = Path("results")
    """The committed results folder."""
    root: Path = Path(".")
    """The repository root: the pages are read and written relative to it."""
    check: bool = False
    """Write nothing; exit 1 when a page's block differs from what the results give."""


def _provenance_ok(value) -> bool:
    return value is None or (isinstance(value, dict) and isinstance(value.get("packages", {}), dict)
                             and all(isinstance(value.get(k, ""), str) for k in ("code_version", "device")))


_WHOLE: Check = (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0, "an integer >= 0")
_OBJECT: Check = (lambda v: isinstance(v, dict), "an object")
_LIST: Check = (lambda v: isinstance(v, list), "a list")
_NON_EMPTY_LIST: Check = (lambda v: isinstance(v, list) and bool(v), "a non-empty list")
PROVENANCE: Check = (_provenance_ok, "an object (code_version and device strings, packages an object) or null")
"""What ``provenance_line`` reads of a record's provenance."""


def _runs(folder: Path) -> list[dict]:
    """The finished runs of a results folder, each with its summary.json, read and checked by
    ``experiments.reader.scan`` (read only: nothing is written). A run directory it cannot use is a
    ``BadFile`` naming the file: the provenance and the wall time would quietly leave the run out."""
    runs = _scanned(folder)
    for run in runs:
        check_fields(run.summary, run.path / "summary.json", {}, {"provenance": PROVENANCE})
    return [{"run_id": run.run_id, "summary": run.summary} for run in runs]


def _scanned(folder: Path) -> list:
    """``experiments.reader.scan``'s runs of ``folder``; a run directory it skipped is a ``BadFile``."""
    runs, skipped = scan(folder)
    if skipped:
        raise BadFile(skipped[0].run_dir / skipped[0].file, skipped[0].reason)
    return runs


def _mean_se(cell: dict) -> str:
    """'mean ± SE'; the mean alone for one seed (no SE), as the table prints them."""
    if cell["n"] == 0:
        return f"all {cell['not_finite']} seeds NaN"
    if math.isnan(cell["se"]):
        return format_number(cell["mean"])
    return f"{format_number(cell['mean'])} ± {format_number(cell['se'], like=cell['mean'])}"


def _sd(cell: dict) -> str:
    return "–" if math.isnan(cell["sd"]) else format_number(cell["sd"], like=cell["mean"])


def _signed(x: float) -> str:
    return "–" if math.isnan(x) else f"{x:+.0f}"


def provenance_line(records: list[dict]) -> str:
    """Where a folder's results came from: the code version, device and the packages that decide
    the numbers, from the ``provenance`` of each record (a run's summary, or verify-variance's
    table.json); a folder whose records differ says MIXED."""
    prov = [r.get("provenance") or {} for r in records]
    versions = sorted({p.get("code_version", "unknown") for p in prov})
    devices = sorted({p.get("device", "unknown") for p in prov})
    packages = sorted({", ".join(f"{k} {v}" for k, v in p.get("packages", {}).items() if v is not None)
                       for p in prov})
    code = versions[0] if len(versions) == 1 else f"MIXED {versions}"
    used = packages[0] if len(packages) == 1 else f"MIXED {packages}"
    return f"Provenance: code {code}; {', '.join(devices)}; {used}."


def _wall_line(summaries: list[dict]) -> str:
    """The runs' wall time added up. A run stopped and continued from its checkpoint records every
    segment's time since commit e4d231c (``bpo.training.driver.elapsed``), only its last segment's
    before it; the work redone after an interruption (since the last checkpoint) counts in neither."""
    wall = sum(s.get("wall_time_s", 0.0) for s in summaries)
    return (f"{len(summaries)} run{'s' if len(summaries) != 1 else ''}, {wall / 60:.1f} min of wall time in all "
            "(a run continued from its checkpoint: every segment, as recorded since commit e4d231c; only its "
            "last segment before it).")


def table_problem(folder: Path) -> BadFile | None:
    """What makes ``folder``'s table not the table of its runs, if anything, as a ``BadFile`` naming
    the file: its cells must be exactly the folder's finished runs, each cell's values its run's
    final returns, and table1.md must be, to the character, and table1.json, its numbers to a
    relative 1e-9, what the block's command makes of them (``reproduce_arguments``). A table left
    from fewer or other runs (a sweep that redid runs without ``bpo table``), copied from another
    folder or edited by hand (a mean, a p-value) would be published under this folder's provenance.
    A run directory that cannot be read is a ``BadFile`` naming its file, as in ``_runs``."""
    path = folder / "table1.json"
    cells = {(c["env"], c["preset"], c["row"]): _returns(c.get("values")) for c in _table_json(path)["cells"]}
    scanned = _scanned(folder)
    runs: dict = {}  # a cell pools the seeds of its runs, in the order the table read them
    for r in scanned:
        runs.setdefault((r.config.env, r.config.preset, r.row), []).extend(r.summary["final_eval_returns"])
    runs = {cell: _returns(values) for cell, values in runs.items()}
    command, arguments = reproduce_arguments(folder)  # a sweep file is run to read them: once
    allowed = f"allowed: the table `{' '.join(command)}` makes of them"
    if cells != runs:
        differ = sorted({k for k in cells.keys() | runs.keys() if cells.get(k) != runs.get(k)}, key=str)
        example = " ".join(map(str, differ[0]))
        return BadFile(path, f"its cells are not the runs of {str(folder)!r} ({len(differ)} differ, e.g. "
                             f"{example}); {allowed}")
    made = table_texts(scanned, **arguments)
    for name in ("table1.json", "table1.md"):
        # The JSON's statistics to 1e-9 (another SciPy may differ in the last digits of a p-value);
        # the Markdown, whose numbers are rounded, to the character.
        if not (_same_json(read_json_object(folder / name), json.loads(made[name])) if name.endswith(".json")
                else read_text(folder / name) == made[name]):
            return BadFile(folder / name, f"it is not the table of the runs of {str(folder)!r} (edited, or made "
                                          f"by another command or version); {allowed}")
    return None


def _same_json(a, b) -> bool:
    """Whether two parsed JSON values are the same, numbers to a relative 1e-9."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_json(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same_json(x, y) for x, y in zip(a, b, strict=True))
    numbers = (int, float)
    if isinstance(a, numbers) and isinstance(b, numbers) and not isinstance(a, bool) and not isinstance(b, bool):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12) or (math.isnan(a) and math.isnan(b))
    return type(a) is type(b) and a == b


def reproduce_arguments(folder: Path) -> tuple[list[str], dict]:
    """The command that makes ``folder``'s table, and the arguments it gives ``write_tables``:
    ``bpo reproduce NAME``'s, with its sweep's baseline and alternative, for a folder named after a
    sweep (every folder the pages read), else ``bpo table``'s defaults."""
    try:
        sweep = load_sweep(folder.name)
    except ConfigError:
        return ["bpo", "table", str(folder)], {}
    return ["bpo", "reproduce", folder.name], {"baseline": sweep.baseline, "alternative": sweep.alternative}


def _returns(values) -> list | None:
    """Final returns as comparable values: a NaN or infinite one (null in a table) as None."""
    if not isinstance(values, list):
        return None
    return [float(v) if isinstance(v, (int, float)) and math.isfinite(v) else None for v in values]


def sweep_block(results: Path, name: str) -> str:
    """A sweep folder's ``table1.md`` (``bpo table``) under its provenance line, and its learning
    curves (``bpo plot``), linked from a page in ``docs/``; the table must be that of the folder's
    runs (``table_problem``)."""
    folder = results / name
    if not (folder / "table1.md").is_file():
        return f"*Not made yet: `bpo reproduce {name} --out results/{name}`.*\n"
    if problem := table_problem(folder):
        raise problem
    summaries = [r["summary"] for r in _runs(folder)]
    curves = f"\n![{SWEEPS[name]}](../results/{name}/curves.png)\n" if (folder / "curves.png").is_file() else ""
    return (f"Made by `bpo reproduce {name} --out results/{name}`. {provenance_line(summaries)} "
            f"{_wall_line(summaries)}\n\n"
            + read_text(folder / "table1.md") + curves)


_BOOL: Check = (lambda v: isinstance(v, bool), "true or false")
MDP_FIELDS: dict[str, Check] = {"theorem2_holds": _BOOL, "theorem2_holds_eq6_vpi": _BOOL, "mc_agrees": _BOOL}
SHORT_CORRIDOR_FIELDS: dict[str, Check] = {name: NUMBER for name in ("var_pi", "var_mu_hat", "var_mu_hat_eq6_vpi")}
"""What the variance blocks read of verify-variance's table.json: each MDP's verdicts, and the
variances of ShortCorridor."""


def _variance_table(results: Path) -> dict:
    """``results/variance/table.json`` (``bpo verify-variance``), checked for what the blocks read."""
    path = results / "variance" / "table.json"
    data = read_json_object(path)
    check_fields(data, path, {"mdps": _OBJECT}, {"provenance": PROVENANCE})
    mdps = data["mdps"]
    if "ShortCorridor" not in mdps:
        raise BadFile(path, "mdps: no ShortCorridor (bpo verify-variance writes it first)")
    for name, mdp in mdps.items():
        check_part(mdp, MDP_FIELDS, path, f"mdps[{name!r}]: ")
    check_part(mdps["ShortCorridor"], SHORT_CORRIDOR_FIELDS, path, "mdps['ShortCorridor']: ")
    return data


def variance_block(results: Path) -> str:
    folder = results / "variance"
    if not (folder / "table.md").is_file():
        return "*Not made yet: `bpo verify-variance --out results/variance`.*\n"
    data = _variance_table(results)
    return (f"Made by `bpo verify-variance --out results/variance`. {provenance_line([data])}\n\n"
            + read_text(folder / "table.md"))


_NAME_OR_NULL: Check = (lambda v: v is None or NAME[0](v), "a string or null")
CELL_FIELDS: dict[str, Check] = {
    "env": NAME, "preset": NAME, "row": NAME, "n": _WHOLE, "not_finite": _WHOLE, "mean": NUMBER_OR_NULL,
    "sd": NUMBER_OR_NULL, "se": NUMBER_OR_NULL, "p": NUMBER_OR_NULL,
    "mark": ((lambda v: isinstance(v, str)), "a string")}
CELL_OPTIONAL: dict[str, Check] = {name: NUMBER_OR_NULL for name in ("p_greater", "p_holm", "p_worse_holm")}
AGAINST_PAPER_FIELDS: dict[str, Check] = {
    "env": NAME, "preset": NAME, "row": NAME, "difference": NUMBER, "p_two_sided": NUMBER_OR_NULL}
TABLE_OPTIONAL: dict[str, Check] = {
    "alpha": ((lambda v: NUMBER[0](v) and 0 < v < 1), "a number in (0, 1)"), "alternative": NAME,
    "against_paper": ((lambda v: v is None or isinstance(v, dict)), "an object or null")}
"""What the blocks read of a table1.json (``bpo table``), besides its cells and baseline."""


def _table(folder: Path) -> tuple[dict, dict]:
    """``experiments.table.read_cells`` of ``folder``, after its table1.json has been checked for
    the fields the blocks use: read_cells checks only that it is JSON, so a cell without one was a
    traceback."""
    if problem := table_problem(folder):
        raise problem
    return read_cells(folder)


def _table_json(path: Path) -> dict:
    """A table1.json, checked for the fields the blocks use."""
    data = read_json_object(path)
    check_fields(data, path, {"cells": _LIST, "baseline": _NAME_OR_NULL}, TABLE_OPTIONAL)
    for i, cell in enumerate(data["cells"]):
        check_part(cell, CELL_FIELDS, path, f"cells[{i}]: ", CELL_OPTIONAL)
    against = data.get("against_paper") or {}
    check_part(against, {}, path, "against_paper: ", {"cells": _LIST})
    for i, cell in enumerate(against.get("cells", [])):
        check_part(cell, AGAINST_PAPER_FIELDS, path, f"against_paper: cells[{i}]: ")
    return data


VS_PAPER = {"headline": "*Not made yet: `bpo reproduce headline --out results/headline`.*\n",
            "table1": "*No cell tabulated yet: the campaign's progress is in "
                      "[results/table1/PROGRESS.md](../results/table1/PROGRESS.md).*\n"}
"""The folders whose cells are set beside the paper's (block ``NAME-vs-paper``), and what the block
says before the folder has a table: the headline, and the Table 1 campaign, whose committed cells
are tabulated again as each one comes in (``bpo table results/table1``)."""


def vs_paper_block(results: Path, name: str) -> str:
    """A folder's cells beside the paper's Table 1 cells for the same columns: means with SDs on
    both sides (the paper's ± is an SD over 10 runs), Welch's two-sided test of ours against the
    paper's from those summary statistics, and each row against the baseline in our runs
    (``verdict_lines``: n, p, the interval of the difference, the power to see the paper's gap)."""
    folder = results / name
    if not (folder / "table1.json").is_file():
        return VS_PAPER[name]
    cells, data = _table(folder)
    # table.against_paper's tests, as the table wrote them: the block reads them, not computes them again
    vs_paper = {((c["env"], c["preset"]), c["row"]): c for c in (data.get("against_paper") or {}).get("cells", [])}
    settings, rows = sort_settings({s for s, _ in cells}), sort_rows({r for _, r in cells})
    lines = [f"| setting | row | ours: mean ± SE (SD), n | ours: one-sided p vs {row_label(data['baseline'])} "
             "| the paper: mean (SD), n = 10 "
             "| ours − paper | Welch p, ours vs the paper (two-sided) |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for setting in settings:
        paper = PAPER_TABLE1.get(paper_setting(*setting), {})
        for row in rows:
            c = cells.get((setting, row))
            if c is None:
                continue
            ours = f"{_mean_se(c)} (SD {_sd(c)}), {c['n']}"
            if (v := vs_paper.get((setting, row))) is not None and row in paper:
                mean, sd = paper[row]
                theirs, diff, p = f"{mean} (SD {sd})", f"{v['difference']:+.0f}", format_p(v["p_two_sided"])
            else:
                theirs, diff, p = "–", "–", "–"
            one_sided = format_p(c.get("p_greater"))  # the column says one-sided, whatever the table's alternative
            lines.append(f"| {setting_label(setting)} | {row_label(row)} | {ours} | {one_sided} | {theirs} "
                         f"| {diff} | {p} |")
    summaries = [r["summary"] for r in _runs(folder)]
    return ("\n".join(lines) + "\n\n" + "\n".join(verdict_lines(cells, settings, data["baseline"]))
            + f"\n\n{provenance_line(summaries)} {_wall_line(summaries)}\n")


def _curve_points(steps_by_seed: list[dict[int, float]], step: int) -> str:
    """Mean ± SE over seeds of the evaluation at ``step`` (``bpo.instruments.stats.describe``)."""
    d = describe([s[step] for s in steps_by_seed if step in s])
    return "–" if d["n"] < 2 else f"{d['mean']:.0f} ± {d['se']:.0f}"


def _numbers(value) -> bool:
    return isinstance(value, list) and bool(value) and all(NUMBER[0](x) for x in value)


REFERENCE_RUN_FIELDS: dict[str, Check] = {"steps": (_numbers, "a non-empty list of numbers"),
                                          "eval_return": (_numbers, "a non-empty list of numbers")}


def _a2c_reference(path: Path) -> dict:
    """The reference's curves (``benchmarks/sb3_a2c_reference.py``), checked: its version, and per
    run (seed) as many returns as steps."""
    ref = read_json_object(path)
    check_fields(ref, path, {"stable_baselines3": NAME, "runs": _NON_EMPTY_LIST})
    for i, run in enumerate(ref["runs"]):
        check_part(run, REFERENCE_RUN_FIELDS, path, f"runs[{i}]: ")
        if len(run["steps"]) != len(run["eval_return"]):
            raise BadFile(path, f"runs[{i}]: {len(run['steps'])} steps but {len(run['eval_return'])} eval_return")
    return ref


def _seeds(run_dir: Path) -> int | None:
    """The seeds a run's summary.json gives (None where it gives none: the block reads the file only as
    the mark of a finished run), which ``read_curve`` checks the curve against: a curve cut off
    inside its first seed is whole rows of one seed, and passes every other check."""
    path = run_dir / "summary.json"
    summary = read_json_object(path)
    check_fields(summary, path, {}, {"seeds": COUNT})
    return summary.get("seeds")


def a2c_reference_block(results: Path) -> str:
    """Our A2C on CartPole beside Stable-Baselines3's A2C with the same settings and evaluation: the
    two curves at a few points and the final returns with Welch's two-sided test and interval."""
    name, file, run = A2C_REFERENCE
    path, run_dir = results / name / file, results / name / run
    if not path.is_file() or not (run_dir / "summary.json").is_file():
        return (f"*Not made yet: `bpo reproduce {name} --out results/{name}` and "
                f"`python benchmarks/sb3_a2c_reference.py --seeds 5 --out results/{name}/{file}`.*\n")
    ref = _a2c_reference(path)
    theirs = [dict(zip(r["steps"], r["eval_return"], strict=True)) for r in ref["runs"]]
    ours: dict[int, dict[int, float]] = {}
    for row in read_curve(run_dir, _seeds(run_dir)):
        ours.setdefault(int(row["seed"]), {})[int(row["step"])] = row["eval_return"]
    mine = list(ours.values())
    a, b = ([s[max(s)] for s in x] for x in (mine, theirs))
    stats = [(d["mean"], d["sd"], d["n"]) for d in map(describe, (a, b))]
    diff, low, high = welch_interval(*stats[0], *stats[1])
    p = welch_p_from_stats(*stats[0], *stats[1], "two-sided")
    lines = ["| environment steps | " + " | ".join(f"{s // 1000}k" for s in REFERENCE_STEPS) + " |",
             "| --- |" + " --- |" * len(REFERENCE_STEPS),
             "| ours (`cartpole_a2c`, A2C) | " + " | ".join(_curve_points(mine, s) for s in REFERENCE_STEPS) + " |",
             f"| Stable-Baselines3 {ref['stable_baselines3']} A2C | "
             + " | ".join(_curve_points(theirs, s) for s in REFERENCE_STEPS) + " |"]
    within = min(b) <= stats[0][0] <= max(b)
    return ("\n".join(lines) + f"\n\nMean ± SE over seeds of the deterministic evaluation (10 episodes) at each "
            f"point. Final returns: ours {stats[0][0]:.1f} (SD {stats[0][1]:.1f}, n = {stats[0][2]}), the reference "
            f"{stats[1][0]:.1f} (SD {stats[1][1]:.1f}, n = {stats[1][2]}; seeds {', '.join(f'{v:.0f}' for v in b)}); "
            f"ours − reference {diff:+.1f}, 95 % Welch interval [{low:+.1f}, {high:+.1f}], two-sided p = "
            f"{format_p(p)}. Our mean is {'within' if within else 'outside'} the range of the reference's seeds.\n")


def verdict_lines(cells: dict, settings: list, baseline: str) -> list[str]:
    """Each row against the baseline in our runs: n, the one-sided Welch p, the 95 % interval of the
    difference, and the power of that test to detect the paper's gap for the same cells at our SDs."""
    lines = [f"| setting | row − {row_label(baseline)} | n (row, {row_label(baseline)}) | difference of means, "
             "95 % Welch interval | one-sided Welch p | the paper's gap | power to detect the paper's gap "
             "(one-sided, α = 0.05, our SDs) |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for setting in settings:
        base = cells.get((setting, baseline))
        paper = PAPER_TABLE1.get(paper_setting(*setting), {})
        for row in sort_rows({r for s, r in cells if s == setting}):  # the paper's row order, as in the tables
            c = cells[(setting, row)]
            if row == baseline or base is None:
                continue
            diff, low, high = welch_interval(c["mean"], c["sd"], c["n"], base["mean"], base["sd"], base["n"])
            gap = paper[row][0] - paper[baseline][0] if row in paper and baseline in paper else None
            power = math.nan if gap is None else welch_power(gap, c["sd"], c["n"], base["sd"], base["n"])
            shown_power = "–" if math.isnan(power) else f"{power:.2f}"
            lines.append(f"| {setting_label(setting)} | {row_label(row)} | {c['n']}, {base['n']} "
                         f"| {_signed(diff)} [{_signed(low)}, {_signed(high)}] | {format_p(c.get('p_greater'))} "
                         f"| {'–' if gap is None else f'{gap:+.0f}'} | {shown_power} |")
    return lines


def _budget(steps: float) -> str:
    """A run's environment steps to two significant figures (runs end on whole rollouts, so a
    100k-step budget runs 100,096 or 102,400 steps): '100k steps', '1.5M steps'."""
    rounded = float(f"{steps:.2g}")
    return f"{rounded / 1e6:g}M steps" if rounded >= 1e6 else f"{rounded / 1e3:g}k steps"


def _glance_sweep(results: Path, name: str, link: bool = True) -> str | None:
    """One line for a sweep folder: budget, seeds and every cell's mean ± SE with its p; ``link``
    appends a link to the folder relative to the repository root (the README's)."""
    folder = results / name
    if not (folder / "table1.json").is_file():
        return None
    cells, data = _table(folder)
    runs = _runs(folder)
    budgets = sorted({_budget(r["summary"]["total_timesteps"]) if "total_timesteps" in r["summary"]
                      else f"{r['summary'].get('episodes')} episodes" for r in runs})
    seeds = sorted({c["n"] for c in cells.values()})
    parts, all_rows = [], sort_rows({r for _, r in cells})
    for setting in sort_settings({s for s, _ in cells}):
        rows = [r for r in all_rows if (setting, r) in cells]
        texts = []
        for row in rows:
            c = cells[(setting, row)]
            p = "" if c.get("p") is None or math.isnan(c["p"]) else f" (p = {format_p(c['p'])})"
            worse = " †" if c.get("mark") == "worse" else ""
            texts.append(f"{row_label(row)} {_mean_se(c)}{p}{worse}")
        parts.append(f"{setting_label(setting)}: " + ", ".join(texts))
    devices = ", ".join(sorted({(r["summary"].get("provenance") or {}).get("device", "unknown") for r in runs}))
    test = (f"p: {'two-sided' if data.get('alternative') == 'two-sided' else 'one-sided'} Welch test against "
            f"{row_label(data['baseline'])}, {_marks_text(cells, data)}" if data.get("baseline")
            else "no baseline row in the folder, so no test")
    planned = len(expand(load_sweep(name)))
    progress = f" ([progress](results/{name}/PROGRESS.md))" if link else ""
    so_far = (f", a campaign at {len(cells)} of {planned} cells{progress}"
              if (folder / "PROGRESS.md").is_file() and len(cells) < planned else "")
    return (f"* **{SWEEPS[name]}**{so_far} ({', '.join(budgets)}; {'/'.join(map(str, seeds))} seeds per cell; made on "
            f"{devices}; mean ± SE; {test}): "
            + "; ".join(parts) + "." + (f" [`results/{name}`](results/{name})" if link else ""))


def _marks_text(cells: dict, data: dict) -> str:
    """What † means in a sweep's line, and how many cells at an unadjusted p < alpha (a higher mean,
    bold in its table, or a lower one, †) stay below alpha after Holm's adjustment over the folder's
    tests (table1.json's cells carry p_holm and p_worse_holm)."""
    alpha = data.get("alpha", 0.05)
    mc = multiple_comparisons(cells, alpha, data.get("alternative", "greater"))
    text = f"† = lower mean at unadjusted p < {alpha} (each cell's own Welch test)"
    marked, kept = mc["bold"] + mc["worse"], mc["bold_after_holm"] + mc["worse_after_holm"]
    if not mc["tests"]:
        return text
    if not marked:
        return text + f"; no cell at unadjusted p < {alpha}"
    return (text + f"; cells at unadjusted p < {alpha}: {marked}, of which {kept} stay{'s' if kept == 1 else ''} "
            f"significant after Holm's adjustment over the {mc['tests']} test{'s' if mc['tests'] > 1 else ''}")


def _glance_variance(results: Path, link: bool = True) -> str | None:
    if not (results / "variance" / "table.json").is_file():
        return None
    mdps = _variance_table(results)["mdps"]
    n = len(mdps)
    pdis = sum(m["theorem2_holds"] for m in mdps.values())
    eq6 = sum(m["theorem2_holds_eq6_vpi"] for m in mdps.values())
    mc = sum(m["mc_agrees"] for m in mdps.values())
    sc = mdps["ShortCorridor"]
    return (f"* **Theorem 2** (exact dynamic programming on ShortCorridor and {n - 1} random MDPs): holds for the "
            f"per-decision IS return on {pdis} of {n}, for eq. (6) with its value term on {eq6} of {n}; Monte Carlo "
            f"agrees on {mc} of {n}. ShortCorridor: Var under π {sc['var_pi']:.1f}, under μ̂ {sc['var_mu_hat']:.2f} "
            f"(per-decision IS) and {sc['var_mu_hat_eq6_vpi']:.1f} (with the value term)."
            + (" [`results/variance`](results/variance)" if link else ""))


def _probe_summary(results: Path, name: str = "probe") -> dict | None:
    path = results / PROBE / f"{summary_stem(name)}.json"
    return read_probe_summary(path) if path.is_file() else None


def _glance_probe(results: Path, link: bool = True, name: str = "probe") -> str | None:
    """One line for a probe: per environment and run, the last probed point's pooled median
    ratios of the variance and of the MSE with their intervals."""
    summary = _probe_summary(results, name)
    if summary is None:
        return None
    parts = []
    for setting in sort_settings({(r["env"], r["preset"]) for r in summary["runs"]}):
        texts = []
        for r in (r for r in summary["runs"] if (r["env"], r["preset"]) == setting):
            last = max(r["points"], key=lambda p: p["update"])
            texts.append(f"{r['label']}: Var {ratio_text(last, 'var')}, MSE {ratio_text(last, 'mse')} "
                         f"at {_budget(last['env_steps'])}")
        parts.append(f"{setting_label(setting)}: " + "; ".join(texts))
    first = summary["runs"][0]["points"][-1]
    return (f"* **The estimator probe, {PROBES[name]}** (Var_μ/Var_π and MSE_μ/MSE_π of eq. (6)'s start-state "
            "estimate at the "
            f"last probed point: the median over {first['seeds']} seeds × {first['states_per_seed']} states, "
            f"[{summary['level']} bootstrap interval over the pooled states, which treats them as independent; "
            "the test with the seeds as the units is in the probe's table]; below 1: μ's estimate is better): "
            + "; ".join(parts) + "."
            + (f" [`results/{PROBE}`](results/{PROBE})" if link else ""))


def probe_block(results: Path, name: str = "probe") -> str:
    """A probe's summary table (``bpo probe-summary``, its title left out), the cost of the
    probes beside the training's, and the figure."""
    summary = _probe_summary(results, name)
    if summary is None:
        return f"*Not made yet: `bpo reproduce {PROBE} --out results/{PROBE}`.*\n"
    folder = results / PROBE
    train = {r["run_id"]: r["summary"]["wall_time_s"] for r in _runs(folder)}
    probe = {r["run_id"]: (r["probe_provenance"] or {}).get("wall_time_s") for r in summary["runs"]}
    costs = [f"`{run}` {train[run] / 60:.1f} min of training, {probe[run] / 60:.1f} min of probing"
             for run in probe if run in train and probe[run] is not None]
    versions = sorted({(r["probe_provenance"] or {}).get("code_version", "unknown") for r in summary["runs"]})
    md = folder / f"{summary_stem(name)}.md"
    parts = read_text(md).split("\n", 2)
    if len(parts) < 3 or not parts[0].startswith("# "):
        raise BadFile(md, "not a probe summary's table (`bpo probe-summary` writes a '# title' line, then the table)")
    text = parts[2]  # without its '# title' line
    table = re.sub(r"^## ", "#### ", text, flags=re.M)  # below the page's own headings
    return (f"Made by `bpo reproduce {PROBE} --out results/{PROBE}` (the runs, then `bpo probe` on each and "
            f"`bpo probe-summary`). Probed by code {', '.join(versions)}. Wall time of each run's training (a "
            f"resumed run's from its last start) and of its probe (compilations included): "
            + "; ".join(costs) + ".\n\n"
            + table + f"\n![The estimator probe, {PROBES[name]}](../results/{PROBE}/{summary_stem(name)}.png)\n")


def glance_block(results: Path) -> str:
    """The README's one line per result (the probe's: its ratios, not its runs' returns)."""
    lines = [line for line in [*(_glance_sweep(results, name) for name in SWEEPS if name != PROBE),
                               *(_glance_probe(results, name=name) for name in PROBES), _glance_variance(results)]
             if line is not None]
    return "\n".join(lines) + "\n"


def _authors_verdict(results: Path) -> str:
    """``authors_verdict_block``, after the table1.json files whose cells it reads (its ``five_ways``:
    authors_code's and headline's) have been checked here: it reads them with read_cells alone."""
    for name in ("authors_code", "headline"):
        if (results / name / "table1.json").is_file():
            _table(results / name)
    return authors_verdict_block(results)


def _line(line: str | None, made_by: str) -> str:
    return (line if line is not None else f"* *Not made yet: `{made_by}`.*") + "\n"


def blocks(results: Path) -> dict[str, Callable[[], str]]:
    """Block name -> its text: ``glance`` (every result's line), ``NAME`` (a sweep folder's table),
    ``line-NAME`` (its line alone), ``NAME-vs-paper`` for each folder of ``VS_PAPER``,
    ``NAME-summary`` and ``line-NAME-summary`` for each probe of ``PROBES`` (its ratios),
    ``a2c-reference``, ``authors-verdict`` (the headline cell five ways,
    ``experiments.authors_verdict``), ``variance`` and ``line-variance``."""
    return {
        "glance": lambda: glance_block(results),
        **{name: (lambda n=name: sweep_block(results, n)) for name in SWEEPS},
        **{f"line-{name}": (lambda n=name: _line(_glance_sweep(results, n, link=False),
                                                 f"bpo reproduce {n} --out results/{n}")) for name in SWEEPS},
        **{f"{name}-vs-paper": (lambda n=name: vs_paper_block(results, n)) for name in VS_PAPER},
        **{f"{name}-summary": (lambda n=name: probe_block(results, n)) for name in PROBES},
        **{f"line-{name}-summary": (lambda n=name: _line(_glance_probe(results, link=False, name=n),
                                                         f"bpo reproduce {PROBE} --out results/{PROBE}"))
           for name in PROBES},
        "a2c-reference": lambda: a2c_reference_block(results),
        "authors-verdict": lambda: _authors_verdict(results),
        "variance": lambda: variance_block(results),
        "line-variance": lambda: _line(_glance_variance(results, link=False),
                                       "bpo verify-variance --out results/variance"),
    }


def render(text: str, results: Path) -> str:
    """``text`` with every results block rewritten; an unknown block name is an error."""
    makers = blocks(results)
    cache: dict[str, str] = {}

    def replace(m: re.Match) -> str:
        name = m["name"]
        if name not in makers:
            raise ValueError(f"unknown results block {name!r}; allowed: {sorted(makers)}")
        if name not in cache:
            cache[name] = makers[name]()
        return m.group(1) + cache[name] + m.group(4)

    return BLOCK.sub(replace, text)


def report(results: Path, root: Path, check: bool) -> list[Path]:
    """The pages whose blocks differ from the results: rewritten, or with ``check`` only listed. A
    root without any page holding a results block is an error: a check that compares nothing must
    not pass."""
    differing, blocks_found = [], 0
    for page in PAGES:
        path = root / page
        if not path.is_file():
            continue
        text = path.read_text()
        blocks_found += len(BLOCK.findall(text))
        new = render(text, results)
        if new != text:
            differing.append((path, new))
    if not blocks_found:
        raise ValueError(f"root: no results block in {', '.join(PAGES)} under {str(root)!r}; run it from the "
                         "checkout or give --root")
    # Every page is made before any is written: a damaged results file met on a later page leaves the
    # earlier ones as they were, not some pages rewritten from the results and some not.
    if not check:
        for path, new in differing:
            atomic_write_text(path, new)
    return [path for path, _ in differing]


def report_main(argv: list[str]) -> int:
    """``bpo report``: 0 when written (with --check: when every block matches), 1 with --check when a
    block differs, 2 when refused (a bad argument, a damaged or foreign results file), with no page
    written."""
    args = parse(ReportArgs, argv, prog="bpo report")
    if not args.results.is_dir():
        print(f"error: results: {str(args.results)!r} is not a folder", file=sys.stderr)
        return 2
    try:
        differing = report(args.results, args.root, args.check)
    except ValueError as e:  # BadFile (a results file, named) and ConfigError are ValueErrors too
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.check:
        for path in differing:
            print(f"bpo report --check: {path} differs from {args.results}; run `bpo report`", file=sys.stderr)
        if not differing:
            print(f"bpo report --check: every results block matches {args.results}")
        return 1 if differing else 0
    print("rewrote " + (", ".join(map(str, differing)) or "nothing (every block already matches)"))
    return 0
