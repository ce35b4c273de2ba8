"""FQE (eqs. 13, 14) with r-hat and gamma^2 (eqs. 7, 8) converges to the exact q_pi and q-hat_pi
of a tabular MDP, and the loss, the second-moment problem and the Appendix C.2 stabilisers match
hand computations."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from bpo.core.fqe import (
    FQESettings,
    QState,
    clip_targets,
    expected_next_value,
    fqe_loss,
    fqe_step,
    polyak_update,
    q_bounds,
    q_hat_bounds,
    second_moment_problem,
    take_action,
    td_weights,
    to_real,
)

N_S, N_A, GAMMA = 3, 2, 0.9
# P[s, a, s'] in quarters; the last column is the absorbing terminal state.
P_QUARTERS = np.array([
    [[1, 2, 0, 1], [0, 1, 3, 0]],
    [[2, 0, 1, 1], [0, 0, 2, 2]],
    [[1, 1, 1, 1], [3, 0, 0, 1]],
])
# Deterministic transitions: with symlog targets FQE regresses on mean(symlog(y)), which equals
# symlog(mean(y)) only when the next state is deterministic (Jensen), so symlog runs use this MDP.
P_DETERMINISTIC = 4 * np.eye(N_S + 1)[np.array([[1, 2], [2, 3], [0, 3]])]
REWARD = np.array([[1.0, -2.0], [0.5, 3.0], [-1.0, 2.0]])
PI = np.array([[0.3, 0.7], [0.6, 0.4], [0.5, 0.5]])


def exact_q(reward, gamma, quarters=P_QUARTERS):
    """Solve q = reward + gamma * sum_{s'} P(s'|s,a) sum_{a'} pi(a'|s') q(s', a') exactly."""
    p = quarters[:, :, :N_S] / 4.0
    m = np.einsum("sat,tb->satb", p, PI).reshape(N_S * N_A, N_S * N_A)
    return np.linalg.solve(np.eye(N_S * N_A) - gamma * m, reward.reshape(-1)).reshape(N_S, N_A)


def dataset(quarters=P_QUARTERS):
    """Every (s, a) with next states in exact proportion to P, so the FQE fixed point is exact."""
    rows = []
    for s in range(N_S):
        for a in range(N_A):
            for s2, count in enumerate(quarters[s, a]):
                rows += [(s, a, s2)] * int(count)
    s, a, s2 = map(np.array, zip(*rows, strict=True))
    eye = np.eye(N_S, dtype=np.float32)
    terminal = s2 == N_S
    return {
        "obs": jnp.asarray(eye[s]),
        "action": jnp.asarray(a),
        "reward": jnp.asarray(REWARD[s, a], dtype=jnp.float32),
        "terminated": jnp.asarray(terminal, dtype=jnp.float32),
        "next_obs": jnp.asarray(np.where(terminal[:, None], 0.0, eye[np.minimum(s2, N_S - 1)])),
        # A behaviour policy unlike pi, so weighted TD has non-trivial weights.
        "log_mu": jnp.asarray(np.log(np.array([[0.5, 0.5], [0.2, 0.8], [0.9, 0.1]])[s, a]), dtype=jnp.float32),
    }, s, a


def tabular_apply(params, obs):
    return obs @ params["table"]


def train_fqe(batch, gamma, bounds, settings, steps=4000):
    tx = optax.adam(0.03)
    params = {"table": jnp.zeros((N_S, N_A))}
    state = QState(params, params, tx.init(params))
    pi_next = jnp.asarray(batch["next_obs"] @ PI)  # rows of zeros at terminal states: no bootstrap anyway
    log_pi = jnp.log(jnp.asarray(PI)[batch["obs"].argmax(-1), batch["action"]])

    def predict(params, b):
        return take_action(tabular_apply(params, b["obs"]), b["action"])

    def next_values(params, b):
        return expected_next_value(to_real(tabular_apply(params, b["next_obs"]), settings.symlog_targets), pi_next)

    def body(state, _):
        state, metrics = fqe_step(state, batch, log_pi, predict=predict, next_values=next_values, tx=tx, gamma=gamma,
                                  bounds=bounds, tau=0.02, reg_coef=1.0, settings=settings)
        return state, metrics["loss"]

    state, _ = jax.jit(lambda s: jax.lax.scan(body, s, None, length=steps))(state)
    return np.asarray(to_real(state.params["table"], settings.symlog_targets))


@pytest.mark.parametrize("symlog,weight_td,clip,bootstrap_target", [
    (False, False, False, False), (False, True, True, True), (True, True, True, False), (True, False, False, True),
])
def test_fqe_converges_to_exact_q_and_q_hat(symlog, weight_td, clip, bootstrap_target):
    quarters = P_DETERMINISTIC if symlog else P_QUARTERS
    batch, s, a = dataset(quarters)
    settings = FQESettings(symlog, weight_td, clip, bootstrap_from_target=bootstrap_target)
    q_true = exact_q(REWARD, GAMMA, quarters)
    q = train_fqe(batch, GAMMA, q_bounds(-3.0, 3.0, GAMMA, lower=True), settings)
    np.testing.assert_allclose(q, q_true, rtol=2e-3, atol=2e-3)

    # Q-hat: reward r-hat from the trained Q (eq. 7), discount gamma^2 (eqs. 8, 14).
    r_hat, gamma_hat = second_moment_problem(batch["reward"], jnp.asarray(q[s, a]), GAMMA)
    batch_hat = {**batch, "reward": r_hat}
    r_hat_true = 2 * REWARD * q_true - REWARD**2
    q_hat_true = exact_q(r_hat_true, GAMMA**2, quarters)
    q_hat = train_fqe(batch_hat, gamma_hat, q_hat_bounds(jnp.max(r_hat), GAMMA, lower=True), settings,
                      steps=6000)
    np.testing.assert_allclose(q_hat, q_hat_true, rtol=5e-3, atol=5e-3)
    assert np.all(q_hat_true > 0)


def test_q_hat_is_second_moment_of_return():
    """Eq. (4)/(8): q-hat(s, a) = E[G^2 | s, a] under pi, checked by Monte Carlo from one (s, a)."""
    rng = np.random.default_rng(0)
    q_true = exact_q(REWARD, GAMMA)
    q_hat_true = exact_q(2 * REWARD * q_true - REWARD**2, GAMMA**2)
    p = P_QUARTERS / 4.0
    returns = []
    for _ in range(20000):
        s, a, g, disc = 0, 1, 0.0, 1.0
        while True:
            g += disc * REWARD[s, a]
            s = rng.choice(N_S + 1, p=p[s, a])
            if s == N_S:
                break
            disc *= GAMMA
            a = rng.choice(N_A, p=PI[s])
        returns.append(g)
    returns = np.array(returns)
    second = returns**2
    assert abs(second.mean() - q_hat_true[0, 1]) < 4 * second.std() / np.sqrt(len(second))
    assert abs(returns.mean() - q_true[0, 1]) < 4 * returns.std() / np.sqrt(len(returns))


def test_td_weights_match_direct_computation():
    log_pi = jnp.array([0.0, -1.0, -20.0, -0.1, 5.0])
    log_mu = jnp.array([-0.5, -0.2, -0.1, -3.0, -9.0])
    raw = np.clip(np.exp(np.clip(np.asarray(log_pi - log_mu, np.float64), -10, 10)), 0.1, 10)
    np.testing.assert_allclose(td_weights(log_pi, log_mu, clip=True), raw / raw.mean(), rtol=1e-6)
    # The paper's text: the ratios themselves, normalised to mean 1 (the 5th ratio is e^14).
    ratios = np.exp(np.asarray(log_pi - log_mu, np.float64))
    np.testing.assert_allclose(td_weights(log_pi, log_mu, clip=False), ratios / ratios.mean(), rtol=1e-5)
    # Log-ratios that overflow exp in float32 still give finite weights that sum to the batch size.
    huge = td_weights(jnp.array([200.0, 0.0, 100.0]), jnp.zeros(3), clip=False)
    assert np.all(np.isfinite(huge)) and float(huge.sum()) == pytest.approx(3.0)
    np.testing.assert_allclose(huge, [3.0, 0.0, 0.0], atol=1e-6)


def test_second_moment_problem_by_hand():
    """Eq. (7): r-hat = 2 r q - r^2; eqs. (8)/(14): discount gamma^2; also with a traced gamma."""
    rewards, q = jnp.array([1.0, -2.0, 0.5, 0.0]), jnp.array([3.0, 1.0, -4.0, 7.0])
    r_hat, gamma_hat = second_moment_problem(rewards, q, 0.9)
    np.testing.assert_allclose(r_hat, [2 * 3 - 1, 2 * -2 * 1 - 4, 2 * 0.5 * -4 - 0.25, 0.0], rtol=1e-6)
    assert float(gamma_hat) == pytest.approx(0.81)
    _, traced = jax.jit(second_moment_problem)(rewards, q, jnp.float32(0.5))
    assert float(traced) == pytest.approx(0.25)


def test_bounds_loss_and_polyak():
    low, high = q_bounds(-1.0, 2.0, 0.99, lower=True)
    assert (float(low), float(high)) == pytest.approx((-100.0, 200.0))
    low, high = q_bounds(-1.0, 2.0, 0.99, lower=False)  # Appendix C.2: upper bounds only
    assert float(low) == -np.inf and float(high) == pytest.approx(200.0)
    low, high = q_hat_bounds(jnp.array(3.0), 0.9, lower=True)
    assert (float(low), float(high)) == pytest.approx((0.0, 3.0 / 0.19))
    low, high = q_hat_bounds(jnp.array(3.0), 0.9, lower=False)
    assert float(low) == -np.inf and float(high) == pytest.approx(3.0 / 0.19)
    clipped, frac = clip_targets(jnp.array([-5.0, 0.0, 7.0]), (-1.0, 2.0), True)
    np.testing.assert_array_equal(clipped, [-1.0, 0.0, 2.0])
    assert float(frac) == pytest.approx(2 / 3)
    unclipped, frac = clip_targets(jnp.array([-5.0, 0.0, 7.0]), (-1.0, 2.0), False)
    np.testing.assert_array_equal(unclipped, [-5.0, 0.0, 7.0])
    assert float(frac) == 0.0
    # symlog(e^4 - 1) = 4, so the symlog-space residuals are [1, -2].
    pred, y, w, tgt = jnp.array([1.0, 2.0]), jnp.array([0.0, np.e**4 - 1]), jnp.array([0.5, 1.5]), jnp.array([1.5, 1.0])
    total, td = fqe_loss(pred, y, w, tgt, 0.3, symlog_targets=True)
    assert float(td) == pytest.approx(0.5 * (0.5 * 1 + 1.5 * 4) / 2)
    assert float(total) == pytest.approx(float(td) + 0.3 * (0.25 + 1.0) / 2)
    new = polyak_update({"w": jnp.array([0.0, 10.0])}, {"w": jnp.array([1.0, 0.0])}, 0.02)
    np.testing.assert_allclose(new["w"], [0.02, 9.8], rtol=1e-6)


def test_the_authors_fqe_loss_form():
    """Their code: the TD term without the one-half, and the regulariser IS-weighted too."""
    pred, y, w, tgt = jnp.array([1.0, 2.0]), jnp.array([0.0, np.e**4 - 1]), jnp.array([0.5, 1.5]), jnp.array([1.5, 1.0])
    total, td = fqe_loss(pred, y, w, tgt, 0.3, symlog_targets=True, form="authors")
    assert float(td) == pytest.approx((0.5 * 1 + 1.5 * 4) / 2)
    assert float(total) == pytest.approx(float(td) + 0.3 * (0.5 * 0.25 + 1.5 * 1.0) / 2)
    paper, _ = fqe_loss(pred, y, w, tgt, 0.3, symlog_targets=True, form="paper")
    assert float(paper) == pytest.approx(0.5 * (0.5 * 1 + 1.5 * 4) / 2 + 0.3 * (0.25 + 1.0) / 2)


# (loss, td, d loss / d pred) by hand for pred = [1, 2], w = [0.5, 1.5], p_target = [1.5, 1], c = 0.3
# and residuals pred - y = [1, -2] in the network's space: n = 2, so a mean is half a sum.
FQE_LOSS_BY_HAND = {
    # 0.5 mean(w r^2) = 0.5 * 6.5 / 2; c mean((p - p_t)^2) = 0.3 * 1.25 / 2
    ("paper", True): (1.625 + 0.1875, 1.625, [0.5 * 1 / 2 + 2 * 0.3 * -0.5 / 2, 1.5 * -2 / 2 + 2 * 0.3 * 1 / 2]),
    # mean(w r^2) = 6.5 / 2; c mean(w (p - p_t)^2) = 0.3 * 1.625 / 2
    ("authors", True): (3.25 + 0.24375, 3.25,
                        [2 * 0.5 * 1 / 2 + 2 * 0.3 * 0.5 * -0.5 / 2, 2 * 1.5 * -2 / 2 + 2 * 0.3 * 1.5 * 1 / 2]),
    ("paper", False): (1.625, 1.625, [0.5 * 1 / 2, 1.5 * -2 / 2]),  # no regulariser without symlog
    ("authors", False): (3.25, 3.25, [2 * 0.5 * 1 / 2, 2 * 1.5 * -2 / 2]),
}


@pytest.mark.parametrize("form,symlog", list(FQE_LOSS_BY_HAND))
def test_fqe_loss_by_hand_in_both_forms_with_symlog_on_and_off(form, symlog):
    """Real-scale targets go through symlog only with symlog targets; the regulariser exists only
    then; neither the targets nor the target network's prediction receive a gradient."""
    loss_want, td_want, grad_want = FQE_LOSS_BY_HAND[form, symlog]
    pred, w, p_target = jnp.array([1.0, 2.0]), jnp.array([0.5, 1.5]), jnp.array([1.5, 1.0])
    y = jnp.array([0.0, np.e**4 - 1]) if symlog else jnp.array([0.0, 4.0])

    def loss(pred, y, p_target):
        return fqe_loss(pred, y, w, p_target, 0.3, symlog_targets=symlog, form=form)

    (total, td), grads = jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True)(pred, y, p_target)
    assert float(total) == pytest.approx(loss_want, rel=1e-6)
    assert float(td) == pytest.approx(td_want, rel=1e-6)
    np.testing.assert_allclose(grads[0], grad_want, rtol=1e-6)
    np.testing.assert_array_equal(grads[1], 0.0)
    np.testing.assert_array_equal(grads[2], 0.0)
    if not symlog:  # the target network's prediction is not read at all
        assert fqe_loss(pred, y, w, None, 0.3, symlog_targets=False, form=form)[0] == total


