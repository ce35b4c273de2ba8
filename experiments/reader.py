"""Reading a results folder: each file of a run directory that ``bpo table`` and ``bpo plot`` read
(``summary.json``, ``config.json``, ``curve.csv``, ``spec.json``) and a sweep folder's
``sweep.json``, checked where it is read, by one function per kind of file.

Why: the analysis commands used to trust these files. An empty ``summary.json`` or a
``config.json`` without a preset made a run vanish from the tables with exit code 0; a summary
missing a field, a truncated ``curve.csv`` or a garbage ``spec.json`` was a traceback. Here each
reader returns what the commands use, in the types they expect, or raises ``BadFile``: one line
naming the file and what is wrong with it. ``scan`` turns that into a ``Skipped`` run directory,
which the commands list on stderr and count in their exit code.

What is data and what is damage. A NaN (or null) final return or evaluation return is data: a
seed that diverged; it is kept, and the table and the plot say how they treat it. Damage is a file
that is missing, empty, not JSON or not an object, a field that is missing or of the wrong type,
an empty ``final_eval_returns``, a curve row with too few fields (cut off), a step or seed that is
not a whole number (a row of NaNs), a seed with fewer evaluations than the others (cut off at a
line end), and files that disagree with each other (a summary or spec of another run): the run
directory is skipped.

``index.json`` is never read: ``experiments.store`` rebuilds it from the run directories every
time, so a damaged one is replaced.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bpo.config.schema import MAX_CONFIG_NESTING, ConfigError, config_digest, from_dict, nesting
from bpo.infra.results import json_number
from experiments.sweep import RunSpec, UnknownField, apply_overrides, load_sweep, sweep_names

CURVE_COLUMNS = ("step", "seed", "eval_return")
"""The columns of a curve that the plot uses; every run's curve has them (bpo.training.summary)."""


class BadFile(ValueError):
    """A file that cannot be used as it is; its text is one line, 'PATH: what is wrong'."""

    def __init__(self, path: Path, reason: str):
        self.path, self.reason = Path(path), " ".join(str(reason).split())
        super().__init__(f"{self.path}: {self.reason}")


@dataclass(frozen=True)
class Skipped:
    """A run directory left out of a table or a plot: the file that could not be used, and why."""

    run_id: str
    run_dir: Path
    file: str
    reason: str

    def line(self) -> str:
        return f"{self.run_dir}: {self.file}: {self.reason}"

    def to_json(self) -> dict:
        return {"run_id": self.run_id, "file": self.file, "reason": self.reason}


@dataclass(frozen=True)
class Run:
    """A finished run directory whose files were read and checked: its config (a ``bpo.config.schema``
    object), its summary (``read_summary``) and its row (from ``spec.json``, else the variant or
    algorithm)."""

    run_id: str
    path: Path
    config: Any
    summary: dict
    row: str

    @property
    def env(self) -> str:
        return self.config.env

    @property
    def preset(self) -> str:
        return self.config.preset

    @property
    def seeds(self) -> int:
        return self.summary["seeds"]

    def skipped(self, error: BadFile) -> Skipped:
        return Skipped(self.run_id, self.path, error.path.name, error.reason)

    def entry(self) -> dict:
        """The run's entry in ``index.json``, null where a return is NaN (valid for strict parsers)."""
        s = self.summary
        return {"run_id": self.run_id, "status": "finished", "preset": self.preset, "env": self.env,
                "algo": self.config.algo, "variant": getattr(self.config, "variant", "") or "", "row": self.row,
                "seeds": s["seeds"], "step_unit": s["step_unit"], "final_mean": json_number(s["final_mean"]),
                "final_se": json_number(s["final_se"]),
                "final_eval_returns": [json_number(x) for x in s["final_eval_returns"]],
                "wall_time_s": s["wall_time_s"]}


def _json_type(value) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), "number")


def _shown(value) -> str:
    text = json.dumps(value) if not isinstance(value, float) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def read_text(path: Path, kind: str = "") -> str:
    """A results file's text; a ``BadFile`` naming it when it is missing, unreadable or not UTF-8
    (``kind``, e.g. ": not a JSON file", ends that reason)."""
    path = Path(path)
    try:
        return path.read_text()
    except FileNotFoundError:
        raise BadFile(path, "missing") from None
    except UnicodeDecodeError:
        raise BadFile(path, f"not text (not UTF-8){kind}") from None
    except OSError as e:
        raise BadFile(path, f"cannot be read ({e.strerror or e})") from None


