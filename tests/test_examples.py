"""The examples run as documented (docs/api.md)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).parents[1] / "examples"


@pytest.mark.slow
def test_the_python_api_example_runs(capsys):
    spec = importlib.util.spec_from_file_location("python_api", EXAMPLES / "python_api.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = module.main(2048)
    assert out["seeds"].shape == (4,) and out["c_bar"].shape == (3,)
    assert out["summary"]["seeds"] == 2
    printed = capsys.readouterr().out
    assert "4 seeds: final returns" in printed and "run directory" in printed
