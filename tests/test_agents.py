"""REINFORCE update (Listing 2) against the closed-form linear-softmax gradient, the learning-rate
schedule, the FIFO replay buffer against a Python deque, epoch sampling, and the minibatch-epoch
loop shared by PPO, FQE and mu."""

import collections

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from bpo.agents.reinforce import exponential_schedule, reinforce_loss, reinforce_update
from bpo.core import replay as rb
from bpo.core.minibatch import last_minibatch, minibatch_epochs, permuted_minibatches
from bpo.core.networks import SHORT_CORRIDOR_FEATURES, LinearSoftmax, two_action_logits


def test_reinforce_gradient_matches_closed_form():
    """grad of sum_t G_t ln pi(A_t) for a linear softmax is sum_t G_t (x(A_t) - sum_b pi(b) x(b))."""
    policy = LinearSoftmax(SHORT_CORRIDOR_FEATURES, two_action_logits(0.3))
    obs = jnp.ones((5, 1))
    params = policy.init(jax.random.PRNGKey(0), obs)
    actions = jnp.array([0, 1, 1, 0, 1])
    returns = jnp.array([-5.0, -4.0, -3.0, -2.0, -1.0])
    mask = jnp.array([1.0, 1.0, 1.0, 1.0, 0.0])  # the last row is padding
    grad = jax.grad(reinforce_loss)(params, policy.apply, obs, actions, returns, mask)["params"]["theta"]
    x = np.array(SHORT_CORRIDOR_FEATURES)
    pi = np.array([0.7, 0.3])
    want = sum(m * g * (x[a] - pi @ x) for a, g, m in zip(actions, returns, mask, strict=True))
    np.testing.assert_allclose(-np.asarray(grad), want, rtol=1e-5)
    assert float(jax.nn.softmax(policy.apply(params, obs[:1]))[0, 1]) == pytest.approx(0.3, rel=1e-6)


def test_sgd_update_is_listing2_step():
    policy = LinearSoftmax(SHORT_CORRIDOR_FEATURES, two_action_logits(0.5))
    obs = jnp.ones((2, 1))
    params = policy.init(jax.random.PRNGKey(0), obs)
    tx = optax.sgd(0.1)
    actions, returns, mask = jnp.array([1, 0]), jnp.array([-2.0, -1.0]), jnp.ones(2)
    new, _, _ = reinforce_update(params, tx.init(params), tx, policy.apply, obs, actions, returns, mask)
    x = np.array(SHORT_CORRIDOR_FEATURES)
    step = 0.1 * sum(g * (x[a] - np.array([0.5, 0.5]) @ x) for a, g in zip([1, 0], [-2.0, -1.0], strict=True))
    np.testing.assert_allclose(new["params"]["theta"] - params["params"]["theta"], step, rtol=1e-6)


def test_exponential_schedule_endpoints_and_ratio():
    schedule = exponential_schedule(0.1, 0.01, 11)
    values = np.array([float(schedule(k)) for k in range(12)])
    assert values[0] == pytest.approx(0.1) and values[10] == pytest.approx(0.01) and values[11] == pytest.approx(0.01)
    np.testing.assert_allclose(values[1:11] / values[:10], 0.1 ** 0.1, rtol=1e-5)


def test_replay_is_fifo_like_a_deque():
    rng = np.random.default_rng(0)
    capacity = 8
    buf = rb.init_replay({"x": 0.0, "i": jnp.int32(0)}, capacity)
    add = jax.jit(rb.add)
    reference = collections.deque(maxlen=capacity)
    counter = 0
    for n_rows in (3, 0, 5, 12, 1, 7):
        rows = np.arange(counter, counter + 12)
        valid = np.zeros(12, bool)
        valid[:n_rows] = True
        rng.shuffle(valid)  # valid rows need not be contiguous
        buf = add(buf, {"x": rows.astype(np.float32), "i": rows.astype(np.int32)}, jnp.asarray(valid))
        reference.extend(rows[valid].tolist())
        counter += 12
        stored = np.asarray(buf.data["i"])[: int(buf.size)]
        assert int(buf.size) == len(reference)
        assert sorted(stored.tolist()) == sorted(reference)
        # The slot at ptr holds the oldest entry once the buffer is full.
        if len(reference) == capacity:
            assert int(buf.data["i"][int(buf.ptr)]) == reference[0]


