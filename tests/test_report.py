"""``bpo report``: the results pages' blocks are made from the results (checked against numbers
computed here by hand from the synthetic runs), ``--check`` catches a page that drifted, and the
committed pages match the committed results. Also the ``mujoco_default_authors`` preset and its
place beside the paper's default column."""

from __future__ import annotations

import dataclasses
import json
import math
import re
import shutil
from pathlib import Path

import pytest
from scipy import stats

from bpo.config.presets import PAPER_COLUMNS, PAPER_TABLE1, best_bpo_row, get_preset, paper_setting
from bpo.infra.results import read_summary
from experiments import store
from experiments.cli import main
from experiments.common import provenance_notes, setting_label, sort_settings
from experiments.report import PAGES, _mean_se, render, report, table_problem, verdict_lines
from experiments.store import build_index
from experiments.sweep import expand, load_sweep

from synthetic_results import exact_sample, provenance_record, synthetic_results

ROOT = Path(__file__).resolve().parent.parent
HC, HCA = ("HalfCheetah-v5", "mujoco_default"), ("HalfCheetah-v5", "mujoco_default_authors")


def _flat(obj, prefix=""):
    out = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            out.update(_flat(value, f"{prefix}{f.name}."))
        else:
            out[f"{prefix}{f.name}"] = value
    return out


def test_authors_preset_is_table_4_with_every_setting_of_the_authors_code():
    table4, authors = _flat(get_preset("mujoco_default")), _flat(get_preset("mujoco_default_authors"))
    differ = {k: (table4[k], authors[k]) for k in table4 if table4[k] != authors[k]}
    # Their configs.yaml (mujoco_ppo, ppo_bpo_zero1.0_1.5) and what their bpo.py fixes in code.
    assert differ == {"preset": ("mujoco_default", "mujoco_default_authors"),
                      "ppo.normalize_observations": (True, False), "ppo.log_std_init": (-1.0, 0.0),
                      "ppo.ortho_gains": ("sb3", "unit"), "ppo.vf_coef": (0.5, 1.0),
                      "returns.advantage": ("eq11", "authors"), "bpo.ppo_ent_coef": (None, 0.0),
                      "bpo.mu_ent_coef": (0.0, 0.001), "bpo.fqe_loss": ("paper", "authors"),
                      "bpo.q_hat_head": ("linear", "softplus"), "bpo.q_init": ("lecun", "orthogonal"),
                      "bpo.td_weight_clip": (False, True)}
    # Compared with (and its ablations based on) the paper's default column.
    assert paper_setting(*HCA) == HC and paper_setting(*HC) == HC
    assert best_bpo_row(*HCA) == best_bpo_row(*HC) == "bpo_c1.0_rho1.5"
    assert sort_settings([HCA, ("Hopper-v5", "mujoco_default"), HC]) == [HC, HCA, ("Hopper-v5", "mujoco_default")]


def test_the_authors_code_preset_is_their_configuration_with_their_bugs_on():
    """``mujoco_authors_code``: ``mujoco_default_authors`` and the five switches of their code's
    bugs (docs/authors_code.md rows 14, 15, 17, 21, 22), nothing else; compared with the paper's
    default column."""
    config, code = _flat(get_preset("mujoco_default_authors")), _flat(get_preset("mujoco_authors_code"))
    differ = {k: (config[k], code[k]) for k in config if config[k] != code[k]}
    assert differ == {"preset": ("mujoco_default_authors", "mujoco_authors_code"),
                      "bpo.q_hat_reward": ("r_hat", "last_q_batch_reward"), "bpo.mu_q_hat_batch_min": (False, True),
                      "bpo.mu_q_hat_unclipped_actions": (False, True), "bpo.replay_epoch_filled_only": (False, True),
                      "bpo.fqe_unclipped_actions": (False, True)}
    assert paper_setting("HalfCheetah-v5", "mujoco_authors_code") == HC


