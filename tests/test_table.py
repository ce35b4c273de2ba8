"""Table 1 from synthetic results whose means and Welch p-values are known by construction: the
right cells are bold, italic or † (lower mean at an unadjusted p < 0.05), in Markdown, LaTeX and JSON, with the SD
beside the SE, Holm's adjustment against a hand computation, the paper's numbers (as SD over 10
runs), known optima and the runs beside them; runs with the paper's exact means and SDs give the
paper's 20 marks; rliable's aggregates against a plain computation, with honest intervals and
axes at small n; provenance warnings when a folder mixes code or MuJoCo versions."""

import json
import math
import time
import warnings

import numpy as np
import pytest
from matplotlib.figure import Figure
from matplotlib.text import Text
from scipy import stats

from bpo.config.presets import PAPER_TABLE1, apply_variant, get_preset
from bpo.config.schema import replace, with_bpo
from experiments.aggregates import improvement_figure, iqm_figure, newcombe_interval
from experiments.cli import main
from experiments.common import (
    holm,
    one_sample_t,
    provenance_notes,
    save_figure,
    welch_interval,
    welch_p,
    welch_p_from_stats,
    welch_power,
)
from experiments.table import (
    compute_paper_table,
    compute_table,
    legend,
    mark,
    multiple_comparisons,
    to_latex,
    to_markdown,
)

from synthetic_results import exact_sample, fake_run, provenance_record, synthetic_results


def sample(mean: float, sd: float, n: int) -> np.ndarray:
    """n values with exactly this sample mean and sample standard deviation."""
    z = np.arange(n) - (n - 1) / 2
    return mean + sd * z / z.std(ddof=1)


def welch_reference(m1, s1, n1, m2, s2, n2, alternative="greater") -> float:
    """Welch's t-test written out: t, the Welch-Satterthwaite degrees of freedom, the t tail."""
    v1, v2 = s1 ** 2 / n1, s2 ** 2 / n2
    t = (m1 - m2) / math.sqrt(v1 + v2)
    df = (v1 + v2) ** 2 / (v1 ** 2 / (n1 - 1) + v2 ** 2 / (n2 - 1))
    return float(stats.t.sf(t, df)) if alternative == "greater" else float(2 * stats.t.sf(abs(t), df))


def mean_for_p(p: float, base_mean=1000.0, sd=100.0, n=10) -> float:
    """The row mean whose one-sided Welch p against (base_mean, sd, n) is p, for equal sd and n."""
    se = math.sqrt(2 * sd ** 2 / n)
    return base_mean + stats.t.isf(p, 2 * n - 2) * se


# Column A: equal n and sd, means placed at chosen p-values around 0.05. Column B: unequal n and sd.
HOPPER, ANT = ("Hopper-v5", "mujoco_default"), ("Ant-v5", "mujoco_gsde")
CELLS = {
    HOPPER: {
        "ppo": sample(1000, 100, 10),
        "bpo_c1.5_rho1.5": sample(mean_for_p(0.001), 100, 10),  # bold
        "bpo_c1.0_rho1.0": sample(mean_for_p(0.049), 100, 10),  # bold (just)
        "bpo_c1.0_rho1.5": sample(mean_for_p(0.051), 100, 10),  # italic (just)
        "bpo_traj_c1.0": sample(900, 100, 10),  # worse, one-sided p (lower mean) ~ 0.019: †
    },
    ANT: {
        "ppo": sample(500, 50, 5),
        "bpo_c1.5_rho1.5": sample(600, 200, 8),  # p ~ 0.1: italic
        "bpo_c1.0_rho1.0": sample(700, 60, 4),  # p ~ 0.002: bold
        "bpo_c1.0_rho1.5": sample(500, 80, 6),  # equal mean: not an improvement
    },
}
EXPECTED = {
    (HOPPER, "bpo_c1.5_rho1.5"): "bold", (HOPPER, "bpo_c1.0_rho1.0"): "bold", (HOPPER, "bpo_c1.0_rho1.5"): "italic",
    (HOPPER, "bpo_traj_c1.0"): "worse", (HOPPER, "ppo"): "",
    (ANT, "bpo_c1.5_rho1.5"): "italic", (ANT, "bpo_c1.0_rho1.0"): "bold", (ANT, "bpo_c1.0_rho1.5"): "",
    (ANT, "ppo"): "",
}


def test_welch_p_matches_the_written_out_test():
    for alternative in ("greater", "two-sided"):
        for (m1, s1, n1), (m2, s2, n2) in [((600, 200, 8), (500, 50, 5)), ((1.5, 0.3, 3), (1.0, 2.0, 12))]:
            got = welch_p(sample(m1, s1, n1), sample(m2, s2, n2), alternative)
            assert got == pytest.approx(welch_reference(m1, s1, n1, m2, s2, n2, alternative), rel=1e-9)
            # From summary statistics (a table's mean ± SD): the same test.
            assert welch_p_from_stats(m1, s1, n1, m2, s2, n2, alternative) == pytest.approx(got, rel=1e-9)
    assert math.isnan(welch_p([1.0], [1.0, 2.0])) and math.isnan(welch_p_from_stats(1.0, 1.0, 1, 1.0, 1.0, 5))
    # Every seed at the same return in both rows (CartPole's cap): undefined, and no warning printed.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert math.isnan(welch_p([500.0] * 10, [500.0] * 10))


def test_marks_follow_mean_and_p():
    assert mark(2.0, 1.0, 0.01, 0.05) == "bold" and mark(2.0, 1.0, 0.2, 0.05) == "italic"
    assert mark(1.0, 1.0, 0.0, 0.05) == "" and mark(0.5, 1.0, 0.01, 0.05) == ""
    # No test (one seed, or two samples without spread): no mark; italic would say p >= alpha.
    assert mark(2.0, 1.0, math.nan, 0.05) == "" and mark(2.0, 1.0, None, 0.05) == ""
    # A loss: a lower mean with a significant test for a lower mean.
    assert mark(0.5, 1.0, 0.99, 0.05, p_worse=0.01) == "worse" and mark(0.5, 1.0, 0.9, 0.05, p_worse=0.1) == ""
    assert mark(0.5, 1.0, 0.99, 0.05, p_worse=math.nan) == "" and mark(1.0, 1.0, 0.5, 0.05, p_worse=0.01) == ""