def test_epoch_indices_cover_filled_slots():
    buf = rb.init_replay({"x": 0.0}, 16)
    buf = rb.add(buf, {"x": jnp.arange(16.0)}, jnp.arange(16) < 16)
    idx = np.asarray(rb.epoch_indices(jax.random.PRNGKey(0), buf, 4))
    assert idx.shape == (4, 4) and sorted(idx.ravel().tolist()) == list(range(16))  # one exact pass
    partial = rb.add(rb.init_replay({"x": 0.0}, 16), {"x": jnp.arange(16.0)}, jnp.arange(16) < 5)
    idx = np.asarray(rb.epoch_indices(jax.random.PRNGKey(1), partial, 4))
    assert set(idx.ravel().tolist()) == set(range(5))  # only filled slots, each used


def test_permuted_minibatches_visit_every_row_once_per_epoch():
    idx = np.asarray(permuted_minibatches(jax.random.PRNGKey(0), 16, 4))
    assert idx.shape == (4, 4) and sorted(idx.ravel().tolist()) == list(range(16))
    assert idx.ravel().tolist() != list(range(16))  # permuted, not in order
    idx = np.asarray(permuted_minibatches(jax.random.PRNGKey(1), 18, 4))  # 4 whole minibatches, 2 rows sit out
    assert idx.shape == (4, 4) and len(set(idx.ravel().tolist())) == 16 and idx.max() < 18
    # A single minibatch is every row in order, the remainder included.
    np.testing.assert_array_equal(permuted_minibatches(jax.random.PRNGKey(2), 6, 4), [list(range(6))])


