"""``bpo probe-summary FOLDER``: the estimator probes (``bpo probe RUN``) of a results folder's runs
side by side: a figure with one column per environment (Var_mu / Var_pi and MSE_mu / MSE_pi
against environment steps, one line per run labelled by its row), a Markdown table and a JSON
file of the same numbers with their provenance (docs/probe.md, "Summarising a measurement").

Every ``FOLDER/*/probe/probe.json`` is read and checked (``read_probe``) together with its run's
own files (``experiments.reader.read_run``: the row comes from ``spec.json`` as in ``bpo table``);
one that cannot be used (a damaged or foreign probe.json or run file) is skipped and named, on
stderr and in the summary's notes, and the command exits with 1 (``--allow-skipped``: 0), because a
summary that quietly left a run out would compare the rows on unequal terms; with no usable probe
at all it writes nothing and exits with 2, as it does for a bad ``--name`` or ``--baseline``,
which are checked before the output folder is made.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import numpy as np
import tyro

from bpo.config.schema import ConfigError, OnPolicyTrainConfig
from bpo.infra.provenance import code_version
from bpo.infra.results import atomic_write_json, atomic_write_text, ensure_writable_dir
from bpo.instruments.stats import describe
from bpo.training.probe_run import FINAL, check_probe_name
from experiments.arguments import parse
from experiments.common import (
    format_p,
    one_sample_t,
    report_provenance,
    row_label,
    save_figure,
    setting_label,
    sort_rows,
    sort_settings,
    welch_interval,
    welch_p,
)
from experiments.reader import (
    COUNT,
    NAME,
    NUMBER,
    NUMBER_OR_NULL,
    BadFile,
    Check,
    Run,
    Skipped,
    _json_type,
    _shown,
    check_fields,
    read_json_object,
    read_run,
)

STEM = "probe_summary"
_WHOLE: Check = (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0, "an integer >= 0")
_OBJECT: Check = (lambda v: isinstance(v, dict), "an object")
PROBE_FIELDS: dict[str, Check] = {
    "env": NAME, "settings": _OBJECT, "returns": _OBJECT,
    "points": (lambda v: isinstance(v, list) and bool(v), "a non-empty list")}
"""What makes a file a probe result (``bpo.training.probe_run.probe_run``'s output)."""
SETTINGS_FIELDS: dict[str, Check] = {
    "m": COUNT, "k": COUNT, "horizon": COUNT, "ref_k": COUNT, "ref_horizon": COUNT, "n_boot": COUNT,
    "level": (lambda v: NUMBER[0](v) and 0 < v < 1, "a number in (0, 1)"), "seed": _WHOLE}
POINT_FIELDS: dict[str, Check] = {
    "point": (lambda v: v == FINAL or _WHOLE[0](v), "an update count or 'final'"), "update": _WHOLE,
    "env_steps": _WHOLE, "seeds": (lambda v: isinstance(v, dict) and bool(v), "a non-empty object"),
    "pooled": _OBJECT}
STAT_FIELDS: dict[str, Check] = {
    **{f"{name}_ratio_{end}": NUMBER_OR_NULL for name in ("var", "mse") for end in ("median", "lo", "hi")},
    "frac_var_mu_lower": NUMBER, "ess_frac_mean": NUMBER_OR_NULL, "states": COUNT}
"""The numbers of ``bpo.instruments.probe.probe_statistics`` the summary reads, pooled and per seed (None: NaN
or an infinity, as the probe writes them)."""


@dataclass(frozen=True)
class ProbedRun:
    """A run directory with its probe: the run as ``bpo table`` reads it, and its checked probe.json."""

    run: Run
    probe: dict
    path: Path

    @property
    def setting(self) -> tuple[str, str]:
        """The column it is drawn in: (environment, preset), as ``bpo plot`` groups runs."""
        return self.run.env, self.run.preset


def check_part(part, fields: dict[str, Check], path: Path, where: str, optional: dict[str, Check] = ()) -> None:
    """An object inside a JSON file (probe.json, a summary, a table) with ``fields`` (and, where
    present, ``optional``: ``experiments.reader.check_fields``); a ``BadFile`` says where in the file
    it failed."""
    if not isinstance(part, dict):
        raise BadFile(path, f"{where}holds a JSON {_json_type(part)}, not an object")
    try:
        check_fields(part, path, fields, optional)
    except BadFile as e:
        raise BadFile(path, where + e.reason) from None


def _check_point(point, path: Path, where: str, m: int) -> None:
    """One entry of ``points``: its fields, its pooled and per-seed statistics (seeds named by their
    index), and that the pooled states are every seed's M (a point cut from another probe would not
    add up)."""
    check_part(point, POINT_FIELDS, path, where)
    check_part(point["pooled"], STAT_FIELDS, path, f"{where}pooled: ")
    for seed, stats in point["seeds"].items():
        if not seed.isdigit():
            raise BadFile(path, f"{where}seeds: {_shown(seed)} is not a seed index")
        check_part(stats, STAT_FIELDS, path, f"{where}seeds[{seed!r}]: ")
    expected = len(point["seeds"]) * m
    if point["pooled"]["states"] != expected:
        raise BadFile(path, f"{where}pooled states is {point['pooled']['states']}, not {len(point['seeds'])} seeds "
                            f"x settings.m {m} = {expected}")


def read_probe(path: Path) -> dict:
    """A ``probe.json`` checked for what the summary reads (``PROBE_FIELDS``, ``SETTINGS_FIELDS``,
    and per point ``POINT_FIELDS`` and ``STAT_FIELDS``); anything else is a ``BadFile``."""
    data = read_json_object(path)
    missing = [name for name in PROBE_FIELDS if name not in data]
    if missing:
        raise BadFile(path, f"not a probe result (`bpo probe RUN` writes one): no {', '.join(missing)}")
    check_fields(data, path, PROBE_FIELDS)
    try:
        check_fields(data["settings"], path, SETTINGS_FIELDS)
    except BadFile as e:
        raise BadFile(path, f"settings: {e.reason}") from None
    for i, point in enumerate(data["points"]):
        _check_point(point, path, f"points[{i}]: ", data["settings"]["m"])
    return data


def find_probes(folder: Path, name: str = "probe") -> tuple[list[ProbedRun], list[Skipped]]:
    """Every ``FOLDER/*/NAME/probe.json`` (not in hidden folders, where a sweep stages runs; NAME is
    ``bpo probe --name``) with its run, in the order of the folder's names, and those that cannot be
    used (a damaged or foreign probe.json or run file: skipped and listed, as ``bpo table`` does);
    a ``ConfigError`` when there is none, or none that can be used."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ConfigError("folder", f"{str(folder)!r} is not a folder")
    paths = sorted(p for p in folder.glob(f"*/{name}/probe.json") if not p.parts[-3].startswith("."))
    if not paths:
        hint = (" (it is a run directory itself: give the folder that holds its runs)"
                if (folder / name / "probe.json").exists() else "")
        raise ConfigError("folder", f"no probe results in {str(folder)!r}: no FOLDER/*/{name}/probe.json{hint}; run "
                                    "`bpo probe RUN` on its runs first")
    found, skipped = [], []
    for path in paths:
        run_dir = path.parent.parent
        try:
            found.append(_probed_run(path, folder))
        except BadFile as e:
            skipped.append(Skipped(str(run_dir.relative_to(folder)), run_dir, str(e.path.relative_to(run_dir)),
                                   e.reason))
    if not found:
        raise ConfigError("folder", f"no usable probe results in {str(folder)!r}: "
                                    + "; ".join(s.line() for s in skipped))
    return found, skipped


def _probed_run(path: Path, folder: Path) -> ProbedRun:
    probe = read_probe(path)
    run = read_run(path.parent.parent, folder)
    if probe["env"] != run.env:
        raise BadFile(path, f"env is {_shown(probe['env'])} but config.json says {_shown(run.env)}: the probe "
                            "of another run?")
    cfg = run.config
    if not isinstance(cfg, OnPolicyTrainConfig) or cfg.bpo is None:
        raise BadFile(path, f"config.json says the run is {cfg.algo} without BPO, which has no mu to probe: the "
                            "probe of another run?")
    ours = {"gamma": cfg.settings.gamma, "lambda": cfg.settings.gae_lambda, "traj": cfg.returns.traj}
    if path.parent.name == "probe":  # a named probe (--name) has truncation levels of its own
        ours |= {"rho_bar": cfg.returns.rho_bar, "c_bar": cfg.returns.c_bar}
    recorded = probe["returns"] if isinstance(probe.get("returns"), dict) else {}
    for name, value in ours.items():
        if recorded.get(name) != value:
            raise BadFile(path, f"returns.{name} is {_shown(recorded.get(name))} but config.json says "
                                f"{_shown(value)}: the probe of another run?")
    return ProbedRun(run, probe, path)


def _nan(x) -> float:
    """A statistic to plot: probe.json's None (NaN or an infinity) as NaN, which leaves a gap."""
    return math.nan if x is None else float(x)


def plotted_points(probe: dict) -> list[dict]:
    """The points to draw, by update: the final policies are left out where a kept point has the
    same update (``probe_run`` then repeats that point's numbers), kept where the run ended
    between two kept points."""
    kept = {p["update"] for p in probe["points"] if p["point"] != FINAL}
    points = [p for p in probe["points"] if p["point"] != FINAL or p["update"] not in kept]
    return sorted(points, key=lambda p: p["update"])


def levels_text(runs: list[ProbedRun]) -> str:
    """The bootstrap level(s) of the probes, '95%' (or '95% / 90%' where runs differ)."""
    levels = sorted({r.probe["settings"]["level"] for r in runs}, reverse=True)
    return " / ".join(f"{level:.0%}" for level in levels)


def labels(runs: list[ProbedRun]) -> dict[str, str]:
    """Each run's label, by run id: its row as ``bpo table`` names it; with the run id added where
    two runs of one setting share a row (their lines would otherwise have one name)."""
    count: dict = {}
    for r in runs:
        count[(r.setting, r.run.row)] = count.get((r.setting, r.run.row), 0) + 1
    return {r.run.run_id: row_label(r.run.row) + (f" ({r.run.run_id})" if count[(r.setting, r.run.row)] > 1 else "")
            for r in runs}


def _draw(ax, run: ProbedRun, name: str, colour: str, label: str) -> None:
    """One run in one panel: the pooled median with its bootstrap band, and each seed's median thin."""
    points = plotted_points(run.probe)
    steps = [p["env_steps"] for p in points]
    pooled = [p["pooled"] for p in points]
    ax.plot(steps, [_nan(q[f"{name}_ratio_median"]) for q in pooled], marker="o", color=colour, label=label)
    ax.fill_between(steps, [_nan(q[f"{name}_ratio_lo"]) for q in pooled],
                    [_nan(q[f"{name}_ratio_hi"]) for q in pooled], color=colour, alpha=0.2, linewidth=0)
    for seed in sorted(points[0]["seeds"], key=int):
        ax.plot(steps, [_nan(p["seeds"].get(seed, {}).get(f"{name}_ratio_median")) for p in points], color=colour,
                linewidth=0.7, alpha=0.5)


RATIOS = (("var", "Var_μ / Var_π"), ("mse", "MSE_μ / MSE_π"))


def _log_axis(ax) -> None:
    """Log scale labelled 0.5 and 2, not 5 x 10^-1; minor ticks labelled only where the axis spans
    less than a decade (a ratio near 1 would otherwise show no label but the 1)."""
    from matplotlib.ticker import FuncFormatter

    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}"))

    def minor(y, _):
        low, high = sorted(ax.get_ylim())
        return f"{y:.3g}" if low > 0 and high / low < 10 else ""

    ax.yaxis.set_minor_formatter(FuncFormatter(minor))
    ax.axhline(1.0, color="black", linewidth=0.8)


