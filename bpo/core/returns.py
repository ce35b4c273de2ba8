"""Return estimators: truncated IS-TD(lambda) (paper eq. 6, Remark 1) and its special cases.

All functions take time-major arrays of shape ``[T, *batch]`` and are pure, jittable and
vmappable. Conventions (docs/choices.md, "Returns"):

* ``terminated[t]``: s_{t+1} is terminal, so there is no bootstrap from it;
* ``done[t]``: terminated or truncated; the trace is cut after step t;
* ``next_values[t]``: v(s_{t+1}) of the *real* next observation (on truncation the final
  observation, never the reset observation); at the last row of the batch it bootstraps the tail;
* ``log_ratio[t]``: log pi(a_t|s_t) - log mu(a_t|s_t).
"""

from typing import Literal

import jax
import jax.numpy as jnp

TrajMode = Literal["per_decision", "traj", "traj_shifted"]


def td_errors(rewards, values, next_values, terminated, *, gamma):
    """Untruncated TD error  r_t + gamma * (1 - terminated_t) * v(s_{t+1}) - v(s_t)."""
    return rewards + gamma * (1.0 - terminated) * next_values - values


def truncated_ratios(log_ratio, bar):
    """min(bar, pi/mu), the truncated IS ratio rho_t or c_t of eq. (6); ``bar`` may be inf."""
    return jnp.minimum(bar, jnp.exp(log_ratio))


def tis_lambda_returns(
    rewards,
    values,
    next_values,
    terminated,
    done,
    log_ratio,
    *,
    gamma,
    lam,
    rho_bar,
    c_bar,
    traj: bool | TrajMode = False,
):
    """Truncated IS-TD(lambda) returns G_t^{TIS,lambda}, eq. (6), computed as in Remark 1.

    ``G_t = v_t + delta_t + gamma*lam*c_t*(1-done_t)*(G_{t+1} - v_{t+1})`` with
    ``delta_t = rho_t * (r_t + gamma*(1-terminated_t)*v(s_{t+1}) - v_t)``.

    ``traj`` selects trajectory-level truncation (paper Section 6, "Discussion"):
    ``True`` or ``"traj"`` weights the TD error at step k by ``min(c_bar, prod_{i=t}^{k} pi_i/mu_i)``
    (rho_bar is unused); ``"traj_shifted"`` uses the authors' variant
    ``min(rho_bar, pi_t/mu_t) * min(c_bar, prod_{i=t+1}^{k} pi_i/mu_i)``.
    ``gamma``, ``lam``, ``rho_bar`` and ``c_bar`` may be traced scalars.
    """
    mode = _traj_mode(traj)
    dtilde = td_errors(rewards, values, next_values, terminated, gamma=gamma)
    if mode == "per_decision":
        corrections = _per_decision_corrections(dtilde, done, log_ratio, gamma * lam, rho_bar, c_bar)
    else:
        corrections = _trajectory_corrections(dtilde, done, log_ratio, gamma * lam, rho_bar, c_bar, mode)
    return values + corrections


def _traj_mode(traj) -> TrajMode:
    if traj is False or traj == "per_decision":
        return "per_decision"
    if traj is True or traj == "traj":
        return "traj"
    if traj == "traj_shifted":
        return "traj_shifted"
    raise ValueError(f"traj must be False, True, 'traj' or 'traj_shifted', got {traj!r}")


def _per_decision_corrections(dtilde, done, log_ratio, discount, rho_bar, c_bar):
    """Backward scan of  D_t = rho_t*dtilde_t + discount*c_t*(1-done_t)*D_{t+1},  D_T = 0."""
    rho = truncated_ratios(log_ratio, rho_bar)
    # A where, not a product with (1 - done): with c_bar = inf an overflowing ratio at an episode's
    # end would make inf * 0 = NaN instead of cutting the trace.
    trace = jnp.where(done > 0, 0.0, discount * truncated_ratios(log_ratio, c_bar))

    def step(next_correction, xs):
        delta, trace_t = xs
        correction = delta + trace_t * next_correction
        return correction, correction

    init = jnp.zeros_like(dtilde[0])
    _, corrections = jax.lax.scan(step, init, (rho * dtilde, trace), reverse=True)
    return corrections