def test_whole_step_minibatches_hold_whole_time_steps():
    """Row 26 of the departures (the authors' code): with ``group`` environments, a minibatch is
    batch / group time steps of a time-major rollout, each with all its rows in the order of the
    authors' ``buffer[steps].reshape(-1)``; an epoch still visits every row once. ``group`` 1 draws
    the rows Stable-Baselines3's way, the very indices of a plain permutation."""
    n_steps, group, batch = 8, 4, 8
    idx = np.asarray(permuted_minibatches(jax.random.PRNGKey(0), n_steps * group, batch, group))
    rows = np.arange(n_steps * group).reshape(n_steps, group)  # rows[t, e]: step t of environment e
    assert idx.shape == (4, 8) and sorted(idx.ravel().tolist()) == list(range(32))
    for minibatch in idx:
        steps = minibatch[::group] // group
        np.testing.assert_array_equal(minibatch, rows[steps].reshape(-1))
    assert idx.ravel().tolist() != list(range(32))  # the time steps are shuffled
    for key, n, size in ((jax.random.PRNGKey(1), 18, 4), (jax.random.PRNGKey(2), 32, 8)):
        np.testing.assert_array_equal(permuted_minibatches(key, n, size, 1),
                                      jax.random.permutation(key, n)[: n // size * size].reshape(-1, size))


def test_whole_step_epochs_of_a_filling_replay_draw_its_filled_steps():
    """``epoch_indices`` with ``group``: only the time steps D holds, each with its ``group`` rows;
    one exact pass when D is full; ``group`` 1 is the plain random order of the filled slots."""
    group, capacity = 4, 32
    filling = rb.add(rb.init_replay({"x": 0.0}, capacity), {"x": jnp.arange(12.0)}, jnp.ones(12, bool))
    idx = np.asarray(rb.epoch_indices(jax.random.PRNGKey(3), filling, 8, group))
    assert idx.shape == (4, 8) and set(idx.ravel().tolist()) == set(range(12))
    for minibatch in idx:
        for block in minibatch.reshape(-1, group):
            np.testing.assert_array_equal(block, block[0] + np.arange(group))
            assert block[0] % group == 0
    full = rb.add(filling, {"x": jnp.arange(20.0)}, jnp.ones(20, bool))
    idx = np.asarray(rb.epoch_indices(jax.random.PRNGKey(4), full, 8, group))
    assert sorted(idx.ravel().tolist()) == list(range(capacity))
    wrapped = rb.add(full, {"x": jnp.arange(12.0)}, jnp.ones(12, bool))  # the FIFO wraps: slots 0-11 rewritten
    assert int(wrapped.ptr) % group == 0 and int(wrapped.size) == capacity
    idx = np.asarray(rb.epoch_indices(jax.random.PRNGKey(6), wrapped, 8, group))
    assert sorted(idx.ravel().tolist()) == list(range(capacity))
    assert all(np.array_equal(b, b[0] + np.arange(group)) and b[0] % group == 0 for b in idx.reshape(-1, group))
    key = jax.random.PRNGKey(5)
    order = np.argsort(np.where(np.arange(capacity) < 12, jax.random.uniform(key, (capacity,)), 2.0))
    np.testing.assert_array_equal(rb.epoch_indices(key, filling, 8, 1), order[np.arange(32) % 12].reshape(4, 8))


def record_steps(n_rows, n_steps):
    """A minibatch step that counts each row's visits and records every step's indices and key."""
    def step(carry, idx, key):
        counts, i, seen_idx, seen_keys = carry
        carry = (counts.at[idx].add(1), i + 1, seen_idx.at[i].set(idx), seen_keys.at[i].set(key))
        return carry, {"step": i.astype(jnp.float32)}

    keys = jnp.zeros((n_steps,) + jax.random.PRNGKey(0).shape, jax.random.PRNGKey(0).dtype)
    return step, (jnp.zeros(n_rows, jnp.int32), jnp.int32(0), jnp.zeros((n_steps, 4), jnp.int32), keys)


def test_minibatch_epochs_ppo_style_visits_each_row_once_per_epoch():
    """3 epochs of 16 rows in minibatches of 4: 12 steps, every row once per epoch; the epoch
    key splits into (index key, sample key), the steps' keys come from the sample key; the
    metrics come back averaged over the 12 steps."""
    key, n_epochs = jax.random.PRNGKey(7), 3
    step, carry = record_steps(16, 12)
    (counts, n_steps, seen_idx, seen_keys), metrics = jax.jit(lambda c: minibatch_epochs(
        key, c, step, n_epochs=n_epochs, indices=lambda k: permuted_minibatches(k, 16, 4)))(carry)
    assert int(n_steps) == 12
    np.testing.assert_array_equal(counts, 3)
    assert float(metrics["step"]) == pytest.approx(np.mean(np.arange(12)))
    for e, k in enumerate(jax.random.split(key, n_epochs)):
        k_idx, k_samples = jax.random.split(k)
        np.testing.assert_array_equal(seen_idx[4 * e: 4 * e + 4], permuted_minibatches(k_idx, 16, 4))
        np.testing.assert_array_equal(seen_keys[4 * e: 4 * e + 4], jax.random.split(k_samples, 4))
        assert sorted(np.asarray(seen_idx[4 * e: 4 * e + 4]).ravel().tolist()) == list(range(16))
    assert len({tuple(np.asarray(k).tolist()) for k in seen_keys}) == 12


def test_minibatch_epochs_over_a_filling_replay_use_only_its_filled_rows():
    """FQE and mu: capacity 16 // 4 = 4 minibatches per epoch, drawn from the 5 filled rows only."""
    replay = rb.add(rb.init_replay({"x": 0.0}, 16), {"x": jnp.arange(16.0)}, jnp.arange(16) < 5)
    step, carry = record_steps(16, 8)
    (counts, n_steps, _, _), _ = minibatch_epochs(jax.random.PRNGKey(3), carry, step, n_epochs=2,
                                                  indices=lambda k: rb.epoch_indices(k, replay, 4))
    assert int(n_steps) == 8 and int(counts.sum()) == 32
    assert np.all(np.asarray(counts)[:5] >= 6) and np.all(np.asarray(counts)[5:] == 0)


def test_filled_only_epochs_make_one_pass_over_the_rows_a_filling_replay_holds():
    """``n_active`` (bpo.replay_epoch_filled_only, the authors' epochs while D fills): 8 of 16 rows
    filled in minibatches of 4: each of 3 epochs steps on 2 minibatches, every filled row exactly
    once per epoch, as a plain loop over a permutation of the 8 rows would; the metrics average the
    6 steps that ran; ``last_minibatch`` names the rows of the last of them."""
    replay = rb.add(rb.init_replay({"x": 0.0}, 16), {"x": jnp.arange(16.0)}, jnp.arange(16) < 8)
    key, indices = jax.random.PRNGKey(5), (lambda k: rb.epoch_indices(k, replay, 4))
    step, carry = record_steps(16, 6)
    (counts, n_steps, seen_idx, _), metrics = jax.jit(lambda c: minibatch_epochs(
        key, c, step, n_epochs=3, indices=indices, n_active=jnp.int32(2)))(carry)
    assert int(n_steps) == 6
    np.testing.assert_array_equal(counts, [3] * 8 + [0] * 8)
    assert float(metrics["step"]) == pytest.approx(np.mean(np.arange(6)))
    np.testing.assert_array_equal(last_minibatch(key, n_epochs=3, indices=indices, n_active=2), seen_idx[5])
    # without n_active: the epoch is padded to 16 rows, and the last minibatch is the fourth
    step, carry = record_steps(16, 12)
    (_, _, seen_idx, _), _ = minibatch_epochs(key, carry, step, n_epochs=3, indices=indices)
    np.testing.assert_array_equal(last_minibatch(key, n_epochs=3, indices=indices), seen_idx[11])