def summary_figure(runs: list[ProbedRun]):
    """One column per (environment, preset), rows Var_mu / Var_pi and MSE_mu / MSE_pi on a log
    scale: per run the pooled median with its bootstrap band and each seed's median, thin; a
    run's colour is the same in every column."""
    from matplotlib.figure import Figure

    settings = sort_settings(r.setting for r in runs)
    order = sort_rows(r.run.row for r in runs)
    names = labels(runs)
    by_label = sorted(runs, key=lambda r: (order.index(r.run.row), names[r.run.run_id]))
    colours = {label: f"C{i % 10}" for i, label in enumerate(dict.fromkeys(names[r.run.run_id] for r in by_label))}
    fig = Figure(figsize=(5.2 * len(settings), 7.0), layout="constrained")
    axes = fig.subplots(2, len(settings), squeeze=False)
    for col, setting in enumerate(settings):
        for row, (name, what) in enumerate(RATIOS):
            ax = axes[row, col]
            for r in (r for r in by_label if r.setting == setting):
                label = names[r.run.run_id]
                _draw(ax, r, name, colours[label], label)
            _log_axis(ax)
            ax.set_ylabel(what)
        axes[0, col].set_title(setting_label(setting))
        axes[1, col].set_xlabel("environment steps")
        axes[0, col].legend(fontsize=7)
    fig.suptitle("Eq. (6)'s start-state estimate under μ over under π: median over states pooled over seeds, "
                 f"{levels_text(runs)} percentile-bootstrap band; thin: each seed's median", fontsize=9)
    return fig