def test_table_marks_exactly_the_right_cells():
    table = compute_table({k: {r: list(v) for r, v in rows.items()} for k, rows in CELLS.items()}, "ppo")
    assert {k: c["mark"] for k, c in table.items()} == EXPECTED
    # The constructed p-values come out as designed.
    assert table[(HOPPER, "bpo_c1.0_rho1.0")]["p"] == pytest.approx(0.049, rel=1e-6)
    assert table[(HOPPER, "bpo_c1.0_rho1.5")]["p"] == pytest.approx(0.051, rel=1e-6)
    assert table[(ANT, "bpo_c1.5_rho1.5")]["p"] == pytest.approx(welch_reference(600, 200, 8, 500, 50, 5), rel=1e-9)
    assert table[(ANT, "bpo_c1.0_rho1.0")]["se"] == pytest.approx(60 / 2)
    assert table[(ANT, "bpo_c1.0_rho1.0")]["sd"] == pytest.approx(60) and table[(ANT, "ppo")]["n"] == 5
    assert table[(ANT, "ppo")]["values"] == pytest.approx(CELLS[ANT]["ppo"])
    # The worse row: its one-sided p for a lower mean and its two-sided p, by the written-out test.
    worse = table[(HOPPER, "bpo_traj_c1.0")]
    assert worse["p_worse"] == worse["p_less"] == pytest.approx(
        welch_reference(1000, 100, 10, 900, 100, 10), rel=1e-9)  # = P(PPO's mean > this row's mean)
    assert worse["p_less"] == pytest.approx(0.0191, abs=1e-4)
    assert worse["p_two_sided"] == pytest.approx(2 * worse["p_less"], rel=1e-9)
    assert worse["p_greater"] == worse["p"] == pytest.approx(1 - worse["p_less"], rel=1e-9)
    # Two-sided: p doubles, so the cell at one-sided 0.049 loses its bold.
    two = compute_table({k: {r: list(v) for r, v in rows.items()} for k, rows in CELLS.items()}, "ppo",
                        alternative="two-sided")
    assert two[(HOPPER, "bpo_c1.0_rho1.0")]["mark"] == "italic"
    assert two[(HOPPER, "bpo_c1.5_rho1.5")]["mark"] == "bold"
    assert two[(HOPPER, "bpo_traj_c1.0")]["mark"] == "worse"  # two-sided p 0.038
    assert two[(HOPPER, "bpo_traj_c1.0")]["p_worse"] == pytest.approx(two[(HOPPER, "bpo_traj_c1.0")]["p_two_sided"])


def test_holm_matches_a_hand_computation():
    # Sorted: 0.005 x 4 = 0.02, 0.01 x 3 = 0.03, 0.03 x 2 = 0.06, 0.04 x 1 = 0.04 -> raised to 0.06.
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.6, 0.7]) == [1.0, 1.0]  # capped at 1
    adjusted = holm([0.2, None, 0.01, math.nan])  # untested cells: not counted, stay NaN
    assert adjusted[0] == pytest.approx(0.2) and adjusted[2] == pytest.approx(0.02)
    assert math.isnan(adjusted[1]) and math.isnan(adjusted[3])
    # The Hopper column: four tests with one-sided p 0.001, 0.049, 0.051 and 1 - 0.0191 (the worse row).
    table = compute_table({HOPPER: {r: list(v) for r, v in CELLS[HOPPER].items()}}, "ppo")
    p_traj = table[(HOPPER, "bpo_traj_c1.0")]["p"]
    hand = {"bpo_c1.5_rho1.5": 0.001 * 4, "bpo_c1.0_rho1.0": 0.049 * 3, "bpo_c1.0_rho1.5": 0.049 * 3,
            "bpo_traj_c1.0": p_traj}  # 0.051 x 2 = 0.102 < 0.147: raised to 0.147
    for row, expected in hand.items():
        assert table[(HOPPER, row)]["p_holm"] == pytest.approx(expected, rel=1e-5), row
    assert table[(HOPPER, "ppo")]["p_holm"] is None
    # The loss tests, a family of their own: the worse row's 0.0191 x 4 = 0.076, no longer significant.
    assert table[(HOPPER, "bpo_traj_c1.0")]["p_worse_holm"] == pytest.approx(4 * (1 - p_traj), rel=1e-9)
    mc = multiple_comparisons(table, 0.05, "greater")
    assert mc["tests"] == 4 and mc["expected_false_positives"] == pytest.approx(0.2)
    assert (mc["bold"], mc["bold_after_holm"], mc["worse"], mc["worse_after_holm"]) == (2, 1, 1, 0)
    md = to_markdown(table, [HOPPER], list(CELLS[HOPPER]), "ppo", 0.05, "greater")
    assert "Multiple comparisons: 4 tests at α = 0.05, so about 0.05 × 4 = 0.20 cells would be marked bold" in md
    assert "Still significant at α = 0.05 after Holm's adjustment: bold cells 1 of 2, † cells 0 of 1 (their" in md
    assert "| BPO (c̄, ρ̄ = 1.5, 1.5) | 0.004 |" in md  # the Holm table
    assert "Few seeds" not in md  # 10 seeds per cell


def test_two_samples_without_spread_have_no_test_interval_or_power():
    """Both constant (CartPole's cap against another constant): Welch's df is 0/0, so no p, no
    interval and no power, whether the constants are equal or not (SciPy gives p = 0 for unequal
    ones). One constant sample beside a spread one is an ordinary test."""
    assert math.isnan(welch_p([500.0] * 5, [400.0] * 5)) and math.isnan(welch_p([500.0] * 5, [500.0] * 5))
    assert math.isnan(welch_p_from_stats(500, 0, 5, 400, 0, 5))
    diff, low, high = welch_interval(500, 0, 5, 400, 0, 5)
    assert diff == 100 and math.isnan(low) and math.isnan(high) and math.isnan(welch_power(10, 0, 5, 0, 5))
    assert welch_p([1.0, 2.0, 3.0], [4.0] * 3) == pytest.approx(welch_reference(2, 1, 3, 4, 0, 3))
    table = compute_table({("CartPole-v1", "cartpole_ppo"): {"ppo": [500.0] * 5, "bpo": [400.0] * 5}}, "ppo")
    assert table[(("CartPole-v1", "cartpole_ppo"), "bpo")]["mark"] == ""


def test_a_row_at_another_budget_than_its_baseline_is_not_tested_against_it(tmp_path):
    """Pendulum's BPO run trained 20,480 steps and was evaluated on 1 episode, its PPO 102,400 and
    10: the table shows both, tests neither against the other, and says why."""
    cells = {("Pendulum-v1", "pendulum_ppo"): {"ppo": [-400.0, -380.0, -420.0],
                                               "bpo_c1.0_rho1.5": [-250.0, -240.0, -260.0]}}
    synthetic_results(tmp_path / "res", cells)
    config = next((tmp_path / "res").rglob("bpo_c1.0_rho1.5/config.json"))
    recorded = json.loads(config.read_text())
    config.write_text(json.dumps({**recorded, "total_timesteps": 20480, "eval_episodes": 1}))
    assert main(["table", str(tmp_path / "res"), "--out", str(tmp_path / "out"), "--bootstrap-reps", "100"]) == 0
    data = json.loads((tmp_path / "out" / "table1.json").read_text())
    bpo = next(c for c in data["cells"] if c["row"] == "bpo_c1.0_rho1.5")
    assert bpo["p"] is None and bpo["mark"] == ""
    assert any("Not tested against their column's baseline, whose budget or evaluation differs, and left out of "
               "rliable's aggregates: BPO (c̄, ρ̄ = 1.0, "
               "1.5) in Pendulum-v1 "
               f"(pendulum_ppo) (total_timesteps 20480 vs {recorded['total_timesteps']}, eval_episodes 1 vs "
               f"{recorded['eval_episodes']}, against PPO)." in n for n in data["notes"]), data["notes"]
    aggregates = json.loads((tmp_path / "out" / "aggregates.json").read_text())
    assert aggregates["runs_per_task"] == {"ppo": 3} and "bpo_c1.0_rho1.5" not in aggregates["iqm"]


