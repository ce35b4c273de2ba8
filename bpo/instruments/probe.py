"""A probe of the return estimator: does a behaviour policy mu give lower-variance (or lower-error)
estimates of v_pi than pi itself, for the estimator the learner trains on? (docs/probe.md)

From each of M start states (environment states with their observations), K independent segments
of H steps are run under pi and K under mu, with the run's gamma, lambda, rho_bar, c_bar and value
function. Each segment gives one estimate of v_pi at its start state:

* under mu: the truncated IS-TD(lambda) return G_0 of eq. (6) (``bpo.core.returns.tis_lambda_returns``,
  log rho_t = log pi(a_t|s_t) - log mu(a_t|s_t)), the value target BPO-PPO uses;
* under pi: the same estimator with log rho_t = 0 (eq. (6) on-policy: GAE(lambda), Lemma 3).

A segment never continues into a new episode: after the step that ends the episode (terminated or
truncated) the trace is cut, as the learner's ``done`` does, and the environment is not stepped on.
A segment still running after H steps bootstraps from v(s_H), as the last row of a rollout does.

Policies are given as *distribution functions* ``obs -> bpo.core.distributions.Dist`` (``DistFn``),
evaluated on one raw observation, with ``discrete`` saying how to read them. A sampler
``(key, obs) -> (action, log_prob)`` would not be enough: under mu the estimator needs log pi of
the action mu drew. The learner's networks fit directly:
``lambda obs: learner.dist_fn(params)(learner.normalize(stats, obs))`` (statistics frozen), and the
value function ``lambda obs: learner.critic_apply(critic_params, learner.normalize(stats, obs))``.
Actions are sampled from the per-state distribution at every step; with gSDE this is the marginal
Gaussian of each step, not noise held for ``sde_sample_freq`` steps (docs/probe.md, "Limits").

``probe_segments`` and ``reference_values`` are pure and jittable (close over the environment and
the functions, pass keys, states and arrays as arguments); ``probe_statistics`` is NumPy.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from bpo.config.validation import MAX_COUNT
from bpo.core import distributions
from bpo.core.distributions import Dist
from bpo.core.returns import TrajMode, tis_lambda_returns
from envs.functional import EnvSpec, FunctionalEnv, auto_reset_step

DistFn = Callable[[jax.Array], Dist]
"""A policy: one raw observation -> its action distribution (module docstring)."""
ValueFn = Callable[[jax.Array], jax.Array]
"""A value function: one raw observation -> a scalar v(s)."""


class ProbeReturns(NamedTuple):
    """The return estimator's numbers, traced scalars (a run's ``hp.gamma``, ``hp.gae_lambda``,
    ``hp.rho_bar``, ``hp.c_bar``)."""

    gamma: float
    lam: float
    rho_bar: float
    c_bar: float


class Segment(NamedTuple):
    """One segment's outcome (leading axes [M, K] when batched)."""

    estimate: jax.Array  # the start-state estimate G_0
    log_weight: jax.Array  # log prod_{t<L} min(c_bar, pi/mu) over the L steps inside the episode; 0 under pi
    ended: jax.Array  # the episode ended (terminated or truncated) within the H steps
    steps: jax.Array  # L, the steps inside the episode (<= H)


class ProbeSegments(NamedTuple):
    """``probe_segments``' output: K segments per start state under each policy, [M, K] leaves."""

    mu: Segment
    pi: Segment


class Reference(NamedTuple):
    """``reference_values``' output: the Monte Carlo estimate of v_pi per start state [M]."""

    mean: jax.Array
    se: jax.Array  # standard error of ``mean``: sample std / sqrt(K_ref)
    ended_frac: jax.Array  # share of the K_ref segments whose episode ended within the horizon


def _identity(action):
    return action