def point_entry(point: dict, m: int) -> dict:
    """One point of a run as the summary keeps it: the pooled statistics the table shows, its seeds
    and states, each seed's median ratios (the thin lines) and the test of those medians with the
    seeds as the units (``seed_test``)."""
    medians = {seed: {name: stats[name] for name in ("var_ratio_median", "mse_ratio_median")}
               for seed, stats in sorted(point["seeds"].items(), key=lambda kv: int(kv[0]))}
    return {"point": point["point"], "update": point["update"], "env_steps": point["env_steps"],
            "seeds": len(point["seeds"]), "states_per_seed": m,
            **{name: point["pooled"][name] for name in STAT_FIELDS},
            "seed_medians": medians,
            "seed_test": {name: seed_test([v[f"{name}_ratio_median"] for v in medians.values()])
                          for name in ("var", "mse")}}


def seed_test(medians: list) -> dict:
    """The seeds' median ratios of one point tested with the seeds as the independent units:
    Student's one-sample t-test, two-sided, of their logs against 0 (ratio 1), reported as the
    geometric mean of the medians with the 95 % t interval (exp of the mean log and of its
    interval). A seed whose median is n/a or not positive is left out (``n`` counts the others);
    fewer than two, or no spread, leave the interval and p None. The pooled bootstrap beside it
    treats every state of every seed as independent, which the states of one seed are not."""
    logs = [math.log(v) for v in medians if v is not None and v > 0]
    if not logs:
        return {"n": 0, "geomean": None, "lo": None, "hi": None, "p": None}
    mean, lo, hi, p = one_sample_t(logs)
    return {"n": len(logs), "geomean": _finite(math.exp(mean)), "lo": _finite(math.exp(lo)),
            "hi": _finite(math.exp(hi)), "p": _finite(p)}