def test_the_authors_gsde_presets_are_tables_3_and_5_with_their_settings_and_bugs():
    """``mujoco_gsde_authors``: their mujoco_ppo_gsde block merged with ppo_bpo_zero1.0_1.5 (docs/
    authors_code.md, "The authors' gSDE preset"): Table 3 with their "gSDE" (row 13), whole time
    steps (row 26), no Table 5 changes (row 25) and the settings their code fixes; mu's entropy
    weight stays 0 (theirs is PPO's, 0 in this block). ``mujoco_gsde_authors_code`` adds the five
    bug switches, as ``mujoco_authors_code`` does. Both are compared with the paper's gSDE column."""
    for env, table5 in (("HalfCheetah-v5", {"ppo.log_std_init": (-2.0, -1.0)}),
                        ("Ant-v5", {})):  # Table 5 on Ant: no observation normalisation, as theirs
        paper, authors = _flat(get_preset("mujoco_gsde", env)), _flat(get_preset("mujoco_gsde_authors", env))
        differ = {k: (paper[k], authors[k]) for k in paper if paper[k] != authors[k]}
        assert differ == {"preset": ("mujoco_gsde", "mujoco_gsde_authors"), **table5,
                          **({"ppo.normalize_observations": (True, False)} if env == "HalfCheetah-v5" else {}),
                          "ppo.sde_features": ("latent", "constant"), "ppo.vf_coef": (0.5, 1.0),
                          "ppo.ortho_gains": ("sb3", "unit"), "ppo.whole_step_minibatches": (False, True),
                          "returns.advantage": ("eq11", "authors"), "bpo.ppo_ent_coef": (None, 0.0),
                          "bpo.fqe_loss": ("paper", "authors"), "bpo.q_hat_head": ("linear", "softplus"),
                          "bpo.q_init": ("lecun", "orthogonal"), "bpo.td_weight_clip": (False, True)}, env
        code = _flat(get_preset("mujoco_gsde_authors_code", env))
        bugs = {k: (authors[k], code[k]) for k in authors if authors[k] != code[k]}
        default_bugs = _flat(get_preset("mujoco_authors_code"))
        assert bugs == {k: (authors[k], default_bugs[k]) if k != "preset" else ("mujoco_gsde_authors",
                                                                               "mujoco_gsde_authors_code")
                        for k in bugs} and len(bugs) == 6
        for preset in ("mujoco_gsde_authors", "mujoco_gsde_authors_code"):
            assert paper_setting(env, preset) == (env, "mujoco_gsde")
            assert best_bpo_row(env, preset) == best_bpo_row(env, "mujoco_gsde")


def test_every_preset_set_beside_a_paper_column_has_a_column_name():
    """A table of an authors' preset heads its column with a name a reader knows, never the raw
    preset name, and no two presets share one."""
    names = {setting_label(("Ant-v5", preset)) for preset in (*PAPER_COLUMNS, *set(PAPER_COLUMNS.values()))}
    assert len(names) == len(PAPER_COLUMNS) + len(set(PAPER_COLUMNS.values()))
    assert not any("mujoco_" in name for name in names), names
    assert setting_label(("Ant-v5", "mujoco_gsde_authors_code")) == "Ant-v5 (gSDE, authors' code)"


def test_headline_sweep_is_the_papers_cell_in_both_settings():
    specs = expand(load_sweep("headline"))
    cells = {(s.preset, s.variant): s.config() for s in specs}
    assert set(cells) == {(p, v) for p in ("mujoco_default", "mujoco_default_authors")
                          for v in ("ppo", "bpo_c1.0_rho1.5")}
    for (preset, _), cfg in cells.items():
        assert (cfg.env, cfg.total_timesteps, cfg.seeds) == ("HalfCheetah-v5", 1_500_000,
                                                             15 if preset == "mujoco_default" else 10)
    bpo = cells[("mujoco_default", "bpo_c1.0_rho1.5")]
    assert (bpo.algo, bpo.returns.c_bar, bpo.returns.rho_bar) == ("bpo", 1.0, 1.5)


FINALS = {HC: {"ppo": exact_sample(3000, 600, 5, 1), "bpo_c1.0_rho1.5": exact_sample(4000, 400, 5, 2)},
          HCA: {"ppo": exact_sample(800, 100, 3, 3), "bpo_c1.0_rho1.5": exact_sample(1100, 60, 3, 4)}}


@pytest.fixture
def headline_results(tmp_path):
    results = tmp_path / "results"
    prov = {(*s, v): provenance_record("feedc0de") for s, rows in FINALS.items() for v in rows}
    synthetic_results(results / "headline", FINALS, prov)
    assert main(["table", str(results / "headline"), "--bootstrap-reps", "200"]) == 0
    return results