def _step_row(env: FunctionalEnv, behaviour: DistFn, target: DistFn | None, value: ValueFn, discrete: bool,
              to_env: Callable, carry, key):
    """One step of a segment: act with ``behaviour``, step the environment (no reset), and the
    row for eq. (6). Rows after the episode's end are inert (no reward, done, ratio 1)."""
    state, obs, v, live = carry
    k_act, k_env = jax.random.split(key)
    dist = behaviour(obs)
    action = distributions.sample(k_act, dist, discrete)
    log_ratio = jnp.zeros(())
    if target is not None:  # None: on-policy, every ratio exactly 1
        log_ratio = distributions.log_prob(target(obs), action, discrete) - distributions.log_prob(dist, action,
                                                                                                   discrete)
    next_state, next_obs, reward, terminated, truncated = env.step_env(k_env, state, to_env(action))
    done = terminated | truncated
    # v of a terminal state is never used (eq. 6 multiplies it by 0); zeroing it keeps a NaN out.
    v_next = jnp.where(terminated, 0.0, value(next_obs))
    row = {"reward": jnp.where(live, reward, 0.0), "value": jnp.where(live, v, 0.0),
           "next_value": jnp.where(live, v_next, 0.0), "terminated": jnp.where(live, terminated, True),
           "done": jnp.where(live, done, True), "log_ratio": jnp.where(live, log_ratio, 0.0), "live": live}
    # After the end the last live state is kept (and stepped again, discarded): no reset, no new episode.
    go_on = live & ~done
    state = jax.tree.map(lambda new, old: jnp.where(go_on, new, old), next_state, state)
    obs = jnp.where(go_on, next_obs, obs)
    return (state, obs, jnp.where(go_on, v_next, v), go_on), row


def segment_estimate(key, env: FunctionalEnv, state, obs, behaviour: DistFn, target: DistFn | None,
                     value: ValueFn, returns: ProbeReturns, *, horizon: int, discrete: bool,
                     to_env: Callable | None = None, traj: bool | TrajMode = False) -> Segment:
    """One segment of ``horizon`` steps from (``state``, ``obs``) under ``behaviour`` and its
    start-state estimate: eq. (6) at t = 0 (``bpo.core.returns.tis_lambda_returns``) with log-ratios
    log target - log behaviour, or 0 where ``target`` is None (on-policy). ``to_env``: the action
    the environment executes (e.g. clipped to the bounds); log-probabilities use the sampled one."""
    step = functools.partial(_step_row, env, behaviour, target, value, discrete, to_env or _identity)
    carry = (state, obs, value(obs), jnp.array(True))
    _, rows = jax.lax.scan(step, carry, jax.random.split(key, horizon))
    f32 = lambda x: x.astype(jnp.float32)  # noqa: E731
    g = tis_lambda_returns(f32(rows["reward"]), f32(rows["value"]), f32(rows["next_value"]), f32(rows["terminated"]),
                           f32(rows["done"]), f32(rows["log_ratio"]), gamma=returns.gamma, lam=returns.lam,
                           rho_bar=returns.rho_bar, c_bar=returns.c_bar, traj=traj)
    live = rows["live"]
    log_c = jnp.minimum(jnp.log(jnp.asarray(returns.c_bar, jnp.float32)), rows["log_ratio"])
    log_weight = jnp.sum(jnp.where(live, log_c, 0.0))
    ended = jnp.any(live & rows["done"])
    return Segment(g[0], log_weight, ended, jnp.sum(live.astype(jnp.int32)))


def _segments(key, env, states, obs, behaviour, target, value, returns, *, horizon, k, discrete, to_env, traj):
    """``segment_estimate`` for K segments from each of the M start states: [M, K] leaves."""
    def one(key_, state, ob):
        return segment_estimate(key_, env, state, ob, behaviour, target, value, returns, horizon=horizon,
                                discrete=discrete, to_env=to_env, traj=traj)

    m = obs.shape[0]
    per_state = jax.vmap(one, in_axes=(0, None, None))
    return jax.vmap(lambda key_, s, o: per_state(jax.random.split(key_, k), s, o))(jax.random.split(key, m),
                                                                                    states, obs)


