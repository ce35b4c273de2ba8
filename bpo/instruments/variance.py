"""Exact variance of importance-sampled returns in tabular MDPs (paper Sections 3-4, Appendix A).

A finite MDP is given as arrays (``TabularMDP``):

* ``P[s, a, s']``: probability of moving to non-terminal state s'. Rows may sum to less than one:
  the missing mass ``1 - P[s, a].sum()`` is the probability that the episode *terminates* after
  (s, a). The terminal state is not a row of P; its value is 0 and nothing follows it.
* ``R[s, a]``: the reward of (s, a), *deterministic* (the paper's r(s, a)). Reward noise is not
  modelled, so every variance below comes from actions and transitions only.
* ``gamma`` and the start distribution ``p0``.

The return estimator is eq. (6) with lambda = 1 and rho_bar = c_bar = inf, written with a
per-state *baseline* b:

    G_t = (1 - rho_t) b(S_t) + rho_t (R_{t+1} + gamma G_{t+1}),    rho_t = pi(A_t|S_t) / mu(A_t|S_t),

i.e. G_t = b(S_t) + sum_k gamma^(k-t) rho_{t:k} (R_{k+1} + gamma b(S_{k+1}) - b(S_k)).
With b = v_pi this is eq. (6) as printed; with b = 0 it is the per-decision IS return G^PDIS
of eq. (1), which is also what BPO-REINFORCE uses (no value function, Listing 3). On-policy
(mu = pi) both are the plain Monte Carlo return. Lemma 4's variance Bellman operator is exact
for b = 0 only: its between-action term E_mu[rho^2 q^2] - v^2 assumes E[G_t | S_t, A_t] = rho_t q,
whereas eq. (6) with b = v_pi has E[G_t | S_t, A_t] = (1 - rho_t) v + rho_t q.
``is_return_variance`` solves the operator for any b; see its docstring.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from envs.short_corridor import GOAL, N_ACTIONS, ShortCorridorEnv


@dataclass(frozen=True)
class TabularMDP:
    P: np.ndarray  # [S, A, S], sub-stochastic rows: the deficit is the termination probability
    R: np.ndarray  # [S, A], deterministic rewards
    gamma: float
    p0: np.ndarray  # [S]
    name: str = ""

    def __post_init__(self):
        S, A, S2 = self.P.shape
        if S != S2 or self.R.shape != (S, A) or self.p0.shape != (S,):
            raise ValueError(f"shapes: P {self.P.shape}, R {self.R.shape}, p0 {self.p0.shape}")
        if np.any(self.P < 0) or np.any(self.P.sum(-1) > 1 + 1e-12):
            raise ValueError("P: rows must be non-negative and sum to at most 1")
        if not 0.0 < self.gamma <= 1.0 or not np.isclose(self.p0.sum(), 1.0):
            raise ValueError(f"gamma must be in (0, 1] and p0 a distribution, got {self.gamma}, {self.p0}")


def _solve(matrix: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """(I - matrix)^-1 rhs, or inf everywhere when the Neumann series of ``matrix`` diverges
    (spectral radius >= 1: the episode's discounted weights do not vanish)."""
    if np.max(np.abs(np.linalg.eigvals(matrix))) >= 1.0 - 1e-12:
        return np.full(rhs.shape, np.inf)
    return np.linalg.solve(np.eye(len(matrix)) - matrix, rhs)


def policy_evaluation(mdp: TabularMDP, pi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(v_pi [S], q_pi [S, A]) from the Bellman equation q = r + gamma P v, v = sum_a pi q."""
    v = _solve(mdp.gamma * np.einsum("sa,sat->st", pi, mdp.P), np.sum(pi * mdp.R, axis=1))
    return v, mdp.R + mdp.gamma * mdp.P @ v


def next_value_variance(mdp: TabularMDP, v: np.ndarray) -> np.ndarray:
    """nu_pi(s, a) = Var_{S'~p}(gamma v_pi(S')), eq. (22); termination counts as v = 0."""
    return mdp.gamma**2 * (mdp.P @ v**2 - (mdp.P @ v) ** 2)


def r_hat(mdp: TabularMDP, q: np.ndarray) -> np.ndarray:
    """r-hat_pi(s, a) = 2 r(s, a) q_pi(s, a) - r(s, a)^2, eq. (7)."""
    return 2.0 * mdp.R * q - mdp.R**2


def q_hat(mdp: TabularMDP, pi: np.ndarray, q: np.ndarray) -> np.ndarray:
    """q-hat_pi of eq. (8): the action value of r-hat with discount gamma^2 (Theorem 3).
    Equals E_pi[G_t^2 | S_t = s, A_t = a], the second moment of the return (eq. 4, Lemma 6)."""
    rh = r_hat(mdp, q)
    v_hat = _solve(mdp.gamma**2 * np.einsum("sa,sat->st", pi, mdp.P), np.sum(pi * rh, axis=1))
    return rh + mdp.gamma**2 * mdp.P @ v_hat


def mu_hat(pi: np.ndarray, qh: np.ndarray) -> np.ndarray:
    """The one-step variance-optimal behaviour policy mu-hat ∝ pi sqrt(q-hat_pi), eq. (5).
    Where q-hat is 0 for every action of pi, any mu is optimal; pi is returned there."""
    w = pi * np.sqrt(np.maximum(qh, 0.0))
    z = w.sum(axis=1, keepdims=True)
    return np.where(z > 0, w / np.where(z > 0, z, 1.0), pi)


def _ratios(pi: np.ndarray, mu: np.ndarray) -> np.ndarray:
    if np.any((mu <= 0) & (pi > 0)):
        raise ValueError("mu must cover pi: mu(a|s) > 0 wherever pi(a|s) > 0")
    return np.divide(pi, mu, out=np.zeros_like(pi), where=mu > 0)


def is_return_variance(mdp: TabularMDP, pi: np.ndarray, mu: np.ndarray, baseline: np.ndarray | None = None,
                       ) -> np.ndarray:
    """J_mu(s) = Var_mu(G_t | S_t = s) of the IS return above (lambda = 1, no truncation), from the
    variance Bellman equation J = K_mu J + b_mu (Appendix A, Lemma 4), solved as a linear system:

        K_mu J(s) = sum_a mu rho^2 gamma^2 sum_s' P(s'|s,a) J(s')
        b_mu(s)   = sum_a mu rho^2 nu_pi(s, a) + sum_a mu (b(s) + rho (q_pi(s, a) - b(s)) - v_pi(s))^2

    For b = 0 the last sum is Lemma 4's E_mu[rho^2 q_pi^2] - v_pi^2; for b = v_pi it is
    E_mu[rho^2 (q_pi - v_pi)^2] (law of total variance with E[G_t | s, a] = b + rho (q - b)).
    Requires mu to cover pi (then E_mu[G_t | S_t] = v_pi, Theorem 1). Infinite where the
    importance weights make the second moment diverge (spectral radius of K_mu >= 1).
    """
    rho = _ratios(pi, mu)
    v, q = policy_evaluation(mdp, pi)
    b = np.zeros_like(v) if baseline is None else np.asarray(baseline, dtype=float)
    w2 = mu * rho**2  # = pi^2 / mu
    between = np.sum(mu * (b[:, None] + rho * (q - b[:, None]) - v[:, None]) ** 2, axis=1)
    rhs = np.sum(w2 * next_value_variance(mdp, v), axis=1) + between
    return _solve(mdp.gamma**2 * np.einsum("sa,sat->st", w2, mdp.P), rhs)


def start_variance(mdp: TabularMDP, J: np.ndarray, v: np.ndarray) -> float:
    """Var(G_0) with S_0 ~ p0: E[J(S_0)] + Var(v_pi(S_0)) (total variance; G_0 is unbiased).
    Infinite when J is at a possible start state (0 * inf in the dot product would give NaN)."""
    start = mdp.p0 > 0
    if np.any(np.isinf(J[start])):
        return float("inf")
    p0, J, v = mdp.p0[start], J[start], v[start]
    return float(p0 @ J + p0 @ v**2 - (p0 @ v) ** 2)


def theorem2_gap(mdp: TabularMDP, pi: np.ndarray, qh: np.ndarray) -> np.ndarray:
    """epsilon(s) of Theorem 2: epsilon = c + K_mu-hat epsilon, with the per-state Jensen gap
    c(s) = E_pi[q-hat] - (E_pi[sqrt q-hat])^2 >= 0. The proof shows J_pi - J_mu-hat = epsilon (b = 0)."""
    c = np.sum(pi * qh, axis=1) - np.sum(pi * np.sqrt(np.maximum(qh, 0.0)), axis=1) ** 2
    mu = mu_hat(pi, qh)
    w2 = mu * _ratios(pi, mu) ** 2
    return _solve(mdp.gamma**2 * np.einsum("sa,sat->st", w2, mdp.P), c)


class MCEstimate(NamedTuple):
    mean: float
    mean_se: float
    var: float
    var_se: float
    episodes: int
    truncated: int  # episodes still running at max_steps: their returns are cut there


def monte_carlo(mdp: TabularMDP, pi: np.ndarray, mu: np.ndarray, episodes: int, rng: np.random.Generator,
                baseline: np.ndarray | None = None, max_steps: int = 10_000) -> MCEstimate:
    """Sample ``episodes`` episodes from p0 with mu, all at once, and estimate the mean and variance
    of G_0 (the IS return above) with their standard errors. ``max_steps`` guards against endless
    episodes; ``truncated`` counts the episodes it cut."""
    rho = _ratios(pi, mu)
    b = np.zeros(len(mdp.p0)) if baseline is None else np.asarray(baseline, dtype=float)
    S = len(mdp.p0)
    # Next-state outcomes 0..S-1 plus S = terminate, as cumulative tables for inverse-CDF sampling.
    outcomes = np.concatenate([mdp.P, 1.0 - mdp.P.sum(-1, keepdims=True)], axis=-1).cumsum(-1)
    mu_cdf = mu.cumsum(-1)
    state = np.minimum(np.searchsorted(mdp.p0.cumsum(), rng.random(episodes), side="right"), S - 1)
    g, weight = np.zeros(episodes), np.ones(episodes)  # weight = gamma^t rho_{0:t-1}
    alive = np.arange(episodes)
    for _ in range(max_steps):
        if alive.size == 0:
            break
        s = state[alive]
        a = np.minimum((rng.random(alive.size)[:, None] >= mu_cdf[s]).sum(-1), mu.shape[1] - 1)
        r_t, w = rho[s, a], weight[alive]
        g[alive] += w * ((1.0 - r_t) * b[s] + r_t * mdp.R[s, a])
        weight[alive] = w * r_t * mdp.gamma
        nxt = (rng.random(alive.size)[:, None] >= outcomes[s, a]).sum(-1)
        state[alive] = np.minimum(nxt, S - 1)
        alive = alive[nxt < S]
    n = episodes
    dev = g - g.mean()
    var = float(np.mean(dev**2) * n / (n - 1))
    # SE of the sample variance: sqrt((m4 - var^2) / n), the large-sample (delta-method) form.
    var_se = float(np.sqrt(max(np.mean(dev**4) - np.mean(dev**2) ** 2, 0.0) / n))
    return MCEstimate(float(g.mean()), float(np.sqrt(var / n)), var, var_se, n, int(alive.size))


def random_mdp(seed: int, n_states: int = 5, n_actions: int = 3, gamma: float = 0.9,
               terminate: tuple[float, float] = (0.1, 0.4)) -> tuple[TabularMDP, np.ndarray]:
    """A random episodic MDP and a random policy pi: every (s, a) ends the episode with probability
    drawn from ``terminate``, so the terminal state is reachable from everywhere and every
    variance is finite under pi; rewards uniform in [-1, 1], Dirichlet transitions, pi from a
    softmax of Gaussian logits (each action has probability > 0). Start state 0."""
    rng = np.random.default_rng(seed)
    stay = 1.0 - rng.uniform(*terminate, size=(n_states, n_actions, 1))
    P = stay * rng.dirichlet(np.full(n_states, 0.5), size=(n_states, n_actions))
    R = rng.uniform(-1.0, 1.0, size=(n_states, n_actions))
    logits = rng.normal(size=(n_states, n_actions))
    pi = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    p0 = np.eye(n_states)[0]
    return TabularMDP(P, R, gamma, p0, name=f"random-{seed}"), pi


def short_corridor_mdp(gamma: float = 0.99) -> TabularMDP:
    """ShortCorridor (envs/short_corridor.py) as a tabular MDP over cells 0..2; reaching GOAL
    (cell 3) terminates. Dynamics and rewards are read off the environment's own ``step``."""
    env = ShortCorridorEnv()
    P, R = np.zeros((GOAL, N_ACTIONS, GOAL)), np.zeros((GOAL, N_ACTIONS))
    for cell in range(GOAL):
        for action in range(N_ACTIONS):
            env.reset()
            env._cell = cell  # the environment has no public way to start elsewhere than cell 0
            _, reward, terminated, _, info = env.step(action)
            R[cell, action] = reward
            if not terminated:
                P[cell, action, info["cell"]] = 1.0
    return TabularMDP(P, R, gamma, np.eye(GOAL)[0], name="ShortCorridor")


def state_independent(p_right: float, n_states: int = 3) -> np.ndarray:
    """The ShortCorridor policy (left, right) = (1 - p, p) in every cell: all cells look alike."""
    return np.tile([1.0 - p_right, p_right], (n_states, 1))
