"""Seed shards trained side by side in threads (``bpo.runners.jax_runner``): the shards cover every
seed once at chunk boundaries, and a run's results are bit-identical whatever the number of
threads, checkpointed and resumed or not, for both JAX runners and for rows of hyperparameters."""

from __future__ import annotations

import signal

import jax
import numpy as np
import pytest

from bpo.config.presets import apply_variant, get_preset
from bpo.config.schema import replace, with_bpo
from bpo.infra import processes, runtime
from bpo.runners.jax_runner import shard_bounds
from bpo.training import run, run_rows


@pytest.mark.parametrize(("seeds", "chunk", "threads", "expected"), [
    (100, 10, 2, [(0, 50), (50, 100)]),
    (100, 10, 3, [(0, 40), (40, 70), (70, 100)]),
    (25, 10, 4, [(0, 10), (10, 25)]),      # two whole chunks: two shards; the last takes the 5 left over
    (7, 10, 2, [(0, 7)]),                  # less than a chunk: one shard
    (5, 1, 2, [(0, 3), (3, 5)]),
    (6, 6, 8, [(0, 6)]),
])
def test_shards_are_whole_chunks_covering_every_seed_once(seeds, chunk, threads, expected):
    bounds = shard_bounds(seeds, chunk, threads)
    assert bounds == expected
    assert [a for a, _ in bounds[1:]] == [b for _, b in bounds[:-1]] and bounds[0][0] == 0 and bounds[-1][1] == seeds
    assert all((b - a) % chunk == 0 for a, b in bounds[:-1])


def _equal(a, b):
    jax.tree.map(np.testing.assert_array_equal, a.metrics, b.metrics)


def _with_threads(monkeypatch, n: int, cfg, **kw):
    monkeypatch.setenv("BPO_THREADS", str(n))
    out = run(cfg, **kw)
    assert out.threads == min(n, cfg.seeds // kw.get("seed_chunk", 10) or 1)
    return out


@pytest.mark.parametrize("algo", ["reinforce", "bpo"])
def test_episodic_runs_are_identical_whatever_the_threads(monkeypatch, algo):
    cfg = replace(with_bpo(get_preset("short_corridor"), algo == "bpo"), episodes=20, eval_every=10, eval_episodes=3,
                  seeds=5)
    one = _with_threads(monkeypatch, 1, cfg, seed_chunk=2)
    _equal(one, _with_threads(monkeypatch, 2, cfg, seed_chunk=2))


def test_onpolicy_runs_and_checkpoints_are_identical_whatever_the_threads(monkeypatch, tmp_path):
    cfg = replace(apply_variant(get_preset("cartpole_ppo"), "bpo_c1.0_rho1.5"), seeds=4, total_timesteps=1024,
                  eval_every=512, eval_episodes=2)
    one = _with_threads(monkeypatch, 1, cfg, seed_chunk=1)
    _equal(one, _with_threads(monkeypatch, 3, cfg, seed_chunk=1))
    # Stopped after its first iteration with a checkpoint written by two threads, resumed by one:
    # the same run. (The stop is requested here directly; tests/test_processes.py sends real signals.)
    with monkeypatch.context() as m:
        m.setattr(processes, "requested", lambda: signal.SIGTERM)
        with pytest.raises(processes.Interrupted):
            _with_threads(m, 2, cfg, seed_chunk=1, checkpoint_dir=tmp_path, checkpoint_every=100)
    _equal(one, _with_threads(monkeypatch, 1, cfg, seed_chunk=1, checkpoint_dir=tmp_path, checkpoint_every=100))


def test_rows_of_hyperparameters_are_identical_whatever_the_threads(monkeypatch):
    cfgs = [replace(apply_variant(get_preset("cartpole_ppo"), v), seeds=2, total_timesteps=512, eval_every=512,
                    eval_episodes=2) for v in ("bpo_c1.5_rho1.5", "bpo_c1.0_rho1.0")]
    outs = {}
    for n in (1, 2):
        monkeypatch.setenv("BPO_THREADS", str(n))
        outs[n] = run_rows(cfgs, seed_chunk=1)
    assert outs[2][0].threads == 2
    for a, b in zip(outs[1], outs[2], strict=True):
        _equal(a, b)


@pytest.mark.parametrize("value", ["0", "-1", "two"])
def test_bpo_threads_must_be_a_positive_integer(monkeypatch, value):
    monkeypatch.setenv("BPO_THREADS", value)
    with pytest.raises(ValueError, match="BPO_THREADS"):
        runtime.cpu_threads()