def test_the_latex_legend_escapes_field_names_and_writes_the_bars_in_math():
    """A row named by a grid value (``bpo.use_q_hat=False``) as the baseline: its underscores are
    escaped and c-bar and rho-bar are math, as in the table's body."""
    setting, base = ("HalfCheetah-v5", "mujoco_default"), "bpo_c1.0_rho1.5 bpo.use_q_hat=False"
    table = compute_table({setting: {base: [1.0, 2.0, 3.0], "bpo_c1.0_rho1.5 bpo.use_q_hat=True": [1.0, 2.5, 2.0]}},
                          base)
    legend_line = to_latex(table, [setting], sorted({r for _, r in table}), base).splitlines()[-1]
    assert r"against BPO ($\bar{c}$, $\bar{\rho}$ = 1.0, 1.5) bpo.use\_q\_hat=False" in legend_line, legend_line
    outside_math = "".join(legend_line.split("$")[::2]).replace(r"\_", "")
    assert "_" not in outside_math and "c̄" not in legend_line, legend_line


def test_bpo_table_tests_a_sweep_folder_as_its_sweep_asks_unless_told_otherwise(tmp_path, capsys):
    """A sweep folder's sweep.json records its sweep's baseline and alternative, and ``bpo table``
    uses them where no flag is given (saying so), so that it remakes the folder's table as ``bpo
    reproduce`` made it; an older sweep.json without them is tested as the built-in sweep it names
    says; a damaged record is refused by name."""
    synthetic_results(tmp_path / "res", CELLS)
    record = {"sweep": "mine", "baseline": "bpo_c1.5_rho1.5", "alternative": "two-sided", "runs": []}
    (tmp_path / "res" / "sweep.json").write_text(json.dumps(record))

    def table(*flags):
        code = main(["table", str(tmp_path / "res"), "--out", str(tmp_path / "out"), "--bootstrap-reps", "100",
                     *flags])
        data = json.loads((tmp_path / "out" / "table1.json").read_text()) if code == 0 else {}
        return code, data.get("baseline"), data.get("alternative"), capsys.readouterr().err

    code, baseline, alternative, err = table()
    assert (code, baseline, alternative) == (0, "bpo_c1.5_rho1.5", "two-sided")
    assert "tested as sweep 'mine' asks (its sweep.json): baseline 'bpo_c1.5_rho1.5', two-sided" in err, err
    assert table("--alternative", "greater")[:3] == (0, "bpo_c1.5_rho1.5", "greater")
    code, baseline, alternative, err = table("--baseline", "ppo", "--alternative", "greater")
    assert (code, baseline, alternative) == (0, "ppo", "greater") and "tested as sweep" not in err
    (tmp_path / "res" / "sweep.json").write_text(json.dumps({"sweep": "a2c", "runs": []}))  # before the record
    assert table()[2] == "two-sided"  # experiments/sweeps/a2c.py's
    (tmp_path / "res" / "sweep.json").write_text(json.dumps({"sweep": "mine", "runs": []}))
    assert table()[1:3] == ("ppo", "greater")  # an unknown sweep, nothing recorded: the defaults
    (tmp_path / "res" / "sweep.json").write_text(json.dumps({**record, "alternative": "less"}))
    code, _, _, err = table()
    assert code == 2 and "sweep.json: alternative must be one of ['greater', 'two-sided'], got \"less\"" in err, err