def _row(text: str, setting: str, row: str) -> list[str]:
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[:2] == [setting, row]:
            return cells
    raise AssertionError(f"no line for {setting} / {row}")


def test_headline_block_puts_ours_beside_the_papers_cell(headline_results):
    page = "intro\n<!-- results:headline-vs-paper -->\nold text\n<!-- /results -->\nafter\n"
    text = render(page, headline_results)
    assert text.startswith("intro\n<!-- results:headline-vs-paper -->\n")
    assert text.endswith("<!-- /results -->\nafter\n")
    assert "old text" not in text and "code feedc0de" in text
    paper_ppo, paper_bpo = PAPER_TABLE1[HC]["ppo"], PAPER_TABLE1[HC]["bpo_c1.0_rho1.5"]
    for setting, label in ((HC, "HalfCheetah-v5 (default)"), (HCA, "HalfCheetah-v5 (default, authors' config)")):
        for row, name, paper in (("ppo", "PPO", paper_ppo), ("bpo_c1.0_rho1.5", "BPO (c̄, ρ̄ = 1.0, 1.5)", paper_bpo)):
            values = FINALS[setting][row]
            n, mean, sd = len(values), values.mean(), values.std(ddof=1)
            cells = _row(text, label, name)
            assert cells[2] == f"{mean:.0f} ± {sd / math.sqrt(n):.0f} (SD {sd:.0f}), {n}"
            # The paper's column is its default one for both settings, its ± an SD over 10 runs.
            assert cells[4] == f"{paper[0]} (SD {paper[1]})" and cells[5] == f"{mean - paper[0]:+.0f}"
            p = stats.ttest_ind_from_stats(mean, sd, n, paper[0], paper[1], 10, equal_var=False).pvalue
            assert cells[6] == ("< 0.001" if p < 0.0005 else f"{p:.3f}")
        ppo, bpo = FINALS[setting]["ppo"], FINALS[setting]["bpo_c1.0_rho1.5"]
        p_bpo = stats.ttest_ind(bpo, ppo, equal_var=False, alternative="greater").pvalue
        assert _row(text, label, "BPO (c̄, ρ̄ = 1.0, 1.5)")[3] == f"{p_bpo:.3f}"
        assert _row(text, label, "PPO")[3] == "–"


def test_the_table1_campaign_block_waits_for_a_column_then_sets_it_beside_the_paper(tmp_path):
    results = tmp_path / "results"
    page = "<!-- results:table1-vs-paper -->\n<!-- /results -->\n"
    assert "No cell tabulated yet" in render(page, results)
    prov = {(*HC, v): provenance_record("feedc0de") for v in FINALS[HC]}
    synthetic_results(results / "table1", {HC: FINALS[HC]}, prov)
    assert main(["table", str(results / "table1"), "--bootstrap-reps", "200"]) == 0
    text = render(page, results)
    ppo, bpo = FINALS[HC]["ppo"], FINALS[HC]["bpo_c1.0_rho1.5"]
    paper = PAPER_TABLE1[HC]["bpo_c1.0_rho1.5"]
    cells = _row(text, "HalfCheetah-v5 (default)", "BPO (c̄, ρ̄ = 1.0, 1.5)")
    assert cells[4] == f"{paper[0]} (SD {paper[1]})" and cells[5] == f"{bpo.mean() - paper[0]:+.0f}"
    # The verdict line: the difference from PPO and its Welch interval, as scipy gives them.
    diff = bpo.mean() - ppo.mean()
    interval = stats.ttest_ind(bpo, ppo, equal_var=False).confidence_interval(0.95)
    verdict = [line for line in text.splitlines() if line.startswith("| HalfCheetah-v5 (default) | BPO")][-1]
    assert f"| {diff:+.0f} [{interval.low:+.0f}, {interval.high:+.0f}] |" in verdict and "code feedc0de" in text
    # The README's line says how far the campaign is while it runs.
    glance = "<!-- results:glance -->\n<!-- /results -->\n"
    assert "**Table 1 at the paper's budget** (" in render(glance, results)
    (results / "table1" / "PROGRESS.md").write_text("in progress\n")
    assert ("**Table 1 at the paper's budget**, a campaign at 2 of 25 cells ([progress](results/table1/PROGRESS.md)) ("
            in render(glance, results))


