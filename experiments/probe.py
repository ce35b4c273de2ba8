"""``bpo probe RUN``: the return-estimator probe (``bpo.training.probe_run``) on a finished BPO-PPO
run's kept policies; writes ``RUN/probe/probe.json`` and a figure ``RUN/probe/probe.png``/``.pdf``."""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, Literal

import tyro

from bpo.config.schema import ConfigError
from bpo.infra.processes import end_at_once
from bpo.infra.provenance import code_version
from bpo.infra.publish import save_or_rescue
from bpo.infra.results import atomic_write_json, ensure_writable_dir
from bpo.infra.settings import validate_environment
from bpo.instruments.probe import ProbeSettings, format_cost, probe_cost
from bpo.training.probe_run import check_probe, check_probe_name, probe_run, probed_points
from experiments import store
from experiments.arguments import parse
from experiments.common import save_figure
from experiments.probe_summary import find_probes, markdown, read_probe, summarise, write_summary
from experiments.reader import BadFile, Run
from experiments.sweep import ProbePlan, probed


@dataclass(frozen=True)
class ProbeArgs:
    """Probe the return estimator of a BPO-PPO run at every kept point (save_policies_every) and at
    the end: Var_mu / Var_pi and MSE_mu / MSE_pi of eq. (6)'s start-state estimate (docs/probe.md)."""

    run: Annotated[tyro.conf.Positional[Path], tyro.conf.arg(metavar="RUN")]
    """A BPO-PPO run directory with policies.msgpack."""
    m: int = 32
    """Start states per point and seed."""
    k: int = 32
    """Segments per start state, under pi and under mu."""
    horizon: int = 256
    """H, steps per segment (also the steps under mu from reset that the start states are drawn from)."""
    ref_k: int = 128
    """Segments of pi per start state for the Monte Carlo v_pi."""
    ref_horizon: int = 512
    """Their length."""
    seed: int = 0
    """Every key and the bootstrap's generator: the same seed gives the same numbers."""
    points: tuple[str, ...] | None = None
    """Update counts of kept policies and/or 'final'; default all of them."""
    seeds: tuple[int, ...] | None = None
    """Seed indices of the run; default all."""
    backend: Literal["jax", "mjx", "threads"] | None = None
    """Where the segments run; default the run's own (threads for a Gymnasium-backend MuJoCo run)."""
    rho_bar: float | None = None
    """Probe the estimator with this rho_bar instead of the run's (inf: no truncation); the policies
    and critic are the run's. Give another --name to keep the probe with the run's own."""
    c_bar: float | None = None
    """The same for c_bar."""
    name: str = "probe"
    """The folder under RUN the results go to (RUN/NAME/probe.json)."""
    yes: bool = False
    """Do not ask before starting (it never asks when stdin is not a terminal)."""


def settings_of(args: ProbeArgs) -> ProbeSettings:
    """The settings, each value checked with the field's name (ProbeSettings' own checks)."""
    if not 0 <= args.seed < 2**32:
        raise ConfigError("seed", f"must be in [0, 2**32 - 1], got {args.seed}")
    return ProbeSettings(m=args.m, k=args.k, horizon=args.horizon, ref_k=args.ref_k, ref_horizon=args.ref_horizon,
                         seed=args.seed)


def cost_line(settings: ProbeSettings, n_points: int, n_seeds: int) -> str:
    """What the probe will do, before it starts; nothing is measured, so no time is claimed."""
    cost = probe_cost(settings)
    start = settings.m * settings.horizon
    total = n_points * n_seeds * (cost["env_steps"] + start)
    return (f"{format_cost(settings, cost)} per point and seed, plus {start:,} steps under mu for the start "
            f"states; {n_points} points probed x {n_seeds} seeds: {total:,} environment steps in all (time not "
            f"measured beforehand; it adds one compilation)")