def test_bpo_table_writes_marked_markdown_latex_and_aggregates(tmp_path, capsys):
    synthetic_results(tmp_path / "res", CELLS)
    assert main(["table", str(tmp_path / "res"), "--out", str(tmp_path / "out"), "--bootstrap-reps", "500"]) == 0
    md = (tmp_path / "out" / "table1.md").read_text().splitlines()
    header = [c.strip() for c in md[0].strip("|").split("|")]
    assert header[1:] == ["Ant-v5 (gSDE)", "Hopper-v5 (default)"]  # the paper's column order
    labels = {"ppo": "PPO", "bpo_c1.5_rho1.5": "BPO (c̄, ρ̄ = 1.5, 1.5)", "bpo_c1.0_rho1.0": "BPO (c̄, ρ̄ = 1.0, 1.0)",
              "bpo_c1.0_rho1.5": "BPO (c̄, ρ̄ = 1.0, 1.5)", "bpo_traj_c1.0": "BPO (traj c̄ = 1.0)"}
    body = {cells[0]: cells[1:] for cells in ([c.strip() for c in line.strip("|").split("|")] for line in md[2:7])}
    assert list(body) == list(labels.values())  # the paper's row order
    for (setting, row), expected in EXPECTED.items():
        text = body[labels[row]][header[1:].index(f"{setting[0]} ({'gSDE' if setting == ANT else 'default'})")]
        style = ("bold" if text.startswith("**") else "italic" if text.startswith("*") else
                 "worse" if text.endswith(" †") else "")
        assert style == expected, (setting, row, text)
    # Mean ± SE, then the SD; the worse row's cell carries the dagger.
    assert body["PPO"][1] == "1000 ± 32 (SD 100)" and body["BPO (traj c̄ = 1.0)"][1] == "900 ± 32 (SD 100) †"
    assert body["BPO (c̄, ρ̄ = 1.0, 1.0)"][0] == "**700 ± 30** (SD 60)"
    assert body["BPO (traj c̄ = 1.0)"][0] == "–"  # no such run on Ant
    text = "\n".join(md)
    assert ("Mean ± SE of the final evaluation return over seeds (SE = SD / √n), with the SD over seeds in "
            "parentheses.") in text
    assert ("† = lower mean with unadjusted p < 0.05 (each cell's own Welch test, one-sided test for a lower "
            "mean)") in text  # the legend: each mark is its cell's own test, and how many survive Holm's
    assert "**bold** = higher mean with unadjusted p < 0.05 (each cell's own Welch test)" in text
    mc = json.loads((tmp_path / "out" / "table1.json").read_text())["multiple_comparisons"]
    assert (mc["bold"], mc["worse"]) == (3, 1)  # EXPECTED's marks; how many survive Holm's, in the legend
    assert (f"After Holm's adjustment over the 7 tested cells, {mc['bold_after_holm']} of 3 bold cells and "
            f"{mc['worse_after_holm']} of 1 † cell stay significant at 0.05.") in text
    assert "| BPO (traj c̄ = 1.0) | – | 0.981 (0.038) |" in text  # one-sided p (two-sided p)
    assert "Multiple comparisons: 7 tests at α = 0.05, so about 0.05 × 7 = 0.35 cells" in text
    tex = (tmp_path / "out" / "table1.tex").read_text()
    assert tex.count(r"\bm{") == 3 and tex.count(r"\mathit{") == 2
    assert r"$900 \pm 32$ (SD 100)$^{\dagger}$" in tex and tex.count(r"$^{\dagger}$") == 3  # the cell, the legend twice
    assert r"Mean $\pm$ SE of the final evaluation return over seeds" in tex
    table = json.loads((tmp_path / "out" / "table1.json").read_text())
    cells = table["cells"]
    assert {c["row"]: c["mark"] for c in cells if c["env"] == "Hopper-v5"} == {
        r: m for (s, r), m in EXPECTED.items() if s == HOPPER}
    for c in cells:  # mean, SD, SE, n and the per-seed values; both p-values of each tested cell
        values = CELLS[(c["env"], c["preset"])][c["row"]]
        assert c["values"] == pytest.approx(values) and c["n"] == len(values)
        assert c["sd"] == pytest.approx(np.std(values, ddof=1))
        assert c["se"] == pytest.approx(c["sd"] / len(values) ** 0.5)
        assert (c["p_greater"] is None) == (c["p_two_sided"] is None) == (c["row"] == "ppo")
    assert table["multiple_comparisons"]["tests"] == 7 and table["notes"][0].startswith(
        "Few seeds: only 4 to 10 per cell (the paper's Table 1 used 10 runs per cell).")  # in the Markdown too, in bold
    assert f"**{table['notes'][0]}**" in text and table["notes"][1] == (
        "Note: runs have no provenance record (9 runs, written before summaries recorded the code and package "
        "versions), so whether they all come from the same code and MuJoCo version cannot be checked.")
    # Ant has fewer seeds than Hopper: the cross-task aggregates use the first runs, and say so.
    assert table["notes"][2].startswith("rliable's IQM and overall probability of improvement need equal runs")
    assert len(table["notes"]) == 3
    for name in ("iqm.png", "iqm.pdf", "probability_of_improvement.png", "probability_of_improvement.pdf"):
        assert (tmp_path / "out" / name).stat().st_size > 5000
    # The paper's Table 1 for the same cells (bpo.config.presets.PAPER_TABLE1), in the same column order,
    # labelled mean (SD) over 10 runs and marked by the same test with its ± as the SD.
    assert "The paper's Table 1 for the same cells (1.5M/2M steps): mean (SD) over 10 runs." in text
    assert "| PPO | 1106 (SD 111) | 2126 (SD 492) |" in text
    assert "| BPO (traj c̄ = 1.0) | **1400** (SD 122) | **2770** (SD 296) |" in text
    assert "| BPO (c̄, ρ̄ = 1.5, 1.5) | **1287** (SD 148) | *2143* (SD 422) |" in text
    paper = {(c["env"], c["row"]): c for c in table["paper_table1"]["cells"]}
    assert paper[("Ant-v5", "bpo_c1.5_rho1.5")]["sd"] == 148 and paper[("Ant-v5", "ppo")]["n"] == 10
    assert paper[("Ant-v5", "bpo_c1.5_rho1.5")]["se"] == pytest.approx(148 / 10 ** 0.5)
    # One line per run, with its seeds and wall time.
    assert "| Hopper-v5/mujoco_default/ppo | PPO | 10 | – | 1 | – |" in text
    assert sum(line.startswith("| Ant-v5/") or line.startswith("| Hopper-v5/") for line in md) == 9
    assert "Optimal expected return" not in text  # no MuJoCo optimum is known


def test_rliable_aggregates_match_a_plain_computation(tmp_path):
    synthetic_results(tmp_path / "res", CELLS)
    assert main(["table", str(tmp_path / "res"), "--bootstrap-reps", "200"]) == 0
    agg = json.loads((tmp_path / "res" / "aggregates.json").read_text())
    rows = ["ppo", "bpo_c1.5_rho1.5", "bpo_c1.0_rho1.0", "bpo_c1.0_rho1.5"]  # on both tasks
    assert sorted(agg["iqm"]) == sorted(rows)
    normalised = {}
    for task in (ANT, HOPPER):
        everything = np.concatenate(list(CELLS[task].values()))
        lo, hi = everything.min(), everything.max()
        for r in rows:
            normalised.setdefault(r, []).append((CELLS[task][r] - lo) / (hi - lo))
    for r in rows:
        n = min(len(x) for x in normalised[r])  # runs per task: the smallest task's count
        flat = np.concatenate([x[:n] for x in normalised[r]])
        # IQM: the mean of the middle half of all (run, task) scores.
        assert agg["iqm"][r]["point"] == pytest.approx(stats.trim_mean(flat, 0.25), rel=1e-9)
        assert agg["iqm"][r]["low"] <= agg["iqm"][r]["point"] <= agg["iqm"][r]["high"]
    for r in rows[1:]:
        # P(X > Y): over tasks, the share of (x, y) run pairs with x > y, ties counting half.
        per_task = []
        for task in (ANT, HOPPER):
            n = min(len(CELLS[t][r]) for t in (ANT, HOPPER)), min(len(CELLS[t]["ppo"]) for t in (ANT, HOPPER))
            n = min(n)
            x, y = CELLS[task][r][:n], CELLS[task]["ppo"][:n]
            per_task.append(np.mean([(a > b) + 0.5 * (a == b) for a in x for b in y]))
        assert agg["probability_of_improvement"][r]["point"] == pytest.approx(np.mean(per_task), rel=1e-9)
        # Each task's own P(X > Y) uses every run of that task.
        for task, entry in zip((ANT, HOPPER), agg["probability_of_improvement"][r]["per_task"], strict=True):
            x, y = CELLS[task][r], CELLS[task]["ppo"]
            assert entry["point"] == pytest.approx(np.mean([(a > b) + 0.5 * (a == b) for a in x for b in y]))
            assert entry["runs"] == [len(x), len(y)]


