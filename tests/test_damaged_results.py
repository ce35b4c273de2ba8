"""Damaged or foreign results files and bad arguments refused with one line: ``bpo report`` names
the results file and what is wrong with it (exit 2, no traceback, no page half-made), and ``bpo
probe-summary`` checks ``--name`` and ``--baseline`` before it writes anything.

Each case copies only the files of ``results/`` that its block reads and puts that one block on a
page, so it runs in a second or two."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from experiments.cli import main

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "results"
A2C_RUN = "a2c/CartPole-v1-cartpole_a2c-a2c"
PROBED = "probe"


def _results(tmp_path: Path, *paths: str) -> Path:
    """A results folder holding copies of the committed ``paths`` (files or folders) under it."""
    results = tmp_path / "results"
    for rel in paths:
        source, target = RESULTS / rel, results / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, ignore=shutil.ignore_patterns("*.png", "*.pdf", "logs"))
        else:
            shutil.copy(source, target)
    return results


def _page(tmp_path: Path, block: str) -> Path:
    """A repository root whose README holds the one results block ``block``, so only it is made."""
    root = tmp_path / "root"
    root.mkdir()
    (root / "README.md").write_text(f"# page\n\n<!-- results:{block} -->\n<!-- /results -->\n")
    return root


def _cut(path: Path) -> str:
    return path.read_text()[:600]


def _one_cell_without_its_preset(path: Path) -> str:
    return json.dumps({**json.loads(path.read_text()), "cells": [{"env": "HalfCheetah-v5", "row": "ppo"}]})


def _a_run_without_its_steps(path: Path) -> str:
    data = json.loads(path.read_text())
    del data["runs"][1]["steps"]
    return json.dumps(data)


def _short_corridor_left_out(path: Path) -> str:
    data = json.loads(path.read_text())
    del data["mdps"]["ShortCorridor"]
    return json.dumps(data)


# (block, what to copy, the file damaged, its new text, what the error says about it)
CASES = [
    ("line-variance", ["variance/table.json"], "variance/table.json", lambda p: "{}", "mdps is missing"),
    ("variance", ["variance/table.json", "variance/table.md"], "variance/table.json", lambda p: "{}",
     "mdps is missing"),
    ("variance", ["variance/table.json", "variance/table.md"], "variance/table.json", _short_corridor_left_out,
     "mdps: no ShortCorridor"),
    ("line-probe-summary", ["probe/probe_summary.json"], "probe/probe_summary.json", lambda p: '{"runs": []}',
     "runs must be a non-empty list"),
    ("probe-summary", ["probe/probe_summary.json", "probe/probe_summary.md"], "probe/probe_summary.json",
     lambda p: '{"runs": []}', "runs must be a non-empty list"),
    ("probe-summary", ["probe/probe_summary.json"], "probe/probe_summary.md", None, "missing"),
    ("line-classic", ["classic/table1.json", "classic/table1.md"], "classic/table1.json", _cut, "not valid JSON"),
    ("classic", ["classic"], "classic/CartPole-v1-cartpole_ppo-bpo/summary.json", lambda p: "{}",
     "seeds is missing"),
    ("headline-vs-paper", ["headline/table1.json"], "headline/table1.json", _one_cell_without_its_preset,
     "cells[0]: preset is missing"),
    ("a2c-reference", ["a2c/sb3_cartpole.json", f"{A2C_RUN}/summary.json", f"{A2C_RUN}/curve.csv"],
     "a2c/sb3_cartpole.json", _a_run_without_its_steps, "runs[1]: steps is missing"),
    ("a2c-reference", ["a2c/sb3_cartpole.json", f"{A2C_RUN}/summary.json", f"{A2C_RUN}/curve.csv"],
     f"{A2C_RUN}/curve.csv", _cut, "holds seeds 0; summary.json has 5"),
]


@pytest.mark.parametrize("block, copied, damaged, damage, needle", CASES,
                         ids=[f"{c[0]}:{c[2].split('/')[-1]}:{c[4]}" for c in CASES])
def test_a_damaged_results_file_is_one_line_naming_it(tmp_path, capsys, block, copied, damaged, damage, needle):
    results, root = _results(tmp_path, *copied), _page(tmp_path, block)
    path = results / damaged
    if damage is None:
        path.unlink(missing_ok=True)
    else:
        path.write_text(damage(path))
    page = (root / "README.md").read_text()
    for check in (["--check"], []):
        assert main(["report", "--results", str(results), "--root", str(root), *check]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1, err
        assert err.startswith(f"error: {path}: ") and needle in err, err
    assert (root / "README.md").read_text() == page  # nothing half-written


def test_the_cli_names_an_empty_variance_table_without_a_traceback(tmp_path):
    """The audit's case as a user meets it: the ``bpo`` program in a process of its own."""
    results, root = _results(tmp_path, "variance/table.json"), _page(tmp_path, "line-variance")
    (results / "variance" / "table.json").write_text("{}\n")
    done = subprocess.run([sys.executable, "-m", "experiments.cli", "report", "--results", str(results), "--root",
                           str(root), "--check"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip().splitlines() == [f"error: {results / 'variance' / 'table.json'}: mdps is missing"]


@pytest.fixture(scope="module")
def probed(tmp_path_factory) -> Path:
    """The committed probe folder's run files and probes (``probe`` and ``probe-untruncated``),
    without its summaries, policies and figures."""
    folder = tmp_path_factory.mktemp("probed") / "probe"
    shutil.copytree(RESULTS / PROBED, folder, ignore=shutil.ignore_patterns(
        "*.png", "*.pdf", "*.msgpack", "logs", "*_summary.*", "train_metrics.csv", "curve.csv"))
    return folder


def _listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.mark.parametrize("name", ["*", "probe*", "probe?untruncated", "../probe", ""])
def test_probe_summary_refuses_a_name_that_is_no_plain_folder_name_before_writing(probed, tmp_path, capsys, name):
    """``--name`` is a folder name, as ``bpo probe --name`` checks it: a pattern would pool different
    probes into one summary and put the pattern in the files' names."""
    before, out = _listing(probed), tmp_path / "out"
    assert main(["probe-summary", str(probed), "--out", str(out), "--name", name]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: name: must be a plain folder name (letters, digits, _ and -), got {name!r}", err
    assert not out.exists() and _listing(probed) == before


def test_probe_summary_checks_the_baseline_before_making_the_output_folder(probed, tmp_path, capsys):
    out = tmp_path / "out" / "nested"
    assert main(["probe-summary", str(probed), "--out", str(out), "--baseline", "nosuchrow"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: baseline: no probed run has the row 'nosuchrow'"), err
    assert not (tmp_path / "out").exists()


def test_a_damaged_file_on_a_later_page_leaves_the_earlier_pages_unwritten(tmp_path, capsys):
    """Every page is made before any is written: the README's block (a sweep not made yet) would be
    rewritten, docs/results.md's reads a damaged probe summary, so neither is written."""
    results = _results(tmp_path, "probe/probe_summary.json")
    (results / "probe" / "probe_summary.json").write_text('{"level": "95%", "runs": [{"run_id": "x"}]}')
    root = _page(tmp_path, "line-fig2")
    (root / "docs").mkdir()
    (root / "docs" / "results.md").write_text("<!-- results:line-probe-summary -->\n<!-- /results -->\n")
    pages = {p: p.read_text() for p in (root / "README.md", root / "docs" / "results.md")}
    assert main(["report", "--results", str(results), "--root", str(root)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: {results / 'probe' / 'probe_summary.json'}: runs[0]: label is missing", err
    assert {p: p.read_text() for p in pages} == pages
