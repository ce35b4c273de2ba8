"""Sweep definitions: a grid of presets x environments x algorithm variants x overrides, each
point one *run* (one configuration, all its seeds vmapped in one process).

A sweep file is a Python module in ``experiments/sweeps/`` (or any path) that defines
``SWEEP = Sweep(...)``. ``bpo sweep NAME`` loads ``experiments/sweeps/NAME.py``; the same grid
can be given on the command line (``bpo sweep --preset ... --variants ... --grid KEY=V1,V2``).
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import itertools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bpo.agents.methods import method_names, validate
from bpo.config.presets import VARIANTS, apply_variant, get_preset, variant_changes, with_bpo_labelled
from bpo.config.schema import (
    BPO_SECTIONS,
    EXECUTION_ONLY,
    ConfigError,
    EpisodicTrainConfig,
    get_dotted,
    replace,
)
from bpo.instruments.probe import ProbeSettings
from bpo.training.probe_run import check_probe_name, with_truncation

SWEEPS_DIR = Path(__file__).parent / "sweeps"


@dataclass(frozen=True)
class SlurmResources:
    """What each Slurm job of a sweep asks for (one job per run, submitted as a job array)."""

    partition: str | None = None
    """Partition (queue); None uses the cluster's default."""
    timeout_min: int = 24 * 60
    """Wall-clock limit of one run, in minutes."""
    cpus_per_task: int = 4
    """CPU cores per run (Gymnasium steps on one, XLA uses the rest)."""
    mem_gb: int = 16
    """Memory per run, in GiB."""
    gpus_per_node: int = 0
    """GPUs per run: 1 for the JAX/MJX backends on a GPU cluster."""
    array_parallelism: int = 64
    """Most jobs of the array running at once."""
    additional: tuple[tuple[str, str], ...] = ()
    """Extra sbatch options as (name, value) pairs, e.g. (("account", "myproj"), ("qos", "normal"))."""


@dataclass(frozen=True)
class Grid:
    """One block of a sweep: the product of ``envs`` x ``variants`` x the ``grid`` values."""

    preset: str
    """A name from bpo.config.presets.PRESETS."""
    envs: tuple[str, ...] = ()
    """Environments, each with the preset's Table 5 overrides; () keeps the preset's own."""
    variants: tuple[str, ...] = ()
    """For on-policy presets: Table 1 rows or ablations, 'bpo' (BPO with the preset's own settings)
    or the method's name (the method alone); for episodic presets 'reinforce' or 'bpo'; () keeps
    the preset's own (BPO on its method)."""
    grid: tuple[tuple[str, tuple], ...] = ()
    """(dotted field, values) pairs swept as a product; they are part of each run's id."""
    fixed: tuple[tuple[str, Any], ...] = ()
    """(dotted field, value) pairs applied to every run of this block (budgets, backend, ...)."""
    set_values: tuple[tuple[str, Any], ...] = ()
    """Values given on the command line (``--set``), applied after ``fixed``. Those that change a
    run's results are part of its id, so sweeps of one folder with different ``--set`` values
    never claim each other's runs."""
    seeds: int = 10
    """Independent runs per configuration, vmapped in one process."""


@dataclass(frozen=True)
class ProbeVariant:
    """One more probe of the same runs, its estimator's truncation changed: ``bpo probe RUN --name
    NAME --points ... --rho-bar R --c-bar C`` (None keeps the run's level; inf: none)."""

    name: str
    """The folder under each run, and the summary's files (NAME_summary.*); not 'probe'."""
    points: tuple[int | str, ...] | None = None
    rho_bar: float | None = None
    c_bar: float | None = None


@dataclass(frozen=True)
class ProbePlan:
    """``bpo reproduce``'s last step for a sweep that has one (docs/probe.md): ``bpo probe RUN`` on
    every finished BPO-PPO run of the folder at ``points`` with ``settings`` (a run already probed so
    is kept), the same for each of ``variants``, then ``bpo probe-summary`` of the folder for each."""

    points: tuple[int | str, ...] | None = None
    """Update counts of kept policies (``save_policies_every``) and/or 'final'; None: all of them."""
    settings: ProbeSettings = field(default_factory=ProbeSettings)
    """M, K, H, the reference and the bootstrap (``bpo probe``'s defaults unless given)."""
    variants: tuple[ProbeVariant, ...] = ()
    """Further probes with other truncation levels, each into its own folder."""