def run_entry(r: ProbedRun, label: str) -> dict:
    """One run: what it is, where its probe came from (the probe's settings, estimator and
    provenance), and its points in the probe's order."""
    p = r.probe
    return {"run_id": r.run.run_id, "row": r.run.row, "label": label, "env": r.run.env, "preset": r.run.preset,
            "probe_file": str(r.path), "settings": p["settings"], "returns": p["returns"],
            "start_states": p.get("start_states"), "probe_provenance": p.get("provenance"),
            "points": [point_entry(point, p["settings"]["m"]) for point in p["points"]]}


SUMMARY_POINT_FIELDS: dict[str, Check] = {
    "update": _WHOLE, "env_steps": _WHOLE, "seeds": COUNT, "states_per_seed": COUNT, **STAT_FIELDS}
"""What ``point_entry`` writes of a point and ``bpo report`` reads."""
SUMMARY_RUN_FIELDS: dict[str, Check] = {
    "run_id": NAME, "label": NAME, "env": NAME, "preset": NAME, "points": PROBE_FIELDS["points"],
    "probe_provenance": (lambda v: v is None or (isinstance(v, dict) and NUMBER_OR_NULL[0](v.get("wall_time_s"))
                                                 and isinstance(v.get("code_version", ""), str)),
                         "an object (wall_time_s a number, code_version a string) or null")}
