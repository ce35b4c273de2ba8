"""The headline cell five ways (experiments.authors_verdict): the authors' seeds are read only when
they are what they claim, and every difference, p, interval and power is checked against SciPy on
the raw values or against the normal-approximation formula written out here."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from bpo.config.presets import PAPER_TABLE1, paper_setting
from experiments.authors_verdict import BPO, ENV, PPO, THEIR_SEEDS, authors_verdict_block, their_arm, their_seed

PAPER = PAPER_TABLE1[paper_setting(ENV, "mujoco_default")]


def seed_file(folder: Path, number: int, final: float, **changes) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    data = {"format": "bpo-authors-reference-seed/1", "algo": folder.name, "env": ENV, "seed": number,
            "finished": True, "final_return": final, **changes}
    path = folder / f"seed{number}.json"
    path.write_text(json.dumps(data))
    return path


def table(folder: Path, cells: dict) -> None:
    """A table1.json with the cells {(preset, row): values} (the fields the reader uses)."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = [{"env": ENV, "preset": preset, "row": row, "mean": float(np.mean(v)), "sd": float(np.std(v, ddof=1)),
             "n": len(v)} for (preset, row), v in cells.items()]
    (folder / "table1.json").write_text(json.dumps({"cells": rows}))


@pytest.mark.parametrize("changes,field", [
    ({"format": "something-else/1"}, "format"), ({"algo": "ppo"}, "algo"), ({"env": "Hopper-v5"}, "env"),
    ({"seed": 4}, "seed"), ({"finished": False}, "finished"), ({"final_return": float("nan")}, "final_return"),
    ({"final_return": "3000"}, "final_return"), ({"final_return": True}, "final_return")])
def test_a_seed_that_is_not_what_it_claims_is_refused_by_field(tmp_path, changes, field):
    path = seed_file(tmp_path / "bpo", 3, 3000.0, **changes)
    with pytest.raises(ValueError, match=re.escape(f"{path}: {field} must be")):
        their_seed(path)


def test_a_file_that_is_not_json_is_refused(tmp_path):
    path = tmp_path / "bpo" / "seed0.json"
    path.parent.mkdir()
    path.write_text('{"format": "bpo-authors-ref')
    with pytest.raises(ValueError, match="not a seed of the authors' code"):
        their_arm(path.parent)


def test_partial_seeds_are_not_counted(tmp_path):
    folder = tmp_path / "ppo"
    for seed, value in enumerate([1000.0, 2000.0, 4000.0]):
        seed_file(folder, seed, value)
    (folder / "seed3.partial.json").write_text(json.dumps({"finished": False}))
    arm = their_arm(folder)
    assert arm["n"] == 3 and arm["mean"] == pytest.approx(7000 / 3)
    assert arm["sd"] == pytest.approx(np.std([1000, 2000, 4000], ddof=1))
    assert their_arm(tmp_path / "absent") is None
    # seed1.json copied as seed01.json: one seed in two files, refused rather than counted twice.
    (folder / "seed01.json").write_text((folder / "seed1.json").read_text())
    with pytest.raises(ValueError, match=re.escape(f"{folder}: more than one file for seed 1 (")) as refused:
        their_arm(folder)
    assert "seed1.json" in str(refused.value) and "seed01.json" in str(refused.value)


def _cells(block: str) -> dict[tuple[str, str], list[str]]:
    """The comparisons table: (comparison, arm) -> its cells."""
    out = {}
    for line in block.splitlines():
        parts = [p.strip() for p in line.strip("|").split("|")]
        if len(parts) == 6 and parts[1] in ("BPO", "PPO"):
            out[(parts[0], parts[1])] = parts[2:]
    return out


def test_the_block_tests_each_source_against_its_neighbour_as_scipy_does(tmp_path):
    rng = np.random.default_rng(0)
    theirs = {arm: rng.normal(mean, 900, n) for arm, mean, n in (("bpo", 3000, 6), ("ppo", 3200, 10))}
    for arm, values in theirs.items():
        for seed, value in enumerate(values):
            seed_file(tmp_path / "authors_reference" / "their_code" / arm, seed, float(value))
    bugs = rng.normal(3300, 1000, 10)
    table(tmp_path / "authors_code", {("mujoco_authors_code", BPO): bugs})
    ours = {(preset, row): rng.normal(4000, 1000, 10) for preset in ("mujoco_default_authors", "mujoco_default")
            for row in (BPO, PPO)}
    table(tmp_path / "headline", ours)
    block = authors_verdict_block(tmp_path)
    rows = _cells(block)

    # ours with their departures - their code, BPO: Welch on the raw values
    n, interval, p, power = rows[("ours with their departures − their code", "BPO")]
    assert n == "10, 6"
    want = stats.ttest_ind(bugs, theirs["bpo"], equal_var=False)
    assert float(p) == pytest.approx(want.pvalue, abs=6e-4)
    ci = want.confidence_interval(0.95)
    diff = bugs.mean() - theirs["bpo"].mean()
    assert interval == f"{diff:+.0f} [{ci.low:+.0f}, {ci.high:+.0f}]"
    # their code - the paper, PPO: from the paper's summary statistics
    _, interval, p, _ = rows[("their code − the paper", "PPO")]
    mean, sd = PAPER[PPO]
    want = stats.ttest_ind_from_stats(theirs["ppo"].mean(), theirs["ppo"].std(ddof=1), 10, mean, sd, 10,
                                      equal_var=False)
    assert float(p) == pytest.approx(want.pvalue, abs=6e-4)
    # power to detect the paper's gain: near the normal approximation at these counts
    gain = PAPER[BPO][0] - PAPER[PPO][0]
    se = math.sqrt(bugs.var(ddof=1) / 10 + theirs["bpo"].var(ddof=1) / 6)
    normal = stats.norm.sf(1.96 - gain / se) + stats.norm.cdf(-1.96 - gain / se)
    assert float(power) < normal and float(power) == pytest.approx(normal, abs=0.08)  # t's heavier tails
    # no PPO arm with their departures (the switches are BPO's): our PPO in their configuration is
    # set against their code's PPO instead
    assert ("ours with their departures − their code", "PPO") not in rows
    want = stats.ttest_ind(ours[("mujoco_default_authors", PPO)], theirs["ppo"], equal_var=False)
    assert float(rows[("ours in their configuration − their code", "PPO")][2]) == pytest.approx(want.pvalue, abs=6e-4)
    assert ("ours in their configuration − their code", "BPO") not in rows  # BPO's neighbour has its arm
    assert f"their code has 6 of {THEIR_SEEDS} seeds of BPO and 10 of {THEIR_SEEDS} of PPO" in block


def test_the_interim_note_goes_when_both_arms_have_their_seeds(tmp_path):
    for arm in ("bpo", "ppo"):
        for seed in range(THEIR_SEEDS):
            seed_file(tmp_path / "authors_reference" / "their_code" / arm, seed, 3000.0 + 100 * seed)
    block = authors_verdict_block(tmp_path)
    assert "Interim" not in block and "| their code, as it is | 3450 (SD 303), 10 |" in block
    assert "ours with their code's departures (`mujoco_authors_code`) | – | – |" in block  # not made: dashes
