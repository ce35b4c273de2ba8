"""Property-based tests (hypothesis) of the return estimators in ``bpo.core.returns``.

Every estimator is compared with a plain-Python reference written here straight from the
definitions (paper eq. (6), Remark 1, Lemma 3; the module's docstrings for the argument
conventions), on random batches: T in 1..12 steps, 1-D ``[T]`` or ``[T, N]`` with N in 1..3,
episode ends (terminations and truncations) anywhere, |log pi/mu| <= 3, gamma in [0, 1), lambda in
[0, 1], rho_bar and c_bar positive or inf. Definitions (per column, backwards in time):

    dtilde_k = r_k + gamma (1 - terminated_k) v(s_{k+1}) - v(s_k)      (v(s_{k+1}) = next_values[k])
    G_t      = v(s_t) + sum_{k=t}^{end of episode or batch} (gamma lam)^(k-t) w_{t,k} dtilde_k
    w_{t,k}  = rho_k prod_{i=t}^{k-1} c_i                                  (per decision)
             = min(c_bar, prod_{i=t}^{k} pi_i/mu_i)                        (traj)
             = min(rho_bar, pi_t/mu_t) min(c_bar, prod_{i=t+1}^{k} pi_i/mu_i)  (traj_shifted)

with rho_i = min(rho_bar, pi_i/mu_i) and c_i = min(c_bar, pi_i/mu_i); the batch's last row
bootstraps through next_values and has no trace beyond it.

Compilation is the cost here (one XLA program per shape): the bulk of the examples therefore runs
at one padded shape, ``[T_MAX, N_MAX]`` (or ``[T_MAX]``); ``test_unpadded_shapes`` checks the
estimators at the drawn shapes themselves. Rows appended after the drawn T are a terminal episode
with zero TD error (``r = v``, ``next_values = 0``, ``terminated = done = 1``): they add exactly
zero to every earlier return, and the first of them has ``v = next_values[T-1]``, so that the
authors' advantage, which reads G_{t+1} at the next row, sees at row T-1 what it sees at the end of
an unpadded batch (``V(s_T)``). Columns appended after the drawn N are all-zero terminal steps.
"""

import math
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from bpo.core.returns import gae_returns, pdis_returns, tis_advantages, tis_lambda_returns

MODES = ("per_decision", "traj", "traj_shifted")
T_MAX, N_MAX = 12, 3
INF = math.inf
RTOL = 1e-4  # float32 computation against float64 references, relative to the magnitude of the sum

# database=None: no .hypothesis/ folder in the checkout; deadline=None: the first example of a
# shape compiles.
SETTINGS = dict(deadline=None, database=None)

# ---------------------------------------------------------------------------------------------
# Strategies
# ---------------------------------------------------------------------------------------------

# float32-representable inputs, so that the float64 references see exactly what the module sees.
FLOATS = st.floats(-10.0, 10.0, width=32, allow_subnormal=False)
LOG_RATIOS = st.floats(-3.0, 3.0, width=32, allow_subnormal=False)
GAMMAS = st.floats(0.0, 1.0, exclude_max=True, width=32, allow_subnormal=False)
LAMBDAS = st.floats(0.0, 1.0, width=32, allow_subnormal=False)
BARS = st.one_of(st.floats(2.0**-10, 20.0, width=32), st.just(INF))
BARS_AT_LEAST_ONE = st.one_of(st.floats(1.0, 20.0, width=32), st.just(INF))