def test_aggregates_use_every_seed_per_task_and_say_which_runs_the_cross_task_ones_use(tmp_path, capsys):
    """The headline's shape: 5 seeds per row on one task, 3 on the other. The task with 5 seeds gets
    its probability of improvement from all 25 pairs; rliable's cross-task aggregates use the first
    3 runs of each task, and the output, the table and aggregates.json say so."""
    rng = np.random.default_rng(7)
    cells = {ANT: {"ppo": rng.normal(0, 1, 5), "bpo_c1.0_rho1.5": rng.normal(0.5, 1, 5)},
             HOPPER: {"ppo": rng.normal(0, 1, 3), "bpo_c1.0_rho1.5": rng.normal(0.5, 1, 3)}}
    synthetic_results(tmp_path / "res", cells)
    assert main(["table", str(tmp_path / "res"), "--bootstrap-reps", "200"]) == 0
    agg = json.loads((tmp_path / "res" / "aggregates.json").read_text())
    ant = agg["probability_of_improvement"]["bpo_c1.0_rho1.5"]["per_task"][0]
    x, y = cells[ANT]["bpo_c1.0_rho1.5"], cells[ANT]["ppo"]
    assert ant["runs"] == [5, 5]
    assert ant["point"] == pytest.approx(np.mean([(a > b) + 0.5 * (a == b) for a in x for b in y]))
    assert agg["runs_by_task"]["ppo"] == [5, 3] and agg["runs_per_task"]["ppo"] == 3
    note = "bpo_c1.0_rho1.5 uses the first 3 runs of each task (Ant-v5 mujoco_gsde: 5, Hopper-v5 mujoco_default: 3)"
    assert any(note in n for n in agg["notes"])
    assert note in capsys.readouterr().out  # printed with the table, and in table1.md
    assert note in (tmp_path / "res" / "table1.md").read_text()


def test_a_row_missing_from_a_task_is_named_as_left_out_of_the_cross_task_aggregates(tmp_path):
    """A campaign part-way: two BPO rows on the first column only, and a third whose runs on the
    second all ended in NaN. The aggregates are PPO's alone, and aggregates.json and the table say
    which rows are left out, which tasks they lack, and whether for want of a run, of a finite
    return or of a budget like the baseline's (the committed Table 1 said "no finite final return"
    of cells not run yet, and so it did of cells at another budget)."""
    rng = np.random.default_rng(3)
    cells = {ANT: {"ppo": rng.normal(0, 1, 4), "bpo_c1.0_rho1.5": rng.normal(0.5, 1, 4),
                   "bpo_c1.5_rho1.5": rng.normal(0.5, 1, 4), "bpo_c1.0_rho1.0": rng.normal(0.5, 1, 4),
                   "bpo_traj_c1.0": rng.normal(0.5, 1, 4)},
             HOPPER: {"ppo": rng.normal(0, 1, 4), "bpo_c1.0_rho1.0": [math.nan] * 4,
                      "bpo_traj_c1.0": rng.normal(0.5, 1, 4)}}
    synthetic_results(tmp_path / "res", cells)
    config = tmp_path / "res" / HOPPER[0] / HOPPER[1] / "bpo_traj_c1.0" / "config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "total_timesteps": 20480}))
    assert main(["table", str(tmp_path / "res"), "--bootstrap-reps", "200"]) == 0
    agg = json.loads((tmp_path / "res" / "aggregates.json").read_text())
    assert list(agg["iqm"]) == ["ppo"]
    note = ("Left out of the cross-task aggregates, which need every row on all 2 tasks that have the baseline: "
            "bpo_c1.5_rho1.5, bpo_c1.0_rho1.5 (no run yet on Hopper-v5 mujoco_default); "
            "bpo_c1.0_rho1.0 (no finite final return on Hopper-v5 mujoco_default); "
            "bpo_traj_c1.0 (another budget or evaluation than the baseline's on Hopper-v5 mujoco_default).")
    assert any(note in n for n in agg["notes"])
    assert note in (tmp_path / "res" / "table1.md").read_text()
    text = figure_text(iqm_figure(agg, "ppo"))  # under the figure, wrapped to keep its width
    assert note in " ".join(text.split()) and max(map(len, text.splitlines())) <= 120
    for row in ("bpo_c1.0_rho1.5", "bpo_c1.5_rho1.5", "bpo_c1.0_rho1.0"):  # once they are on every task, no note
        cells[HOPPER][row] = rng.normal(0.5, 1, 4)
    synthetic_results(tmp_path / "whole", cells)
    assert main(["table", str(tmp_path / "whole"), "--bootstrap-reps", "200"]) == 0
    assert "Left out" not in (tmp_path / "whole" / "aggregates.json").read_text()


def test_episodic_table_notes_the_optimum_and_each_run(tmp_path):
    base = get_preset("short_corridor")
    for algo, finals in (("reinforce", [-13.0, -13.2, -12.8]), ("bpo", [-11.0, -11.2, -11.4])):
        fake_run(tmp_path / algo, replace(with_bpo(base, algo == "bpo"), seeds=3), finals)
    assert main(["table", str(tmp_path), "--bootstrap-reps", "200"]) == 0
    md = (tmp_path / "table1.md").read_text()
    assert "| REINFORCE | -13.00 ± 0.12 (SD 0.20) |" in md and "| BPO | **-11.20 ± 0.12** (SD 0.20) |" in md  # baseline
    assert "| BPO | < 0.001 (< 0.001) |" in md  # p-values: one-sided (two-sided)
    assert "Multiple comparisons: 1 test at α = 0.05, so about 0.05 × 1 = 0.05 cells" in md
    assert "Still significant at α = 0.05 after Holm's adjustment: bold cells 1 of 1." in md
    assert ("**Few seeds: only 3 per cell (the paper's Table 1 used 10 runs per cell). A t-test on so few values has "
            "little power and relies on them being roughly normal;") in md
    assert "Optimal expected return: ShortCorridor-v0 -11.66." in md  # envs.short_corridor, exact
    assert "The paper's Table 1" not in md
    assert "| bpo | BPO | 3 | – | 1 | – |" in md and "| reinforce | REINFORCE | 3 | – | 1 | – |" in md


# The paper's Table 1 marks (bold: significant improvement over PPO; italic: higher mean, not
# significant; none: lower mean), 4 BPO rows x 5 columns. docs/choices.md: reading the paper's ± as
# an SD over 10 runs reproduces all 20; as an SE only 13 (the 7 cells in SE_READING_LOSES turn italic).
A, HCG, HCD, H, W = (("Ant-v5", "mujoco_gsde"), ("HalfCheetah-v5", "mujoco_gsde"),
                     ("HalfCheetah-v5", "mujoco_default"), ("Hopper-v5", "mujoco_default"),
                     ("Walker2d-v5", "mujoco_default"))
C15, C10, C1015, TRAJ = "bpo_c1.5_rho1.5", "bpo_c1.0_rho1.0", "bpo_c1.0_rho1.5", "bpo_traj_c1.0"
PAPER_MARKS = {
    (A, C15): "bold", (A, C10): "bold", (A, C1015): "bold", (A, TRAJ): "bold",
    (HCG, C15): "italic", (HCG, C10): "italic", (HCG, C1015): "italic", (HCG, TRAJ): "italic",
    (HCD, C15): "bold", (HCD, C10): "", (HCD, C1015): "bold", (HCD, TRAJ): "italic",
    (H, C15): "italic", (H, C10): "italic", (H, C1015): "italic", (H, TRAJ): "bold",
    (W, C15): "bold", (W, C10): "bold", (W, C1015): "bold", (W, TRAJ): "bold",
}
SE_READING_LOSES = {(A, C15), (HCD, C15), (HCD, C1015), (H, TRAJ), (W, C15), (W, C10), (W, C1015)}