"""What ``run_entry`` writes of a run and ``bpo report`` reads."""


def read_probe_summary(path: Path) -> dict:
    """A summary this command wrote (NAME_summary.json), checked for what ``bpo report`` reads from
    it: its level and, per run, what it is and its points (``SUMMARY_RUN_FIELDS``,
    ``SUMMARY_POINT_FIELDS``); anything else is a ``BadFile``."""
    data = read_json_object(path)
    check_fields(data, path, {"runs": PROBE_FIELDS["points"], "level": NAME})
    for i, run in enumerate(data["runs"]):
        check_part(run, SUMMARY_RUN_FIELDS, path, f"runs[{i}]: ")
        for j, point in enumerate(run["points"]):
            check_part(point, SUMMARY_POINT_FIELDS, path, f"runs[{i}]: points[{j}]: ")
    return data


def check_baseline(runs: list[ProbedRun], baseline: str | None) -> None:
    """``--baseline``: None, or the row of a probed run (a ``ConfigError`` listing the rows)."""
    rows = sorted({r.run.row for r in runs})
    if baseline is not None and baseline not in rows:
        raise ConfigError("baseline", f"no probed run has the row {baseline!r}; rows: {rows}")


def summarise(runs: list[ProbedRun], folder: Path, argv: list[str], baseline: str | None = None,
              skipped: list[Skipped] = ()) -> dict:
    """The summary the table and the JSON file are both written from, with its notes: differing
    code or MuJoCo versions of the runs (``report_provenance``), differing probe settings and the
    probes skipped; with a ``baseline`` row, each other run of a setting tested against it
    (``compare_rows``)."""
    check_baseline(runs, baseline)
    notes = report_provenance([r.run.summary for r in runs], "bpo probe-summary")
    distinct = {json.dumps(r.probe["settings"], sort_keys=True) for r in runs}
    if len(distinct) > 1:
        notes.append("Warning: the runs were probed with different settings (each run's are in Runs below); "
                     "their numbers are not on equal terms.")
        print(f"bpo probe-summary: {notes[-1]}", file=sys.stderr)
    if skipped:
        notes.append(f"Skipped: {len(skipped)} probe(s) whose files could not be used: "
                     + "; ".join(f"{s.run_id} ({s.file}: {s.reason})" for s in skipped) + ".")
    names = labels(runs)
    settings, order = sort_settings(r.setting for r in runs), sort_rows(r.run.row for r in runs)
    ordered = sorted(runs, key=lambda r: (settings.index(r.setting), order.index(r.run.row), names[r.run.run_id]))
    entries = [run_entry(r, names[r.run.run_id]) for r in ordered]
    return {"provenance": {"command": ["bpo", "probe-summary", *argv], "code_version": code_version()},
            "folder": str(folder), "level": levels_text(runs),
            "settings": runs[0].probe["settings"] if len(distinct) == 1 else None, "notes": notes,
            "runs": entries, "baseline": baseline, "skipped": [s.to_json() for s in skipped],
            "comparisons": [] if baseline is None else compare_rows(entries, baseline)}