@st.composite
def batches(draw, max_steps=T_MAX):
    """One random batch as float64 numpy arrays of shape [T] or [T, N], with consistent next_values:
    next_values[t] = values[t+1] inside an episode, the real final observation's value (any
    number) where the episode ends (termination or truncation) and at the last row."""
    steps = draw(st.integers(1, max_steps))
    n = draw(st.integers(0, N_MAX))  # 0: 1-D arrays [T]
    shape = (steps,) if n == 0 else (steps, n)

    def floats(elements=FLOATS):
        return draw(arrays(np.float32, shape, elements=elements)).astype(np.float64)

    def flags():
        return draw(arrays(np.bool_, shape, elements=st.booleans(), fill=st.just(False)))

    rewards, values, final_values = floats(), floats(), floats()
    terminated, truncated = flags(), flags()  # both at once is allowed (Gymnasium can report both)
    done = terminated | truncated
    following = np.concatenate([values[1:], final_values[-1:]], axis=0)
    next_values = np.where(done, final_values, following)
    next_values[-1] = final_values[-1]
    return dict(
        rewards=rewards, values=values, next_values=next_values, terminated=terminated.astype(np.float64),
        done=done.astype(np.float64), log_ratio=floats(LOG_RATIOS),
    )


# ---------------------------------------------------------------------------------------------
# References: plain Python on one column (lists of floats), straight from the definitions
# ---------------------------------------------------------------------------------------------


def ref_weight(ratio, t, k, rho_bar, c_bar, mode):
    """w_{t,k} of eq. (6) (per decision) or of trajectory-level truncation, for t <= k."""
    if mode == "per_decision":
        w = min(rho_bar, ratio[k])
        for i in range(t, k):
            w *= min(c_bar, ratio[i])
        return w
    if mode == "traj":
        return min(c_bar, math.prod(ratio[t : k + 1]))
    if mode == "traj_shifted_tail":  # the authors' traj advantage: traj_shifted without its first factor
        return min(c_bar, math.prod(ratio[t + 1 : k + 1]))
    return min(rho_bar, ratio[t]) * min(c_bar, math.prod(ratio[t + 1 : k + 1]))


def ref_tis_column(r, v, nv, term, done, log_ratio, gamma, lam, rho_bar, c_bar, mode):
    """G_t = v_t + sum_k (gamma lam)^(k-t) w_{t,k} dtilde_k, the sum cut after the first episode
    end at or after t and at the end of the batch. Returns (G, scale): scale_t = |v_t| + sum of the
    absolute terms, the magnitude that float32 rounding errors are relative to."""
    steps = len(r)
    ratio = [math.exp(x) for x in log_ratio]
    returns, scales = [], []
    for t in range(steps):
        g, scale = v[t], abs(v[t])
        for k in range(t, steps):
            dtilde = r[k] + gamma * (1.0 - term[k]) * nv[k] - v[k]
            term_k = (gamma * lam) ** (k - t) * ref_weight(ratio, t, k, rho_bar, c_bar, mode) * dtilde
            g += term_k
            scale += abs(term_k)
            if done[k]:
                break  # terms past an episode end are zero
        returns.append(g)
        scales.append(scale)
    return returns, scales


def ref_tis_recursive_column(r, v, nv, term, done, log_ratio, gamma, lam, rho_bar, c_bar):
    """Per-decision G by the backward recursion of eq. (6) / Remark 1:
    G_t = v_t + rho_t dtilde_t + gamma lam c_t (1 - done_t) (G_{t+1} - v_{t+1}), nothing after the batch."""
    steps = len(r)
    returns = [0.0] * steps
    for t in reversed(range(steps)):
        ratio = math.exp(log_ratio[t])
        rho, c = min(rho_bar, ratio), min(c_bar, ratio)
        delta = rho * (r[t] + gamma * (1.0 - term[t]) * nv[t] - v[t])
        tail = returns[t + 1] - v[t + 1] if t + 1 < steps else 0.0
        returns[t] = v[t] + delta + gamma * lam * c * (1.0 - done[t]) * tail
    return returns


def ref_gae_column(r, v, nv, term, done, gamma, lam):
    """GAE(lambda) (Schulman et al.): A_t = delta_t + gamma lam (1 - done_t) A_{t+1}; returns A + v."""
    steps = len(r)
    advantages = [0.0] * steps
    following = 0.0
    for t in reversed(range(steps)):
        delta = r[t] + gamma * (1.0 - term[t]) * nv[t] - v[t]
        following = delta + gamma * lam * (1.0 - done[t]) * following
        advantages[t] = following
    return [a + value for a, value in zip(advantages, v, strict=True)]


