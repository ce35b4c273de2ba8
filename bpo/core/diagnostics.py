"""Off-policy health checks of a BPO update, on the behaviour samples a ~ mu(.|s) of one rollout.

With log rho = log pi(a|s) - log mu(a|s) (the IS ratio of eq. 6 before truncation):

* IS ratio mean / min / max, and the effective-sample-size fraction (sum rho)^2 / (n sum rho^2):
  1 when pi = mu, near 1/n when one sample carries all the weight;
* the fractions of ratios truncated by rho_bar and by c_bar;
* KL(mu || pi) and KL(pi || mu) from the samples by the k1 and k3 estimators (``bpo.core.kl``), and
  exactly from the two action distributions where that is a closed form;
* the log-probability mismatch between the log mu stored at collection and log mu recomputed by the
  learner with the same parameters: mean log-ratio and half the mean squared log-ratio, the two
  usual sampler/trainer mismatch metrics (docs/choices.md). Both must be ~0; above 0.01 the
  rollout and the learner disagree about the data;
* Trust Region Masking (Li et al., "Trust Region Masking for Long-Horizon LLM Reinforcement
  Learning"): a trajectory segment is accepted only if its largest per-step |log rho| (or its
  mean k3) is at most delta.

Every function works on arrays of any shape and is jit-safe.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from bpo.core.distributions import Dist

MISMATCH_WARNING = 0.01  # the mismatch metrics' usual thresholds: below 0.01 expected, above 0.1 critical
# Per-update diagnostics, and how updates are pooled (for curves and summaries): min, max or mean.
POOLING = {"is_ratio_mean": "mean", "is_ratio_min": "min", "is_ratio_max": "max", "ess_frac": "mean",
           "rho_truncated_frac": "mean", "c_truncated_frac": "mean", "kl_mu_pi_k1": "mean", "kl_mu_pi_k3": "mean",
           "kl_pi_mu_k1": "mean", "kl_pi_mu_k3": "mean", "kl_pi_mu_exact": "mean", "kl_mu_pi_exact": "mean",
           "logprob_mismatch": "mean", "logprob_mismatch_sq": "mean", "trm_mask_rate": "mean",
           "trm_segments_masked": "mean"}


def _weights(x, valid):
    return jnp.ones_like(x) if valid is None else valid.astype(x.dtype)


def _mean(x, valid=None):
    w = _weights(x, valid)
    return jnp.sum(x * w) / jnp.maximum(jnp.sum(w), 1.0)


def ratio_stats(log_ratio, valid=None) -> dict:
    """Mean, min and max of rho over the samples (``valid``: 1 where a sample exists, padding 0)."""
    ratio, w = jnp.exp(log_ratio), _weights(log_ratio, valid)
    return {"is_ratio_mean": _mean(ratio, valid), "is_ratio_min": jnp.min(jnp.where(w > 0, ratio, jnp.inf)),
            "is_ratio_max": jnp.max(jnp.where(w > 0, ratio, -jnp.inf))}


def ess_fraction(log_ratio, valid=None):
    """(sum w)^2 / (n sum w^2) for w = rho, computed from log rho without overflow."""
    v = _weights(log_ratio, valid)
    shifted = jnp.where(v > 0, log_ratio, -jnp.inf)
    w = jnp.exp(shifted - jnp.max(shifted)) * v
    return jnp.sum(w) ** 2 / (jnp.sum(v) * jnp.sum(w**2))


def truncated_fraction(log_ratio, bar, valid=None):
    """Share of samples whose ratio exceeds ``bar`` (rho_bar or c_bar), i.e. is cut by min(bar, rho)."""
    return _mean((jnp.exp(log_ratio) > bar).astype(log_ratio.dtype), valid)


def sample_kls(log_ratio, valid=None) -> dict:
    """KL estimates from a ~ mu, with rho = pi/mu:

    KL(mu || pi) = E_mu[-log rho]:        k1 = -log rho,        k3 = rho - 1 - log rho;
    KL(pi || mu) = E_mu[rho log rho]:     k1 = rho log rho,     k3 = rho log rho - rho + 1
    (the second pair re-weights samples of mu to pi; its k3 adds the zero-mean 1 - rho)."""
    rho = jnp.exp(log_ratio)
    return {
        "kl_mu_pi_k1": _mean(-log_ratio, valid),
        "kl_mu_pi_k3": _mean(rho - 1.0 - log_ratio, valid),
        "kl_pi_mu_k1": _mean(rho * log_ratio, valid),
        "kl_pi_mu_k3": _mean(rho * log_ratio - rho + 1.0, valid),
    }


def exact_kl(p: Dist, q: Dist, discrete: bool):
    """KL(p || q) per state: categorical sum, or the diagonal-Gaussian closed form."""
    if discrete:
        log_p, log_q = jax.nn.log_softmax(p.loc, axis=-1), jax.nn.log_softmax(q.loc, axis=-1)
        return jnp.sum(jnp.exp(log_p) * (log_p - log_q), axis=-1)
    var_ratio = (p.scale / q.scale) ** 2
    mean_term = ((p.loc - q.loc) / q.scale) ** 2
    return 0.5 * jnp.sum(var_ratio + mean_term - 1.0 - jnp.log(var_ratio), axis=-1)


def exact_kls(pi: Dist, mu: Dist, discrete: bool, valid=None) -> dict:
    """KL(pi || mu) and KL(mu || pi) at the visited states, averaged."""
    return {"kl_pi_mu_exact": _mean(exact_kl(pi, mu, discrete), valid),
            "kl_mu_pi_exact": _mean(exact_kl(mu, pi, discrete), valid)}


def logprob_mismatch(stored_log_prob, recomputed_log_prob, valid=None) -> dict:
    """The two mismatch metrics of d = stored - recomputed log-probability: mean d (linear) and
    0.5 mean d^2 (quadratic); both estimate the KL between what acted and what the learner sees."""
    d = stored_log_prob - recomputed_log_prob
    return {"logprob_mismatch": _mean(d, valid), "logprob_mismatch_sq": 0.5 * _mean(d**2, valid)}


def off_policy_diagnostics(log_pi, log_mu_stored, log_mu_recomputed, pi: Dist, mu: Dist, discrete: bool,
                           rho_bar, c_bar, valid=None) -> dict:
    """Every diagnostic of one BPO update, on the rollout's samples. ``log_mu_stored``: what the
    rollout recorded; ``mu`` and ``log_mu_recomputed``: the behaviour policy as the learner computes
    it with the parameters that collected the data (before the behaviour step changes them)."""
    log_ratio = log_pi - log_mu_stored
    return {
        **ratio_stats(log_ratio, valid),
        "ess_frac": ess_fraction(log_ratio, valid),
        "rho_truncated_frac": truncated_fraction(log_ratio, rho_bar, valid),
        "c_truncated_frac": truncated_fraction(log_ratio, c_bar, valid),
        **sample_kls(log_ratio, valid),
        **exact_kls(pi, mu, discrete, valid),
        **logprob_mismatch(log_mu_stored, log_mu_recomputed, valid),
    }


def segment_ids(done):
    """Time-major ``done [T, N]`` -> an id per step naming its trajectory segment: a segment is a
    run of steps of one environment within the rollout, ending at an episode end or the rollout's."""
    t, n = done.shape
    starts = jnp.concatenate([jnp.zeros((1, n)), jnp.cumsum(done, axis=0)[:-1]], axis=0).astype(jnp.int32)
    return starts + jnp.arange(n, dtype=jnp.int32)[None, :] * t  # segments of env j use ids j*T ..