def figure(result: dict, out: Path) -> list[Path]:
    """The pooled median ratios with their bootstrap intervals against environment steps."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6, 3.5), layout="constrained")
    ax = fig.add_subplot()
    points = [p for p in result["points"] if p["point"] != "final"] or result["points"]
    steps = [p["env_steps"] for p in points]
    for name, label in (("var", "Var_mu / Var_pi"), ("mse", "MSE_mu / MSE_pi")):
        pooled = [p["pooled"] for p in points]
        med = [_nan(q[f"{name}_ratio_median"]) for q in pooled]
        lo = [_nan(q[f"{name}_ratio_lo"]) for q in pooled]
        hi = [_nan(q[f"{name}_ratio_hi"]) for q in pooled]
        ax.plot(steps, med, marker="o", label=f"median {label}")
        ax.fill_between(steps, lo, hi, alpha=0.25)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_yscale("log")
    from matplotlib.ticker import ScalarFormatter

    for axis in (ax.yaxis.set_major_formatter, ax.yaxis.set_minor_formatter):
        axis(ScalarFormatter())  # 0.9 and 1.2, not 9 x 10^-1
    ax.set_xlabel("environment steps")
    ax.set_ylabel("ratio (mu over pi)")
    ax.set_title(f"{result['env']}: eq. (6) start-state estimate, {result['settings']['level']:.0%} bootstrap")
    ax.legend(fontsize=8)
    return save_figure(fig, out, "probe", dpi=120)


def _nan(x):
    return float("nan") if x is None else x


def table(result: dict) -> str:
    rows = ["point   update  env steps  Var ratio [interval]     MSE ratio [interval]     mu lower (var)  ESS/K"]
    for p in result["points"]:
        q = p["pooled"]
        rows.append(f"{str(p['point']):<7} {p['update']:>6} {p['env_steps']:>10}  "
                    f"{_fmt(q, 'var'):<24} {_fmt(q, 'mse'):<24} {q['frac_var_mu_lower']:>14.2f}  "
                    f"{_nan(q['ess_frac_mean']):.2f}")
    return "\n".join(rows)


def _fmt(q: dict, name: str) -> str:
    med, lo, hi = (_nan(q[f"{name}_ratio_{end}"]) for end in ("median", "lo", "hi"))
    return f"{med:.3g} [{lo:.3g}, {hi:.3g}]"


def probe_and_write(run: Path, settings: ProbeSettings, points, seeds, backend, command: list[str], *,
                    ask: bool = False, truncation: tuple = (None, None), name: str = "probe") -> Path | None:
    """``probe_run`` timed, with its provenance, written to ``RUN/NAME/`` (probe.json and the
    figure, atomically; where that fails, rescued elsewhere and the path returned says so). The
    arguments are checked (``check_probe``; ``truncation`` is (rho_bar, c_bar), None keeping the
    run's) and the cost printed before anything compiles; with ``ask`` on a terminal, None when
    the user does not go on."""
    saved, resolved, seed_list, _ = check_probe(run, points, seeds, backend, *truncation)
    check_probe_name(name)
    out_dir = ensure_writable_dir(run / name, "run")
    print(cost_line(settings, probed_points(saved, resolved), len(seed_list)), flush=True)
    if ask and sys.stdin.isatty() and input("go on? [y/N] ").strip().lower() not in ("y", "yes"):
        return None
    start = time.perf_counter()
    with end_at_once(f"nothing written to {str(out_dir)!r} (the probe had not finished)"):
        result = probe_run(run, settings, points, seeds, backend, *truncation)
    wall = time.perf_counter() - start  # compilations included; the training's own is in the run's summary
    result["provenance"] = {"command": command, "code_version": code_version(), "wall_time_s": wall}

    def write(folder: Path) -> None:
        atomic_write_json(folder / "probe.json", result)
        figure(result, folder)

    _, rescued = save_or_rescue(out_dir, write, "run", last_resort=lambda: json.dumps(result["points"]))
    print(table(result))
    return (out_dir if rescued is None else rescued) / "probe.json"


def probe_main(argv: list[str]) -> int:
    args = parse(ProbeArgs, argv, prog="bpo probe")
    try:
        validate_environment()  # the write after the work reads BPO_WRITE_*: checked first
        path = probe_and_write(args.run, settings_of(args), args.points, args.seeds, args.backend,
                               ["bpo", "probe", *argv], ask=not args.yes, truncation=(args.rho_bar, args.c_bar),
                               name=args.name)
    except (ConfigError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if path is None:
        return 1
    print(f"-> {path}")
    return 0 if path.parent == args.run / args.name else 1


def probed_as(run: Run, settings: ProbeSettings, points, seeds, name: str = "probe",
              truncation: tuple = (None, None)) -> bool:
    """Whether ``RUN/NAME/probe.json`` holds a probe with these settings and truncation (None: the
    run's own level) at exactly these points and seeds (as ``check_probe`` resolves them); a
    missing or damaged file is not one."""
    try:
        probe = read_probe(run.path / name / "probe.json")
    except BadFile:
        return False
    own = {"rho_bar": run.config.returns.rho_bar, "c_bar": run.config.returns.c_bar}
    wanted = {k: own[k] if v is None else v for k, v in zip(("rho_bar", "c_bar"), truncation, strict=True)}
    return (probe["settings"] == asdict(settings) and [p["point"] for p in probe["points"]] == list(points)
            and all(probe["returns"].get(k) == v for k, v in wanted.items())
            and all(sorted(p["seeds"], key=int) == [str(s) for s in seeds] for p in probe["points"]))


def _probe_once(run: Run, settings: ProbeSettings, points, name: str, truncation: tuple, command: list[str]) -> None:
    """``bpo probe`` of one run into ``RUN/NAME``, unless it holds that probe already."""
    _, resolved, seeds, _ = check_probe(run.path, points, None, None, *truncation)
    if probed_as(run, settings, resolved, seeds, name, truncation):
        print(f"{run.run_id}: probed already with these settings ({name}/probe.json kept)")
        return
    print(f"{run.run_id}: probing into {name}/", flush=True)
    probe_and_write(run.path, settings, points, None, None, command, truncation=truncation, name=name)


def probe_folder(folder: Path, plan: ProbePlan, command: list[str], baseline: str | None = None) -> list[Path]:
    """``bpo reproduce``'s probe step: ``bpo probe`` on every finished on-policy BPO run of the
    folder at the plan's points, and again for each of its variants into its own folder (a probe
    already there with the same settings is kept), then ``bpo probe-summary`` of the folder for
    each, with ``--baseline`` the sweep's baseline row where that row was probed. Returns the
    files written."""
    probes = [("probe", plan.points, (None, None)), *((v.name, v.points, (v.rho_bar, v.c_bar)) for v in plan.variants)]
    for run in store.load_runs(folder)[0]:
        if probed(run.config):
            for name, points, truncation in probes:
                _probe_once(run, plan.settings, points, name, truncation, command)
    written = []
    for name, _, _ in probes:
        runs, skipped = find_probes(folder, name)
        for s in skipped:
            print(f"bpo reproduce: probe summary: skipped {s.line()}", file=sys.stderr)
        base = baseline if baseline in {r.run.row for r in runs} else None
        argv = [str(folder), *(["--name", name] if name != "probe" else []), *(["--baseline", base] if base else [])]
        summary = summarise(runs, folder, argv, base, skipped)
        print(markdown(summary))
        written += write_summary(runs, summary, folder, name)
    return written