@dataclass(frozen=True)
class Sweep:
    name: str
    """Results go to runs/NAME/ unless --out says otherwise."""
    grids: tuple[Grid, ...]
    description: str = ""
    slurm: SlurmResources = field(default_factory=SlurmResources)
    baseline: str | None = None
    """The row ``bpo reproduce`` tests the others against (``bpo table --baseline``); None: 'ppo' or
    'reinforce'."""
    alternative: str = "greater"
    """The test ``bpo reproduce`` tabulates with (``bpo table --alternative``)."""
    probe: ProbePlan | None = None
    """Probe the runs' return estimator after training (``bpo reproduce`` only); None: no probe."""


@dataclass(frozen=True)
class RunSpec:
    """One point of a sweep: everything needed to rebuild its config in another process."""

    run_id: str
    preset: str
    env: str | None
    variant: str | None
    overrides: tuple[tuple[str, Any], ...]
    """Grid values then fixed values, applied in this order after the variant."""
    label_overrides: tuple[tuple[str, Any], ...]
    """The grid values alone: what distinguishes this run from its neighbours in a table."""
    seeds: int

    def config(self):
        """The run's config, validated (a ConfigError names the bad field)."""
        return validate(self.build())

    def build(self):
        """The run's config, not validated: for a worker whose planner validated it (``expand``)."""
        cfg = get_preset(self.preset, self.env)
        if self.variant is not None:
            if isinstance(cfg, EpisodicTrainConfig):
                if self.variant not in ("reinforce", "bpo"):
                    raise ConfigError("variant", f"preset {self.preset!r} is episodic; allowed: ['bpo', 'reinforce']")
                cfg = with_bpo_labelled(cfg, self.variant == "bpo")
            elif self.variant == "bpo" or (self.variant in method_names() and self.variant not in VARIANTS):
                # BPO on the method with the preset's own settings (no Table 1 row), or a plug-in
                # method alone (the built-in ones have a row of their own: 'ppo', 'a2c'), on its own
                # preset or on another's (then in that preset's column, beside its method)
                method = cfg.method if self.variant == "bpo" else self.variant
                cfg = with_bpo_labelled(replace(cfg, method=method), self.variant == "bpo")
            elif self.variant not in VARIANTS:  # a sweep also takes 'bpo' and a plug-in method's name
                allowed = ["bpo", *VARIANTS, *(m for m in method_names() if m not in VARIANTS)]
                raise ConfigError("variant", f"unknown variant {self.variant!r}; allowed: {allowed} "
                                             "(a plug-in method's name runs it alone)")
            else:
                cfg = apply_variant(cfg, self.variant)
        cfg = apply_overrides(cfg, dict(self.overrides))
        return replace(cfg, seeds=self.seeds)

    @property
    def row(self) -> str:
        """The table row / plot line: variant (or algorithm) and grid values."""
        base = self.variant or self.config().algo
        return " ".join([base] + [f"{k}={_fmt(v)}" for k, v in self.label_overrides])

    def to_json(self) -> dict:
        return {**dataclasses.asdict(self), "overrides": [list(p) for p in self.overrides],
                "label_overrides": [list(p) for p in self.label_overrides]}

    @classmethod
    def from_json(cls, d: dict) -> RunSpec:
        pairs = lambda xs: tuple((k, _as_tuple(v)) for k, v in xs)  # noqa: E731 - JSON lists back to tuples
        return cls(run_id=d["run_id"], preset=d["preset"], env=d["env"], variant=d["variant"],
                   overrides=pairs(d["overrides"]), label_overrides=pairs(d["label_overrides"]), seeds=d["seeds"])


def _as_tuple(value):
    return tuple(_as_tuple(v) for v in value) if isinstance(value, list) else value


def _fmt(value) -> str:
    if isinstance(value, tuple):
        return "x".join(map(str, value))
    return str(value)


class UnknownField(ConfigError):
    """An override whose name is no field of the config (a ``ConfigError`` naming it): a setting of
    another version, where a ``ConfigError`` of another kind is a value the field cannot take."""