def probe_segments(key, env: FunctionalEnv, states, obs, pi: DistFn, mu: DistFn, value: ValueFn,
                   returns: ProbeReturns, *, horizon: int, k: int, discrete: bool, to_env: Callable | None = None,
                   traj: bool | TrajMode = False, key_mu=None) -> ProbeSegments:
    """The probe's rollouts (module docstring): from each of the M start states (``states``: an
    environment-state pytree with leading axis M, ``obs`` [M, ...] their observations), K segments
    of ``horizon`` steps under mu with eq. (6)'s estimate (log rho = log pi - log mu) and K under pi
    with the same estimator and unit ratios. ``key`` drives pi's segments and ``key_mu`` mu's; by
    default ``key_mu`` is split off ``key``. ``key_mu = key`` gives both policies the same random
    numbers: with mu = pi the two sets of estimates are then identical, draw for draw."""
    if key_mu is None:
        key, key_mu = jax.random.split(key)
    kw = dict(horizon=horizon, k=k, discrete=discrete, to_env=to_env, traj=traj)
    under_mu = _segments(key_mu, env, states, obs, mu, pi, value, returns, **kw)
    under_pi = _segments(key, env, states, obs, pi, None, value, returns, **kw)
    return ProbeSegments(under_mu, under_pi)


def reference_values(key, env: FunctionalEnv, states, obs, pi: DistFn, *, gamma, horizon: int, k: int,
                     discrete: bool, value: ValueFn | None = None, to_env: Callable | None = None) -> Reference:
    """Monte Carlo v_pi(s) at the M start states from K segments of pi each: the same rollout with
    unit ratios and lambda = 1, so each estimate is the discounted return of the segment. With
    ``value`` None nothing is added at the horizon (the plain return, short by gamma^H v_pi(s_H) for
    segments that did not end: see ``ended_frac``); with ``value`` it bootstraps gamma^H v(s_H)
    there (at lambda = 1 on-policy the TD errors of eq. (6) telescope to exactly that)."""
    value = value or (lambda _obs: jnp.zeros(()))
    returns = ProbeReturns(gamma, 1.0, 1.0, 1.0)
    seg = _segments(key, env, states, obs, pi, None, value, returns, horizon=horizon, k=k, discrete=discrete,
                    to_env=to_env, traj=False)
    est = seg.estimate
    se = jnp.std(est, axis=1, ddof=1) / jnp.sqrt(k)
    return Reference(jnp.mean(est, axis=1), se, jnp.mean(seg.ended.astype(jnp.float32), axis=1))


def visited_states(key, env: FunctionalEnv, states, obs, mu: DistFn, *, n_steps: int, discrete: bool,
                   to_env: Callable | None = None):
    """Start states visited by mu: ``n_steps`` steps of the N environments (``states``, ``obs`` with
    leading axis N) under mu with auto-reset, returning the (state, obs) *before* each step, stacked
    to a leading axis of n_steps * N (time-major). Pick the probe's M from these."""
    to_env = to_env or _identity
    n = obs.shape[0]

    def step(carry, key_t):
        state, ob = carry
        k_act, k_env = jax.random.split(key_t)
        action = jax.vmap(lambda kk, o: distributions.sample(kk, mu(o), discrete))(jax.random.split(k_act, n), ob)
        out = jax.vmap(lambda kk, s, a: auto_reset_step(env, kk, s, a))(jax.random.split(k_env, n), state,
                                                                          to_env(action))
        return (out.state, out.obs), (state, ob)

    _, (seen_states, seen_obs) = jax.lax.scan(step, (states, obs), jax.random.split(key, n_steps))
    flat = lambda x: x.reshape((n_steps * n,) + x.shape[2:])  # noqa: E731
    return jax.tree.map(flat, seen_states), flat(seen_obs)


# -- statistics (NumPy, outside jit) ---------------------------------------------------------------

def kish_ess(log_weight, axis: int = -1) -> np.ndarray:
    """Kish's effective sample size (sum_k w_k)^2 / sum_k w_k^2 of importance weights given as logs,
    along ``axis`` (Kish, *Survey Sampling*, 1965; for importance sampling see Owen, *Monte Carlo
    theory, methods and examples*, 2013, Section 9.3). K when all weights are equal, 1 when one
    carries all the weight; NaN when every weight is 0. Shifted by the largest log weight so that
    c_bar = inf cannot overflow."""
    lw = np.asarray(log_weight, dtype=float)
    top = np.max(lw, axis=axis, keepdims=True)
    w = np.exp(lw - np.where(np.isfinite(top), top, 0.0))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.sum(w, axis=axis) ** 2 / np.sum(w**2, axis=axis)