def _trajectory_corrections(dtilde, done, log_ratio, discount, rho_bar, c_bar, mode):
    """Trajectory-level truncation, vectorised as a [T, T] weight matrix (O(T^2) memory).

    No exact backward recursion exists because min(c_bar, product) does not factorise.
    """
    log_w, valid, powers = _trajectory_log_weights(done, log_ratio, discount, c_bar, mode)
    if mode == "traj_shifted":
        log_w = log_w + _shifted_first_factor(log_ratio, rho_bar)
    return _weighted_sum(log_w, valid, powers, dtilde)


def _trajectory_log_weights(done, log_ratio, discount, c_bar, mode):
    """The [T, T] log-weights of the TD error at step k in the correction at step t, the mask of
    the (t, k) pairs that count (k >= t in t's episode) and discount^(k - t): ``"traj"``'s
    log min(c_bar, prod_{i=t}^{k} r_i), or ``"traj_shifted"``'s log min(c_bar, prod_{i=t+1}^{k} r_i)
    without its first factor (``_shifted_first_factor``)."""
    steps = done.shape[0]
    batch_ndim = done.ndim - 1
    # Segment id of each step: steps t <= k share an episode iff no done in [t, k-1].
    segment = jnp.cumsum(done, axis=0) - done
    # A ratio of 0 (log -inf: pi gives the action no mass) zeroes the products through it. It is
    # counted apart, so that the cumulative sums stay finite and later episodes keep their weights
    # (-inf - -inf would be NaN); with no such ratio the sums are exactly those of log_ratio.
    vanishing = jnp.isneginf(log_ratio)
    finite_log_ratio = jnp.where(vanishing, 0.0, log_ratio)
    log_cum = jnp.cumsum(finite_log_ratio, axis=0)  # sum_{i<=k} log r_i
    zeros_cum = jnp.cumsum(vanishing, axis=0)  # ratios of 0 among i <= k
    t_idx = jnp.arange(steps).reshape((steps, 1) + (1,) * batch_ndim)
    k_idx = jnp.arange(steps).reshape((1, steps) + (1,) * batch_ndim)
    valid = (k_idx >= t_idx) & (segment[:, None] == segment[None, :])
    if mode == "traj":
        log_prod = log_cum[None, :] - (log_cum - finite_log_ratio)[:, None]  # sum_{i=t}^{k}
        log_prod = jnp.where(zeros_cum[None, :] - zeros_cum[:, None] + vanishing[:, None] > 0, -jnp.inf, log_prod)
    else:
        log_prod = log_cum[None, :] - log_cum[:, None]  # sum_{i=t+1}^{k}
        log_prod = jnp.where(zeros_cum[None, :] - zeros_cum[:, None] > 0, -jnp.inf, log_prod)
    powers = jnp.power(discount, jnp.maximum(k_idx - t_idx, 0))
    return jnp.minimum(jnp.log(c_bar), log_prod), valid, powers


def _shifted_first_factor(log_ratio, rho_bar):
    """log min(rho_bar, pi_t/mu_t), ``"traj_shifted"``'s factor of row t, as a [T, 1, *batch] column."""
    return jnp.minimum(jnp.log(rho_bar), log_ratio)[:, None]


def _weighted_sum(log_w, valid, powers, dtilde):
    """sum_k exp(log_w[t, k]) discount^(k - t) dtilde_k over the valid (t, k): the corrections."""
    # Masked entries are replaced before exponentiating so that they cannot become inf * 0.
    weights = jnp.where(valid, jnp.exp(jnp.where(valid, log_w, 0.0)) * powers, 0.0)
    return jnp.sum(weights * dtilde[None, :], axis=1)