def test_runs_with_the_papers_means_and_sds_give_the_papers_marks(tmp_path):
    assert set(PAPER_TABLE1) == {A, HCG, HCD, H, W} and len(PAPER_MARKS) == 20
    # 10 runs per cell whose returns have exactly the paper's mean and SD.
    cells = {s: {row: exact_sample(mean, sd, 10, seed=i) for i, (row, (mean, sd)) in enumerate(rows.items())}
             for s, rows in PAPER_TABLE1.items()}
    synthetic_results(tmp_path / "res", cells)
    assert main(["table", str(tmp_path / "res"), "--out", str(tmp_path / "out"), "--bootstrap-reps", "100"]) == 0
    table = json.loads((tmp_path / "out" / "table1.json").read_text())
    ours = {((c["env"], c["preset"]), c["row"]): c for c in table["cells"]}
    for (setting, row), cell in ours.items():
        assert (cell["mean"], cell["sd"], cell["n"]) == pytest.approx((*PAPER_TABLE1[setting][row], 10))
    assert {k: c["mark"] for k, c in ours.items() if k[1] != "ppo"} == PAPER_MARKS  # all 20
    # The paper's own numbers, tested from summary statistics as SD: the same 20 marks.
    paper = {((c["env"], c["preset"]), c["row"]): c for c in table["paper_table1"]["cells"]}
    assert {k: c["mark"] for k, c in paper.items() if k[1] != "ppo"} == PAPER_MARKS
    assert all(paper[k]["p"] == pytest.approx(ours[k]["p"], rel=1e-9) for k in PAPER_MARKS)
    assert "mean ± SD over 10 runs" in table["paper_table1"]["dispersion"]
    md = (tmp_path / "out" / "table1.md").read_text()
    assert "Few seeds" not in md and "Seeds per cell: 10." in md
    assert "| BPO (c̄, ρ̄ = 1.0, 1.0) | **1592 ± 40** (SD 126) |" in md  # ours: mean ± SE (SD)
    assert "| BPO (c̄, ρ̄ = 1.0, 1.0) | **1592** (SD 126) |" in md  # the paper's: mean (SD)
    # Reading the paper's ± as an SE (SD = ± x sqrt(10)) instead loses exactly the 7 documented bold marks.
    as_se = compute_table({s: {r: exact_sample(m, sd * 10 ** 0.5, 10) for r, (m, sd) in rows.items()}
                           for s, rows in PAPER_TABLE1.items()}, "ppo")
    differ = {k for k, expected in PAPER_MARKS.items() if as_se[k]["mark"] != expected}
    assert differ == SE_READING_LOSES and all(as_se[k]["mark"] == "italic" for k in differ)
    # No loss in the paper's table: its one lower mean (HalfCheetah default, 1.0/1.0) is far from significant.
    assert compute_paper_table([HCD], "ppo")[(HCD, C10)]["p_worse"] == pytest.approx(0.39, abs=0.01)


def figure_text(fig) -> str:
    return "\n".join(t.get_text() for t in fig.findobj(Text))


def test_probability_of_improvement_is_not_zero_width_with_opposite_certain_tasks(tmp_path):
    """BPO beats PPO in every run pair on Hopper and loses every pair on Ant: rliable's stratified
    bootstrap gives P = 0.5 with a zero-width interval; ours shows the two tasks and an honest interval."""
    cells = {HOPPER: {"ppo": [1.0, 2.0, 3.0], "bpo_c1.0_rho1.5": [10.0, 11.0, 12.0]},
             ANT: {"ppo": [10.0, 11.0, 12.0], "bpo_c1.0_rho1.5": [1.0, 2.0, 3.0]}}
    synthetic_results(tmp_path, cells)
    assert main(["table", str(tmp_path), "--bootstrap-reps", "200"]) == 0
    agg = json.loads((tmp_path / "aggregates.json").read_text())
    poi = agg["probability_of_improvement"]["bpo_c1.0_rho1.5"]
    assert poi["point"] == 0.5 and poi["bootstrap_low"] == poi["bootstrap_high"] == 0.5  # rliable's, kept
    assert [t["point"] for t in poi["per_task"]] == [0.0, 1.0]  # Ant, Hopper
    # Each task: Newcombe's interval at the Bonferroni level 1 - 0.05 / 2; the reported one averages them.
    assert [(t["low"], t["high"]) for t in poi["per_task"]] == [
        pytest.approx(newcombe_interval(0.0, 3, 3, 0.975)), pytest.approx(newcombe_interval(1.0, 3, 3, 0.975))]
    assert poi["low"] == pytest.approx(np.mean([t["low"] for t in poi["per_task"]]))
    assert poi["low"] < 0.3 and poi["high"] > 0.7
    assert agg["runs_per_task"] == {"ppo": 3, "bpo_c1.0_rho1.5": 3}
    assert agg["notes"] == ["n = 3 runs per task: intervals unreliable (fewer than 10)"]
    fig = improvement_figure(agg, "ppo")
    ax = fig.axes[0]
    assert ax.get_xlim()[0] <= 0.0 and ax.get_xlim()[1] >= 1.0  # includes 0.5, the reference line
    assert any(list(line.get_xdata()) == [0.5, 0.5] for line in ax.lines)
    text = figure_text(fig)
    assert "n = 3 runs per task: intervals unreliable" in text
    assert "Ant-v5 (gSDE)" in text and "Hopper-v5 (default)" in text  # the per-task markers' legend
    offsets = sorted(float(c.get_offsets()[0][0]) for c in ax.collections if len(c.get_offsets()) == 1)
    assert offsets == [0.0, 1.0]  # each task's own probability is drawn
    fig = iqm_figure(agg, "ppo")
    ax = fig.axes[0]
    assert ax.get_xlim() == (0.0, 1.0)  # the whole normalised range, from 0
    baseline_iqm = agg["iqm"]["ppo"]["point"]
    assert any(list(line.get_xdata()) == [baseline_iqm, baseline_iqm] and line.get_linestyle() == "--"
               for line in ax.lines)  # the baseline's level, marked
    assert "n = 3 runs per task: intervals unreliable" in figure_text(fig) and "PPO IQM" in figure_text(fig)


def test_no_small_n_note_with_ten_runs_per_task(tmp_path):
    cells = {HOPPER: {r: sample(1000 + 10 * i, 100, 10) for i, r in enumerate(("ppo", C1015))}}
    synthetic_results(tmp_path, cells)
    assert main(["table", str(tmp_path), "--bootstrap-reps", "100"]) == 0
    agg = json.loads((tmp_path / "aggregates.json").read_text())
    assert agg["notes"] == []
    assert "unreliable" not in figure_text(improvement_figure(agg, "ppo"))
    assert "unreliable" not in figure_text(iqm_figure(agg, "ppo"))