def apply_overrides(cfg, overrides: dict):
    """``cfg`` with dotted-name overrides, each checked against the config's fields (an unknown name
    or a value of the wrong type is a ConfigError naming it) and coerced (int to float, list to tuple).
    A field of a section the run does not have (``bpo.*`` of the method alone, in a sweep that also
    runs BPO) is checked the same way and leaves the run as it is."""
    for name, value in overrides.items():
        owner, parts, absent = cfg, name.split("."), False
        for i, part in enumerate(parts):
            fields = {f.name: f for f in dataclasses.fields(owner)}
            if part not in fields:
                where = ".".join(parts[:i]) or type(cfg).__name__
                raise UnknownField(name, f"no such field in {where}; allowed: {sorted(fields)}")
            if i < len(parts) - 1:
                absent = absent or getattr(owner, part) is None
                owner = get_dotted(owner, part)  # an absent section: its defaults, to check the name
                if not dataclasses.is_dataclass(owner):
                    raise UnknownField(name, f"{'.'.join(parts[:i + 1])} is not a nested config")
        coerced = _coerce(name, value, getattr(owner, parts[-1]))
        cfg = cfg if absent else replace(cfg, **{name: coerced})
    return cfg


def _coerce(name: str, value, current):
    if isinstance(current, bool):
        if not isinstance(value, bool):
            raise ConfigError(name, f"must be true or false, got {value!r}")
        return value
    if isinstance(current, float) and isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            return float(value)
        except OverflowError:
            raise ConfigError(name, f"must be a number within float range, got an integer of {len(str(value))} "
                              "digits") from None
    if isinstance(current, float) and value in ("inf", "-inf"):
        return float(value)
    if isinstance(current, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(name, f"must be a list of integers, got {value!r}")
        return tuple(value)
    if isinstance(current, int) and isinstance(value, float) and value.is_integer():
        return int(value)
    if current is not None and not isinstance(value, type(current)):
        raise ConfigError(name, f"must be of type {type(current).__name__}, got {value!r}")
    return value


def parse_value(text: str):
    """A CLI value: a Python literal (1e-4, 3, true/false, (64, 64)) or else a plain string."""
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("inf", "-inf"):
        return float(lowered)
    try:
        return _as_tuple(ast.literal_eval(text))
    except (ValueError, SyntaxError):
        return text


def parse_assignment(text: str, many: bool) -> tuple[str, Any]:
    """``KEY=VALUE`` (``many``: ``KEY=V1,V2`` or ``KEY=[V1, V2]``) from the command line."""
    name, sep, values = text.partition("=")
    if not sep or not name:
        raise ConfigError("grid" if many else "set", f"expected KEY=VALUE, got {text!r}")
    if not many:
        return name.strip(), parse_value(values)
    values = values.strip()
    if values.startswith("["):
        parsed = parse_value(values)
        return name.strip(), tuple(parsed) if isinstance(parsed, tuple) else (parsed,)
    return name.strip(), tuple(parse_value(v) for v in values.split(","))


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._=+-]+", "_", text)


NOT_SETTABLE = {"seeds": "--seeds (or the grid's seeds)", "preset": "--preset or the sweep file's grids",
                "env": "--envs, which also applies the preset's per-environment settings",
                "variant": "--variants", "bpo": "--variants ('bpo', or the method's name for it alone)",
                "algo": "--variants ('bpo', or the method's name for it alone; algo became the bpo section)"}
"""Fields a sweep sets itself: an override of them would be ignored or would skip what the proper
option does."""


def check_settable(pairs, option: str) -> None:
    for name, _ in pairs:
        if name in NOT_SETTABLE:
            raise ConfigError(option, f"{name} cannot be set this way; use {NOT_SETTABLE[name]}")


def _check_not_the_variants(spec: RunSpec, pairs) -> None:
    """A fixed or ``--set`` value may not change a field the run's variant sets: the variant is the
    run's row in every table and plot (``RunSpec.row``), and ``bpo_c1.0_rho1.5`` run with c̄ = 2
    would be labelled with the c̄ it did not use. A grid value is in the row's name, so it may."""
    cfg = get_preset(spec.preset, spec.env)
    if spec.variant is None or isinstance(cfg, EpisodicTrainConfig) or spec.variant not in VARIANTS:
        return
    fields = variant_changes(cfg, spec.variant)
    for name, value in pairs:
        if name in fields and value != fields[name]:
            raise ConfigError(name, f"is set by the variant {spec.variant!r} (to {fields[name]!r}), whose name "
                                    "labels the run's row; allowed: another variant, or a grid of the field, "
                                    "which names its value in the row (--grid with --preset and --variants; in "
                                    "a sweep file, a Grid's grid=)")


