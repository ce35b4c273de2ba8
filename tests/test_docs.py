"""The documentation names real code: every dotted name of a first-party module in backticks in
``docs/*.md`` and ``README.md`` (``bpo.core.fqe.fqe_step``, ``bpo.agents.learner.Learner.update``) resolves to
a module or an attribute, every ``tests/FILE.py::test_name`` is a test of that file, and every
relative Markdown link points to a file of the repository, and to a heading of it when it names one."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
import unicodedata
from collections.abc import Iterator
from pathlib import Path

import pytest

from bpo.config.schema import EpisodicTrainConfig, OnPolicyTrainConfig, field_names
from experiments.cli import usage

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
DOTTED = re.compile(r"`((?:bpo|envs|experiments)(?:\.[A-Za-z_][A-Za-z0-9_]*)+)")
TEST_REF = re.compile(r"(tests/test_[a-z0-9_]+\.py)::([A-Za-z0-9_]+)")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
ANCHOR_LINK = re.compile(r"\]\(([^)#\s]*)#([^)\s]+)\)")


CONFIG_FIELDS = set(field_names(EpisodicTrainConfig())) | set(field_names(OnPolicyTrainConfig()))


def is_config_field(dotted: str) -> bool:
    """``bpo.q_lr``, ``returns.c_bar``: a field of a section of a run config, as the flag
    ``--returns.c-bar`` (the ``bpo`` section shares its name with the package)."""
    return dotted in CONFIG_FIELDS


def resolve(dotted: str) -> bool:
    """A config field, or the longest importable prefix and then attributes."""
    if is_config_field(dotted):
        return True
    parts = dotted.split(".")
    try:  # a module named alone is found, not imported: experiments.program blocks SIGINT and
        # SIGTERM when imported (the console script's entry point), which would leave this pytest
        # worker deaf to them and end it in tests/test_processes.py
        if importlib.util.find_spec(dotted) is not None:
            return True
    except (ImportError, ValueError):
        pass
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            if not hasattr(obj, name):
                return False
            obj = getattr(obj, name)
        return True
    return False


def test_pages_are_found():
    assert len(PAGES) > 5
    assert any(DOTTED.search(p.read_text()) for p in PAGES)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_named_functions_exist(page):
    text = page.read_text()
    # A name ending in .py is a file name (the authors' ``bpo.py``), not a dotted path.
    missing = sorted({name for name in DOTTED.findall(text) if not name.endswith(".py") and not resolve(name)})
    assert not missing, f"{page.name} names code that does not exist: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_named_tests_exist(page):
    missing = []
    for path, name in TEST_REF.findall(page.read_text()):
        file = ROOT / path
        defined = {n.name for n in ast.walk(ast.parse(file.read_text()))
                   if isinstance(n, ast.FunctionDef)} if file.exists() else set()
        if name not in defined:
            missing.append(f"{path}::{name}")
    assert not missing, f"{page.name} names tests that do not exist: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_relative_links_point_to_files(page):
    broken = [target for target in LINK.findall(page.read_text())
              if "://" not in target and not (page.parent / target).exists()]
    assert not broken, f"{page.name} links to missing files: {broken}"


def heading_anchors(page: Path) -> Iterator[str]:
    """The anchors GitHub gives a page's headings: lower case, every character but a letter, a mark,
    a digit, ``-``, ``_`` or a space dropped, spaces made hyphens, a repeated heading numbered
    ``-1``, ``-2``; headings inside code fences are not headings."""
    seen: dict[str, int] = {}
    fenced = False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        heading = re.match(r"#{1,6} (.*)", line)
        if heading and not fenced:
            text = heading.group(1).strip().lower()
            slug = "".join(c for c in text if c in "-_ " or unicodedata.category(c)[0] in "LMN").replace(" ", "-")
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            yield slug if count == 0 else f"{slug}-{count}"


def test_heading_anchors_follow_github():
    page = ROOT / "docs" / "reproduction.md"
    assert "the-headline-cell-halfcheetah-v5-ppo-against-bpo-c̄--10-ρ̄--15-15m-steps" in set(heading_anchors(page))


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_links_to_a_section_name_a_heading_of_its_page(page):
    """A link ``page.md#anchor`` (or ``#anchor`` on the same page) names a heading that exists:
    a renamed heading leaves the link pointing at the page's top."""
    broken, anchors = [], {}
    for target, anchor in ANCHOR_LINK.findall(page.read_text()):
        linked = page if not target else page.parent / target
        if "://" in target or linked.suffix != ".md" or not linked.exists():
            continue
        if linked not in anchors:
            anchors[linked] = set(heading_anchors(linked))
        if anchor not in anchors[linked]:
            broken.append(f"{target}#{anchor}")
    assert not broken, f"{page.name} links to headings that are not there: {broken}"