def test_newcombe_interval():
    low, high = newcombe_interval(1.0, 3, 3)
    assert high == 1.0 and 0.45 < low < 0.55  # all 9 pairs won: still not sure P > 0.5
    assert newcombe_interval(0.0, 3, 3) == pytest.approx((1 - high, 1 - low))  # symmetric
    lo10, hi10 = newcombe_interval(1.0, 10, 10)
    assert low < lo10 < 1.0  # narrower with more runs
    # Large samples: close to the Wald interval with the Hanley-McNeil variance (N = (m + n) / 2).
    p, m = 0.7, 400
    var = p * (1 - p) / m ** 2 * (1 + (m - 1) * (1 - p) / (2 - p) + (m - 1) * p / (1 + p))
    assert newcombe_interval(p, m, m) == pytest.approx((p - 1.96 * var ** 0.5, p + 1.96 * var ** 0.5), abs=2e-3)


PROV_CELLS = {HOPPER: {"ppo": [1.0, 2.0, 3.0], C1015: [2.0, 3.0, 4.0], C15: [1.5, 2.5, 3.5]},
              ANT: {"ppo": [1.0, 2.0, 3.0], C1015: [2.0, 3.0, 4.0]}}


def provenance_of(code: dict, mujoco: dict | None = None) -> dict:
    """{(env, preset, variant): record} with the code version ``code[key]`` (None: no record)."""
    return {(*s, r): None if code.get((*s, r), "x") is None else
            provenance_record(code.get((*s, r), "aaa111"), (mujoco or {}).get((*s, r), "3.17.0"))
            for s, rows in PROV_CELLS.items() for r in rows}


def run_table_and_plot(tmp_path, capsys, provenance) -> tuple[str, str, str]:
    """(bpo table's stderr, its Markdown, bpo plot's stderr) on PROV_CELLS with ``provenance``."""
    synthetic_results(tmp_path / "res", PROV_CELLS, provenance)
    capsys.readouterr()
    assert main(["table", str(tmp_path / "res"), "--out", str(tmp_path / "t"), "--bootstrap-reps", "100"]) == 0
    table_err = capsys.readouterr().err
    assert main(["plot", str(tmp_path / "res"), "--out", str(tmp_path / "p")]) == 0
    return table_err, (tmp_path / "t" / "table1.md").read_text(), capsys.readouterr().err


def test_provenance_notes():
    same = [{"provenance": provenance_record("aaa")}] * 3
    assert provenance_notes(same) == [] and provenance_notes([]) == []
    assert provenance_notes([{}, {}]) == [
        "Note: runs have no provenance record (2 runs, written before summaries recorded the code and package "
        "versions), so whether they all come from the same code and MuJoCo version cannot be checked."]
    mixed = same + [{"provenance": provenance_record("bbb-dirty", "3.16.0")}, {}]
    assert provenance_notes(mixed) == [
        "Warning: this results folder mixes runs from different code versions: aaa (3 runs), bbb-dirty (1 run), "
        "unknown (1 run) (unknown: no provenance record). Their numbers may not be comparable.",
        "Warning: this results folder mixes runs from different MuJoCo versions: 3.17.0 (3 runs), 3.16.0 (1 run), "
        "unknown (1 run) (unknown: no provenance record). Their numbers may not be comparable."]
    # Installed without git: the package version is the code version.
    assert "bpo 0.1.0 (1 run)" in provenance_notes(same + [{"provenance": provenance_record("bpo 0.1.0")}])[0]


def test_table_and_plot_warn_when_code_versions_are_mixed(tmp_path, capsys):
    code = {(*HOPPER, C15): "bbb222-dirty", (*ANT, C1015): "bbb222-dirty"}
    table_err, md, plot_err = run_table_and_plot(tmp_path, capsys, provenance_of(code))
    warning = ("Warning: this results folder mixes runs from different code versions: aaa111 (3 runs), "
               "bbb222-dirty (2 runs). Their numbers may not be comparable.")
    assert f"bpo table: {warning}" in table_err and f"bpo plot: {warning}" in plot_err
    assert f"**{warning}**" in md
    assert "MuJoCo versions" not in md + table_err + plot_err  # the same MuJoCo everywhere


def test_table_and_plot_warn_when_runs_without_provenance_are_mixed_in(tmp_path, capsys):
    table_err, md, plot_err = run_table_and_plot(tmp_path, capsys, provenance_of({(*HOPPER, "ppo"): None}))
    for text in (table_err, md, plot_err):
        assert "different code versions: aaa111 (4 runs), unknown (1 run) (unknown: no provenance record)" in text
        assert "different MuJoCo versions: 3.17.0 (4 runs), unknown (1 run)" in text
        assert "runs have no provenance record" not in text


def test_table_and_plot_warn_when_mujoco_versions_are_mixed(tmp_path, capsys):
    table_err, md, plot_err = run_table_and_plot(tmp_path, capsys, provenance_of({}, {(*ANT, "ppo"): "4.0.0"}))
    for text in (table_err, md, plot_err):
        assert ("Warning: this results folder mixes runs from different MuJoCo versions: 3.17.0 (4 runs), "
                "4.0.0 (1 run).") in text
        assert "code versions" not in text
    assert json.loads((tmp_path / "t" / "table1.json").read_text())["provenance"] == {
        "code_version": {"aaa111": 5}, "mujoco": {"3.17.0": 4, "4.0.0": 1}}


def test_table_and_plot_say_once_when_no_run_has_provenance(tmp_path, capsys):
    table_err, md, plot_err = run_table_and_plot(tmp_path, capsys, None)
    for text in (table_err, md, plot_err):
        assert text.count("runs have no provenance record") == 1 and "Warning" not in text


def test_table_and_plot_are_quiet_when_provenance_agrees(tmp_path, capsys):
    table_err, md, plot_err = run_table_and_plot(tmp_path, capsys, provenance_of({}))
    assert table_err == plot_err == ""
    assert "provenance" not in md and "Warning" not in md


def test_the_legend_says_each_mark_is_unadjusted_and_counts_what_survives_holm():
    mc = {"tests": 8, "bold": 0, "bold_after_holm": 0, "worse": 2, "worse_after_holm": 0}
    text = legend("ppo", 0.05, "greater", mc=mc)
    assert "**bold** = higher mean with unadjusted p < 0.05 (each cell's own Welch test)" in text
    assert text.endswith("After Holm's adjustment over the 8 tested cells, 0 of 2 † cells stay significant at 0.05.")
    none = {**mc, "tests": 1, "worse": 0}
    assert legend("ppo", 0.05, "two-sided", mc=none).endswith(
        "No cell is marked before Holm's adjustment over the 1 tested cell, so none after it.")
    assert "Holm" not in legend("ppo", 0.05, "greater")  # without the counts, no claim about them


