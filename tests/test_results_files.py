"""Nothing lost and nothing silently wrong in ``bpo table`` and ``bpo plot`` (docs/runs.md, "What is
refused, and why"):

* every file of a run directory they read is checked where it is read (``experiments.reader``):
  each kind damaged in a copy of a real results folder (``results/classic``, four runs made by
  ``bpo reproduce classic``) is skipped with one line naming the run directory, the file and the
  reason, the outputs are made from the other runs, and the exit code is 1 (0 with
  ``--allow-skipped``); a damaged ``sweep.json`` is a one-line error, exit code 2;
* a table cell is one configuration: runs of one row that differ in budget, backend or
  evaluation protocol, or that share their seeds, are refused with exit code 2;
* each column is tested against its own baseline row, and a column without one is untested;
* a NaN final return is counted in its cell and left out of the statistics, and the JSON files
  hold null for it and stay valid for strict parsers.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
from flax import serialization

from bpo.config.presets import apply_variant, get_preset
from bpo.config.schema import replace, with_bpo
from bpo.training.policies import policies_problem
from experiments import reader, store
from experiments.cli import main
from experiments.common import welch_p
from experiments.plotting import mean_se_by_step
from experiments.sweep import RunSpec

from synthetic_results import fake_run, synthetic_results

ROOT = Path(__file__).resolve().parents[1]
CLASSIC = ROOT / "results" / "classic"
VICTIM = "Pendulum-v1-pendulum_ppo-bpo"
OTHER = "CartPole-v1-cartpole_ppo-bpo"
SAME_TASK = "Pendulum-v1-pendulum_ppo-ppo"


def strict_load(path: Path):
    """JSON as a strict parser reads it: a bare NaN or Infinity is an error."""
    def refuse(constant):
        raise ValueError(f"{path}: {constant} is not JSON")
    return json.loads(path.read_text(), parse_constant=refuse)


@pytest.fixture
def classic(tmp_path) -> Path:
    """A copy of the committed results/classic run directories and sweep.json (not its outputs)."""
    folder = tmp_path / "classic"
    folder.mkdir()
    shutil.copy(CLASSIC / "sweep.json", folder / "sweep.json")
    for run in CLASSIC.glob("*/summary.json"):
        shutil.copytree(run.parent, folder / run.parent.name)
    return folder


def edit_json(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def deep(levels: int) -> list:
    """A JSON array nested ``levels`` deep, well inside what ``json`` parses."""
    value: list | int = 1
    for _ in range(levels):
        value = [value]
    return value


def cut_mid_row(path: Path) -> None:
    text = path.read_text()
    last = text.rstrip("\n").rfind("\n")
    path.write_text(text[:last + (len(text) - last) // 2])


def drop_last_row(path: Path) -> None:
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:-1]))


def replace_row(path: Path, number: int, make) -> None:
    """Line ``number`` (1 = the header) replaced by ``make(fields)``."""
    lines = path.read_text().splitlines()
    lines[number - 1] = ",".join(make(lines[number - 1].split(",")))
    path.write_text("\n".join(lines) + "\n")


# file, what is done to it in the victim run directory, the reason printed.
DAMAGE = {
    "summary-empty": ("summary.json", lambda p: p.write_text(""), "empty"),
    "summary-truncated": ("summary.json", lambda p: p.write_text(p.read_text()[:200]), "not valid JSON"),
    "summary-array": ("summary.json", lambda p: p.write_text("[1, 2]"), "holds a JSON array, not an object"),
    "summary-missing-field": ("summary.json", lambda p: edit_json(p, lambda d: d.pop("final_eval_returns")),
                              "final_eval_returns is missing"),
    "summary-wrong-type": ("summary.json", lambda p: edit_json(p, lambda d: d.update(final_mean="high")),
                           'final_mean must be a number or null, got "high"'),
    "summary-no-returns": ("summary.json", lambda p: edit_json(p, lambda d: d.update(final_eval_returns=[])),
                           "final_eval_returns is empty"),
    "summary-mean-edited": ("summary.json", lambda p: edit_json(p, lambda d: d.update(final_mean=d["final_mean"] + 1)),
                            "final_mean is "),
    "summary-foreign": ("summary.json", lambda p: shutil.copy(p.parents[1] / OTHER / "summary.json", p),
                        'preset is "cartpole_ppo" but config.json says "pendulum_ppo": the summary of another run?'),
    # Another run's summary or spec of the same task, method and seeds (two rows of one column, swapped).
    "summary-other-row": ("summary.json", lambda p: edit_json(p, lambda d: d.update(variant="bpo_c1.5_rho1.5")),
                          'variant is "bpo_c1.5_rho1.5" but config.json says "": the summary of another run?'),
    "summary-other-digest": ("summary.json", lambda p: edit_json(p, lambda d: d.update(config_sha256="0" * 64)),
                             "its config_sha256 is not the digest of config.json: the summary of another run?"),
    "spec-same-task": ("spec.json", lambda p: shutil.copy(p.parents[1] / SAME_TASK / "spec.json", p),
                       'variant is "ppo" but config.json says "bpo": the spec of another run?'),
    "spec-other-setting": ("spec.json", lambda p: edit_json(p, lambda d: d.update(overrides=[["ppo.gamma", 0.5]])),
                           "ppo.gamma is 0.5 but config.json says 0.9: the spec of another run?"),
    # A row's label that the run never had, and settings that are not [field, value] pairs or that
    # their field cannot take (adversarial audit: a relabelled row with exit 0, or a traceback).
    "spec-relabelled": ("spec.json", lambda p: edit_json(p, lambda d: d.update(label_overrides=[["ppo.gamma", 0.5]])),
                        "label_overrides are not the first of its overrides"),
    "spec-field-not-a-name": ("spec.json", lambda p: edit_json(p, lambda d: d.update(overrides=[[["ppo.gamma"], 2]])),
                              "overrides must be a list of [field, value] pairs, each field a non-empty string"),
    "spec-value-not-allowed": ("spec.json", lambda p: edit_json(p, lambda d: d.update(overrides=[["ppo.gamma", {}]])),
                               "overrides: ppo.gamma: must be of type float, got {}"),
    "spec-nested-deep": ("spec.json", lambda p: edit_json(p, lambda d: d.update(overrides=[["ppo.gamma", deep(500)]])),
                         "its values nest 503 levels deep; a run of a sweep nests at most 8"),
    "config-missing": ("config.json", lambda p: p.unlink(), "missing"),
    "config-garbage": ("config.json", lambda p: p.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00"),
                       "not text (not UTF-8): not a JSON file"),
    "config-truncated": ("config.json", lambda p: p.write_text(p.read_text()[:100]), "not valid JSON"),
    "config-invalid": ("config.json", lambda p: p.write_text('{"preset": "pendulum_ppo"}'), "env is missing"),
    "config-wrong-budget": ("config.json", lambda p: edit_json(p, lambda d: d.update(total_timesteps="lots")),
                            'total_timesteps must be an integer >= 1, got "lots"'),
    "spec-garbage": ("spec.json", lambda p: p.write_text("run_id = 3"), "not valid JSON"),
    "spec-missing-field": ("spec.json", lambda p: edit_json(p, lambda d: d.pop("run_id")), "run_id is missing"),
    "spec-foreign": ("spec.json", lambda p: shutil.copy(p.parents[1] / OTHER / "spec.json", p),
                     'preset is "cartpole_ppo" but config.json says "pendulum_ppo": the spec of another run?'),
}
CURVE_DAMAGE = {
    "curve-missing": (lambda p: p.unlink(), "missing"),
    "curve-empty": (lambda p: p.write_text(""), "empty"),
    "curve-cut-mid-row": (cut_mid_row, "line 261 has"),
    "curve-cut-at-a-line-end": (drop_last_row, "seed 9 has 25 evaluations, seed 0 26 (cut off?)"),
    "curve-row-of-nans": (lambda p: replace_row(p, 5, lambda f: ["nan"] * len(f)),
                          'line 5: step is "nan", not a whole number >= 0'),
    "curve-not-a-number": (lambda p: replace_row(p, 7, lambda f: [f[0], f[1], "oops", *f[3:]]),
                           'line 7: eval_return is "oops", not a number'),
    "curve-foreign": (lambda p: p.write_text("update,loss\n0,1.5\n"), "no column step, seed, eval_return"),
}


def analyse(command: str, folder: Path, capsys, *flags: str) -> tuple[int, list[str]]:
    """(exit code, stderr lines) of ``bpo table`` or ``bpo plot`` on ``folder``."""
    capsys.readouterr()
    extra = ["--bootstrap-reps", "100"] if command == "table" else []
    code = main([command, str(folder), *extra, *flags])
    return code, capsys.readouterr().err.splitlines()


@pytest.mark.parametrize("case", list(DAMAGE))
def test_a_damaged_run_file_is_skipped_by_name_and_the_rest_is_used(classic, capsys, case):
    name, damage, reason = DAMAGE[case]
    damage(classic / VICTIM / name)
    line = f"skipped {classic / VICTIM}: {name}: {reason}"
    for command in ("table", "plot"):
        code, err = analyse(command, classic, capsys)
        assert code == 1, err
        skipped = [e for e in err if " skipped " in e and ": " in e and "(listed above)" not in e]
        assert len(skipped) == 1 and skipped[0].startswith(f"bpo {command}: {line}"), err
        assert not any("Traceback" in e for e in err)
        assert err[-1] == (f"bpo {command}: 1 run directory skipped (listed above); the outputs are made from the "
                           "other runs; exit code 1 (--allow-skipped: 0)")
    md = (classic / "table1.md").read_text()
    assert md.splitlines()[0] == "| | CartPole-v1 (cartpole_ppo) | Pendulum-v1 (pendulum_ppo) |"
    assert md.splitlines()[2:4] == ["| BPO | 500 ± 0 (SD 0) | – |",  # the victim's cell is empty
                                    "| PPO | 500 ± 0 (SD 0) | -397 ± 72 (SD 228) |"]  # the others are there
    data = strict_load(classic / "table1.json")
    assert [(s["run_id"], s["file"]) for s in data["skipped"]] == [(VICTIM, name)]
    assert f"Skipped: 1 run directory whose files could not be used: {VICTIM} ({name}: " in md
    index = strict_load(classic / "index.json")
    assert {e["run_id"]: e["status"] for e in index["runs"]}[VICTIM] == "skipped"
    assert (classic / "curves.png").stat().st_size > 5000
    assert main(["table", str(classic), "--bootstrap-reps", "100", "--allow-skipped"]) == 0
    assert main(["plot", str(classic), "--allow-skipped"]) == 0


@pytest.mark.parametrize("case", list(CURVE_DAMAGE))
def test_a_damaged_curve_is_skipped_by_the_plot(classic, capsys, case):
    damage, reason = CURVE_DAMAGE[case]
    damage(classic / VICTIM / "curve.csv")
    code, err = analyse("plot", classic, capsys)
    assert code == 1, err
    assert err[0].startswith(f"bpo plot: skipped {classic / VICTIM}: curve.csv: {reason}"), err
    assert len(err) == 2 and (classic / "curves.png").stat().st_size > 5000
    assert analyse("plot", classic, capsys, "--allow-skipped")[0] == 0
    code, err = analyse("table", classic, capsys)  # the table reads no curve: the run is in it
    assert code == 0 and err == [], err


def test_a_nan_evaluation_is_data_in_the_plot(classic, capsys):
    replace_row(classic / VICTIM / "curve.csv", 4, lambda f: [f[0], f[1], "nan", *f[3:]])
    code, err = analyse("plot", classic, capsys)
    assert code == 0 and err == [f"bpo plot: {classic / VICTIM / 'curve.csv'}: 1 of 260 evaluation returns are NaN "
                                 "or infinite; the mean and SE at those steps are over the other seeds"], err
    # The mean and SE at a step with a NaN seed are those of the other seeds.
    rows = [{"step": s, "seed": k, "eval_return": v} for s, values in ((0, [1.0, 2.0, 3.0]), (1, [4.0, math.nan, 8.0]))
            for k, v in enumerate(values)]
    steps, mean, se = mean_se_by_step(rows)
    assert list(steps) == [0, 1] and list(mean) == [2.0, 6.0]
    assert se == pytest.approx([1.0 / 3 ** 0.5, np.std([4.0, 8.0], ddof=1) / 2 ** 0.5])


def test_a_damaged_sweep_file_is_one_line_and_exit_2(classic, capsys):
    (classic / "sweep.json").write_text('{"sweep": "classic", "runs": [')
    for command in ("table", "plot"):
        code, err = analyse(command, classic, capsys)
        assert code == 2 and len(err) == 1, err
        assert err[0].startswith(f"error: {classic / 'sweep.json'}: not valid JSON (Expecting value at line 1"), err
    (classic / "sweep.json").write_text('{"sweep": "classic", "runs": [{"run_id": 7}]}')
    code, err = analyse("table", classic, capsys)
    assert (code, err) == (2, [f"error: {classic / 'sweep.json'}: runs[0]: run_id must be a non-empty string, got 7"])
    shutil.copy(CLASSIC / "sweep.json", classic / "sweep.json")
    edit_json(classic / "sweep.json", lambda d: d["runs"][0].update(overrides=[["ppo.gamma", deep(500)]]))
    code, err = analyse("table", classic, capsys)  # was a RecursionError
    assert (code, err) == (2, [f"error: {classic / 'sweep.json'}: runs[0]: its values nest 503 levels deep; a run of "
                               "a sweep nests at most 8"])
    assert not (classic / "table1.md").exists()


def test_a_damaged_index_is_never_read_and_is_replaced(classic, capsys):
    (classic / "index.json").write_text("\x00garbage")
    assert analyse("table", classic, capsys) == (0, [])
    index = strict_load(classic / "index.json")
    assert sorted(e["status"] for e in index["runs"]) == ["finished"] * 4
    # Rebuilt the same, the index is left as it is: `bpo table FOLDER --out ELSEWHERE` only reads FOLDER.
    before = (classic / "index.json").stat()
    assert analyse("table", classic, capsys, "--out", str(classic.parent / "elsewhere")) == (0, [])
    after = (classic / "index.json").stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert (classic.parent / "elsewhere" / "table1.md").is_file()


def test_no_usable_run_lists_each_and_exits_2(classic, capsys):
    for run in classic.glob("*/summary.json"):
        run.write_text("")
    code, err = analyse("table", classic, capsys)
    assert code == 2 and len(err) == 5, err
    assert all(e.startswith("bpo table: skipped ") and e.endswith("summary.json: empty") for e in err[:4])
    assert err[4] == (f"error: no finished runs (summary.json + config.json) under {classic} that can be read "
                      "(4 skipped)")


def _kept_point(policies: Path, key: str, tree) -> None:
    """A point of ``during`` added to a policies.msgpack by hand."""
    payload = serialization.msgpack_restore(policies.read_bytes())
    payload["during"] = {key: tree}
    policies.write_bytes(serialization.msgpack_serialize(payload))


@pytest.mark.parametrize("damage", ["truncated", "another run's", "a kept point without networks",
                                    "a kept point named ²"])
def test_a_sweep_redoes_a_run_whose_saved_policies_are_damaged(tmp_path, damage):
    """A finished run whose policies.msgpack is cut off or another run's is not finished for its
    sweep, which redoes it: tables read it as before, but ``bpo probe`` and ``bpo evaluate`` would
    refuse it for good (adversarial audit: a sweep counted it finished)."""
    runs = ROOT / "results" / "a2c"
    victim, other = "Pendulum-v1-pendulum_a2c-a2c", "Pendulum-v1-pendulum_a2c-bpo_c1.0_rho1.5"
    run = shutil.copytree(runs / victim, tmp_path / victim)
    spec = RunSpec.from_json(json.loads((run / "spec.json").read_text()))
    assert store.is_finished(tmp_path, spec)
    policies = run / "policies.msgpack"
    if damage == "truncated":
        policies.write_bytes(policies.read_bytes()[:1000])
    elif damage == "another run's":
        shutil.copy(runs / other / "policies.msgpack", policies)
    else:  # checked only for its final policies, it passed; a probe of that point failed, or int("²")
        _kept_point(policies, "5" if damage == "a kept point without networks" else "²", 3)
    assert not store.is_finished(tmp_path, spec)
    assert policies_problem(run) is not None  # one line naming the file, for bpo probe and evaluate too
    assert reader.read_run(run, tmp_path).run_id == victim  # the tables still read it


def test_a_sweep_redoes_a_run_whose_summary_is_damaged(classic):
    spec = RunSpec.from_json(json.loads((classic / VICTIM / "spec.json").read_text()))
    assert store.is_finished(classic, spec)
    (classic / VICTIM / "summary.json").write_text("{}")
    assert not store.is_finished(classic, spec)  # kept, it would be skipped by every table for good


# Mixed configurations in one cell.
HOPPER = ("Hopper-v5", "mujoco_default")


def ppo_run(root: Path, name: str, finals, **changes) -> None:
    cfg = replace(apply_variant(get_preset("mujoco_default", "Hopper-v5"), "ppo"),
                  **{"seeds": len(finals), "total_timesteps": 100_000, **changes})
    fake_run(root / name, cfg, finals)


def with_bpo_row(root: Path) -> None:
    cfg = replace(apply_variant(get_preset("mujoco_default", "Hopper-v5"), "bpo_c1.0_rho1.5"), seeds=3,
                  total_timesteps=100_000)
    fake_run(root / "bpo", cfg, [1500.0, 1600.0, 1700.0])


@pytest.mark.parametrize(("field", "value", "shown"), [
    ("total_timesteps", 200_000, "total_timesteps (100000 vs 200000)"),
    ("backend", "threads", "backend (gymnasium vs threads)"),
    ("eval_episodes", 5, "eval_episodes (10 vs 5)"),
    ("eval_every", 20_000, "eval_every (8192 vs 20000)"),
    ("ppo.learning_rate", 1e-3, "ppo.learning_rate (0.0003 vs 0.001)"),  # any field that changes the results
])
def test_runs_of_one_cell_with_different_configurations_are_refused(tmp_path, capsys, field, value, shown):
    with_bpo_row(tmp_path)
    ppo_run(tmp_path, "ppo-a", [1000.0, 1100.0, 1200.0])
    ppo_run(tmp_path, "ppo-b", [900.0, 1000.0, 1100.0], seed=3, **{field: value})
    code, err = analyse("table", tmp_path, capsys)
    assert code == 2 and err == [f"error: Hopper-v5 (default) PPO: runs 'ppo-a' and 'ppo-b' differ in {shown}; a cell "
                                 "pools the seeds of one configuration: move one of them to another results folder"]
    assert not (tmp_path / "table1.md").exists()


def test_runs_of_one_cell_with_the_same_seeds_are_refused_and_other_seeds_pooled(tmp_path, capsys):
    """By ``bpo table`` and ``bpo plot`` alike."""
    with_bpo_row(tmp_path)
    ppo_run(tmp_path, "ppo-a", [1000.0, 1100.0, 1200.0])
    ppo_run(tmp_path, "ppo-b", [900.0, 1000.0, 1100.0])
    for command in ("table", "plot"):  # the plot drew both as lines of one row (a copied run folder)
        code, err = analyse(command, tmp_path, capsys)
        assert code == 2 and err == ["error: Hopper-v5 (default) PPO: runs 'ppo-a' and 'ppo-b' have the same seed (0), "
                                     "so the same seeds: pooled, each would count twice"], (command, err)
    assert not (tmp_path / "table1.md").exists() and not (tmp_path / "curves.png").exists()
    # Seeds 3, 4, 5 (other random streams), evaluated in the training loop (which gives the same results).
    ppo_run(tmp_path, "ppo-b", [900.0, 1000.0, 1100.0], seed=3, eval_in_background=False)
    assert analyse("table", tmp_path, capsys)[0] == 0
    cells = {c["row"]: c for c in strict_load(tmp_path / "table1.json")["cells"]}
    assert cells["ppo"]["n"] == 6 and cells["ppo"]["mean"] == pytest.approx(1050.0)


# Baselines per column.
SC = ("ShortCorridor-v0", "short_corridor")
SC_RUNS = {"reinforce": [-13.0, -13.2, -12.8, -13.1], "bpo": [-11.0, -11.2, -11.4, -11.1]}
HOPPER_RUNS = {"ppo": [1000.0, 1100.0, 1200.0, 1050.0], "bpo_c1.0_rho1.5": [1500.0, 1600.0, 1700.0, 1400.0]}


def episodic_results(root: Path, cells: dict) -> None:
    for algo, finals in cells.items():
        cfg = replace(with_bpo(get_preset("short_corridor"), algo == "bpo"), seeds=len(finals))
        fake_run(root / "sc" / algo, cfg, finals)


def cells_of(path: Path) -> dict:
    return {((c["env"], c["preset"]), c["row"]): c for c in strict_load(path)["cells"]}


def test_each_column_is_tested_against_its_own_baseline(tmp_path, capsys):
    episodic_results(tmp_path / "alone", SC_RUNS)
    assert analyse("table", tmp_path / "alone", capsys)[0] == 0
    alone = cells_of(tmp_path / "alone" / "table1.json")[(SC, "bpo")]
    # A PPO column beside it (another preset) no longer makes PPO the ShortCorridor column's baseline.
    episodic_results(tmp_path / "both", SC_RUNS)
    synthetic_results(tmp_path / "both", {HOPPER: HOPPER_RUNS})
    assert analyse("table", tmp_path / "both", capsys)[0] == 0
    data = strict_load(tmp_path / "both" / "table1.json")
    assert data["baselines"] == [{"env": "Hopper-v5", "preset": "mujoco_default", "baseline": "ppo"},
                                 {"env": "ShortCorridor-v0", "preset": "short_corridor", "baseline": "reinforce"}]
    cells = cells_of(tmp_path / "both" / "table1.json")
    assert cells[(SC, "bpo")]["p"] == alone["p"] == pytest.approx(welch_p(SC_RUNS["bpo"], SC_RUNS["reinforce"]))
    assert cells[(SC, "bpo")]["mark"] == "bold" and cells[(SC, "reinforce")]["p"] is None
    assert cells[(HOPPER, "bpo_c1.0_rho1.5")]["p"] == pytest.approx(
        welch_p(HOPPER_RUNS["bpo_c1.0_rho1.5"], HOPPER_RUNS["ppo"]))
    md = (tmp_path / "both" / "table1.md").read_text()
    assert ("Welch's t-test (one-sided) of each row against the baseline row of its column (REINFORCE in "
            "ShortCorridor-v0 (short_corridor); PPO in Hopper-v5 (default))") in md
    assert ("rliable's IQM and probability of improvement compare rows with REINFORCE across the columns tested "
            "against it; left out: Hopper-v5 (default) (tested against PPO).") in md
    assert strict_load(tmp_path / "both" / "aggregates.json")["tasks"] == [list(SC)]


def test_a_column_without_its_baseline_row_is_untested_not_an_error(tmp_path, capsys):
    synthetic_results(tmp_path / "one", {HOPPER: HOPPER_RUNS})
    synthetic_results(tmp_path / "two", {HOPPER: HOPPER_RUNS, ("Ant-v5", "mujoco_gsde"): {
        "bpo_c1.0_rho1.5": [2000.0, 2100.0, 2300.0]}})
    assert analyse("table", tmp_path / "one", capsys)[0] == 0
    assert analyse("table", tmp_path / "two", capsys)[0] == 0
    one, two = cells_of(tmp_path / "one" / "table1.json"), cells_of(tmp_path / "two" / "table1.json")
    assert two[(HOPPER, "bpo_c1.0_rho1.5")]["p"] == one[(HOPPER, "bpo_c1.0_rho1.5")]["p"]
    ant = two[(("Ant-v5", "mujoco_gsde"), "bpo_c1.0_rho1.5")]
    assert ant["p"] is None and ant["mark"] == "" and ant["mean"] == pytest.approx(2133.333333)
    note = ("Not tested: no PPO or A2C or REINFORCE row in Ant-v5 (gSDE), so its cells carry no p-value and no mark "
            "(`bpo table --baseline ROW` tests them against another of their rows).")
    assert note in strict_load(tmp_path / "two" / "table1.json")["notes"]
    assert f"**{note}**" in (tmp_path / "two" / "table1.md").read_text()
    # A --baseline that no column has is a typo: an error, not an untested table.
    code, err = analyse("table", tmp_path / "two", capsys, "--baseline", "bpo_c9")
    assert code == 2 and err[0].startswith("error: baseline row 'bpo_c9' not found; rows: ")
    # ... refused before --out is made, so the typo leaves nothing behind.
    code, err = analyse("table", tmp_path / "two", capsys, "--baseline", "bpo_c9", "--out", str(tmp_path / "new"))
    assert code == 2 and err[0].startswith("error: baseline row 'bpo_c9' not found") and not (tmp_path / "new").exists()


# A seed whose final return is NaN.
NAN_RUNS = {"ppo": [1000.0, 1100.0, math.nan, 1200.0, 1050.0], "bpo_c1.0_rho1.5": [1500.0, 1600.0, 1700.0, 1400.0]}


def test_a_nan_final_return_is_counted_and_left_out_of_the_statistics(tmp_path, capsys):
    synthetic_results(tmp_path, {HOPPER: NAN_RUNS, ("Walker2d-v5", "mujoco_default"): HOPPER_RUNS})
    # A strict writer puts null where the NaN is: the same.
    edit_json(tmp_path / "Walker2d-v5" / "mujoco_default" / "ppo" / "summary.json",
              lambda d: d.update(final_eval_returns=[*d["final_eval_returns"][:3], None], seeds=4, final_mean=None))
    code, err = analyse("table", tmp_path, capsys)
    assert code == 0, err
    cells = cells_of(tmp_path / "table1.json")
    finite = [1000.0, 1100.0, 1200.0, 1050.0]
    ppo = cells[(HOPPER, "ppo")]
    assert (ppo["n"], ppo["not_finite"], ppo["values"][2]) == (4, 1, None)
    assert ppo["mean"] == pytest.approx(np.mean(finite)) and ppo["sd"] == pytest.approx(np.std(finite, ddof=1))
    bpo = cells[(HOPPER, "bpo_c1.0_rho1.5")]
    assert bpo["p"] == pytest.approx(welch_p(NAN_RUNS["bpo_c1.0_rho1.5"], finite)) and bpo["mark"] == "bold"
    walker = cells[(("Walker2d-v5", "mujoco_default"), "ppo")]
    assert (walker["n"], walker["not_finite"]) == (3, 1)
    md = (tmp_path / "table1.md").read_text()
    assert "1088 ± 43 (SD 85) [1 of 5 seeds NaN]" in md
    assert ("left out of the means, SDs, SEs, tests and rliable's aggregates (n counts the other seeds): Hopper-v5 "
            "(default) PPO: 1 of 5; Walker2d-v5 (default) PPO: 1 of 4.") in md
    aggregates = strict_load(tmp_path / "aggregates.json")
    assert all(math.isfinite(v["point"]) for v in aggregates["iqm"].values())
    assert aggregates["runs_by_task"]["ppo"] == [4, 3]  # Hopper, Walker: the finite seeds


def test_a_cell_whose_seeds_are_all_nan_and_undefined_tests_are_null_in_json(tmp_path, capsys):
    synthetic_results(tmp_path, {HOPPER: {"ppo": [500.0, 500.0, 500.0], "bpo_c1.0_rho1.5": [500.0, 500.0, 500.0],
                                          "bpo_c1.0_rho1.0": [math.nan, math.nan]}})
    assert analyse("table", tmp_path, capsys)[0] == 0
    cells = cells_of(tmp_path / "table1.json")  # strict: no bare NaN anywhere
    capped = cells[(HOPPER, "bpo_c1.0_rho1.5")]  # every seed at the cap: the test is undefined
    assert capped["p"] is None and capped["p_holm"] is None and capped["sd"] == 0.0
    lost = cells[(HOPPER, "bpo_c1.0_rho1.0")]
    assert (lost["n"], lost["not_finite"], lost["mean"], lost["values"]) == (0, 2, None, [None, None])
    assert "| BPO (c̄, ρ̄ = 1.0, 1.0) | all 2 seeds NaN |" in (tmp_path / "table1.md").read_text()
    strict_load(tmp_path / "aggregates.json")


def test_reproduce_lists_what_its_plot_and_table_skipped(tmp_path, capsys):
    """``bpo reproduce`` of a tiny sweep (two runs trained for real), then again with a foreign
    run directory dropped into its folder and one run's curve cut off: the sweep keeps its finished
    runs, the plot and the table are made from what can be used, and each skip is one line."""
    sweep_file = tmp_path / "tiny.py"
    sweep_file.write_text("from experiments.sweep import Grid, Sweep\n\n"
                          "SWEEP = Sweep(name='tiny', grids=(Grid(\n"
                          "    preset='short_corridor', variants=('reinforce', 'bpo'),\n"
                          "    fixed=(('episodes', 20), ('eval_every', 10), ('eval_episodes', 3)), seeds=2),))\n")
    out = tmp_path / "tiny"
    argv = ["reproduce", str(sweep_file), "--out", str(out), "--no-progress", "--workers", "1"]
    assert main(argv) == 0
    (out / "by-hand").mkdir()
    (out / "by-hand" / "summary.json").write_text("")
    drop_last_row(out / "ShortCorridor-v0-short_corridor-bpo" / "curve.csv")
    capsys.readouterr()
    assert main(argv) == 1
    captured = capsys.readouterr()
    assert "0 to run" in captured.out and "| REINFORCE |" in captured.out
    assert captured.err.splitlines() == [
        f"bpo reproduce: skipped {out / 'by-hand'}: summary.json: empty",
        f"bpo reproduce: skipped {out / 'ShortCorridor-v0-short_corridor-bpo'}: curve.csv: seed 1 has 2 evaluations, "
        "seed 0 3 (cut off?)",
        "bpo reproduce: 2 run directories skipped (listed above); the outputs are made from the other runs; exit "
        "code 1 (--allow-skipped: 0)"]
    assert main([*argv, "--allow-skipped"]) == 0


def test_run_directories_linked_into_a_results_folder_are_read_once(classic, tmp_path, capsys):
    """A results folder gathered by hand with links to run folders kept elsewhere: every linked run
    is in the table (they were left out without a word), and a folder reached twice (two links to
    it, a link back up) is read once."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (classic / VICTIM).rename(elsewhere / VICTIM)
    (classic / "linked").symlink_to(elsewhere / VICTIM, target_is_directory=True)
    (classic / "linked-again").symlink_to(elsewhere / VICTIM, target_is_directory=True)
    (classic / "up").symlink_to(classic, target_is_directory=True)
    runs, skipped = reader.scan(classic)
    assert len(runs) == 4 and not skipped
    assert sorted(r.run_id for r in runs if r.row == "bpo") == ["CartPole-v1-cartpole_ppo-bpo", "linked"]
    code, err = analyse("table", classic, capsys)
    assert code == 0, err
    cells = json.loads((classic / "table1.json").read_text())["cells"]
    assert sorted((c["env"], c["row"], c["n"]) for c in cells) == [
        ("CartPole-v1", "bpo", 10), ("CartPole-v1", "ppo", 10), ("Pendulum-v1", "bpo", 10), ("Pendulum-v1", "ppo", 10)]


def test_a_spec_setting_for_a_section_the_run_does_not_have_is_not_a_disagreement(classic, capsys):
    """Sweeps before session 61 recorded every --set in each run's spec, also a BPO setting over a
    PPO run, which the run does not read: such a spec is the run's own, and a table reads it (the
    check of session 61 first took it for another run's, and a sweep would have redone the run)."""
    spec = classic / "Pendulum-v1-pendulum_ppo-ppo" / "spec.json"
    edit_json(spec, lambda d: d.update(overrides=[["bpo.q_hidden", [32, 32]], ["bpo.mu_lr", 0.0005]]))
    assert reader.scan(classic)[1] == []
    assert analyse("table", classic, capsys)[0] == 0
