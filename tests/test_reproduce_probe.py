"""``bpo reproduce`` of a sweep with a probe step (``Sweep.probe``, ``experiments.probe.probe_folder``):
the points are checked against the runs before anything runs; a tiny real sweep (PPO and BPO-PPO on
CartPole) is trained, tabulated, its BPO run probed and the probes summarised; the probe.json is the
one `bpo probe` writes by hand; run again, the probe is kept; with other settings or a damaged
file, it is made again."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from bpo.config.presets import get_preset
from bpo.config.schema import ConfigError
from experiments import report
from experiments.cli import main
from experiments.sweep import Grid, ProbePlan, ProbeVariant, Sweep, expand, load_sweep

SETTINGS = "ProbeSettings(m=4, k=4, horizon=16, ref_k=8, ref_horizon=32)"
BY_HAND = ["--m", "4", "--k", "4", "--horizon", "16", "--ref-k", "8", "--ref-horizon", "32", "--points", "1",
           "--yes"]
BPO_RUN = "CartPole-v1-cartpole_ppo-bpo"


def _sweep_file(folder: Path, settings: str = SETTINGS) -> Path:
    """PPO and BPO-PPO on CartPole, 2 updates of 2 seeds, policies kept after update 1."""
    size = get_preset("cartpole_ppo").rollout_size
    fixed = (("total_timesteps", 2 * size), ("eval_every", size), ("eval_episodes", 2), ("save_policies_every", 1))
    path = folder / "tiny_probe.py"
    path.write_text("from bpo.instruments.probe import ProbeSettings\n"
                    "from experiments.sweep import Grid, ProbePlan, ProbeVariant, Sweep\n\n"
                    "SWEEP = Sweep(name='tiny_probe', grids=(Grid(preset='cartpole_ppo', variants=('ppo', 'bpo'),\n"
                    f"             fixed={fixed!r}, seeds=2),),\n"
                    f"             probe=ProbePlan(points=(1,), settings={settings},\n"
                    "    variants=(ProbeVariant('probe-untruncated', points=(1,),\n"
                    "                           rho_bar=float('inf'), c_bar=float('inf')),)))\n")
    return path


def test_probe_points_not_kept_by_a_run_are_refused_before_anything_runs():
    four = 4 * get_preset("cartpole_ppo").rollout_size  # 4 updates
    grid = Grid(preset="cartpole_ppo", variants=("bpo",), fixed=(("total_timesteps", four),
                                                                ("save_policies_every", 2)), seeds=1)
    assert len(expand(Sweep(name="s", grids=(grid,), probe=ProbePlan(points=(2, "final"))))) == 1
    for points in ((3,), (4,), ("2",)):  # not a multiple; the last update (kept as 'final'); not an int
        with pytest.raises(ConfigError, match=r"probe\.points: .* allowed: \[2, 'final'\]"):
            expand(Sweep(name="s", grids=(grid,), probe=ProbePlan(points=points)))
    for variant, message in ((ProbeVariant("probe"), r"probe\.variants: name 'probe'"),
                             (ProbeVariant("a/b"), r"probe\.variants: must be a plain folder name .* got 'a/b'"),
                             (ProbeVariant("x", points=(3,)), r"probe\.variants\[x\]\.points: 3 is not kept"),
                             (ProbeVariant("x", rho_bar=0.0), r"returns\.rho_bar")):
        with pytest.raises(ConfigError, match=message):
            expand(Sweep(name="s", grids=(grid,), probe=ProbePlan(variants=(variant,))))
    # A PPO run is not probed, so the plan does not constrain it.
    ppo = Grid(preset="cartpole_ppo", variants=("ppo",), fixed=(("total_timesteps", four),), seeds=1)
    assert len(expand(Sweep(name="s", grids=(ppo,), probe=ProbePlan(points=(3,))))) == 1
    # The committed measurement: its five points are kept by each of its runs.
    sweep = load_sweep("probe")
    assert sweep.probe.points == (29, 58, 87, 116, 145) and len(expand(sweep)) == 4
    assert [(v.name, v.points, v.rho_bar, v.c_bar) for v in sweep.probe.variants] == [
        ("probe-untruncated", (145,), float("inf"), float("inf"))]


def test_reproduce_probes_the_bpo_runs_once_and_summarises_them(tmp_path, capsys):
    sweep_file, out = _sweep_file(tmp_path), tmp_path / "results" / "probe"
    argv = ["reproduce", str(sweep_file), "--out", str(out), "--no-progress", "--workers", "1"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert f"{BPO_RUN}: probing into probe/" in printed and "# Estimator probe" in printed
    assert f"{BPO_RUN}: probing into probe-untruncated/" in printed
    probe_file = out / BPO_RUN / "probe" / "probe.json"
    probe = json.loads(probe_file.read_text())
    assert [p["point"] for p in probe["points"]] == [1] and sorted(probe["points"][0]["seeds"]) == ["0", "1"]
    assert probe["provenance"]["command"] == ["bpo", *argv]
    assert not (out / "CartPole-v1-cartpole_ppo-ppo" / "probe").exists()  # PPO has no mu
    summary = json.loads((out / "probe_summary.json").read_text())
    assert [r["run_id"] for r in summary["runs"]] == [BPO_RUN]
    assert summary["runs"][0]["points"][0]["var_ratio_median"] == probe["points"][0]["pooled"]["var_ratio_median"]
    for name in ("probe_summary.md", "probe_summary.png", "table1.md", "curves.png"):
        assert (out / name).is_file(), name
    _check_report_blocks(out, probe)
    untruncated = json.loads((out / BPO_RUN / "probe-untruncated" / "probe.json").read_text())
    assert (untruncated["returns"]["rho_bar"], untruncated["returns"]["c_bar"]) == (float("inf"), float("inf"))
    assert untruncated["settings"] == probe["settings"] and [p["point"] for p in untruncated["points"]] == [1]
    assert "ρ̄ = inf, c̄ = inf" in (out / "probe-untruncated_summary.md").read_text()
    assert "ρ̄ = 1.5, c̄ = 1.5" in (out / "probe_summary.md").read_text()  # cartpole_ppo's own levels

    # The same probe by hand on a copy of the run: the same numbers.
    by_hand = tmp_path / "by_hand"
    shutil.copytree(out / BPO_RUN, by_hand, ignore=shutil.ignore_patterns("probe"))
    assert main(["probe", str(by_hand), *BY_HAND]) == 0
    hand = json.loads((by_hand / "probe" / "probe.json").read_text())
    assert hand["points"] == probe["points"] and hand["settings"] == probe["settings"]

    # Again: the runs and the probe are kept, byte for byte; the summary is written again.
    before = probe_file.read_bytes()
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert f"{BPO_RUN}: probed already with these settings (probe/probe.json kept)" in printed
    assert f"{BPO_RUN}: probed already with these settings (probe-untruncated/probe.json kept)" in printed
    assert probe_file.read_bytes() == before

    # A damaged probe.json is not a probe: made again, the same numbers.
    probe_file.write_text("{")
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert f"{BPO_RUN}: probing into probe/" in printed and "probing into probe-untruncated/" not in printed
    assert json.loads(probe_file.read_text())["points"] == probe["points"]

    # Other settings: probed again with them (the runs are kept).
    other = _sweep_file(tmp_path, SETTINGS.replace("m=4", "m=5"))
    assert main(["reproduce", str(other), "--out", str(out), "--no-progress", "--workers", "1"]) == 0
    printed = capsys.readouterr().out
    assert f"{BPO_RUN}: probing into probe/" in printed and f"{BPO_RUN}: probing into probe-untruncated/" in printed
    assert json.loads(probe_file.read_text())["settings"]["m"] == 5


def _check_report_blocks(out: Path, probe: dict) -> None:
    """`bpo report`'s probe blocks: the ratios, written out here from probe.json, and the cost."""
    pooled = probe["points"][0]["pooled"]
    ratio = lambda n: "{:.3g} [{:.3g}, {:.3g}]".format(*(pooled[f"{n}_ratio_{e}"] for e in ("median", "lo", "hi")))  # noqa: E731
    line = report.blocks(out.parent)["line-probe-summary"]()
    assert f"BPO: Var {ratio('var')}, MSE {ratio('mse')} at " in line and "2 seeds × 4 states" in line
    assert line.rstrip("\n") in report.blocks(out.parent)["glance"]()  # the ratios in the glance
    block = report.blocks(out.parent)["probe-summary"]()
    train = json.loads((out / BPO_RUN / "summary.json").read_text())["wall_time_s"]
    wall = probe["provenance"]["wall_time_s"]
    assert f"`{BPO_RUN}` {train / 60:.1f} min of training, {wall / 60:.1f} min of probing" in block
    assert "#### CartPole-v1" in block and "\n## " not in block and "# Estimator probe" not in block
