"""Table 1 from synthetic results whose means and Welch p-values are known by construction: the
right cells are bold or italic, in Markdown, LaTeX and JSON, with the paper's numbers, known optima
and the runs beside them; rliable's aggregates against a plain computation."""

import json
import math

import numpy as np
import pytest
from scipy import stats

from bpo.cli import main
from bpo.config import replace
from bpo.presets import get_preset
from experiments.common import welch_p
from experiments.table import compute_table, mark

from synthetic_results import fake_run, synthetic_results


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
        "bpo_traj_c1.0": sample(900, 100, 10),  # worse: no mark
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
    (HOPPER, "bpo_traj_c1.0"): "", (HOPPER, "ppo"): "",
    (ANT, "bpo_c1.5_rho1.5"): "italic", (ANT, "bpo_c1.0_rho1.0"): "bold", (ANT, "bpo_c1.0_rho1.5"): "",
    (ANT, "ppo"): "",
}


def test_welch_p_matches_the_written_out_test():
    for alternative in ("greater", "two-sided"):
        for (m1, s1, n1), (m2, s2, n2) in [((600, 200, 8), (500, 50, 5)), ((1.5, 0.3, 3), (1.0, 2.0, 12))]:
            got = welch_p(sample(m1, s1, n1), sample(m2, s2, n2), alternative)
            assert got == pytest.approx(welch_reference(m1, s1, n1, m2, s2, n2, alternative), rel=1e-9)
    assert math.isnan(welch_p([1.0], [1.0, 2.0]))


def test_marks_follow_mean_and_p():
    assert mark(2.0, 1.0, 0.01, 0.05) == "bold" and mark(2.0, 1.0, 0.2, 0.05) == "italic"
    assert mark(1.0, 1.0, 0.0, 0.05) == "" and mark(0.5, 1.0, 0.01, 0.05) == ""
    assert mark(2.0, 1.0, math.nan, 0.05) == "italic"  # too few seeds to test: an untested improvement


def test_table_marks_exactly_the_right_cells():
    table = compute_table({k: {r: list(v) for r, v in rows.items()} for k, rows in CELLS.items()}, "ppo")
    assert {k: c["mark"] for k, c in table.items()} == EXPECTED
    # The constructed p-values come out as designed.
    assert table[(HOPPER, "bpo_c1.0_rho1.0")]["p"] == pytest.approx(0.049, rel=1e-6)
    assert table[(HOPPER, "bpo_c1.0_rho1.5")]["p"] == pytest.approx(0.051, rel=1e-6)
    assert table[(ANT, "bpo_c1.5_rho1.5")]["p"] == pytest.approx(welch_reference(600, 200, 8, 500, 50, 5), rel=1e-9)
    assert table[(ANT, "bpo_c1.0_rho1.0")]["se"] == pytest.approx(60 / 2)
    # Two-sided: p doubles, so the cell at one-sided 0.049 loses its bold.
    two = compute_table({k: {r: list(v) for r, v in rows.items()} for k, rows in CELLS.items()}, "ppo",
                        alternative="two-sided")
    assert two[(HOPPER, "bpo_c1.0_rho1.0")]["mark"] == "italic"
    assert two[(HOPPER, "bpo_c1.5_rho1.5")]["mark"] == "bold"


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
        style = "bold" if text.startswith("**") else "italic" if text.startswith("*") else ""
        assert style == expected, (setting, row, text)
    assert body["BPO (traj c̄ = 1.0)"][0] == "–"  # no such run on Ant
    tex = (tmp_path / "out" / "table1.tex").read_text()
    assert tex.count(r"\bm{") == 3 and tex.count(r"\mathit{") == 2
    cells = json.loads((tmp_path / "out" / "table1.json").read_text())["cells"]
    assert {c["row"]: c["mark"] for c in cells if c["env"] == "Hopper-v5"} == {
        r: m for (s, r), m in EXPECTED.items() if s == HOPPER}
    for name in ("iqm.png", "iqm.pdf", "probability_of_improvement.png", "probability_of_improvement.pdf"):
        assert (tmp_path / "out" / name).stat().st_size > 5000
    # The paper's Table 1 for the same cells (bpo.presets.PAPER_TABLE1), in the same column order.
    text = "\n".join(md)
    assert "The paper's Table 1 (1.5M/2M steps, 10 seeds) for the same cells:" in text
    assert "| PPO | 1106 ± 111 | 2126 ± 492 |" in text and "| BPO (traj c̄ = 1.0) | 1400 ± 122 | 2770 ± 296 |" in text
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


def test_episodic_table_notes_the_optimum_and_each_run(tmp_path):
    base = get_preset("short_corridor")
    for algo, finals in (("reinforce", [-13.0, -13.2, -12.8]), ("bpo", [-11.0, -11.2, -11.4])):
        fake_run(tmp_path / algo, replace(base, algo=algo, seeds=3), finals)
    assert main(["table", str(tmp_path), "--bootstrap-reps", "200"]) == 0
    md = (tmp_path / "table1.md").read_text()
    assert "| REINFORCE | -13.00 ± 0.12 |" in md and "| BPO | **-11.20 ± 0.12** |" in md  # baseline: REINFORCE
    assert "Optimal expected return: ShortCorridor-v0 -11.66." in md  # envs.short_corridor, exact
    assert "The paper's Table 1" not in md
    assert "| bpo | BPO | 3 | – | 1 | – |" in md and "| reinforce | REINFORCE | 3 | – | 1 | – |" in md
