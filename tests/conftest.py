"""The quick tier of docs/testing.md (``--quick``) and the record of test durations it is cut by.

``--quick`` runs the tests without the ``slow``, ``mujoco``, ``mjx`` and ``slurm`` markers (a
shorthand for ``-m QUICK``, and-ed with any ``-m``) whose recorded duration is at most
``QUICK_SECONDS`` (``tests/durations.json``; a test not recorded yet is run). Markers say what a
test needs; the durations say what it costs, which a marker set by hand kept missing: the tier
had grown to 928 tests and 42 minutes of CPU.

``--record-durations FILE`` writes each test's setup + call + teardown seconds of this session to
FILE (JSON, test id -> seconds, sorted), merged into what FILE held: run the full suite with
``--record-durations tests/durations.json`` to renew the record (docs/testing.md).

The test processes keep compiled programs on disk as the ``bpo`` command does
(``enable_compile_cache``: ``BPO_COMPILE_CACHE``, empty turns it off), so the many tests that build
the same small program (a tiny CartPole run, the same row alone and grouped) compile it once per
suite and load it afterwards; the processes the tests start find the same folder.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from bpo.infra.runtime import enable_compile_cache

QUICK = "not slow and not mujoco and not mjx and not slurm"
"""No test that steps MuJoCo or compiles MJX physics, no Slurm cluster, nothing marked slow."""
QUICK_SECONDS = 3.0
"""The quick tier's cut: tests recorded as taking longer are left out of it."""
DURATIONS = Path(__file__).resolve().parent / "durations.json"


def pytest_addoption(parser):
    parser.addoption("--quick", action="store_true",
                     help=f"run the quick tier only: -m '{QUICK}' and at most {QUICK_SECONDS:g} s a test as recorded "
                          "in tests/durations.json")
    parser.addoption("--record-durations", metavar="FILE", default=None,
                     help="write each test's duration (setup + call + teardown) to FILE, merged with its contents")


def pytest_configure(config):
    enable_compile_cache()
    if config.getoption("--quick"):
        given = config.option.markexpr
        config.option.markexpr = f"({given}) and ({QUICK})" if given else QUICK
    config._bpo_durations = {}


def recorded_durations() -> dict[str, float]:
    """The committed record: test id -> seconds (empty when absent)."""
    return json.loads(DURATIONS.read_text()) if DURATIONS.is_file() else {}


def pytest_collection_modifyitems(config, items):
    durations = recorded_durations()
    if config.getoption("--quick"):
        slow = [item for item in items if durations.get(item.nodeid, 0.0) > QUICK_SECONDS]
        if slow:
            config.hook.pytest_deselected(items=slow)
            items[:] = [item for item in items if durations.get(item.nodeid, 0.0) <= QUICK_SECONDS]
    items[:] = longest_files_first(items, durations)


def longest_files_first(items: list, durations: dict[str, float]) -> list:
    """The test files in decreasing recorded cost, each file's tests in their own order.

    Under ``--dist loadfile`` (the README's command) a file is one unit of work for one worker:
    handing out the longest first leaves the workers no long file to finish alone at the end, and a
    file's module fixtures and compiled programs are made once, in one process, not once per worker.
    """
    cost: dict[str, float] = {}
    for item in items:
        path = item.nodeid.split("::")[0]
        cost[path] = cost.get(path, 0.0) + durations.get(item.nodeid, 0.0)
    return sorted(items, key=lambda item: -cost[item.nodeid.split("::")[0]])  # stable: a file keeps its order


@pytest.hookimpl(trylast=True)
def pytest_runtest_logreport(report):
    # Runs in the controller for every worker's report under pytest-xdist, so one file gets them all.
    config = getattr(report, "config", None) or _CONFIG.get("config")
    if config is not None and config.getoption("--record-durations"):
        config._bpo_durations[report.nodeid] = config._bpo_durations.get(report.nodeid, 0.0) + report.duration


_CONFIG: dict = {}


def pytest_sessionstart(session):
    _CONFIG["config"] = session.config


def pytest_sessionfinish(session):
    path = session.config.getoption("--record-durations")
    if not path or hasattr(session.config, "workerinput"):  # the controller writes, not each worker
        return
    path = Path(path)
    merged = {**(json.loads(path.read_text()) if path.is_file() else {}),
              **{k: round(v, 3) for k, v in session.config._bpo_durations.items()}}
    path.write_text(json.dumps(dict(sorted(merged.items())), indent=0) + "\n")


@pytest.fixture
def link_home(request, tmp_path):
    """Where a symbolic link's target folder goes (parametrized indirectly): ``"beside"`` the link,
    ``tmp_path / "elsewhere"``, or ``"another file system"``, a fresh folder in /dev/shm, removed
    afterwards; skipped where /dev/shm cannot be written or is on tmp_path's file system."""
    if request.param == "beside":
        yield tmp_path / "elsewhere"
        return
    if not os.access("/dev/shm", os.W_OK):
        pytest.skip("no writable /dev/shm here")
    base = Path(tempfile.mkdtemp(dir="/dev/shm"))
    try:
        if os.stat(base).st_dev == os.stat(tmp_path).st_dev:
            pytest.skip("/dev/shm is on the same file system here")
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)