def test_one_sample_t_matches_scipys_ttest_1samp():
    """The probe's seed-level test (``one_sample_t``) against SciPy's one-sample t-test and its
    interval, at 3 values (the probe's seeds) and 8; no spread or one value gives no p."""
    rng = np.random.default_rng(5)
    for values in (np.log([1.22, 0.24, 1.28]), rng.normal(0.3, 1.0, 8)):
        mean, low, high, p = one_sample_t(list(values))
        test = stats.ttest_1samp(values, 0.0)
        ci = test.confidence_interval(0.95)
        assert mean == pytest.approx(values.mean()) and p == pytest.approx(test.pvalue)
        assert (low, high) == pytest.approx((ci.low, ci.high))
    assert one_sample_t([0.1, 0.2, 0.3], null=0.2)[3] == pytest.approx(1.0)
    assert all(math.isnan(x) for x in one_sample_t([0.5, 0.5, 0.5])[1:])
    assert one_sample_t([0.5])[0] == 0.5 and math.isnan(one_sample_t([0.5])[3])


def test_welch_interval_matches_scipys_and_power_matches_simulation():
    """The headline verdict's statistics against independent references: SciPy's own interval of
    its Welch test, and the share of simulated experiments in which the one-sided test rejects."""
    rng = np.random.default_rng(3)
    a, b = rng.normal(5, 2, 7), rng.normal(3, 1, 4)
    diff, low, high = welch_interval(a.mean(), a.std(ddof=1), 7, b.mean(), b.std(ddof=1), 4)
    ci = stats.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
    assert diff == pytest.approx(a.mean() - b.mean()) and (low, high) == pytest.approx((ci.low, ci.high))
    # Power at the paper's headline gap (1,222) with an SD of 1,100 and 5 seeds per arm.
    x = rng.normal(1222.0, 1100.0, (20000, 5))
    y = rng.normal(0.0, 1100.0, (20000, 5))
    rejected = stats.ttest_ind(x, y, axis=1, equal_var=False, alternative="greater").pvalue < 0.05
    # The noncentral-t formula takes Welch's degrees of freedom at the true SDs, where the test uses
    # the sample SDs: at 5 seeds per arm it reads about 0.02 high (documented in welch_power).
    assert welch_power(1222.0, 1100.0, 5, 1100.0, 5) == pytest.approx(rejected.mean(), abs=0.03)
    two = stats.ttest_ind(x, y, axis=1, equal_var=False).pvalue < 0.05
    assert welch_power(1222.0, 1100.0, 5, 1100.0, 5, alternative="two-sided") == pytest.approx(two.mean(), abs=0.03)
    assert welch_power(0.0, 1100.0, 5, 1100.0, 5) == pytest.approx(0.05, abs=1e-9)  # no gap: the level


def test_redrawing_a_figure_gives_the_same_bytes(tmp_path):
    """No creation date in the files: `bpo plot`/`bpo table` on committed results leave them as they are."""
    def draw(out):
        fig = Figure()
        fig.add_subplot().plot([0, 1], [1, 0])
        return [p.read_bytes() for p in save_figure(fig, out, "f")]

    first = draw(tmp_path / "a")
    time.sleep(1.1)  # a creation date in seconds would differ
    assert draw(tmp_path / "b") == first


def test_our_cells_at_the_papers_budget_are_set_against_the_papers_cells(tmp_path):
    """Each of our cells that trained for the paper's budget against the paper's same cell (Welch,
    two-sided, from the SDs, against the test written out here); a column at another budget is left
    out; and the count of our marks beside the paper's for the same cells."""
    (hc_ppo, _), (hc_bpo, hc_bpo_sd) = PAPER_TABLE1[HCD]["ppo"], PAPER_TABLE1[HCD][C1015]
    synthetic_results(tmp_path / "res", {HCD: {"ppo": exact_sample(hc_ppo, 670, 10),
                                               C1015: exact_sample(hc_bpo - 1500, 900, 10)}})
    short = replace(get_preset("mujoco_default", "Hopper-v5"), seeds=10, total_timesteps=100_000)
    for row in ("ppo", C1015):  # Hopper at 100k steps: not the paper's budget
        fake_run(tmp_path / "res" / "Hopper-v5" / row, apply_variant(short, row), exact_sample(2000, 300, 10))
    assert main(["table", str(tmp_path / "res"), "--out", str(tmp_path / "out"), "--bootstrap-reps", "100"]) == 0
    data = json.loads((tmp_path / "out" / "table1.json").read_text())
    vs = {(c["env"], c["row"]): c for c in data["against_paper"]["cells"]}
    assert set(vs) == {("HalfCheetah-v5", "ppo"), ("HalfCheetah-v5", C1015)}
    c = vs[("HalfCheetah-v5", C1015)]
    se = math.sqrt(900 ** 2 / 10 + hc_bpo_sd ** 2 / 10)
    df = se ** 4 / ((900 ** 2 / 10) ** 2 / 9 + (hc_bpo_sd ** 2 / 10) ** 2 / 9)
    assert c["difference"] == pytest.approx(-1500)
    half = stats.t.ppf(0.975, df) * se
    assert (c["low"], c["high"]) == pytest.approx((-1500 - half, -1500 + half))
    assert c["p_two_sided"] == pytest.approx(welch_reference(hc_bpo - 1500, 900, 10, hc_bpo, hc_bpo_sd, 10, "two"))
    assert vs[("HalfCheetah-v5", "ppo")]["p_two_sided"] == pytest.approx(1.0)
    md = (tmp_path / "out" / "table1.md").read_text()
    assert "| BPO (c̄, ρ̄ = 1.0, 1.5) | -1500 [" in md and "Hopper-v5 (default) |" not in md.split("Ours against")[1]
    assert ("Of these 1 cell tested against their column's baseline: ours 0 bold (0 after Holm) and 0 †; the "
            "paper's same cells 1 bold and 0 †") in md
    assert "of our 2, 0 significantly higher and 1 significantly lower" in md


def test_a_column_without_a_baseline_is_set_against_the_paper_without_a_count_of_marks(tmp_path):
    (mean, sd) = PAPER_TABLE1[HCD][C1015]
    authors = ("HalfCheetah-v5", "mujoco_authors_code")
    synthetic_results(tmp_path / "res", {authors: {C1015: exact_sample(mean, sd, 10)}})
    assert main(["table", str(tmp_path / "res"), "--out", str(tmp_path / "out"), "--bootstrap-reps", "100"]) == 0
    md = (tmp_path / "out" / "table1.md").read_text()
    assert "| BPO (c̄, ρ̄ = 1.0, 1.5) | +0 [" in md and "Of these" not in md
    assert "Against the paper's own cells: of our 1, 0 significantly higher and 0 significantly lower" in md