def _page(tmp_path: Path, results: Path, text: str) -> tuple[Path, list[str]]:
    """A repository root of one page, docs/reproduction.md holding ``text``, and the arguments of
    ``bpo report`` over ``results`` into it."""
    root = tmp_path / "repo"
    (root / "docs").mkdir(parents=True)
    page = root / "docs" / "reproduction.md"
    page.write_text(text)
    return page, ["report", "--results", str(results), "--root", str(root)]


def test_report_rewrites_drifted_blocks_and_check_fails_until_then(headline_results, tmp_path, capsys):
    page, args = _page(tmp_path, headline_results, "# R\n<!-- results:headline -->\nstale\n<!-- /results -->\n"
                                                   "<!-- results:fig2 -->\n<!-- /results -->\n")
    assert main([*args, "--check"]) == 1
    assert "docs/reproduction.md differs" in capsys.readouterr().err
    assert "stale" in page.read_text()  # --check writes nothing
    assert main(args) == 0
    text = page.read_text()
    assert "Made by `bpo reproduce headline --out results/headline`" in text and "| PPO |" in text
    assert "*Not made yet: `bpo reproduce fig2 --out results/fig2`.*" in text  # no such folder
    capsys.readouterr()
    assert main([*args, "--check"]) == 0
    assert capsys.readouterr().out == f"bpo report --check: every results block matches {headline_results}\n"
    page.write_text(text + "<!-- results:nope -->\n<!-- /results -->\n")
    assert main(args) == 2 and "unknown results block 'nope'" in capsys.readouterr().err


def test_a_table_that_is_not_the_folder_s_runs_is_not_published(headline_results, tmp_path, capsys):
    """A results folder whose table1.json is another folder's, or older than its runs (a sweep that
    redid a run without ``bpo table``): ``bpo report`` refuses it, naming the file, rather than
    publishing that table under the folder's provenance."""
    page, args = _page(tmp_path, headline_results, "# R\n<!-- results:headline -->\n<!-- /results -->\n")
    assert table_problem(headline_results / "headline") is None and main(args) == 0
    summary = next((headline_results / "headline").rglob("summary.json"))
    data = json.loads(summary.read_text())
    data["final_eval_returns"][0] += 1.0  # the run redone since its table was made
    data["final_mean"] = sum(data["final_eval_returns"]) / len(data["final_eval_returns"])
    summary.write_text(json.dumps(data))
    before = page.read_text()
    capsys.readouterr()
    assert main(args) == 2
    err = capsys.readouterr().err
    table = headline_results / "headline" / "table1.json"
    assert err.startswith(f"error: {table}: its cells are not the runs of "), err
    assert "(1 differ, e.g. HalfCheetah-v5 " in err and page.read_text() == before


@pytest.mark.parametrize("damage", ["mean", "markdown"])
def test_a_table_edited_by_hand_or_another_folder_s_markdown_is_not_published(headline_results, tmp_path, capsys,
                                                                             damage):
    """The blocks publish table1.md whole and the means and p-values of table1.json's cells: a
    hand-edited mean and p-value (the cells' values untouched), or another table's table1.md, is
    refused by name, and no page is written (adversarial audit: both were published, exit 0)."""
    page, args = _page(tmp_path, headline_results, "# R\n<!-- results:headline -->\n<!-- /results -->\n"
                                                   "<!-- results:headline-vs-paper -->\n<!-- /results -->\n")
    folder = headline_results / "headline"
    if damage == "mean":
        changed = folder / "table1.json"
        data = json.loads(changed.read_text())
        data["cells"][0].update(mean=99999.0, p_greater=0.0001)
        changed.write_text(json.dumps(data))
    else:
        changed = folder / "table1.md"
        changed.write_text(changed.read_text().replace("HalfCheetah", "Hopper"))
    before = page.read_text()
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {changed}: it is not the table of the runs of "), err
    assert "allowed: the table `bpo reproduce headline` makes of them" in err and page.read_text() == before