def _check_each_field_once(grid: Grid) -> None:
    """A grid value labels the runs it makes (``RunSpec.row``), so a field swept twice, or swept and
    also given a value (fixed, ``--set``: ``RunSpec.build`` applies it after the grid's), would label
    runs with values they did not use."""
    names = [k for k, _ in grid.grid]
    given = {k: option for option, pairs in (("fixed", grid.fixed), ("--set", grid.set_values)) for k, _ in pairs}
    for name in names:
        if names.count(name) > 1:
            raise ConfigError(name, "is swept by two grids; allowed: one grid of the field, with all its values")
        if name in given:
            raise ConfigError(name, f"is swept by the grid and also given one value ({given[name]}), which every run "
                                    "would use whatever its label; allowed: one of the two")


def _check_read(cfg, label, variant) -> None:
    """A grid value labels the run, so it must be of a field the run reads: the ``bpo`` and ``returns``
    sections (the behaviour step and its off-policy returns, eq. (6)) are BPO's alone (``_reads``)."""
    for name, _ in label:
        if name.partition(".")[0] in BPO_SECTIONS and not _reads(cfg, name):
            raise ConfigError(name, f"is read by BPO runs only, and the {variant or cfg.algo} runs of the grid have no "
                                    "behaviour step: they would be one run under several labels; allowed: a grid of "
                                    "BPO variants only (in a sweep file, one Grid for them and one for the others)")


def _check_distinct(configs: dict, cfg, run_id: str) -> None:
    """Two runs of one configuration would be computed twice and shown as two rows (a value spelt
    two ways, ``1`` and ``1.0``)."""
    if (twin := configs.setdefault(cfg, run_id)) != run_id:
        raise ConfigError("grids", f"runs {twin!r} and {run_id!r} have the same configuration; allowed: grid values "
                                   "that differ once read as the field's type")


def _run_id(cfg, grid: Grid, variant, label, without_set) -> str:
    """ENV-PRESET-VARIANT, the grid values, then the ``--set`` values that change the run."""
    changed = [(k, get_dotted(cfg, k)) for k, _ in grid.set_values if k.split(".")[-1] not in EXECUTION_ONLY
               and _reads(cfg, k) and get_dotted(cfg, k) != get_dotted(without_set, k)]
    parts = [cfg.env, grid.preset, variant or cfg.algo] + [f"{k}={_fmt(v)}" for k, v in (*label, *changed)]
    return _slug("-".join(parts))


def _reads(cfg, name: str) -> bool:
    """Whether a run of ``cfg`` reads the field ``name``: it has the field's section
    (``apply_overrides`` leaves a run without it as it is), and a field of ``BPO_SECTIONS`` only
    where the run has BPO (a run without it has a ``returns`` section that nothing reads)."""
    head, dot, _ = name.partition(".")
    if head in BPO_SECTIONS:
        return cfg.bpo is not None
    return not dot or getattr(cfg, head) is not None


def _check_applied(grid: Grid, applied: set[str]) -> None:
    """Refuse a setting that changed no run of ``grid``: one of a section none of its runs reads
    (``ppo.*`` in a sweep of A2C runs, ``bpo.*`` or ``returns.*`` of runs without BPO) would be
    silently ignored."""
    for name, _ in (*grid.grid, *grid.fixed, *grid.set_values):
        if name not in applied:
            head = name.partition(".")[0]
            raise ConfigError(name, f"sets the {head} section, which no run of the grid on preset {grid.preset!r} "
                                    f"reads; allowed: the sections its runs read")