def test_help_texts_are_paragraphs_not_the_source_s_lines():
    """tyro kept every source line break of an indented field docstring, and the formatter wrapped
    each source line again (issue 46, item 6); ``experiments.help_text`` joins each paragraph."""
    import os
    import subprocess
    import sys

    from experiments.help_text import reflow

    assert reflow("One line\n    and its continuation.\n\n    A second paragraph:\n    - an item\n    - another") == \
        "One line and its continuation.\n\nA second paragraph:\n- an item\n- another"
    out = subprocess.run([sys.executable, "-m", "experiments.cli", "train", "cartpole_ppo", "--help"],
                         capture_output=True, text=True, env={**os.environ, "COLUMNS": "400"}).stdout
    # In the source these words are on two lines (bpo/config/schema.py, OnPolicyTrainConfig.method).
    assert re.search(r"by its registered name \(``bpo\.agents\.methods``\): 'ppo' \(Listing 1\), 'a2c'", out), out


def test_bpo_help_lists_every_preset_and_variant_within_its_width(capsys):
    """``bpo --help``: the preset and variant names, which come from the registries (a plug-in's
    too: another test file registers one), are wrapped to the hand-written text's width (at most
    113 columns there), not one line of 170 or more."""
    from bpo.config.presets import PRESETS, VARIANTS
    from experiments.cli import usage

    text = usage()
    assert max(len(line) for line in text.splitlines()) <= 113
    listed = [name.strip(".") for name in re.findall(r"[a-z0-9_.]+", text)]  # a list ends with a full stop
    assert set(PRESETS) <= set(listed) and set(VARIANTS) <= set(listed)


def test_bpo_train_help_without_a_preset_says_to_name_one(capsys):
    """Without a preset, ``bpo train --help`` printed the overview and then some 490 lines of base
    defaults that are no preset's (--env CartPole-v1, 100000 steps, both --ppo.* and --a2c.*)."""
    from experiments.cli import main

    assert main(["train", "--help"]) == 0
    out = capsys.readouterr().out
    assert out.rstrip().endswith("(e.g. `bpo train cartpole_ppo --help`).") and "--a2c." not in out


def test_every_sweep_file_is_named_in_the_readme_and_in_bpo_sweep_s_help():
    """The README's list of sweep files and ``bpo sweep --help`` are typed by hand; a sweep file
    added to ``experiments/sweeps`` without them (``a2c`` and ``authors_code`` were, until
    session 52) is one a newcomer cannot find."""
    files = {p.stem for p in (ROOT / "experiments" / "sweeps").glob("*.py") if p.stem != "__init__"}
    readme = (ROOT / "README.md").read_text()
    listed = re.search(r"Sweep files live in `experiments/sweeps/`: (.*?)\. A sweep", readme, re.S)
    assert listed, "README.md no longer lists the sweep files in the sentence this test reads"
    assert files - set(re.findall(r"`(\w+)`", listed.group(1))) == set()
    commands = (ROOT / "experiments" / "commands.py").read_text()
    doc = re.search(r"Sweep file: a name in experiments/sweeps \((.*?)\)", commands, re.S)
    assert doc, "experiments/commands.py no longer lists the sweep files in the help text this test reads"
    assert files - {w.strip() for w in doc.group(1).replace("\n", " ").split(",")} == set()
    # bpo --help's list is made from the folder (it had been typed, without authors_code)
    assert files - set(re.findall(r"[a-z0-9_]+", usage().split("NAME is one of:")[1].split("Results:")[0])) == set()