def ref_authors_advantage_column(r, v, nv, term, done, returns, gamma, lam):
    """A_t = r_t + gamma (1 - terminated_t) ((1 - lam) V(s_{t+1}) + lam G_{t+1}) - V(s_t), with
    G_{t+1} replaced by V(s_{t+1}) after an episode end and at the end of the batch."""
    steps = len(r)
    out = []
    for t in range(steps):
        next_return = nv[t] if (done[t] or t == steps - 1) else returns[t + 1]
        out.append(r[t] + gamma * (1.0 - term[t]) * ((1.0 - lam) * nv[t] + lam * next_return) - v[t])
    return out


def ref_discounted_mc_column(r, done, gamma):
    """Discounted Monte Carlo return inside the episode: G_t = r_t + gamma (1 - done_t) G_{t+1}."""
    out, following = [0.0] * len(r), 0.0
    for t in reversed(range(len(r))):
        following = r[t] + gamma * (1.0 - done[t]) * following
        out[t] = following
    return out


def columns(array):
    """The [T] columns of a [T] or [T, N] array, as lists of Python floats."""
    array = np.asarray(array, dtype=np.float64)
    return [array.tolist()] if array.ndim == 1 else [array[:, j].tolist() for j in range(array.shape[1])]


def stack(cols, like):
    """Inverse of ``columns``."""
    out = np.array(cols, dtype=np.float64).T
    return out.reshape(np.shape(like))


def apply_columns(fn, batch, *names, **kwargs):
    """fn applied column by column to the named arrays of ``batch``; returns stacked outputs."""
    cols = [columns(batch[name]) for name in names]
    results = [fn(*args, **kwargs) for args in zip(*cols, strict=True)]
    if isinstance(results[0], tuple):
        return tuple(stack([res[i] for res in results], batch[names[0]]) for i in range(len(results[0])))
    return stack(results, batch[names[0]])


def ref_tis(batch, gamma, lam, rho_bar, c_bar, mode):
    return apply_columns(
        ref_tis_column, batch, "rewards", "values", "next_values", "terminated", "done", "log_ratio",
        gamma=gamma, lam=lam, rho_bar=rho_bar, c_bar=c_bar, mode=mode,
    )


