"""The loop clock (``bpo.training.driver``) and the evaluation times in ``summary.json``
(``bpo.training.summary.evaluation_clock``): checked with a runner whose iterations take known
times on a fake clock, so the expected numbers are sums by hand; through a stop and a resume; and
on a real short run."""

from __future__ import annotations

import json
import signal
from types import SimpleNamespace

import numpy as np
import pytest

from bpo.config.presets import get_preset
from bpo.config.schema import replace
from bpo.infra import checkpoint as ckpt
from bpo.infra.processes import Interrupted
from bpo.training import driver, summary
from bpo.training.run_output import RunOutput
from experiments.cli import main

DURATIONS = [1.0, 2.0, 3.0, 4.0, 5.0]
"""Seconds iteration i takes on the fake clock."""


class FakeRunner:
    """A runner of ``driver.drive`` whose iteration ``i`` advances ``clock`` by ``DURATIONS[i]``;
    compiling, initialising and snapshotting (a checkpoint) take 100 s each, which the loop clock
    must leave out. It evaluates before every iteration, like an on-policy run."""

    unit, iteration_name, checkpoint_info, backend, threads, seed_chunk = "update", "update", {}, "cpu", 1, 2
    compile_time_s = eval_time_s = eval_worker_time_s = 0.0

    def __init__(self, clock: SimpleNamespace):
        self.clock, self.n_iterations, self.state = clock, len(DURATIONS), np.zeros(1)

    def _spend(self, seconds: float) -> None:
        self.clock.now += seconds

    def compile(self):
        self._spend(100)

    def init(self):
        self._spend(100)

    def template(self, done):
        return np.zeros(1)

    def extra_problem(self, extra, done):
        return None

    def restore(self, state, extra):
        self.state = state

    def iterate(self, done):
        self._spend(DURATIONS[done])
        self.state = self.state + 1
        return {"loss": np.zeros((2, 1))}, done

    def snapshot(self, done):
        self._spend(100)
        return self.state, {}, self.state

    def finish(self):
        return {"eval": {}, "train": {}}

    def policies(self):
        return {}

    def evaluations_done(self, done):
        return done

    def close(self):
        pass


@pytest.fixture
def fake_clock(monkeypatch):
    clock = SimpleNamespace(now=0.0)
    monkeypatch.setattr(driver, "time", SimpleNamespace(perf_counter=lambda: clock.now))
    return clock


def test_the_loop_clock_sums_the_iterations_and_leaves_out_compiling_and_checkpoints(tmp_path, fake_clock):
    cfg = replace(get_preset("cartpole_ppo"), seeds=2)
    out = driver.drive(FakeRunner(fake_clock), cfg, tmp_path, checkpoint_every=1)
    np.testing.assert_array_equal(out.loop_clock_s, [0, 1, 3, 6, 10, 15])


def test_a_resumed_run_s_clock_goes_on_from_its_checkpoint(tmp_path, fake_clock, monkeypatch):
    cfg = replace(get_preset("cartpole_ppo"), seeds=2)
    runner = FakeRunner(fake_clock)
    monkeypatch.setattr(driver.processes, "requested", lambda: signal.SIGINT if runner.state[0] == 2 else None)
    with pytest.raises(Interrupted):
        driver.drive(runner, cfg, tmp_path, checkpoint_every=4)  # a checkpoint at the stop, after 2
    monkeypatch.setattr(driver.processes, "requested", lambda: None)
    told = []
    out = driver.drive(FakeRunner(fake_clock), cfg, tmp_path, checkpoint_every=4, on_resume=told.append)
    # Iterations 2 to 4 are run in the second segment; their durations add to the first segment's 3 s.
    np.testing.assert_array_equal(out.loop_clock_s, [0, 1, 3, 6, 10, 15])
    assert told == [2 * 2]  # two evaluations of each of two seeds before the stop


def test_a_checkpoint_without_a_clock_gives_a_run_without_one(tmp_path, fake_clock, monkeypatch):
    cfg = replace(get_preset("cartpole_ppo"), seeds=2)
    runner = FakeRunner(fake_clock)
    monkeypatch.setattr(driver.processes, "requested", lambda: signal.SIGINT if runner.state[0] == 2 else None)
    with pytest.raises(Interrupted):
        driver.drive(runner, cfg, tmp_path, checkpoint_every=4)
    state, extra, info = ckpt.load(tmp_path, lambda _: np.zeros(1))
    del extra[driver.CLOCK]  # as a checkpoint written before the clock was kept
    ckpt.save(tmp_path, state, extra, {k: v for k, v in info.items() if k != "config"}, cfg)
    monkeypatch.setattr(driver.processes, "requested", lambda: None)
    out = driver.drive(FakeRunner(fake_clock), cfg, tmp_path, checkpoint_every=4)
    assert out.loop_clock_s is None


def _output(cfg, evals: dict, clock) -> RunOutput:
    return RunOutput(cfg, {"eval": evals, "train": {}}, 0.0, 0.0, 0.0, 1, "cpu", loop_clock_s=np.asarray(clock))


def test_on_policy_evaluations_take_the_clock_after_their_updates():
    cfg = replace(get_preset("cartpole_ppo"), seeds=2)
    r = cfg.rollout_size
    steps = np.array([[0, 2 * r, 4 * r, 5 * r]] * 2)  # evaluated after 0, 2, 4 and 5 updates
    clock = [0.0, 1.5, 2.5, 4.0, 7.0, 8.25, 9.0]
    got = summary.evaluation_clock(_output(cfg, {"eval_step": steps, "eval_return": steps * 0.0}, clock))
    assert got == {"step": [0, 2 * r, 4 * r, 5 * r], "elapsed_s": [0.0, 2.5, 7.0, 8.25]}


def test_an_episodic_run_s_k_th_evaluation_takes_the_clock_after_iteration_k():
    cfg = replace(get_preset("short_corridor"), seeds=2, episodes=30, eval_every=10)
    episodes = np.array([[0, 10, 20, 30]] * 2)
    clock = [0.0, 0.1, 1.1, 2.6, 4.0]  # iteration 0 only evaluates; 1 to 3 train a block, then evaluate
    got = summary.evaluation_clock(_output(cfg, {"eval_episode": episodes, "eval_return": episodes * 0.0}, clock))
    assert got == {"step": [0, 10, 20, 30], "elapsed_s": [0.1, 1.1, 2.6, 4.0]}


def test_no_clock_no_evaluation_times():
    cfg = replace(get_preset("cartpole_ppo"), seeds=1)
    out = RunOutput(cfg, {"eval": {"eval_step": np.zeros((1, 1))}, "train": {}}, 0.0, 0.0, 0.0, 1, "cpu")
    assert summary.evaluation_clock(out) is None


def test_a_real_run_records_a_rising_time_for_each_evaluation_of_its_curve(tmp_path):
    out = tmp_path / "run"
    assert main(["train", "short_corridor", "--no-bpo", "--episodes", "40", "--eval-every", "10",
                 "--eval-episodes", "2", "--seeds", "2", "--no-progress", "--out", str(out)]) == 0
    recorded = json.loads((out / "summary.json").read_text())
    clock = recorded["evaluation_clock"]
    curve_steps = sorted({int(line.split(",")[0]) for line in (out / "curve.csv").read_text().splitlines()[1:]})
    assert clock["step"] == curve_steps == [0, 10, 20, 30, 40]
    times = np.array(clock["elapsed_s"])
    assert np.all(times > 0) and np.all(np.diff(times) > 0)
    assert times[-1] < recorded["wall_time_s"] - recorded["compile_time_s"]