def read_json_object(path: Path) -> dict:
    """A JSON file that must hold an object; anything else is a ``BadFile`` saying what it holds."""
    path = Path(path)
    text = read_text(path, ": not a JSON file")
    if not text.strip():
        raise BadFile(path, "empty")
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as e:
        where = (f"{'' if e.msg.endswith(' at') else ' at'} line {e.lineno} column {e.colno}"  # "starting at"
                 if isinstance(e, json.JSONDecodeError) else "")
        raise BadFile(path, f"not valid JSON ({getattr(e, 'msg', 'too deeply nested')}{where})") from None
    except ValueError as e:  # valid JSON Python will not read: an integer of more than 4,300 digits
        raise BadFile(path, f"not readable JSON ({e})") from None
    if not isinstance(data, dict):
        raise BadFile(path, f"holds a JSON {_json_type(data)}, not an object")
    return data


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _number_or_null(value) -> bool:
    return value is None or _number(value)


def _count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _name(value) -> bool:
    return isinstance(value, str) and bool(value)


def _returns(value) -> bool:
    return isinstance(value, list) and all(_number_or_null(x) for x in value)


Check = tuple[Callable[[Any], bool], str]
NUMBER: Check = (_number, "a number")
NUMBER_OR_NULL: Check = (_number_or_null, "a number or null")
COUNT: Check = (_count, "an integer >= 1")
NAME: Check = (_name, "a non-empty string")
SUMMARY_FIELDS: dict[str, Check] = {
    "seeds": COUNT, "step_unit": NAME, "final_eval_returns": (_returns, "a list of numbers (null for NaN)"),
    "final_mean": NUMBER_OR_NULL, "final_se": NUMBER_OR_NULL, "wall_time_s": NUMBER}
"""What the index, the table and the plot read from every summary."""
SUMMARY_OPTIONAL: dict[str, Check] = {
    "total_timesteps": NUMBER, "episodes": COUNT, "train_steps_per_s": NUMBER_OR_NULL,
    "preset": NAME, "env": NAME, "algo": NAME}
"""Read when present (the table's list of runs, the check that a summary is the run's own)."""


def check_fields(data: dict, path: Path, required: dict[str, Check], optional: dict[str, Check] = ()) -> None:
    """Each field of ``required`` present and each of both passing its check, else a ``BadFile``
    naming the first field that does not."""
    for name, (ok, what) in [*required.items(), *dict(optional).items()]:
        if name not in data:
            if name in required:
                raise BadFile(path, f"{name} is missing")
        elif not ok(data[name]):
            raise BadFile(path, f"{name} must be {what}, got {_shown(data[name])}")


def read_summary(run_dir: Path) -> dict:
    """``summary.json``, checked for what the analysis commands read (``SUMMARY_FIELDS``), with
    ``final_eval_returns`` as floats (a null, as a strict JSON writer puts a NaN, read back as
    NaN). An empty ``final_eval_returns``, or one that does not have a value per seed, is refused:
    a run without its final returns has nothing to put in a table."""
    path = Path(run_dir) / "summary.json"
    data = read_json_object(path)
    check_fields(data, path, SUMMARY_FIELDS, SUMMARY_OPTIONAL)
    returns = data["final_eval_returns"]
    if not returns:
        raise BadFile(path, "final_eval_returns is empty")
    if len(returns) != data["seeds"]:
        raise BadFile(path, f"final_eval_returns has {len(returns)} values for {data['seeds']} seeds")
    returns = [math.nan if x is None else float(x) for x in returns]
    _check_final_mean(path, data["final_mean"], returns)
    return {**data, "final_eval_returns": returns}