def expand(sweep: Sweep) -> list[RunSpec]:
    """Every run of the sweep, in a fixed order; each config is built and validated here, so a bad
    value fails before any process starts or anything compiles."""
    specs, configs = [], {}  # each config -> its run id
    for grid in sweep.grids:
        if grid.seeds < 1:
            raise ConfigError("seeds", f"must be an integer >= 1, got {grid.seeds!r}")
        for pairs, option in ((grid.grid, "grid"), (grid.fixed, "fixed"), (grid.set_values, "set")):
            check_settable(pairs, option)
        _check_each_field_once(grid)
        names, applied = [k for k, _ in grid.grid], set()
        for env, variant, values in itertools.product(grid.envs or (None,), grid.variants or (None,),
                                                       itertools.product(*(v for _, v in grid.grid))):
            label = tuple(zip(names, values, strict=True))
            spec = RunSpec(run_id="", preset=grid.preset, env=env, variant=variant,
                           overrides=label + tuple(grid.fixed), label_overrides=label, seeds=grid.seeds)
            without_set = spec.build()
            _check_not_the_variants(spec, (*grid.fixed, *grid.set_values))
            spec = dataclasses.replace(spec, overrides=spec.overrides + tuple(grid.set_values))
            cfg = spec.config()  # every setting checked against the fields, read or not
            _check_read(cfg, label, variant)
            read = tuple((k, v) for k, v in spec.overrides if _reads(cfg, k))
            applied |= {k for k, _ in read}
            # Only what the run reads: a PPO run's unread returns.c_bar would change its config, not
            # its id or its results, and the finished run would no longer count as finished.
            spec = dataclasses.replace(spec, overrides=read)
            cfg = spec.config()
            if sweep.probe is not None:
                check_probe_plan(sweep.probe, cfg)
            run_id = _run_id(cfg, grid, variant, label, without_set)
            if run_id in configs.values():
                raise ConfigError("grids", f"two runs share the id {run_id!r}; make their grid values differ")
            _check_distinct(configs, cfg, run_id)
            specs.append(dataclasses.replace(spec, run_id=run_id))
        _check_applied(grid, applied)
    if not specs:
        raise ConfigError("grids", "the sweep has no runs")
    return specs


def probed(cfg) -> bool:
    """Whether ``bpo reproduce``'s probe step probes a run of this config: on-policy BPO (a mu)."""
    return not isinstance(cfg, EpisodicTrainConfig) and cfg.bpo is not None


def check_probe_plan(plan: ProbePlan, cfg) -> None:
    """Each point of the plan is kept by every run it probes, so that a probe step cannot fail
    after hours of training: a ConfigError naming ``probe.points`` before anything runs."""
    names = [v.name for v in plan.variants]
    for name in names:
        check_probe_name(name, "probe.variants")
        if name == "probe" or names.count(name) > 1:
            raise ConfigError("probe.variants", f"name {name!r}: each variant needs its own folder, not 'probe'")
    if not probed(cfg):
        return
    every = cfg.save_policies_every
    kept = list(range(every, cfg.n_updates, every)) if every else []  # as bpo.training.driver keeps them
    for where, points in (("probe.points", plan.points), *((f"probe.variants[{v.name}].points", v.points)
                                                           for v in plan.variants)):
        for point in points or ():
            if point != "final" and point not in kept:
                raise ConfigError(where, f"{point!r} is not kept by the {cfg.env} {cfg.algo} runs "
                                         f"(save_policies_every = {every}); allowed: {kept + ['final']}")
    for v in plan.variants:
        with_truncation(cfg, v.rho_bar, v.c_bar)


def sweep_names() -> list[str]:
    """The sweep files' names, ``experiments/sweeps/NAME.py``, sorted."""
    return sorted(p.stem for p in SWEEPS_DIR.glob("*.py") if not p.stem.startswith("_"))


def load_sweep(name_or_path: str) -> Sweep:
    """A sweep file by name (experiments/sweeps/NAME.py) or path."""
    path = Path(name_or_path)
    if not path.suffix:
        path = SWEEPS_DIR / f"{name_or_path}.py"
    if not path.exists() or path.suffix != ".py" or not path.is_file():
        what = "no sweep file" if not path.exists() else "not a sweep file (a Python module, .py)"
        raise ConfigError("sweep", f"{what}: {str(path)!r}; allowed names: {sweep_names()} or a path to a .py file")
    module_spec = importlib.util.spec_from_file_location(f"bpo_sweep_{path.stem}", path)
    module = importlib.util.module_from_spec(module_spec)
    try:
        module_spec.loader.exec_module(module)
    except Exception as e:  # noqa: BLE001 -- a user's file: whatever it raises is reported as its fault
        where = f" (line {e.lineno})" if isinstance(e, SyntaxError) and e.lineno else ""
        raise ConfigError("sweep", f"{path} could not be read{where}: {type(e).__name__}: {e}") from e
    sweep = getattr(module, "SWEEP", None)
    if not isinstance(sweep, Sweep):
        raise ConfigError("sweep", f"{path} must define SWEEP = Sweep(...)")
    return sweep