def trust_region_mask(log_ratio, done, delta, criterion: str = "max_abs_log_ratio"):
    """Trust Region Masking (Li et al., Algorithm 1) on a rollout ``[T, N]``: 1 on the steps of
    accepted segments, 0 on rejected ones. ``max_abs_log_ratio``: accept if max_t |log rho_t| <= delta
    (length-invariant, catches both directions); ``mean_k3``: accept if the segment's mean of
    rho - 1 - log rho is <= delta. The loss must then average over *all* steps (masked ones add
    0), not over the accepted ones."""
    t, n = log_ratio.shape
    ids = segment_ids(done).reshape(-1)
    if criterion == "max_abs_log_ratio":
        score = jax.ops.segment_max(jnp.abs(log_ratio).reshape(-1), ids, num_segments=t * n)
    elif criterion == "mean_k3":
        k3 = (jnp.exp(log_ratio) - 1.0 - log_ratio).reshape(-1)
        total = jax.ops.segment_sum(k3, ids, num_segments=t * n)
        count = jax.ops.segment_sum(jnp.ones_like(k3), ids, num_segments=t * n)
        score = total / jnp.maximum(count, 1.0)
    else:
        raise ValueError(f"criterion: unknown {criterion!r}; allowed: ['max_abs_log_ratio', 'mean_k3']")
    accepted = score <= delta
    return accepted[ids].reshape(t, n).astype(log_ratio.dtype)


def masked_segment_fraction(mask, done):
    """Share of the rollout's segments that the mask rejected."""
    t, n = mask.shape
    ids = segment_ids(done).reshape(-1)
    present = jax.ops.segment_max(jnp.ones(t * n), ids, num_segments=t * n) > 0
    rejected = jax.ops.segment_max(1.0 - mask.reshape(-1), ids, num_segments=t * n) > 0
    return jnp.sum(rejected & present) / jnp.sum(present)