def _log_medians(run: dict, update: int, name: str) -> list[float]:
    """The seeds' median ratios at ``update`` on a log scale (a seed whose median is n/a or not
    positive is left out)."""
    point = next(p for p in run["points"] if p["update"] == update)
    values = [m[f"{name}_ratio_median"] for m in point["seed_medians"].values()]
    return [math.log(v) for v in values if v is not None and v > 0]


def compare_rows(runs: list[dict], baseline: str) -> list[dict]:
    """Each run against the run of its setting whose row is ``baseline``, at every update both
    probed: Welch's two-sided t-test on the seeds' log median ratios (the seeds are the independent
    units; a seed's median over its M states is one value), reported as the ratio of the geometric
    means of the seeds' medians, row over baseline, with the 95 % Welch interval."""
    out = []
    for base in (r for r in runs if r["row"] == baseline):
        setting = (base["env"], base["preset"])
        for run in (r for r in runs if (r["env"], r["preset"]) == setting and r["row"] != baseline):
            common = sorted({p["update"] for p in run["points"]} & {p["update"] for p in base["points"]})
            for update in common:
                entry = {"env": run["env"], "preset": run["preset"], "label": run["label"], "row": run["row"],
                         "baseline_label": base["label"], "update": update,
                         "env_steps": next(p["env_steps"] for p in run["points"] if p["update"] == update)}
                for name in ("var", "mse"):
                    a, b = _log_medians(run, update, name), _log_medians(base, update, name)
                    diff, lo, hi = welch_interval(float(np.mean(a)), _sd(a), len(a), float(np.mean(b)), _sd(b),
                                                  len(b))
                    entry[name] = {"ratio": _finite(math.exp(diff)), "lo": _finite(math.exp(lo)),
                                   "hi": _finite(math.exp(hi)), "p": _finite(welch_p(a, b, "two-sided")),
                                   "n": len(a), "n_baseline": len(b)}
                out.append(entry)
    return out


def _sd(values: list[float]) -> float:
    return describe(values, drop_non_finite=False)["sd"]


def _finite(x: float) -> float | None:
    """None for NaN (a JSON file holds no NaN)."""
    return None if math.isnan(x) else x


def _g(x) -> str:
    """A ratio to 3 significant figures; n/a for None (NaN or an infinity in probe.json)."""
    return "n/a" if x is None else f"{x:.3g}"


def ratio_text(stats: dict, name: str) -> str:
    """'median [lo, hi]' of the ratio ``name`` ('var' or 'mse') of a point's statistics."""
    med, lo, hi = (_g(stats[f"{name}_ratio_{end}"]) for end in ("median", "lo", "hi"))
    return f"{med} [{lo}, {hi}]"


def seed_texts(p: dict, name: str) -> tuple[str, str]:
    """('1.22, 0.24, 1.28', '0.717 [0.07, 7.3], p = 0.611'): a point's seeds' median ratios ``name``
    ('var' or 'mse') in seed order, and their test with the seeds as the units (``seed_test``)."""
    medians = ", ".join(_g(v[f"{name}_ratio_median"]) for v in p["seed_medians"].values())
    t = p["seed_test"][name]
    # a seed left out (its median n/a: NaN or an infinity, which may be mu at its worst) is said
    fewer = f" ({t['n']} of {p['seeds']} seeds)" if t["n"] < p["seeds"] else ""
    return medians, f"{_g(t['geomean'])} [{_g(t['lo'])}, {_g(t['hi'])}], p = {_p(t['p'])}{fewer}"


def table_row(label: str, p: dict) -> str:
    """One Markdown row of a point (``point_entry``)."""
    (var_seeds, var_test), (mse_seeds, mse_test) = seed_texts(p, "var"), seed_texts(p, "mse")
    return (f"| {label} | {p['point']} | {p['env_steps']:,} | {ratio_text(p, 'var')} | {var_seeds} | {var_test} | "
            f"{ratio_text(p, 'mse')} | {mse_seeds} | {mse_test} | "
            f"{p['frac_var_mu_lower']:.2f} | {_g(p['ess_frac_mean'])} | {p['seeds']} × {p['states_per_seed']} |")