def gae_returns(rewards, values, next_values, terminated, done, *, gamma, lam):
    """GAE(lambda) returns (advantage + value): the on-policy case of eq. (6) (Lemma 3)."""
    zeros = jnp.zeros_like(rewards)
    return tis_lambda_returns(
        rewards, values, next_values, terminated, done, zeros, gamma=gamma, lam=lam, rho_bar=1.0, c_bar=1.0
    )


def pdis_returns(rewards, terminated, done, log_ratio, *, gamma, lam=1.0, rho_bar=jnp.inf, c_bar=jnp.inf,
                 traj: bool | TrajMode = False):
    """Per-decision IS Monte Carlo return, Listing 3 line 7 (eq. 1 when rho_bar = c_bar = inf).

    ``G_t = sum_{k>=t} (gamma lam)^{k-t} (prod_{i=t}^{k-1} c_i) rho_k r_k`` within the episode:
    eq. (6) with a zero value function; the listing has lambda = 1. With ``log_ratio = 0`` (and
    rho_bar, c_bar >= 1) it is the discounted Monte Carlo return of REINFORCE (Listing 2).
    """
    zeros = jnp.zeros_like(rewards)
    return tis_lambda_returns(
        rewards, zeros, zeros, terminated, done, log_ratio, gamma=gamma, lam=lam, rho_bar=rho_bar, c_bar=c_bar,
        traj=traj,
    )


def tis_advantages(
    rewards, values, next_values, terminated, done, log_ratio, *, gamma, lam, rho_bar, c_bar,
    traj: bool | TrajMode = False, current_rho: bool = False,
):
    """Advantages and value targets for BPO-PPO from the truncated IS-TD(lambda) returns G.

    Returns ``(advantages, G)``. ``current_rho=True`` is the paper's eq. (11), ``A_t = G_t - V(s_t)``,
    whose first TD error carries rho_t. The default is the authors' form (docs/choices.md, "The two
    advantage forms for BPO-PPO"):
    ``A_t = r_t + gamma (1 - terminated_t) ((1 - lam) V(s_{t+1}) + lam G_{t+1}) - V(s_t)``, without
    rho_t because the PPO ratio pi_theta/mu already corrects the current action. ``G_{t+1}`` is
    replaced by ``V(s_{t+1})`` after an episode end and at the end of the batch. On-policy both
    reduce to GAE(lambda) advantages. With ``traj="traj_shifted"`` the authors' form is their code's
    for that mode: ``A_t = sum_k (gamma lam)^(k-t) min(c_bar, prod_{i=t+1}^{k} pi_i/mu_i) dtilde_k``,
    G_t - V(s_t) without its first factor min(rho_bar, pi_t/mu_t).
    """
    if _traj_mode(traj) == "traj_shifted" and not current_rho:
        # Both sums from one set of [T, T] log-weights: they differ only by row t's first factor.
        dtilde = td_errors(rewards, values, next_values, terminated, gamma=gamma)
        log_w, valid, powers = _trajectory_log_weights(done, log_ratio, gamma * lam, c_bar, "traj_shifted")
        returns = values + _weighted_sum(log_w + _shifted_first_factor(log_ratio, rho_bar), valid, powers, dtilde)
        return _weighted_sum(log_w, valid, powers, dtilde), returns
    returns = tis_lambda_returns(rewards, values, next_values, terminated, done, log_ratio, gamma=gamma, lam=lam,
                                 rho_bar=rho_bar, c_bar=c_bar, traj=traj)
    if current_rho:
        return returns - values, returns
    following = jnp.concatenate([returns[1:], next_values[-1:]], axis=0)
    next_return = jnp.where(done > 0, next_values, following)
    bootstrap = (1.0 - lam) * next_values + lam * next_return
    return rewards + gamma * (1.0 - terminated) * bootstrap - values, returns