def assert_close(actual, expected, scale, what):
    """|actual - expected| <= RTOL * (1 + scale), elementwise: float32 against float64."""
    actual, expected = np.asarray(actual, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    error = np.abs(actual - expected)
    tolerance = RTOL * (1.0 + np.broadcast_to(scale, error.shape))
    bad = ~(error <= tolerance)  # NaN fails
    if bad.any():
        i = tuple(int(j) for j in np.argwhere(bad)[0])
        raise AssertionError(
            f"{what}: {bad.sum()} of {bad.size} elements differ; first at {i}: got {float(actual[i])!r}, expected "
            f"{float(expected[i])!r} (tolerance {tolerance[i]:.3g})\nactual:\n{actual}\nexpected:\n{expected}"
        )


# ---------------------------------------------------------------------------------------------
# The functions under test, jitted: all estimators of a batch in one program
# ---------------------------------------------------------------------------------------------


@partial(jax.jit, static_argnames="modes")
def estimates(rewards, values, next_values, terminated, done, log_ratio, pdis_rewards, gamma, lam, rho_bar, c_bar,
              modes=MODES):
    """Every estimator on one batch; gamma, lam, rho_bar and c_bar traced (no recompile per value)."""
    args = (rewards, values, next_values, terminated, done)
    bars = dict(gamma=gamma, lam=lam, rho_bar=rho_bar, c_bar=c_bar)
    out = {"gae": gae_returns(*args, gamma=gamma, lam=lam)}
    for mode in modes:
        out[f"tis/{mode}"] = tis_lambda_returns(*args, log_ratio, traj=mode, **bars)
        out[f"adv/{mode}"], out[f"adv_returns/{mode}"] = tis_advantages(*args, log_ratio, traj=mode, **bars)
        out[f"eq11/{mode}"], out[f"eq11_returns/{mode}"] = tis_advantages(
            *args, log_ratio, traj=mode, current_rho=True, **bars
        )
        out[f"pdis/{mode}"] = pdis_returns(pdis_rewards, terminated, done, log_ratio, traj=mode, **bars)
    out["pdis/defaults"] = pdis_returns(pdis_rewards, terminated, done, log_ratio, gamma=gamma)
    return out


def pad(batch):
    """The batch padded to [T_MAX] or [T_MAX, N_MAX] (see the module docstring) and the slice
    that recovers the drawn rows and columns."""
    shape = batch["rewards"].shape
    steps = shape[0]
    full = (T_MAX,) if len(shape) == 1 else (T_MAX, N_MAX)
    index = (slice(0, steps),) + tuple(slice(0, n) for n in shape[1:])
    out = {}
    for name in ("rewards", "values", "next_values", "log_ratio"):
        out[name] = np.zeros(full)
        out[name][index] = batch[name]
    for name in ("terminated", "done"):
        out[name] = np.ones(full)
        out[name][index] = batch[name]
    out["pdis_rewards"] = out["rewards"].copy()  # zero on the padding: pdis has no value function
    if steps < T_MAX:
        # The first padding row: a one-step terminal episode with value V(s_T) and zero TD error.
        row = (steps,) + index[1:]
        out["values"][row] = batch["next_values"][-1]
        out["rewards"][row] = batch["next_values"][-1]
    return out, index


def run_estimates(batch, gamma, lam, rho_bar, c_bar, padded=True, modes=MODES):
    """The module's estimates of ``batch`` as float64 numpy arrays of the batch's shape."""
    if padded:
        inputs, index = pad(batch)
    else:
        inputs, index = dict(batch, pdis_rewards=batch["rewards"]), ...
    names = ("rewards", "values", "next_values", "terminated", "done", "log_ratio", "pdis_rewards")
    args = [jnp.asarray(inputs[name], dtype=jnp.float32) for name in names]
    out = estimates(*args, gamma, lam, rho_bar, c_bar, modes=modes)
    return {key: np.asarray(value, dtype=np.float64)[index] for key, value in out.items()}


def check_against_references(batch, out, gamma, lam, rho_bar, c_bar, modes=MODES):
    """Every estimate in ``out`` against the references."""
    for mode in modes:
        expected, scale = ref_tis(batch, gamma, lam, rho_bar, c_bar, mode)
        assert_close(out[f"tis/{mode}"], expected, scale, f"tis_lambda_returns traj={mode}")
        assert_close(out[f"adv_returns/{mode}"], expected, scale, f"tis_advantages returns traj={mode}")
        assert_close(out[f"eq11_returns/{mode}"], expected, scale, f"tis_advantages returns traj={mode} eq11")
        # eq. (11): A_t = G_t - V(s_t).
        assert_close(out[f"eq11/{mode}"], expected - batch["values"], scale, f"eq. (11) advantages traj={mode}")
        if mode == "traj_shifted":  # their code's advantage for this mode: G_t - V(s_t) without min(rho_bar, r_t)
            tail, tail_scale = ref_tis(batch, gamma, lam, rho_bar, c_bar, "traj_shifted_tail")
            assert_close(out[f"adv/{mode}"], tail - batch["values"], tail_scale, "authors' advantages traj_shifted")
        else:  # the authors' advantage reads G_{t+1}: its error scale is the next row's
            authors = apply_columns(
                ref_authors_advantage_column, dict(batch, G=expected), "rewards", "values", "next_values",
                "terminated", "done", "G", gamma=gamma, lam=lam,
            )
            next_scale = np.concatenate([scale[1:], np.zeros_like(scale[:1])], axis=0)
            adv_scale = next_scale + np.abs(batch["rewards"]) + np.abs(batch["values"]) + np.abs(batch["next_values"])
            assert_close(out[f"adv/{mode}"], authors, adv_scale, f"authors' advantages traj={mode}")
        # PDIS: eq. (6) with a zero value function.
        zero = np.zeros_like(batch["rewards"])
        pdis_batch = dict(batch, values=zero, next_values=zero)
        expected, scale = ref_tis(pdis_batch, gamma, lam, rho_bar, c_bar, mode)
        assert_close(out[f"pdis/{mode}"], expected, scale, f"pdis_returns traj={mode}")
    # Defaults of pdis_returns: lam = 1, rho_bar = c_bar = inf, per decision (eq. (1)).
    zero = np.zeros_like(batch["rewards"])
    expected, scale = ref_tis(dict(batch, values=zero, next_values=zero), gamma, 1.0, INF, INF, "per_decision")
    assert_close(out["pdis/defaults"], expected, scale, "pdis_returns defaults")
    expected = apply_columns(ref_gae_column, batch, "rewards", "values", "next_values", "terminated", "done",
                             gamma=gamma, lam=lam)
    on_policy = dict(batch, log_ratio=np.zeros_like(batch["log_ratio"]))
    gae_scale = ref_tis(on_policy, gamma, lam, 1.0, 1.0, "per_decision")[1]
    assert_close(out["gae"], expected, gae_scale, "gae_returns")


# ---------------------------------------------------------------------------------------------
# Properties
# ---------------------------------------------------------------------------------------------


@settings(max_examples=100, **SETTINGS)
@given(batch=batches(), gamma=GAMMAS, lam=LAMBDAS, rho_bar=BARS, c_bar=BARS)
def test_estimators_match_references(batch, gamma, lam, rho_bar, c_bar):
    """tis_lambda_returns (3 modes), tis_advantages (both forms), pdis_returns and gae_returns
    against the double-sum references."""
    out = run_estimates(batch, gamma, lam, rho_bar, c_bar)
    check_against_references(batch, out, gamma, lam, rho_bar, c_bar)


@settings(max_examples=60, **SETTINGS)
@given(batch=batches(), gamma=GAMMAS, lam=LAMBDAS, rho_bar=BARS, c_bar=BARS)
def test_per_decision_matches_backward_recursion(batch, gamma, lam, rho_bar, c_bar):
    """The per-decision returns equal the recursive form of eq. (6), and so do the double sum's."""
    out = run_estimates(batch, gamma, lam, rho_bar, c_bar)
    expected = apply_columns(
        ref_tis_recursive_column, batch, "rewards", "values", "next_values", "terminated", "done", "log_ratio",
        gamma=gamma, lam=lam, rho_bar=rho_bar, c_bar=c_bar,
    )
    double_sum, scale = ref_tis(batch, gamma, lam, rho_bar, c_bar, "per_decision")
    np.testing.assert_allclose(expected, double_sum, rtol=1e-9, atol=1e-9 * (1 + scale.max()))
    assert_close(out["tis/per_decision"], expected, scale, "tis_lambda_returns vs recursion")


@settings(max_examples=10, **SETTINGS)
@given(batch=batches(), gamma=GAMMAS, lam=LAMBDAS, rho_bar=BARS, c_bar=BARS)
def test_unpadded_shapes(batch, gamma, lam, rho_bar, c_bar):
    """The estimators at the drawn shape itself ([T] or [T, N], T in 1..12): shapes are kept and
    the batch's last row bootstraps exactly as the references say. One compile per shape, so few
    examples, and two modes: the backward scan and the trajectory-level weight matrix."""
    modes = ("per_decision", "traj_shifted")
    out = run_estimates(batch, gamma, lam, rho_bar, c_bar, padded=False, modes=modes)
    for key, value in out.items():
        assert value.shape == batch["rewards"].shape, key
    check_against_references(batch, out, gamma, lam, rho_bar, c_bar, modes=modes)


@settings(max_examples=60, **SETTINGS)
@given(batch=batches(), gamma=GAMMAS, lam=LAMBDAS, rho_bar=BARS_AT_LEAST_ONE, c_bar=BARS_AT_LEAST_ONE)
def test_lemma3_on_policy_is_gae(batch, gamma, lam, rho_bar, c_bar):
    """Lemma 3: with mu = pi (log ratio 0) and rho_bar, c_bar >= 1, the truncated IS-TD(lambda)
    returns of every mode are the GAE(lambda) returns, and both advantage forms are GAE's."""
    batch = dict(batch, log_ratio=np.zeros_like(batch["log_ratio"]))
    out = run_estimates(batch, gamma, lam, rho_bar, c_bar)
    expected = apply_columns(ref_gae_column, batch, "rewards", "values", "next_values", "terminated", "done",
                             gamma=gamma, lam=lam)
    scale = ref_tis(batch, gamma, lam, 1.0, 1.0, "per_decision")[1]
    assert_close(out["gae"], expected, scale, "gae_returns")
    for mode in MODES:
        assert_close(out[f"tis/{mode}"], expected, scale, f"Lemma 3, traj={mode}")
        assert_close(out[f"tis/{mode}"], out["gae"], scale, f"Lemma 3 against gae_returns, traj={mode}")
        advantages = expected - batch["values"]
        adv_scale = scale + np.concatenate([scale[1:], scale[-1:]], axis=0) + np.abs(batch["next_values"])
        assert_close(out[f"eq11/{mode}"], advantages, adv_scale, f"eq. (11) advantages on-policy, traj={mode}")
        assert_close(out[f"adv/{mode}"], advantages, adv_scale, f"authors' advantages on-policy, traj={mode}")


@settings(max_examples=60, **SETTINGS)
@given(batch=batches(), gamma=GAMMAS, rho_bar=BARS, c_bar=BARS)
def test_lambda_zero_is_one_step(batch, gamma, rho_bar, c_bar):
    """lam = 0 keeps only the first TD error: G_t = v_t + rho_t dtilde_t per decision, and
    min(c_bar, pi_t/mu_t) dtilde_t (traj), min(rho_bar, pi_t/mu_t) min(c_bar, 1) dtilde_t (traj_shifted)."""
    out = run_estimates(batch, gamma, 0.0, rho_bar, c_bar)
    v, ratio = batch["values"], np.exp(batch["log_ratio"])
    dtilde = batch["rewards"] + gamma * (1.0 - batch["terminated"]) * batch["next_values"] - v
    weights = {
        "per_decision": np.minimum(rho_bar, ratio),
        "traj": np.minimum(c_bar, ratio),
        "traj_shifted": np.minimum(rho_bar, ratio) * min(c_bar, 1.0),
    }
    for mode, w in weights.items():
        scale = np.abs(v) + np.abs(w * dtilde)
        assert_close(out[f"tis/{mode}"], v + w * dtilde, scale, f"lam = 0, traj={mode}")


@settings(max_examples=50, **SETTINGS)
@given(batch=batches(), gamma=GAMMAS)
def test_pdis_on_policy_is_discounted_monte_carlo(batch, gamma):
    """pdis_returns with log ratio 0 and its defaults (lam = 1, no truncation) is the discounted
    Monte Carlo return of REINFORCE, cut at every episode end (no bootstrap on truncation)."""
    batch = dict(batch, log_ratio=np.zeros_like(batch["log_ratio"]))
    out = run_estimates(batch, gamma, 1.0, INF, INF)
    expected = apply_columns(ref_discounted_mc_column, batch, "rewards", "done", gamma=gamma)
    scale = apply_columns(ref_discounted_mc_column, dict(batch, rewards=np.abs(batch["rewards"])), "rewards", "done",
                          gamma=gamma)
    assert_close(out["pdis/defaults"], expected, scale, "pdis_returns defaults, on-policy")
    for mode in MODES:
        assert_close(out[f"pdis/{mode}"], expected, scale, f"pdis_returns traj={mode}, on-policy")


# --- the weights w_{t,k} themselves ------------------------------------------------------------


@jax.jit
def weight_matrices(log_ratio, done, bars):
    """W[t, k] = w_{t,k} of each mode and each (rho_bar, c_bar) in ``bars`` [B, 2], read off
    pdis_returns by linearity: rewards e_k in column k, gamma = lam = 1, values 0."""
    steps = log_ratio.shape[0]
    rewards = jnp.eye(steps)
    tile = lambda x: jnp.broadcast_to(x[:, None], (steps, steps))  # noqa: E731
    log_ratio, done = tile(log_ratio), tile(done)
    terminated = jnp.zeros_like(rewards)
    out = {}
    for mode in MODES:
        out[mode] = jax.vmap(
            lambda b: pdis_returns(rewards, terminated, done, log_ratio, gamma=1.0, lam=1.0, rho_bar=b[0],
                                   c_bar=b[1], traj=mode)
        )(bars)
    return out


@st.composite
def ordered_bars(draw):
    """(rho_bar, c_bar) <= (rho_bar', c_bar') componentwise."""
    rho = sorted([draw(BARS), draw(BARS)])
    c = sorted([draw(BARS), draw(BARS)])
    return (rho[0], c[0]), (rho[1], c[1])


@settings(max_examples=60, **SETTINGS)
@given(
    log_ratio=arrays(np.float32, (T_MAX,), elements=LOG_RATIOS),
    done=arrays(np.bool_, (T_MAX,), elements=st.booleans(), fill=st.just(False)),
    bars=ordered_bars(),
)
def test_truncation_never_increases_weights(log_ratio, done, bars):
    """The weights are the definition's (zero before t and past an episode end), non-negative, and
    truncation never increases them: w(rho_bar, c_bar) <= w(rho_bar', c_bar') <= w(inf, inf) for
    rho_bar <= rho_bar', c_bar <= c_bar', in every mode."""
    (low, high) = bars
    all_bars = np.array([low, high, (INF, INF)], dtype=np.float32)
    out = weight_matrices(jnp.asarray(log_ratio), jnp.asarray(done, dtype=jnp.float32), jnp.asarray(all_bars))
    ratio = [math.exp(x) for x in log_ratio.astype(np.float64)]
    for mode in MODES:
        w = np.asarray(out[mode], dtype=np.float64)  # [3, T, T]
        for b, (rho_bar, c_bar) in enumerate([low, high, (INF, INF)]):
            expected = np.zeros((T_MAX, T_MAX))
            for t in range(T_MAX):
                for k in range(t, T_MAX):
                    expected[t, k] = ref_weight(ratio, t, k, float(rho_bar), float(c_bar), mode)
                    if done[k]:
                        break
            np.testing.assert_allclose(w[b], expected, rtol=RTOL, atol=1e-30,
                                       err_msg=f"w, traj={mode}, (rho_bar, c_bar) = {rho_bar, c_bar}")
        assert np.all(w >= 0.0), mode
        slack = 1.0 + 1e-5  # float32 rounding where a bar does not bind
        assert np.all(w[0] <= w[1] * slack), f"traj={mode}: raising the bars {low} -> {high} lowered a weight"
        assert np.all(w[1] <= w[2] * slack), f"traj={mode}: truncation at {high} raised a weight"
        # |w| <= the untruncated importance weight, whose tail is the product of the ratios.
        untruncated = np.array([[math.prod(ratio[t : k + 1]) if k >= t else 0.0 for k in range(T_MAX)]
                                for t in range(T_MAX)])
        assert np.all(w[2] <= untruncated * slack), mode