def variance_se(x, axis: int = -1) -> np.ndarray:
    """Standard error of the sample variance of ``x`` along ``axis``: sqrt((m4 - m2^2) / n) with the
    central moments m2, m4 (the large-sample form ``bpo.instruments.variance.monte_carlo`` uses)."""
    x = np.asarray(x, dtype=float)
    dev = x - np.mean(x, axis=axis, keepdims=True)
    m2, m4 = np.mean(dev**2, axis=axis), np.mean(dev**4, axis=axis)
    return np.sqrt(np.maximum(m4 - m2**2, 0.0) / x.shape[axis])


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """num / den per state: inf where only den is 0, NaN (no comparison) where both are."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.where(num > 0, np.inf, np.nan))


def per_state_statistics(est_mu, est_pi, v_ref, log_weight_mu=None) -> dict[str, np.ndarray]:
    """Per start state (rows of the [M, K] estimates): unbiased variances over the K segments and
    their standard errors (``variance_se``), their ratio Var_mu / Var_pi, the mean squared errors
    mean_k (G_k - v_ref)^2 of each estimator against ``v_ref`` [M] and their ratio, and Kish's ESS
    of mu's segment weights (``kish_ess``; NaN when ``log_weight_mu`` is None)."""
    est_mu, est_pi = np.asarray(est_mu, dtype=float), np.asarray(est_pi, dtype=float)
    v_ref = np.asarray(v_ref, dtype=float)[:, None]
    out = {"var_mu": np.var(est_mu, axis=1, ddof=1), "var_pi": np.var(est_pi, axis=1, ddof=1),
           "var_mu_se": variance_se(est_mu, axis=1), "var_pi_se": variance_se(est_pi, axis=1),
           "mse_mu": np.mean((est_mu - v_ref) ** 2, axis=1), "mse_pi": np.mean((est_pi - v_ref) ** 2, axis=1)}
    out["var_ratio"] = _ratio(out["var_mu"], out["var_pi"])
    out["mse_ratio"] = _ratio(out["mse_mu"], out["mse_pi"])
    out["ess_mu"] = np.full(len(est_mu), np.nan) if log_weight_mu is None else kish_ess(log_weight_mu, axis=1)
    return out


def median_interval(x, *, n_boot: int, level: float, rng: np.random.Generator) -> tuple[float, float, float, int]:
    """(median, lower, upper, n) of the values of ``x`` that are not NaN (inf counts, as +inf):
    the median and its percentile-bootstrap interval at ``level``, resampling the values with
    replacement ``n_boot`` times (Efron and Tibshirani, *An Introduction to the Bootstrap*, 1993,
    Section 13.3). The percentiles are order statistics of the resampled medians (no interpolation,
    which could meet inf - inf)."""
    x = np.asarray(x, dtype=float)
    x = x[~np.isnan(x)]
    if x.size == 0:
        return float("nan"), float("nan"), float("nan"), 0
    medians = np.median(x[rng.integers(0, x.size, size=(n_boot, x.size))], axis=1)
    lo, hi = np.quantile(medians, [(1.0 - level) / 2.0, (1.0 + level) / 2.0], method="inverted_cdf")
    return float(np.median(x)), float(lo), float(hi), int(x.size)


def json_float(x) -> float | None:
    """A float for JSON: None for NaN and +-inf (JSON has neither)."""
    x = float(x)
    return x if np.isfinite(x) else None


def _ess_summary(ess: np.ndarray, k: int) -> dict:
    """Median, minimum and mean fraction ESS / K over the states with a defined ESS."""
    ess = ess[~np.isnan(ess)]
    if ess.size == 0:
        return {"ess_median": float("nan"), "ess_min": float("nan"), "ess_frac_mean": float("nan")}
    return {"ess_median": float(np.median(ess)), "ess_min": float(np.min(ess)),
            "ess_frac_mean": float(np.mean(ess) / k)}