def test_a_table_whose_statistics_differ_in_their_last_digits_is_the_folder_s(headline_results):
    """Another SciPy may compute a p-value that differs in its last digits: the table is still the
    folder's (table1.json's numbers are compared to a relative 1e-9); a change at 1e-6 is not."""
    path = headline_results / "headline" / "table1.json"
    data = json.loads(path.read_text())
    cell = next(c for c in data["cells"] if c["p"] is not None)
    original = cell["p"]
    for factor, same in ((1 + 1e-13, True), (1 + 1e-6, False)):
        cell["p"] = original * factor
        path.write_text(json.dumps(data))
        assert (table_problem(headline_results / "headline") is None) == same, factor


def test_the_table_of_a_cell_pooled_from_two_runs_with_a_nan_seed_is_the_folder_s(tmp_path):
    """A cell may pool the seeds of two runs of one configuration, and a seed's return may be NaN:
    the table of such a folder is its own (a first version of the check took it for another's)."""
    folder = tmp_path / "pool"
    folder.mkdir()
    for run in (ROOT / "results" / "classic").glob("*/summary.json"):
        shutil.copytree(run.parent, folder / run.parent.name)
    second = shutil.copytree(folder / "Pendulum-v1-pendulum_ppo-bpo", folder / "Pendulum-v1-pendulum_ppo-bpo-2")
    config = json.loads((second / "config.json").read_text())
    (second / "config.json").write_text(json.dumps({**config, "seed": 1000}))
    summary = json.loads((second / "summary.json").read_text())
    summary["final_eval_returns"][0], summary["final_mean"] = float("nan"), float("nan")
    (second / "summary.json").write_text(json.dumps(summary))
    assert main(["table", str(folder), "--bootstrap-reps", "100"]) == 0
    assert table_problem(folder) is None


def test_a_check_that_finds_no_block_fails(headline_results, tmp_path, capsys):
    """``bpo report --check`` outside the checkout (no page, or pages without blocks) compares
    nothing: an error, not "every block already matches"."""
    root = tmp_path / "elsewhere"
    root.mkdir()
    args = ["report", "--results", str(headline_results), "--root", str(root)]
    assert main([*args, "--check"]) == 2
    assert "error: root: no results block" in capsys.readouterr().err
    (root / "README.md").write_text("# a page without blocks\n")
    assert main([*args, "--check"]) == 2 and main(args) == 2


def test_committed_pages_match_the_committed_results():
    """The README and docs blocks were written by `bpo report` from results/ as committed."""
    assert any("<!-- results:" in (ROOT / p).read_text() for p in PAGES)
    assert report(ROOT / "results", ROOT, check=True) == []


def test_a_sweeps_line_says_its_marks_are_unadjusted_and_how_many_survive_holm():
    """The README's line of a folder counts the cells at an unadjusted p < alpha (bold or † in its
    table) and those still below alpha after Holm's adjustment, from table1.json's cells: A2C's
    Pendulum cell (p = 0.044, Holm 0.089) and Table 1 at 100k steps' two † cells (Holm 0.24)."""
    from experiments.report import _glance_sweep

    for name, count, kept, tests in (("a2c", 1, 0, 2), ("table1_small", 2, 0, 8)):
        cells = json.loads((ROOT / "results" / name / "table1.json").read_text())["cells"]
        held = sum(min(c["p_holm"], c["p_worse_holm"]) < 0.05 for c in cells if c.get("mark") in ("bold", "worse"))
        assert sum(c.get("mark") in ("bold", "worse") for c in cells) == count and held == kept
        line = _glance_sweep(ROOT / "results", name)
        assert "† = lower mean at unadjusted p < 0.05 (each cell's own Welch test)" in line
        assert (f"cells at unadjusted p < 0.05: {count}, of which {kept} stay significant after Holm's adjustment "
                f"over the {tests} tests") in line
    assert "no cell at unadjusted p < 0.05" in _glance_sweep(ROOT / "results", "headline")


SUMMARY_FIELDS = {"preset", "algo", "env", "seeds", "step_unit", "final_eval_returns", "final_mean", "final_sd",
                  "final_se", "env_steps", "wall_time_s", "compile_time_s", "train_steps_per_s", "eval_time_s",
                  "seed_chunk", "threads", "configs_in_program", "backend", "provenance"}