def _symlog(x):
    return np.sign(x) * np.log1p(np.abs(x))


def _symexp(x):
    return np.sign(x) * np.expm1(np.abs(x))


@pytest.mark.parametrize("symlog,weight_td,clip,bootstrap_target,form", [
    (False, False, False, False, "paper"),  # plain FQE, eq. (13)
    (True, False, False, False, "paper"),  # symlog targets + symlog regulariser towards the Polyak net
    (False, True, False, False, "paper"),  # weighted TD
    (False, False, True, False, "paper"),  # clipped targets
    (False, False, False, True, "paper"),  # bootstrap from the Polyak target network
    (True, True, True, True, "paper"),  # everything at once
    (True, True, True, True, "authors"),  # everything at once, the authors' loss
])
def test_one_fqe_step_matches_numpy_reference(symlog, weight_td, clip, bootstrap_target, form):
    """One SGD step of a linear Q(s, .) = s @ W against a NumPy re-derivation of every stabiliser:
    targets (bootstrap net, clip, symlog), weights, the loss, its gradient and the Polyak update."""
    rng = np.random.default_rng(3)
    n, d, k = 16, 3, 2
    obs = rng.normal(size=(n, d)).astype(np.float32)
    next_obs = rng.normal(size=(n, d)).astype(np.float32)
    action = rng.integers(0, k, n)
    reward = rng.normal(size=n).astype(np.float32) * 3
    terminated = (rng.random(n) < 0.2).astype(np.float32)
    log_mu = np.log(rng.uniform(0.1, 0.9, n)).astype(np.float32)
    log_pi = np.log(rng.uniform(0.1, 0.9, n)).astype(np.float32)
    pi_next = rng.dirichlet(np.ones(k), n).astype(np.float32)
    w_online = rng.normal(size=(d, k)).astype(np.float32)
    w_target = rng.normal(size=(d, k)).astype(np.float32)
    gamma, lr, tau, coef, bounds = 0.9, 0.1, 0.05, 0.7, (-2.0, 2.5)

    # NumPy reference.
    w_boot = w_target if bootstrap_target else w_online
    next_q = next_obs @ w_boot
    next_q = _symexp(next_q) if symlog else next_q
    y = reward + gamma * (1 - terminated) * (pi_next * next_q).sum(1)
    y = np.clip(y, *bounds) if clip else y
    y = _symlog(y) if symlog else y
    w = np.clip(np.exp(np.clip(log_pi - log_mu, -10, 10)), 0.1, 10) if weight_td else np.ones(n)
    w = w / w.mean()
    pred = (obs @ w_online)[np.arange(n), action]
    reg_target = (obs @ w_target)[np.arange(n), action]
    c = coef if symlog else 0.0
    if form == "authors":
        loss = np.mean(w * (pred - y) ** 2) + c * np.mean(w * (pred - reg_target) ** 2)
        dpred = (2 * w * (pred - y) + 2 * c * w * (pred - reg_target)) / n
    else:
        loss = 0.5 * np.mean(w * (pred - y) ** 2) + c * np.mean((pred - reg_target) ** 2)
        dpred = (w * (pred - y) + 2 * c * (pred - reg_target)) / n
    grad = np.zeros_like(w_online)
    for i in range(n):
        grad[:, action[i]] += dpred[i] * obs[i]
    w_new = w_online - lr * grad
    target_new = (1 - tau) * w_target + tau * w_new

    tx = optax.sgd(lr)
    state = QState({"W": jnp.asarray(w_online)}, {"W": jnp.asarray(w_target)}, tx.init({"W": jnp.asarray(w_online)}))
    batch = {"obs": jnp.asarray(obs), "action": jnp.asarray(action), "reward": jnp.asarray(reward),
             "terminated": jnp.asarray(terminated), "next_obs": jnp.asarray(next_obs), "log_mu": jnp.asarray(log_mu)}

    def predict(params, b):
        return take_action(b["obs"] @ params["W"], b["action"])

    def next_values(params, b):
        return expected_next_value(to_real(b["next_obs"] @ params["W"], symlog), jnp.asarray(pi_next))

    settings = FQESettings(symlog, weight_td, clip, bootstrap_target, form)
    new_state, metrics = fqe_step(state, batch, jnp.asarray(log_pi), predict=predict, next_values=next_values, tx=tx,
                                  gamma=gamma, bounds=bounds, tau=tau, reg_coef=coef, settings=settings)
    assert float(metrics["loss"]) == pytest.approx(loss, rel=1e-5)
    np.testing.assert_allclose(new_state.params["W"], w_new, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(new_state.target_params["W"], target_new, rtol=1e-5, atol=1e-6)
    if clip:
        raw = reward + gamma * (1 - terminated) * (pi_next * next_q).sum(1)
        assert float(metrics["clip_frac"]) == pytest.approx(np.mean((raw < bounds[0]) | (raw > bounds[1])))
