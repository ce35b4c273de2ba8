"""``bpo probe-summary FOLDER`` (``experiments.probe_summary``) on two real probed BPO-PPO runs: the
table and the JSON hold the numbers of the probe.json files they come from, the figure draws them
and is the same bytes when made again, one column per environment, and a damaged probe.json or a
folder without probes is refused."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import scipy.stats
from flax import serialization

from bpo.config.presets import get_preset
from bpo.config.schema import config_digest, replace, with_bpo
from bpo.training import run, write
from bpo.training.policies import FILE
from experiments.cli import main
from experiments.common import format_p
from experiments.probe_summary import STAT_FIELDS, find_probes, seed_test, seed_texts, summary_figure
from experiments.sweep import RunSpec

TINY = ["--m", "4", "--k", "4", "--horizon", "16", "--ref-k", "8", "--ref-horizon", "32", "--yes"]
ROWS = {"a-qhat": "bpo bpo.use_q_hat=True", "b-no-qhat": "bpo bpo.use_q_hat=False"}


def _spec(name: str, use_q_hat: bool, env: str | None = "CartPole-v1") -> dict:
    pair = (("bpo.use_q_hat", use_q_hat),)
    return RunSpec(run_id=name, preset="cartpole_ppo", env=env, variant="bpo", overrides=pair,
                   label_overrides=pair, seeds=2).to_json()


@pytest.fixture(scope="module")
def probed(tmp_path_factory):
    """A results folder of two probed copies of one tiny CartPole BPO-PPO run (2 updates of 2 seeds,
    policies kept after every update), given the rows of the probe sweep by their spec.json. The
    second copy's mu is replaced by its pi, so that the two runs' numbers differ and a table that
    swapped them would fail; its config says use_q_hat=False, as its row does (its policies are the
    trained run's: the row is a stand-in)."""
    size = get_preset("cartpole_ppo").rollout_size
    cfg = replace(with_bpo(get_preset("cartpole_ppo"), True), total_timesteps=size * 2, eval_every=size,
                  eval_episodes=2, seeds=2, save_policies_every=1)
    trained = tmp_path_factory.mktemp("trained") / "run"
    write(run(cfg), trained)
    folder = tmp_path_factory.mktemp("results")
    for name, use_q_hat in (("a-qhat", True), ("b-no-qhat", False)):
        shutil.copytree(trained, folder / name)
        (folder / name / "spec.json").write_text(json.dumps(_spec(name, use_q_hat)))
    _agreeing(folder / "b-no-qhat", lambda config: config["bpo"].update(use_q_hat=False))
    payload = serialization.msgpack_restore((folder / "b-no-qhat" / FILE).read_bytes())
    for tree in (payload["final"], *payload["during"].values()):
        tree["mu_params"] = tree["actor_params"]
    (folder / "b-no-qhat" / FILE).write_bytes(serialization.msgpack_serialize(payload))
    for name in ROWS:
        assert main(["probe", str(folder / name), *TINY]) == 0
    return folder


def _agreeing(run: Path, edit) -> None:
    """``edit(config)`` on the run's config.json, with the digest of it that its summary.json and
    policies.msgpack carry made to agree (the files of a run that had that config)."""
    config = json.loads((run / "config.json").read_text())
    edit(config)
    (run / "config.json").write_text(json.dumps(config))
    summary = json.loads((run / "summary.json").read_text())
    (run / "summary.json").write_text(json.dumps({**summary, "config_sha256": config_digest(config)}))
    payload = serialization.msgpack_restore((run / FILE).read_bytes())
    (run / FILE).write_bytes(serialization.msgpack_serialize({**payload, "config_sha256": config_digest(config)}))


def _probe(folder, name) -> dict:
    return json.loads((folder / name / "probe" / "probe.json").read_text())


def _table_cells(md: str) -> dict:
    """The Markdown table's data rows, by (label, point): the cells after those two."""
    rows = {}
    for line in md.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if line.startswith("| BPO"):
            assert (cells[0], cells[1]) not in rows, line
            rows[(cells[0], cells[1])] = cells[2:]
    return rows


def _seed_test_by_hand(medians: list[float]) -> tuple[float, float, float, float]:
    """(geometric mean, low, high, p) of the seeds' medians from SciPy's one-sample t-test on their
    logs, two-sided, against 0."""
    logs = np.log(medians)
    test = scipy.stats.ttest_1samp(logs, 0.0)
    half = scipy.stats.t.ppf(0.975, len(logs) - 1) * logs.std(ddof=1) / np.sqrt(len(logs))
    return np.exp(logs.mean()), np.exp(logs.mean() - half), np.exp(logs.mean() + half), float(test.pvalue)


def _expected_cells(p: dict, m: int) -> list[str]:
    """A point's cells written out here from probe.json, independently of the command's code."""
    q = p["pooled"]
    g = lambda x: "n/a" if x is None else f"{x:.3g}"  # noqa: E731
    cells = [f"{p['env_steps']:,}"]
    for n in ("var", "mse"):
        medians = [p["seeds"][s][f"{n}_ratio_median"] for s in sorted(p["seeds"], key=int)]
        geo, lo, hi, pvalue = _seed_test_by_hand(medians)
        cells += [f"{g(q[f'{n}_ratio_median'])} [{g(q[f'{n}_ratio_lo'])}, {g(q[f'{n}_ratio_hi'])}]",
                  ", ".join(g(v) for v in medians), f"{g(geo)} [{g(lo)}, {g(hi)}], p = {format_p(pvalue)}"]
    return cells + [f"{q['frac_var_mu_lower']:.2f}", g(q["ess_frac_mean"]), f"{len(p['seeds'])} × {m}"]


def test_table_and_json_hold_the_numbers_of_each_probe(probed, tmp_path, capsys):
    assert main(["probe-summary", str(probed), "--out", str(tmp_path)]) == 0
    md = (tmp_path / "probe_summary.md").read_text()
    assert md in capsys.readouterr().out
    summary = json.loads((tmp_path / "probe_summary.json").read_text())
    cells = _table_cells(md)
    assert len(cells) == 6 and "## CartPole-v1 (cartpole_ppo)" in md and "95%" in md
    by_id = {r["run_id"]: r for r in summary["runs"]}
    assert set(by_id) == set(ROWS)
    for name, row in ROWS.items():
        probe, entry = _probe(probed, name), by_id[name]
        assert entry["row"] == row and entry["label"] == row.replace("bpo ", "BPO ", 1)
        assert entry["settings"] == probe["settings"] == summary["settings"]
        assert entry["probe_provenance"] == probe["provenance"] and entry["returns"] == probe["returns"]
        assert [p["point"] for p in entry["points"]] == [p["point"] for p in probe["points"]] == [1, 2, "final"]
        for mine, theirs in zip(entry["points"], probe["points"], strict=True):
            assert {k: mine[k] for k in STAT_FIELDS} == {k: theirs["pooled"][k] for k in STAT_FIELDS}
            assert mine["seed_medians"] == {s: {k: v[k] for k in ("var_ratio_median", "mse_ratio_median")}
                                            for s, v in theirs["seeds"].items()}
            assert cells[(entry["label"], str(theirs["point"]))] == _expected_cells(theirs, probe["settings"]["m"])
            for n in ("var", "mse"):  # the seeds as the units: SciPy's one-sample t-test on the log medians
                medians = [theirs["seeds"][s][f"{n}_ratio_median"] for s in sorted(theirs["seeds"], key=int)]
                got = mine["seed_test"][n]
                assert got["n"] == len(medians) == 2
                assert (got["geomean"], got["lo"], got["hi"], got["p"]) == pytest.approx(_seed_test_by_hand(medians))
    a, b = (_probe(probed, name)["points"][0]["pooled"] for name in ROWS)
    assert a["var_ratio_median"] != b["var_ratio_median"]  # the two runs are told apart
    assert b["ess_frac_mean"] == pytest.approx(1.0, rel=1e-5)  # mu = pi in the second copy: every weight 1


def test_the_figure_draws_the_pooled_medians_and_is_the_same_bytes_twice(probed, tmp_path):
    fig = summary_figure(find_probes(probed)[0])
    axes = fig.axes
    assert len(axes) == 2 and axes[0].get_title() == "CartPole-v1 (cartpole_ppo)" and "95%" in fig.get_suptitle()
    for ax, name in zip(axes, ("var", "mse"), strict=True):
        assert ax.get_yscale() == "log"
        medians = {line.get_label(): list(line.get_ydata()) for line in ax.get_lines() if line.get_marker() == "o"}
        for run_id, row in ROWS.items():
            points = _probe(probed, run_id)["points"][:2]  # 'final' repeats update 2: not drawn again
            assert medians[row.replace("bpo ", "BPO ", 1)] == [p["pooled"][f"{name}_ratio_median"] for p in points]
        thin = [line for line in ax.get_lines() if line.get_linewidth() == 0.7]
        assert len(thin) == 4  # 2 seeds x 2 runs
    first, second = tmp_path / "first", tmp_path / "second"
    for out in (first, second):
        assert main(["probe-summary", str(probed), "--out", str(out)]) == 0
    for suffix in ("png", "pdf"):
        data = (first / f"probe_summary.{suffix}").read_bytes()
        assert len(data) > 1000 and data == (second / f"probe_summary.{suffix}").read_bytes()


def test_one_column_per_environment(probed, tmp_path, capsys):
    """A copy of a run moved to another environment (its files edited to agree) gets its own column
    and its own section of the table, holding only its rows."""
    folder = shutil.copytree(probed, tmp_path / "two-envs")
    moved = folder / "b-no-qhat"
    for name in ("summary.json", "probe/probe.json"):
        data = json.loads((moved / name).read_text())
        (moved / name).write_text(json.dumps({**data, "env": "Acrobot-v1"}))
    _agreeing(moved, lambda config: config.update(env="Acrobot-v1"))
    (moved / "spec.json").write_text(json.dumps(_spec("b-no-qhat", False, env=None)))
    assert main(["probe-summary", str(folder)]) == 0
    md = (folder / "probe_summary.md").read_text()
    sections = {s.splitlines()[0]: s for s in md.split("\n## ")[1:]}
    assert list(sections) == ["Acrobot-v1 (cartpole_ppo)", "CartPole-v1 (cartpole_ppo)", "Runs"]  # sort_settings
    cart, acro = sections["CartPole-v1 (cartpole_ppo)"], sections["Acrobot-v1 (cartpole_ppo)"]
    assert "BPO bpo.use_q_hat=True" in cart and "use_q_hat=False" not in cart
    assert "BPO bpo.use_q_hat=False" in acro and "use_q_hat=True" not in acro
    fig = summary_figure(find_probes(folder)[0])
    assert sorted(ax.get_title() for ax in fig.axes if ax.get_title()) == ["Acrobot-v1 (cartpole_ppo)",
                                                                          "CartPole-v1 (cartpole_ppo)"]
    assert len(fig.axes) == 4


def _refused(argv, capsys, *needles) -> None:
    assert main(["probe-summary", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    for needle in needles:
        assert needle in err, err


def _cut(text: str) -> str:
    return text[: len(text) // 2]


def _no_pooled_median(text: str) -> str:
    data = json.loads(text)
    del data["points"][1]["pooled"]["mse_ratio_median"]
    return json.dumps(data)


def _seeds_as_a_list(text: str) -> str:
    data = json.loads(text)
    data["points"][2]["seeds"] = [data["points"][2]["seeds"]["0"]]
    return json.dumps(data)


def _states_of_another_probe(text: str) -> str:
    data = json.loads(text)
    data["points"][0]["pooled"]["states"] = 99
    return json.dumps(data)


@pytest.mark.parametrize("damage, needle", [
    (_cut, "not valid JSON"),
    (lambda text: json.dumps({"seeds": 2, "final_mean": 1.0}), "not a probe result"),
    (lambda text: "[]", "holds a JSON array, not an object"),
    (_no_pooled_median, "points[1]: pooled: mse_ratio_median is missing"),
    (_seeds_as_a_list, "points[2]: seeds must be a non-empty object, got [{"),
    (_states_of_another_probe, "points[0]: pooled states is 99, not 2 seeds x settings.m 4 = 8"),
    # another run's probe of the same task: its estimator's settings are not this run's
    (lambda text: json.dumps({**json.loads(text), "returns": {**json.loads(text)["returns"], "gamma": 0.5}}),
     "returns.gamma is 0.5 but config.json says"),
    (lambda text: json.dumps({**json.loads(text), "returns": {**json.loads(text)["returns"], "rho_bar": 9.0}}),
     "returns.rho_bar is 9.0 but config.json says"),
])
def test_a_damaged_probe_json_is_skipped_and_listed_naming_it(probed, tmp_path, capsys, damage, needle):
    """As ``bpo table`` does with a damaged run file: the summary is made from the other probes,
    the damaged one is named on stderr and in the summary, exit 1 (``--allow-skipped``: 0); when
    no probe can be used, exit 2 and nothing written."""
    folder = shutil.copytree(probed, tmp_path / "results", ignore=shutil.ignore_patterns("probe_summary.*"))
    path = folder / "b-no-qhat" / "probe" / "probe.json"
    path.write_text(damage(path.read_text()))
    assert main(["probe-summary", str(folder)]) == 1
    err = capsys.readouterr().err
    assert f"bpo probe-summary: skipped {folder / 'b-no-qhat'}: probe/probe.json: " in err and needle in err, err
    summary = json.loads((folder / "probe_summary.json").read_text())
    assert [r["run_id"] for r in summary["runs"]] == ["a-qhat"]
    assert [s["run_id"] for s in summary["skipped"]] == ["b-no-qhat"] and needle in summary["skipped"][0]["reason"]
    assert any(n.startswith("Skipped: 1 probe(s)") for n in summary["notes"])
    assert main(["probe-summary", str(folder), "--allow-skipped"]) == 0
    capsys.readouterr()
    other = folder / "a-qhat" / "probe" / "probe.json"
    other.write_text(damage(other.read_text()))
    for p in folder.glob("probe_summary.*"):
        p.unlink()
    _refused([str(folder)], capsys, "folder: no usable probe results", str(folder / "a-qhat"), needle)
    assert not list(folder.glob("probe_summary.*"))


def test_a_folder_without_probes_exits_2(probed, tmp_path, capsys):
    _refused([str(tmp_path)], capsys, "folder: no probe results", str(tmp_path))
    unprobed = shutil.copytree(probed / "a-qhat", tmp_path / "runs" / "a", ignore=shutil.ignore_patterns("probe"))
    _refused([str(unprobed.parent)], capsys, "no probe results")
    _refused([str(probed / "a-qhat")], capsys, "it is a run directory itself")
    _refused([str(tmp_path / "missing")], capsys, "is not a folder")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs"]


def test_each_row_against_the_baseline_row_is_welch_on_the_seeds_log_medians_by_hand(probed, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["probe-summary", str(probed), "--out", str(out), "--baseline", ROWS["b-no-qhat"]]) == 0
    summary = json.loads((out / "probe_summary.json").read_text())
    row, base = _probe(probed, "a-qhat"), _probe(probed, "b-no-qhat")
    comparisons = summary["comparisons"]
    updates = sorted({p["update"] for p in row["points"]})  # the final policies are those of the last update
    assert summary["baseline"] == ROWS["b-no-qhat"] and [c["update"] for c in comparisons] == updates == [1, 2]
    at = lambda probe, u: next(p for p in probe["points"] if p["update"] == u)  # noqa: E731
    for c in comparisons:
        p, q = at(row, c["update"]), at(base, c["update"])
        assert c["row"] == ROWS["a-qhat"] and c["env_steps"] == p["env_steps"]
        for name in ("var", "mse"):
            a = np.log([s[f"{name}_ratio_median"] for s in p["seeds"].values()])
            b = np.log([s[f"{name}_ratio_median"] for s in q["seeds"].values()])
            va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
            df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
            half = scipy.stats.t.ppf(0.975, df) * np.sqrt(va + vb)
            diff = a.mean() - b.mean()
            got = c[name]
            assert got["ratio"] == pytest.approx(np.exp(diff))
            assert (got["lo"], got["hi"]) == pytest.approx((np.exp(diff - half), np.exp(diff + half)))
            t = diff / np.sqrt(va + vb)
            assert got["p"] == pytest.approx(2 * scipy.stats.t.sf(abs(t), df))
            assert (got["n"], got["n_baseline"]) == (2, 2)
    md = (out / "probe_summary.md").read_text()
    assert "## Against BPO bpo.use_q_hat=False" in md
    assert md.count(f"| {comparisons[0]['label']} | ") == 3 + 2  # its pooled rows, then the comparisons
    # A row no probed run has: refused, naming the field and the rows there are.
    assert main(["probe-summary", str(probed), "--out", str(tmp_path / "x"), "--baseline", "ppo"]) == 2
    err = capsys.readouterr().err
    assert "baseline: no probed run has the row 'ppo'" in err and ROWS["a-qhat"] in err


def test_a_seed_left_out_of_the_seeds_test_is_said_in_its_cell():
    """probe.json writes an infinite median (Var_pi = 0 < Var_mu: mu at its worst) as null, and
    the seeds' test leaves it out: the cell says how many seeds it rests on."""
    medians = {"0": {"var_ratio_median": 0.596, "mse_ratio_median": 1.1},
               "1": {"var_ratio_median": None, "mse_ratio_median": 1.2}}
    point = {"seeds": 2, "seed_medians": medians,
             "seed_test": {name: seed_test([m[f"{name}_ratio_median"] for m in medians.values()])
                           for name in ("var", "mse")}}
    assert seed_texts(point, "var") == ("0.596, n/a", "0.596 [n/a, n/a], p = n/a (1 of 2 seeds)")
    assert not seed_texts(point, "mse")[1].endswith("seeds)")
