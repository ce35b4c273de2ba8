"""The headline cell five ways: whose result is it?

HalfCheetah-v5, BPO (c̄ = 1.0, ρ̄ = 1.5) and PPO at 1.5M steps, from five sources, in the order
that takes one difference at a time: the paper's Table 1; the authors' public code as it is
(``benchmarks/authors_reference.py``, ``results/authors_reference/their_code``); ours with their
code's departures switched on (``mujoco_authors_code``, ``results/authors_code``); ours in their
configuration without them (``mujoco_default_authors``) and ours as Table 4 states
(``mujoco_default``), both in ``results/headline``. ``bpo report`` writes the tables into
docs/reproduction.md from those files; a seed of the authors' code that is not what it claims is
refused, not counted.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from pathlib import Path

from bpo.config.presets import PAPER_TABLE1, paper_setting
from bpo.instruments.stats import describe
from experiments.common import format_p, welch_interval, welch_p_from_stats, welch_power
from experiments.table import PAPER_RUNS, read_cells

ENV, BPO, PPO = "HalfCheetah-v5", "bpo_c1.0_rho1.5", "ppo"
THEIR_CODE = Path("authors_reference") / "their_code"
"""Under results/: one folder per arm (``bpo``, ``ppo``) of ``seedN.json`` files."""
SEED_FILE = re.compile(r"seed(\d+)\.json")
SEED_FORMAT = "bpo-authors-reference-seed/1"
THEIR_SEEDS = 10
"""The seeds the campaign runs per arm, as the paper's n."""
SOURCES = (("the paper (Table 1)", "the paper"), ("their code, as it is", "their code"),
           ("ours with their code's departures (`mujoco_authors_code`)", "ours with their departures"),
           ("ours in their configuration (`mujoco_default_authors`)", "ours in their configuration"),
           ("ours as Table 4 states (`mujoco_default`)", "ours as Table 4 states"))
"""Each source as the table's row names it and, short, as the comparisons do, in ``five_ways``'s order."""