def _check_final_mean(path: Path, recorded: float | None, returns: list[float]) -> None:
    """``final_mean`` is the mean of ``final_eval_returns`` (null where a seed's is NaN): the table
    reads the returns and ``bpo evaluate`` the mean, so an edited one would make them disagree."""
    mean = math.fsum(returns) / len(returns) if all(map(math.isfinite, returns)) else None
    undefined = recorded is None or not math.isfinite(recorded)  # null, or NaN from a lax JSON writer
    if undefined != (mean is None) or (
            mean is not None and not math.isclose(recorded, mean, rel_tol=1e-9, abs_tol=1e-9)):
        shown = "null" if mean is None else f"{mean:.6g}"
        raise BadFile(path, f"final_mean is {_shown(recorded)} but the mean of final_eval_returns is {shown}")


CONFIG_FIELDS: dict[str, Check] = {"preset": NAME, "env": NAME, "seeds": COUNT,
                                   "bpo": (lambda v: v is None or isinstance(v, dict), "an object or null")}
CONFIG_OPTIONAL: dict[str, Check] = {"algo": NAME}
"""``algo``: in files written before the bpo section was optional (``from_dict`` reads it)."""
CONFIG_TYPED: dict[str, Check] = {
    "seed": (lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer"),
    "total_timesteps": COUNT, "episodes": COUNT, "eval_every": COUNT, "eval_episodes": COUNT,
    "max_episode_steps": COUNT, "eval_deterministic": (lambda v: isinstance(v, bool), "true or false"),
    "backend": NAME, "variant": (lambda v: isinstance(v, str), "a string")}
"""The fields the table compares runs by (experiments.table.PROTOCOL) or labels them with."""


def read_config(run_dir: Path):
    """``config.json`` as the config object it was written from (``bpo.config.schema.from_dict``), with
    the fields the analysis commands use checked: what the run is (preset, environment,
    algorithm), its budget, and its evaluation protocol. A field added to the code after the file
    was written takes its default, as everywhere a config is read back."""
    path = Path(run_dir) / "config.json"
    data = read_json_object(path)
    budget = "total_timesteps" if "ppo" in data else "episodes"  # from_dict's own test of the kind
    check_fields(data, path, {**CONFIG_FIELDS, budget: COUNT}, CONFIG_OPTIONAL)
    try:
        cfg = from_dict(data)
    except (TypeError, ValueError, AttributeError, KeyError) as e:
        raise BadFile(path, f"not a bpo config ({type(e).__name__}: {e})") from None
    typed = {name: getattr(cfg, name) for name in CONFIG_TYPED if hasattr(cfg, name)}
    check_fields(typed, path, {}, {k: CONFIG_TYPED[k] for k in typed})
    return cfg


def _pairs(value) -> bool:
    return isinstance(value, list) and all(isinstance(p, list) and len(p) == 2 and _name(p[0]) for p in value)


_PAIRS: Check = (_pairs, "a list of [field, value] pairs, each field a non-empty string")
SPEC_FIELDS: dict[str, Check] = {
    "run_id": NAME, "preset": NAME, "seeds": COUNT,
    "env": (lambda v: v is None or _name(v), "a string or null"),
    "variant": (lambda v: v is None or _name(v), "a string or null"),
    "overrides": _PAIRS, "label_overrides": _PAIRS}


def _spec(data, path: Path, where: str = "") -> RunSpec:
    """One run of a sweep (``spec.json``, or an entry of ``sweep.json`` at ``where``). Its row's
    settings (``label_overrides``) must be the first of the settings it gave the run (``overrides``),
    as ``experiments.sweep.expand`` writes them, so that a row's label is checked with them against
    the run's config.json (``_agree``)."""
    if not isinstance(data, dict):
        raise BadFile(path, f"{where}holds a JSON {_json_type(data)}, not an object")
    if (depth := nesting(data)) > MAX_CONFIG_NESTING:  # RunSpec.from_json recurses into the values
        raise BadFile(path, f"{where}its values nest {depth} levels deep; a run of a sweep nests at most "
                            f"{MAX_CONFIG_NESTING}")
    try:
        check_fields(data, path, SPEC_FIELDS)
        if data["overrides"][:len(data["label_overrides"])] != data["label_overrides"]:
            raise BadFile(path, "label_overrides are not the first of its overrides (the row's settings are "
                                "settings the sweep gave the run)")
        return RunSpec.from_json(data)
    except BadFile as e:
        raise BadFile(path, where + e.reason) from None
    except (TypeError, ValueError) as e:
        raise BadFile(path, f"{where}not a run of a sweep ({type(e).__name__}: {e})") from None


def spec_row(spec: RunSpec, path: Path) -> str:
    """The table row of a sweep's run; a spec whose preset, variant or values are unknown to the
    code (so that its row cannot be named) is a ``BadFile``."""
    try:
        return spec.row
    except (TypeError, ValueError, KeyError, AttributeError) as e:
        raise BadFile(path, f"run {spec.run_id!r} cannot be built ({e})") from None


def read_spec(run_dir: Path) -> tuple[RunSpec, str] | None:
    """``spec.json`` (the run's place in its sweep) and the row it names; None when there is none
    (a run directory that ``bpo train`` wrote)."""
    path = Path(run_dir) / "spec.json"
    if not path.exists():
        return None
    spec = _spec(read_json_object(path), path)
    return spec, spec_row(spec, path)


def read_sweep_file(results_dir: Path) -> tuple[str, list[RunSpec]] | None:
    """A sweep folder's ``sweep.json``: the sweep's name and its runs; None in a folder that is
    not a sweep's. A damaged one is a ``BadFile``: without it the folder's pending runs are unknown."""
    path = Path(results_dir) / "sweep.json"
    if not path.exists():
        return None
    data = read_json_object(path)
    check_fields(data, path, {"sweep": NAME, "runs": (lambda v: isinstance(v, list), "a list")})
    return data["sweep"], [_spec(d, path, f"runs[{i}]: ") for i, d in enumerate(data["runs"])]


ALTERNATIVES = ("greater", "two-sided")
"""The tests a table may make of each row against its baseline (``bpo table --alternative``)."""


def sweep_test(results_dir: Path) -> tuple[str | None, str, str] | None:
    """The test a sweep folder's table is made with, as its sweep asks (its ``baseline`` and
    ``alternative``): (baseline, alternative, the sweep's name) from its ``sweep.json``, or, for
    one written before it recorded them (2026-11-29), from the sweep file of ``experiments/sweeps``
    it names; None for a folder that is not a sweep's or whose sweep is not known here. A damaged
    record is a ``BadFile``: a table must not be made with a test its sweep did not ask for."""
    path = Path(results_dir) / "sweep.json"
    if not path.exists():
        return None
    data = read_json_object(path)
    check_fields(data, path, {"sweep": NAME}, {
        "baseline": ((lambda v: v is None or _name(v)), "a non-empty string or null"),
        "alternative": ((lambda v: v in ALTERNATIVES), f"one of {list(ALTERNATIVES)}")})
    if "alternative" in data:
        return data.get("baseline"), data["alternative"], data["sweep"]
    if data["sweep"] in sweep_names():
        sweep = load_sweep(data["sweep"])
        return sweep.baseline, sweep.alternative, data["sweep"]
    return None


def _agree(summary: dict, cfg, spec: RunSpec | None, run_dir: Path) -> None:
    """The summary and spec belong to the run its config describes (not copied from another run):
    the summary's digest of the config (written since session 61) or else its fields, the spec's
    row and the settings it gave the run."""
    run_dir = Path(run_dir)
    if (problem := digest_problem(summary, run_dir)) is not None:
        raise BadFile(run_dir / "summary.json", problem)
    for name in ("preset", "env", "algo", "seeds", "variant"):
        if name in summary and summary[name] != getattr(cfg, name, None):
            raise BadFile(run_dir / "summary.json", f"{name} is {_shown(summary[name])} but config.json "
                          f"says {_shown(getattr(cfg, name, None))}: the summary of another run?")
    if spec is not None:
        row = getattr(cfg, "variant", "") or cfg.algo  # older sweeps named BPO runs 'bpo', whatever the variant
        given = [(k, v) for k, v in spec.overrides if not _holds(cfg, k, v, run_dir / "spec.json")]
        for name, value, says in (*((n, getattr(spec, n), getattr(cfg, n)) for n in ("preset", "env", "seeds")),
                                  ("variant", spec.variant, row), *((k, v, _dotted(cfg, k)) for k, v in given)):
            if value is not None and value != says and not (name == "variant" and value == cfg.algo):
                raise BadFile(run_dir / "spec.json", f"{name} is {_shown(value)} but config.json says "
                              f"{_shown(says)}: the spec of another run?")


def digest_problem(summary: dict, run_dir: Path) -> str | None:
    """Why ``summary`` is not the summary of the run whose config.json is in ``run_dir`` (its
    ``config_sha256``, written since session 61, is another config's digest); None when it is, or
    when it has no digest (older summaries: checked by their fields instead)."""
    if "config_sha256" in summary and summary["config_sha256"] != config_digest(
            read_json_object(Path(run_dir) / "config.json")):
        return "its config_sha256 is not the digest of config.json: the summary of another run?"
    return None


def _holds(cfg, name: str, value, path: Path) -> bool:
    """Whether ``cfg`` already has the setting ``name = value`` of the spec at ``path``, as the
    sweep applies it (``apply_overrides``: coerced, "inf" a float, a section the run does not have
    left as it is); a setting this version does not know cannot be checked, and is taken as held; a
    value its field cannot take is a ``BadFile``."""
    try:
        return apply_overrides(cfg, {name: value}) == cfg
    except UnknownField:
        return True
    except ConfigError as e:
        raise BadFile(path, f"overrides: {e}") from None


def _dotted(cfg, name: str):
    for part in name.split("."):
        cfg = getattr(cfg, part, None)
    return cfg


def read_run(run_dir: Path, root: Path) -> Run:
    """A finished run directory, each file read and checked (a ``BadFile`` names the first that
    fails): ``summary.json`` first (it marks a finished run), then ``config.json`` and
    ``spec.json``, and that they describe the same run."""
    run_dir = Path(run_dir)
    summary = read_summary(run_dir)
    cfg = read_config(run_dir)
    found = read_spec(run_dir)
    spec, row = found if found is not None else (None, getattr(cfg, "variant", "") or cfg.algo)
    _agree(summary, cfg, spec, run_dir)
    return Run(str(run_dir.relative_to(root)), run_dir, cfg, summary, row)


def run_dirs(root: Path) -> list[Path]:
    """The run directories under ``root``: every folder holding a ``summary.json`` or a
    ``config.json``, except those inside hidden folders (a sweep's ``.staging``, ``.checkpoints``,
    ``.locks``, ``.slurm``), where runs are still being written. Links to folders are followed (a
    results folder gathered by hand; ``Path.rglob`` left them out without a word), each real folder
    once."""
    root, found, seen = Path(root), [], set()
    for folder, subfolders, files in os.walk(root, followlinks=True):
        real = os.path.realpath(folder)
        if real in seen:  # a link back up, or a second link to one folder
            subfolders.clear()
            continue
        seen.add(real)
        subfolders[:] = sorted(d for d in subfolders if not d.startswith("."))
        if {"summary.json", "config.json"} & set(files):
            found.append(Path(folder))
    return sorted(found)


def scan(results_dir: Path) -> tuple[list[Run], list[Skipped]]:
    """Every run directory under ``results_dir``: those whose files pass (``read_run``), and those
    skipped, each with the file and the reason."""
    root = Path(results_dir)
    runs, skipped = [], []
    for run_dir in run_dirs(root):
        try:
            runs.append(read_run(run_dir, root))
        except BadFile as e:
            skipped.append(Skipped(str(run_dir.relative_to(root)), run_dir, e.path.name, e.reason))
    return runs, skipped


def _curve_row(header: list[str], fields: list[str], path: Path, line: int) -> dict:
    """One row of a curve as floats; step and seed whole numbers >= 0 (a NaN there is damage; a
    NaN evaluation return or diagnostic is data)."""
    if len(fields) != len(header):
        raise BadFile(path, f"line {line} has {len(fields)} fields, the header {len(header)} (cut off?)")
    row = {}
    for name, text in zip(header, fields, strict=True):
        try:
            row[name] = float(text)
        except ValueError:
            raise BadFile(path, f"line {line}: {name} is {_shown(text)}, not a number") from None
    for name in ("step", "seed"):
        if not math.isfinite(row[name]) or row[name] < 0 or row[name] != int(row[name]):
            raise BadFile(path, f"line {line}: {name} is {_shown(fields[header.index(name)])}, not a whole "
                          "number >= 0")
    return row


def _seed_list(seeds) -> str:
    seeds = sorted(seeds)
    if seeds == list(range(seeds[0], seeds[-1] + 1)) and len(seeds) > 2:
        return f"{seeds[0]} to {seeds[-1]}"
    return ", ".join(map(str, seeds))


def _check_evaluations(rows: list[dict], seeds: int | None, path: Path) -> None:
    """Every seed 0 .. seeds - 1 evaluated once at each of the same steps: a file cut off at a line
    end leaves its last seed short, a file of another run has other seeds."""
    steps: dict[int, set] = {}
    for line, row in enumerate(rows, start=2):
        at = steps.setdefault(int(row["seed"]), set())
        if row["step"] in at:
            raise BadFile(path, f"line {line}: seed {int(row['seed'])} has step {row['step']:g} twice")
        at.add(row["step"])
    if seeds is not None and sorted(steps) != list(range(seeds)):
        raise BadFile(path, f"holds seeds {_seed_list(steps)}; summary.json has {seeds} (0 to {seeds - 1})")
    first = min(steps)
    for seed, at in steps.items():
        if at != steps[first]:
            raise BadFile(path, f"seed {seed} has {len(at)} evaluations, seed {first} {len(steps[first])} (cut off?)"
                          if len(at) != len(steps[first]) else f"seeds {first} and {seed} were evaluated at "
                          "different steps")


def read_curve(run_dir: Path, seeds: int | None = None) -> list[dict]:
    """``curve.csv``: one dict of floats per row (``bpo.infra.results.read_curve``'s form), checked to
    have the columns ``CURVE_COLUMNS``, whole rows of numbers, and, given the run's ``seeds``,
    the same evaluations for each of them."""
    path = Path(run_dir) / "curve.csv"
    try:
        lines = [fields for fields in csv.reader(io.StringIO(path.read_text())) if fields]
    except FileNotFoundError:
        raise BadFile(path, "missing") from None
    except UnicodeDecodeError:
        raise BadFile(path, "not text (not UTF-8): not a CSV file") from None
    except (OSError, csv.Error) as e:
        raise BadFile(path, f"cannot be read ({getattr(e, 'strerror', None) or e})") from None
    if not lines:
        raise BadFile(path, "empty")
    header = lines[0]
    missing = [c for c in CURVE_COLUMNS if c not in header]
    if missing:
        raise BadFile(path, f"no column {', '.join(missing)} in its header ({_shown(','.join(header))})")
    if len(lines) == 1:
        raise BadFile(path, "has a header and no rows")
    rows = [_curve_row(header, fields, path, line) for line, fields in enumerate(lines[1:], start=2)]
    _check_evaluations(rows, seeds, path)
    return rows


def _numbers(value) -> bool:
    return isinstance(value, list) and all(_number(x) for x in value)


def read_evaluation_clock(run: Run, curve: list[dict]) -> dict[float, float] | None:
    """The training seconds at each step of ``curve`` (``read_curve``), from the summary's
    ``evaluation_clock`` (``bpo.training.summary.evaluation_clock``): {step: seconds}, NaN for a
    null. None when the summary has none: a run written before runs recorded it. A clock that is
    not two lists of numbers of one length (``step``, ``elapsed_s``), or that lacks a step of the
    curve, is a ``BadFile``."""
    path = run.path / "summary.json"
    clock = run.summary.get("evaluation_clock")
    if clock is None:
        return None
    if not isinstance(clock, dict):
        raise BadFile(path, f"evaluation_clock must be an object, got {_shown(clock)}")
    check_fields({f"evaluation_clock.{k}": v for k, v in clock.items()}, path,
                 {"evaluation_clock.step": (_numbers, "a list of numbers"),
                  "evaluation_clock.elapsed_s": (_returns, "a list of numbers (null for NaN)")})
    steps, seconds = clock["step"], clock["elapsed_s"]
    if len(steps) != len(seconds):
        raise BadFile(path, f"evaluation_clock has {len(steps)} steps and {len(seconds)} times")
    times = {float(s): math.nan if t is None else float(t) for s, t in zip(steps, seconds, strict=True)}
    missing = sorted({row["step"] for row in curve} - set(times))
    if missing:
        raise BadFile(path, f"evaluation_clock has no time for step {missing[0]:g} of curve.csv")
    return times