def probe_statistics(est_mu, est_pi, v_ref, log_weight_mu=None, v_ref_se=None, *, n_boot: int = 2000,
                     level: float = 0.95, seed: int = 0) -> dict[str, float | int | None]:
    """One checkpoint's summary, JSON-ready (NaN and inf are None): over the M start states the
    median of Var_mu / Var_pi and of MSE_mu / MSE_pi with percentile-bootstrap intervals over states
    (``median_interval``, seeded; a state whose two variances are both 0 has no ratio and is left
    out, ``*_states`` counts those kept), the fraction of the M states where mu's variance (MSE) is
    strictly lower, Kish's ESS of mu's weights (median, minimum, mean of ESS / K) and, with
    ``v_ref_se``, the median share of MSE_pi that is the reference's own noise, v_ref_se^2 / MSE_pi."""
    s = per_state_statistics(est_mu, est_pi, v_ref, log_weight_mu)
    m, k = np.shape(est_mu)
    rng = np.random.default_rng(seed)
    out: dict = {"states": int(m), "segments": int(k), "n_boot": int(n_boot), "level": float(level)}
    for name in ("var", "mse"):
        med, lo, hi, n = median_interval(s[f"{name}_ratio"], n_boot=n_boot, level=level, rng=rng)
        out.update({f"{name}_ratio_median": med, f"{name}_ratio_lo": lo, f"{name}_ratio_hi": hi,
                    f"{name}_ratio_states": n,
                    f"frac_{name}_mu_lower": float(np.mean(s[f"{name}_mu"] < s[f"{name}_pi"]))})
    out.update(_ess_summary(s["ess_mu"], k))
    out.update({"var_mu_median": float(np.median(s["var_mu"])), "var_pi_median": float(np.median(s["var_pi"]))})
    if v_ref_se is not None:
        share = _ratio(np.asarray(v_ref_se, dtype=float) ** 2, s["mse_pi"])
        out["ref_noise_share_median"] = float(np.nanmedian(share)) if np.any(~np.isnan(share)) else None
    return {key: json_float(v) if isinstance(v, float) else v for key, v in out.items()}


# -- settings and cost -----------------------------------------------------------------------------