def settings_text(s: dict) -> str:
    """A probe's settings in words."""
    return (f"M = {s['m']} start states per seed, K = {s['k']} segments of H = {s['horizon']} steps, reference "
            f"{s['ref_k']} × {s['ref_horizon']} steps of π, {s['n_boot']} bootstrap resamples, seed {s['seed']}")


def markdown(summary: dict) -> str:
    """The table: one section per (environment, preset), a row per run and point, then the runs."""
    level = summary["level"]
    lines = [f"# Estimator probe: {summary['folder']}", "",
             "Per point, pooled over every seed's start states: the median over states of Var_μ/Var_π and of "
             f"MSE_μ/MSE_π of eq. (6)'s start-state estimate with its {level} percentile-bootstrap interval over "
             "states (below 1: μ's estimate varies, or errs, less than π's); μ lower: the fraction of states where "
             "μ's variance is lower; ESS/K: Kish's effective sample size of μ's K segments over K, mean over "
             "states; seeds × M states per seed. The final policies repeat the last kept point's numbers where "
             "they are the same policies (docs/probe.md).", "",
             "The pooled interval treats every state of every seed as independent; the states of one seed share "
             "its policy, critic and training, so the seeds are the independent units. Beside it, with the seeds "
             "as the units: each seed's median over its M states (seed order), and Student's one-sample t-test, "
             "two-sided, of the seeds' log medians against 0 (ratio 1), as the geometric mean of the seeds' "
             "medians with its 95 % t interval and p (n - 1 degrees of freedom; with few seeds only large, "
             "consistent departures from 1 reach p < 0.05).", ""]
    s = summary["settings"]
    lines += [f"Probe settings: {settings_text(s)}." if s else "Probe settings differ between runs (Runs).", ""]
    for note in summary["notes"]:
        lines += [note, ""]
    settings = sort_settings({(r["env"], r["preset"]) for r in summary["runs"]})
    for setting in settings:
        lines += [f"## {setting_label(setting)}", "",
                  f"| row | point | env steps | Var_μ/Var_π, pooled [{level}] | Var: seeds' medians | "
                  "Var: seeds' geometric mean [95 % t], p | "
                  f"MSE_μ/MSE_π, pooled [{level}] | MSE: seeds' medians | MSE: seeds' geometric mean [95 % t], p | "
                  "μ lower (var) | ESS/K | seeds × M |",
                  "| --- | --- | ---: | --- | --- | --- | --- | --- | --- | ---: | ---: | --- |"]
        lines += [table_row(r["label"], p) for r in summary["runs"] if (r["env"], r["preset"]) == setting
                  for p in r["points"]]
        lines.append("")
    lines += comparison_lines(summary)
    lines += ["## Runs", ""]
    for r in summary["runs"]:
        version = (r["probe_provenance"] or {}).get("code_version", "unknown")
        ret = r["returns"]
        lines.append(f"* `{r['run_id']}`: {r['label']}; probed with {settings_text(r['settings'])}; the estimator's "
                     f"ρ̄ = {ret.get('rho_bar')}, c̄ = {ret.get('c_bar')}; code {version}")
    return "\n".join(lines) + "\n"


def comparison_lines(summary: dict) -> list[str]:
    """The section of the rows against the baseline row (none without one)."""
    if summary.get("baseline") is None:
        return []
    base = row_label(summary["baseline"])
    lines = [f"## Against {base}", "",
             f"Each row against {base} of its setting at the same update: the ratio of the geometric means of "
             "the seeds' median ratios (row over baseline; below 1: the row's μ does better) with the 95 % Welch "
             "interval, and Welch's two-sided p on the seeds' log medians; n: seeds (row, baseline). The seeds "
             "are the independent units here, so the interval is wider than the pooled one over states above.",
             "", "| setting | row | update | env steps | n | Var ratio, row / baseline [95 %] | p | "
             "MSE ratio, row / baseline [95 %] | p |", "| --- | --- | ---: | ---: | --- | --- | ---: | --- | ---: |"]
    for c in summary["comparisons"]:
        v, m = c["var"], c["mse"]
        lines.append(f"| {setting_label((c['env'], c['preset']))} | {c['label']} | {c['update']} | "
                     f"{c['env_steps']:,} | {v['n']}, {v['n_baseline']} | {_g(v['ratio'])} [{_g(v['lo'])}, "
                     f"{_g(v['hi'])}] | {_p(v['p'])} | {_g(m['ratio'])} [{_g(m['lo'])}, {_g(m['hi'])}] | "
                     f"{_p(m['p'])} |")
    return lines + [""]