def _assert_current_summaries_of_one_code_version(where, run_dirs: list[Path]) -> list[dict]:
    """Each run's summary.json readable (``read_summary`` refuses one that is not) with today's
    fields, a BPO run's diagnostics in it, and no provenance warning across the runs (what bpo table
    and bpo plot would warn about); returns the summaries."""
    summaries = [read_summary(d) for d in run_dirs]
    for run_dir, summary in zip(run_dirs, summaries, strict=True):
        assert SUMMARY_FIELDS <= set(summary), (run_dir.name, SUMMARY_FIELDS - set(summary))
        if summary["algo"] == "bpo":
            assert summary["diagnostics"], run_dir.name
    assert provenance_notes(summaries) == [], where
    return summaries


CAMPAIGN_TABLE = {f"{stem}.{ext}" for stem in ("curves", "iqm", "optimality_gap", "performance_profile",
                                               "probability_of_improvement") for ext in ("png", "pdf")} | {
    "table1.md", "table1.tex", "table1.json", "aggregates.json"}
"""What `bpo table` and `bpo plot` write into a campaign's folder once one of its columns is whole."""


def _assert_campaign_folder(folder: Path) -> None:
    """A campaign before its last cell (results/table1/PROGRESS.md): its progress page, its own
    finished cells of one code version, and either no table or the table and curves of exactly
    those cells (remade with each committed cell, not left from fewer cells)."""
    cells = [p for p in folder.iterdir() if p.is_dir()]
    files = {p.name for p in folder.iterdir() if not p.is_dir()}
    assert files in ({"PROGRESS.md"}, {"PROGRESS.md"} | CAMPAIGN_TABLE), (folder.name, files)
    assert {p.name for p in cells} <= {spec.run_id for spec in expand(load_sweep(folder.name))}, folder.name
    for cell, summary in zip(cells, _assert_current_summaries_of_one_code_version(folder.name, cells), strict=True):
        assert len(summary["final_eval_returns"]) == summary["seeds"], cell.name
    if "table1.json" in files:
        assert table_problem(folder) is None, folder.name


def test_the_committed_results_are_finished_runs_of_today_s_sweep_files():
    """`bpo reproduce NAME --out results/NAME` redoes nothing: every run of today's sweep file is in
    its folder and holds today's configuration (``store.is_finished``), and so is every cell the
    Table 1 campaign has committed. A config field added without a default that keeps the old
    behaviour (``COMPATIBLE_ADDITIONS``) fails here, before it silently turns hours of committed
    runs into runs to redo."""
    folders = sorted(p.parent for p in (ROOT / "results").glob("*/sweep.json"))
    campaigns = sorted(p.parent for p in (ROOT / "results").glob("*/PROGRESS.md") if p.parent not in folders)
    for folder in folders + campaigns:
        specs = expand(load_sweep(folder.name))
        present = [s for s in specs if (folder / s.run_id).is_dir()]
        assert folder in campaigns or present == specs, (folder.name, sorted({s.run_id for s in specs} - set(present)))
        stale = [s.run_id for s in present if not store.is_finished(folder, s)]
        assert not stale, (folder.name, stale)


def test_every_committed_run_has_the_current_summary_and_one_code_version_per_folder():
    folders = sorted(p.parent for p in (ROOT / "results").glob("*/sweep.json"))
    assert {f.name for f in folders} >= {"fig2", "classic", "table1_small", "mujoco_small"}
    for folder in folders:
        runs = [r for r in build_index(folder)["runs"] if r["status"] == "finished"]
        assert runs, folder
        _assert_current_summaries_of_one_code_version(folder, [folder / r["run_id"] for r in runs])
    variance = json.loads((ROOT / "results" / "variance" / "summary.json").read_text())
    assert variance["provenance"]["code_version"]
    # Nothing under results/ that no command makes: sweep folders, the variance folder, and the
    # authors' code beside ours (benchmarks/authors_differential.py and authors_reference.py).
    campaigns = {p.parent.name for p in (ROOT / "results").glob("*/PROGRESS.md")}  # a campaign's first columns
    assert {p.name for p in (ROOT / "results").iterdir()} == ({f.name for f in folders} | {"variance",
                                                                                        "authors_reference"}
                                                                | campaigns)
    for name in campaigns - {f.name for f in folders}:  # before its last cell: see _assert_campaign_folder
        _assert_campaign_folder(ROOT / "results" / name)
    reference = ROOT / "results" / "authors_reference"
    for path in (p for p in reference.rglob("*") if p.is_file()):
        name = path.relative_to(reference).as_posix()
        assert re.fullmatch(r"differential(_[a-z0-9]+)?\.md|their_code/(bpo|ppo)/seed\d+\.json", name), name
        if name.endswith(".json"):
            record = json.loads(path.read_text())
            assert record["format"] == "bpo-authors-reference-seed/1" and record["finished"], name
            last = record["evaluations"][-1]["returns"]
            assert record["final_return"] == sum(last) / len(last), name