@dataclass(frozen=True)
class ProbeSettings:
    """How much a probe samples at one checkpoint. The defaults fit a 2-core machine: 32 states,
    32 segments of 256 steps per state and policy, and a reference of 128 segments of 512 steps of
    pi per state (``probe_cost`` counts the steps)."""

    m: int = 32  # start states
    k: int = 32  # segments per state and policy
    horizon: int = 256  # H, steps per segment
    ref_k: int = 128  # pi segments per state for v_ref
    ref_horizon: int = 512  # their length
    ref_bootstrap: bool = True  # add gamma^H v(s_H) where a reference segment has not ended (reference_values)
    n_boot: int = 2000  # bootstrap resamples of the states
    level: float = 0.95  # the bootstrap interval's coverage
    seed: int = 0  # of the bootstrap

    def __post_init__(self):
        for name in ("m", "horizon", "ref_horizon", "n_boot"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("k", "ref_k"):  # a sample variance needs two draws
            if getattr(self, name) < 2:
                raise ValueError(f"{name} must be >= 2, got {getattr(self, name)}")
        if not 0.0 < self.level < 1.0:
            raise ValueError(f"level must be in (0, 1), got {self.level}")
        counts = (("m x horizon (the start states' steps)", self.m * self.horizon),
                  ("2 x m x k x horizon (the segments' steps)", 2 * self.m * self.k * self.horizon),
                  ("m x ref_k x ref_horizon (the reference's steps)", self.m * self.ref_k * self.ref_horizon))
        for what, steps in counts:
            if steps > MAX_COUNT:  # the probe's programs index its states' segments and steps in int32
                raise ValueError(f"{what} must be <= {MAX_COUNT:,} (counted in 32 bits), got {steps:,}; allowed: a "
                                 "smaller m, k or horizon")


def probe_cost(settings: ProbeSettings, steps_per_s: float | None = None) -> dict:
    """What one probe costs: environment steps (the scans run every segment for all its steps, also
    after its episode ended, so this is exact, not a bound), policy and value-network evaluations
    (mu's segments evaluate both policies), and seconds at a measured rate of ``steps_per_s``
    environment steps per second of the vmapped probe (None: no estimate)."""
    s = settings
    probe_steps = 2 * s.m * s.k * s.horizon
    ref_steps = s.m * s.ref_k * s.ref_horizon
    env_steps = probe_steps + ref_steps
    policy_evals = 3 * s.m * s.k * s.horizon + ref_steps
    seconds = env_steps / steps_per_s if steps_per_s else None
    return {"env_steps": env_steps, "probe_steps": probe_steps, "reference_steps": ref_steps,
            "policy_evals": policy_evals, "value_evals": env_steps + s.m * (2 * s.k + s.ref_k), "seconds": seconds}


def format_cost(settings: ProbeSettings, cost: dict) -> str:
    """One line to print before a probe starts."""
    s = settings
    time = f", about {cost['seconds']:.0f} s" if cost["seconds"] is not None else ""
    return (f"probe: {s.m} states x {s.k} segments x {s.horizon} steps under pi and under mu, reference "
            f"{s.ref_k} x {s.ref_horizon} steps of pi: {cost['env_steps']:,} environment steps{time}")


# -- a finite MDP as a functional environment (the probe's oracle) ---------------------------------

class TabularState(NamedTuple):
    s: jax.Array  # state index; S is the terminal state
    t: jax.Array  # steps taken in the episode


class TabularEnv:
    """A finite MDP in ``bpo.instruments.variance.TabularMDP``'s arrays (``P[s, a, s']`` sub-stochastic, the
    deficit terminates; ``R[s, a]`` deterministic; start distribution ``p0``) behind the functional
    interface of ``envs.functional``. The observation is one-hot over S + 1 (the last is the
    terminal state). The arrays may be traced: build it inside a jitted function so that one
    compilation serves every MDP of a shape. Truncated after ``max_steps`` steps."""

    def __init__(self, P, R, p0, max_steps: int = 2**30):
        self.P, self.R, self.p0 = jnp.asarray(P, jnp.float32), jnp.asarray(R, jnp.float32), jnp.asarray(p0)
        n_states, n_actions = self.R.shape
        self.n_states, self.max_steps = n_states, max_steps
        self.spec = EnvSpec(n_states + 1, True, n_actions, None, None, max_steps)

    def observation(self, state: TabularState):
        return jax.nn.one_hot(state.s, self.n_states + 1, dtype=jnp.float32)

    def reset(self, key):
        s = jax.random.categorical(key, jnp.log(self.p0))
        state = TabularState(s.astype(jnp.int32), jnp.zeros((), jnp.int32))
        return state, self.observation(state)

    def step_env(self, key, state: TabularState, action):
        # Inverse CDF with one uniform (a Gumbel draw would take S + 1): next states 0..S-1 by their
        # cumulative probabilities, the rest of [0, 1) (the row's deficit) terminates.
        cdf = jnp.cumsum(self.P[state.s, action])
        nxt = jnp.sum(jax.random.uniform(key) >= cdf).astype(jnp.int32)
        terminated = nxt == self.n_states
        t = state.t + 1
        new = TabularState(nxt, t)
        return new, self.observation(new), self.R[state.s, action], terminated, ~terminated & (t >= self.max_steps)


def tabular_policy(probs) -> DistFn:
    """A tabular policy ``probs[s, a]`` as a ``DistFn`` on ``TabularEnv``'s one-hot observations."""
    logits = jnp.log(jnp.asarray(probs, jnp.float32))
    return lambda obs: distributions.logits_dist(logits[jnp.minimum(jnp.argmax(obs), logits.shape[0] - 1)])


def tabular_value(v) -> ValueFn:
    """A tabular value function ``v[s]`` on ``TabularEnv``'s observations (0 at the terminal state)."""
    table = jnp.concatenate([jnp.asarray(v, jnp.float32), jnp.zeros(1, jnp.float32)])
    return lambda obs: table[jnp.argmax(obs)]