def _p(p: float | None) -> str:
    return "n/a" if p is None else format_p(p)


@dataclass(frozen=True)
class ProbeSummaryArgs:
    """Summarise the estimator probes of a results folder's runs (FOLDER/*/probe/probe.json, written
    by `bpo probe RUN`): a figure, a Markdown table and a JSON file (docs/probe.md)."""

    folder: Annotated[tyro.conf.Positional[Path], tyro.conf.arg(metavar="FOLDER")]
    """A results folder whose run directories were probed."""
    out: Path | None = None
    """Where to write probe_summary.png/.pdf/.md/.json; default FOLDER."""
    name: str = "probe"
    """Read FOLDER/*/NAME/probe.json (``bpo probe --name``: a plain folder name of letters, digits, _
    and -, not a pattern) and write NAME_summary.* (probe_summary.* for the default)."""
    baseline: str | None = None
    """A row, as spec.json names it (e.g. 'bpo_c1.0_rho1.5 bpo.use_q_hat=False'), to test each other
    row of its setting against (Welch, two-sided, on the seeds' log median ratios); default none."""
    allow_skipped: bool = False
    """Exit with 0 even when a damaged or foreign probe.json or run file was skipped (listed on
    stderr and in the summary either way)."""


def stem(name: str) -> str:
    """The summary files' name for probes in RUN/NAME: probe_summary for the default NAME."""
    return STEM if name == "probe" else f"{name}_summary"


def write_summary(runs: list[ProbedRun], summary: dict, out: Path, name: str = "probe") -> list[Path]:
    """The JSON file, the table and the figure, each written atomically."""
    base = stem(name)
    atomic_write_json(out / f"{base}.json", summary)
    atomic_write_text(out / f"{base}.md", markdown(summary))
    return [out / f"{base}.json", out / f"{base}.md", *save_figure(summary_figure(runs), out, base, dpi=120)]


def probe_summary_main(argv: list[str]) -> int:
    """``bpo probe-summary``: 0 when written; 1 when written from the others after skipping a damaged
    or foreign probe.json or run file (0 with ``--allow-skipped``); 2 when refused (a bad argument, no
    usable probe results), with nothing written."""
    args = parse(ProbeSummaryArgs, argv, prog="bpo probe-summary")
    try:
        # --name is a glob pattern and part of the output files' names: a pattern would pool other
        # probes (probe-untruncated with probe) into one summary, so it is a plain name, as bpo probe's.
        check_probe_name(args.name)
        runs, skipped = find_probes(args.folder, args.name)
        check_baseline(runs, args.baseline)  # before the output folder is made: a refusal leaves nothing
        out = ensure_writable_dir(args.out or args.folder, "--out")
        summary = summarise(runs, args.folder, argv, args.baseline, skipped)
        paths = write_summary(runs, summary, out, args.name)
    except (ConfigError, BadFile) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(markdown(summary))
    print("wrote " + ", ".join(str(p) for p in paths))
    for s in skipped:
        print(f"bpo probe-summary: skipped {s.line()}", file=sys.stderr)
    if skipped and not args.allow_skipped:
        print(f"bpo probe-summary: {len(skipped)} probe(s) skipped (listed above); the summary is made from the "
              "others; exit code 1 (--allow-skipped: 0)", file=sys.stderr)
        return 1
    return 0