def test_a2c_reference_block_sets_our_curve_beside_the_reference_by_hand(tmp_path):
    """Two seeds on each side with known evaluations: the block's points, means, interval and p
    are those of a hand computation (Welch from the values with SciPy)."""
    from experiments.report import A2C_REFERENCE, a2c_reference_block

    name, file, run = A2C_REFERENCE
    folder = tmp_path / name
    (folder / run).mkdir(parents=True)
    ours = {0: {100_000: 400.0, 500_000: 500.0}, 1: {100_000: 300.0, 500_000: 480.0}}
    lines = ["step,seed,eval_return"] + [f"{st},{s},{v}" for s, c in ours.items() for st, v in c.items()]
    (folder / run / "curve.csv").write_text("\n".join(lines) + "\n")
    (folder / run / "summary.json").write_text("{}")
    ref = {"stable_baselines3": "2.x", "runs": [{"steps": [100_000, 500_000], "eval_return": [200.0, 500.0]},
                                               {"steps": [100_000, 500_000], "eval_return": [250.0, 400.0]}]}
    (folder / file).write_text(json.dumps(ref))
    text = a2c_reference_block(tmp_path)
    assert "| ours (`cartpole_a2c`, A2C) | 350 ± 50 | – | – | – | 490 ± 10 |" in text
    assert "| Stable-Baselines3 2.x A2C | 225 ± 25 | – | – | – | 450 ± 50 |" in text
    t = stats.ttest_ind([500.0, 480.0], [500.0, 400.0], equal_var=False)
    assert f"p = {t.pvalue:.2f}" in text or f"p = {t.pvalue:.3f}" in text
    low, high = t.confidence_interval(0.95)
    assert f"[{low:+.1f}, {high:+.1f}]" in text and "ours − reference +40.0" in text
    assert "within the range of the reference's seeds" in text


def test_a_folder_without_a_baseline_row_gets_a_line_without_a_test():
    """``results/authors_code`` holds one BPO cell and no PPO row: its line gives the cell and says
    there is no test (it raised on the missing baseline before)."""
    from experiments.report import _glance_sweep

    line = _glance_sweep(ROOT / "results", "authors_code")
    assert "no baseline row in the folder, so no test" in line and "Welch" not in line
    assert "BPO (c̄, ρ̄ = 1.0, 1.5) 3329 ± 319" in line


def test_verdict_lines_take_a_single_seed_an_empty_cell_and_a_two_sided_table():
    """A baseline of one seed (no SD) and a row whose seeds are all NaN are written as the table
    writes them ('–', 'all 3 seeds NaN'), not a traceback; the 'one-sided Welch p' column is the
    one-sided p even when the table was made two-sided."""
    nan = math.nan
    cells = {(HC, "ppo"): {"mean": 5000.0, "sd": nan, "se": nan, "n": 1, "not_finite": 0, "p_greater": None},
             (HC, "bpo_c1.0_rho1.5"): {"mean": 5200.0, "sd": 300.0, "se": 173.2, "n": 3, "not_finite": 0,
                                       "p": 0.9, "p_greater": 0.45},
             (HC, "bpo_traj_c1.0"): {"mean": nan, "sd": nan, "se": nan, "n": 0, "not_finite": 3, "p_greater": None}}
    lines = verdict_lines(cells, [HC], "ppo")
    row = next(line for line in lines if "BPO (c̄, ρ̄ = 1.0, 1.5)" in line)
    assert "| 3, 1 | +200 [–, –] | 0.450 | +1222 | – |" in row, row  # a difference, no interval or power
    assert _mean_se(cells[(HC, "bpo_traj_c1.0")]) == "all 3 seeds NaN" and _mean_se(cells[(HC, "ppo")]) == "5000"
    assert "0.900" not in row  # the two-sided p is not what the column says