def their_seed(path: Path) -> float:
    """The final return of one finished seed of the authors' code; a ValueError naming the file and
    the field for anything else (another format, arm or environment, an unfinished seed, no finite
    return)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{path}: not a seed of the authors' code ({err})") from err
    arm, seed = path.parent.name, int(SEED_FILE.fullmatch(path.name)[1])
    expected = {"format": SEED_FORMAT, "algo": arm, "env": ENV, "seed": seed, "finished": True}
    for field, value in expected.items():
        if not isinstance(data, dict) or data.get(field) != value:
            got = data.get(field) if isinstance(data, dict) else type(data).__name__
            raise ValueError(f"{path}: {field} must be {value!r}, got {got!r}")
    value = data.get("final_return")
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{path}: final_return must be a finite number, got {value!r}")
    return float(value)


def their_arm(folder: Path) -> dict | None:
    """Mean, SD and n of the finished seeds in ``folder`` (``seedN.json``; partial files are not
    seeds), or None when it holds none."""
    found = sorted((int(m[1]), p) for p in folder.glob("seed*.json")
                   if (m := SEED_FILE.fullmatch(p.name))) if folder.is_dir() else []
    seeds = [seed for seed, _ in found]
    if len(set(seeds)) < len(seeds):  # seed1.json and seed01.json: one seed, which would count twice
        twice = min(s for s in seeds if seeds.count(s) > 1)
        raise ValueError(f"{folder}: more than one file for seed {twice} "
                         f"({', '.join(p.name for s, p in found if s == twice)}); keep one file per seed")
    return describe([their_seed(p) for _, p in found]) if found else None


def our_arm(folder: Path, preset: str, row: str) -> dict | None:
    """The cell of our table1.json in ``folder`` for the headline column of ``preset``, or None."""
    if not (folder / "table1.json").is_file():
        return None
    return read_cells(folder)[0].get(((ENV, preset), row))


def five_ways(results: Path) -> list[tuple[dict | None, dict | None]]:
    """(BPO, PPO) of each of ``SOURCES``: ``{mean, sd, n}`` or None where it has no such arm (yet)."""
    paper = PAPER_TABLE1[paper_setting(ENV, "mujoco_default")]
    stated = [{"mean": paper[row][0], "sd": paper[row][1], "n": PAPER_RUNS} for row in (BPO, PPO)]
    theirs, headline = results / THEIR_CODE, results / "headline"
    return [tuple(stated), (their_arm(theirs / "bpo"), their_arm(theirs / "ppo")),
            (our_arm(results / "authors_code", "mujoco_authors_code", BPO), None),
            *((our_arm(headline, preset, BPO), our_arm(headline, preset, PPO))
              for preset in ("mujoco_default_authors", "mujoco_default"))]


def _arm(a: dict | None) -> str:
    return "–" if a is None else f"{a['mean']:.0f} (SD {a['sd']:.0f}), {a['n']}"


def welch_row(a: dict | None, b: dict | None, gap: float) -> str:
    """``a − b``: the difference with its 95 % Welch interval, the two-sided p and the power of that
    test to detect a true difference of ``gap`` at these SDs and counts; dashes where an arm is
    missing."""
    if a is None or b is None:
        return "– | – | –"
    diff, low, high = welch_interval(a["mean"], a["sd"], a["n"], b["mean"], b["sd"], b["n"])
    p = welch_p_from_stats(a["mean"], a["sd"], a["n"], b["mean"], b["sd"], b["n"], "two-sided")
    power = welch_power(gap, a["sd"], a["n"], b["sd"], b["n"], alternative="two-sided")
    return f"{diff:+.0f} [{low:+.0f}, {high:+.0f}] | {format_p(p)} | {power:.2f}"


def comparisons(ways: list) -> list[tuple[str, str, dict | None, dict | None]]:
    """Each source against the nearest source before it that has the same arm: (what, arm, a, b)
    for a − b. Their code against the paper; ours with their departures against their code; those
    departures switched off; their configuration against Table 4's. PPO has no departures to
    switch, so our PPO in their configuration is set against their code's PPO."""
    out = []
    for i, arm in itertools.product(range(1, len(ways)), (0, 1)):
        earlier = [j for j in range(i) if ways[j][arm] is not None]
        if ways[i][arm] is not None and earlier:
            j = earlier[-1]
            out.append((f"{SOURCES[i][1]} − {SOURCES[j][1]}", ("BPO", "PPO")[arm], ways[i][arm], ways[j][arm]))
    return out


def authors_verdict_block(results: Path) -> str:
    """The five sources side by side, then each against its neighbour (module docstring)."""
    ways = five_ways(results)
    gain = ways[0][0]["mean"] - ways[0][1]["mean"]
    lines = ["| source | BPO: mean (SD), n | PPO: mean (SD), n | BPO − PPO, 95 % Welch interval | two-sided p "
             f"| power to detect {gain:+.0f} |", "| --- | --- | --- | --- | --- | --- |"]
    lines += [f"| {label} | {_arm(b)} | {_arm(p)} | {welch_row(b, p, gain)} |"
              for (label, _), (b, p) in zip(SOURCES, ways, strict=True)]
    lines += ["", f"| comparison | arm | n | difference, 95 % Welch interval | two-sided p | power to detect "
                  f"±{gain:.0f} |", "| --- | --- | --- | --- | --- | --- |"]
    lines += [f"| {what} | {arm} | {a['n']}, {b['n']} | {welch_row(a, b, gain)} |"
              for what, arm, a, b in comparisons(ways)]
    done = [0 if arm is None else arm["n"] for arm in ways[1]]
    note = ("" if min(done) >= THEIR_SEEDS else f" **Interim**: their code has {done[0]} of {THEIR_SEEDS} seeds of "
            f"BPO and {done[1]} of {THEIR_SEEDS} of PPO so far; these tests are not the verdict.")
    return ("\n".join(lines) + f"\n\nMean (SD over seeds), n; the paper's SDs are its ± over {PAPER_RUNS} runs. "
            "Welch's t-test from these summary statistics, two-sided, with the 95 % interval it inverts; the power "
            f"is that test's (α = 0.05) to detect a true difference as large as the paper's BPO − PPO gain "
            f"({gain:+.0f}) at the SDs and counts shown. A p above 0.05 finds no difference; it does not show "
            f"agreement.{note}\n")
