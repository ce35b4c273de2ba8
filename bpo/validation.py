"""Validation of a config: every field and cross-field constraint, checked before anything is
compiled or written. Each failure is a ``ConfigError`` naming the field and what is allowed.

Validation needs the environments' specs (discrete or continuous actions, which ids exist on which
backend) and the variant names, so it sits above ``bpo.config``, ``bpo.presets`` and ``envs``.
"""

from __future__ import annotations

import math

from bpo.config import BehaviourConfig, ConfigError, OnPolicyTrainConfig
from bpo.presets import VARIANTS
from envs import FUNCTIONAL_ENVS, JAX_ENVS, make_env
from envs.gymnasium_envs import GYMNASIUM_ENVS, MUJOCO_ENVS, gym_spec


def _positive_int(name, value):
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(name, f"must be an integer >= 1, got {value!r}")


def _positive(name, value, allow_inf=False):
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 and not math.isnan(value)
    if ok and not allow_inf and math.isinf(value):
        ok = False
    if not ok:
        allowed = "a number > 0 (inf allowed)" if allow_inf else "a finite number > 0"
        raise ConfigError(name, f"must be {allowed}, got {value!r}")


def _in_unit_interval(name, value, open_right=False):
    ok = isinstance(value, (int, float)) and (0.0 <= value < 1.0 if open_right else 0.0 <= value <= 1.0)
    if not ok:
        raise ConfigError(name, f"must be in [0, 1{')' if open_right else ']'}, got {value!r}")


def _widths(name, widths):
    if not widths or any(not isinstance(w, int) or w < 1 for w in widths):
        raise ConfigError(name, f"must be a non-empty tuple of positive integers, got {widths!r}")


def _choice(name, value, allowed):
    if value not in allowed:
        raise ConfigError(name, f"must be one of {list(allowed)}, got {value!r}")


def validate(cfg):
    """Check every field and cross-field constraint; raise ConfigError before anything compiles."""
    if isinstance(cfg, OnPolicyTrainConfig):
        return _validate_onpolicy(cfg)
    _choice("env", cfg.env, sorted(JAX_ENVS))
    _choice("algo", cfg.algo, ("reinforce", "bpo"))
    for name in ("seeds", "episodes", "eval_every", "eval_episodes", "max_episode_steps"):
        _positive_int(name, getattr(cfg, name))
    if not isinstance(cfg.seed, int) or cfg.seed < 0:
        raise ConfigError("seed", f"must be an integer >= 0, got {cfg.seed!r}")
    if cfg.episodes % cfg.eval_every:
        raise ConfigError("eval_every", f"must divide episodes ({cfg.episodes}), got {cfg.eval_every}")

    r = cfg.reinforce
    _positive("reinforce.lr_start", r.lr_start)
    _positive("reinforce.lr_end", r.lr_end)
    _choice("reinforce.optimizer", r.optimizer, ("adam", "sgd"))
    _in_unit_interval("reinforce.gamma", r.gamma)
    if not (isinstance(r.init_right_prob, float) and 0.0 < r.init_right_prob < 1.0):
        raise ConfigError("reinforce.init_right_prob", f"must be in (0, 1), got {r.init_right_prob!r}")

    _validate_behaviour(cfg.bpo)
    b = cfg.bpo
    _in_unit_interval("bpo.lam", b.lam)
    if math.isfinite(b.trust_region_delta):
        raise ConfigError("bpo.trust_region_delta", "Trust Region Masking is a BPO-PPO option; BPO-REINFORCE "
                          "learns from whole episodes: leave it inf")
    if cfg.algo == "bpo" and b.clip_targets and r.gamma >= 1.0:
        raise ConfigError("reinforce.gamma", "must be < 1 when bpo.clip_targets bounds targets by r/(1-gamma)")
    return cfg


def _validate_behaviour(b: BehaviourConfig) -> None:
    _positive("bpo.rho_bar", b.rho_bar, allow_inf=True)
    _positive("bpo.c_bar", b.c_bar, allow_inf=True)
    _choice("bpo.traj", b.traj, ("per_decision", "traj", "traj_shifted"))
    for name in ("replay_size", "q_batch_size", "mu_batch_size", "n_qvf_epochs", "n_mu_epochs"):
        _positive_int(f"bpo.{name}", getattr(b, name))
    for name in ("q_batch_size", "mu_batch_size"):
        if getattr(b, name) > b.replay_size:
            raise ConfigError(
                "bpo.replay_size",
                f"must hold at least one batch: replay_size={b.replay_size} < {name}={getattr(b, name)}",
            )
    _positive("bpo.q_lr", b.q_lr)
    _positive("bpo.mu_lr", b.mu_lr)
    _positive("bpo.adam_eps", b.adam_eps)
    _positive("bpo.q_max_grad_norm", b.q_max_grad_norm, allow_inf=True)
    _positive("bpo.mu_max_grad_norm", b.mu_max_grad_norm, allow_inf=True)
    for name in ("q_hidden", "mu_hidden"):
        _widths(f"bpo.{name}", getattr(b, name))
    if not (isinstance(b.symlog_reg_coef, (int, float)) and b.symlog_reg_coef >= 0):
        raise ConfigError("bpo.symlog_reg_coef", f"must be a number >= 0, got {b.symlog_reg_coef!r}")
    _in_unit_interval("bpo.polyak_tau", b.polyak_tau)
    _choice("bpo.bootstrap_net", b.bootstrap_net, ("online", "target"))
    _choice("bpo.mu_loss", b.mu_loss, ("cross_entropy", "reverse_kl"))
    _positive("bpo.q_hat_floor", b.q_hat_floor)
    _choice("bpo.advantage", b.advantage, ("authors", "eq11"))
    _choice("bpo.lr_schedule", b.lr_schedule, ("constant", "linear"))
    _positive("bpo.trust_region_delta", b.trust_region_delta, allow_inf=True)
    _choice("bpo.trust_region_criterion", b.trust_region_criterion, ("max_abs_log_ratio", "mean_k3"))
    if not (isinstance(b.ppo_ent_coef, (int, float)) and b.ppo_ent_coef >= 0):
        raise ConfigError("bpo.ppo_ent_coef", f"must be a number >= 0, got {b.ppo_ent_coef!r}")


def _validate_onpolicy(cfg: OnPolicyTrainConfig) -> OnPolicyTrainConfig:
    _choice("backend", cfg.backend, ("jax", "gymnasium", "mjx"))
    if cfg.variant:
        _choice("variant", cfg.variant, VARIANTS)
    _choice("vector_mode", cfg.vector_mode, ("sync", "async"))
    if cfg.backend == "jax" and cfg.env not in FUNCTIONAL_ENVS:
        hint = " (a Gymnasium environment: add --backend gymnasium)" if cfg.env in GYMNASIUM_ENVS else ""
        if cfg.env in MUJOCO_ENVS:
            hint = " (a MuJoCo task: add --backend gymnasium, or --backend mjx for its MJX port)"
        raise ConfigError("env", f"must be one of {sorted(FUNCTIONAL_ENVS)} with backend jax{hint}, got {cfg.env!r}")
    if cfg.backend == "gymnasium":
        _choice("env", cfg.env, sorted(GYMNASIUM_ENVS))
    if cfg.backend == "mjx" and cfg.env not in MUJOCO_ENVS:
        raise ConfigError("env", f"must be one of {sorted(MUJOCO_ENVS)} with backend mjx, got {cfg.env!r}")
    _choice("algo", cfg.algo, ("ppo", "bpo"))
    for name in ("seeds", "total_timesteps", "eval_every", "eval_episodes"):
        _positive_int(name, getattr(cfg, name))
    if not isinstance(cfg.seed, int) or cfg.seed < 0:
        raise ConfigError("seed", f"must be an integer >= 0, got {cfg.seed!r}")
    p = cfg.ppo
    for name in ("n_steps", "n_envs", "batch_size", "n_epochs"):
        _positive_int(f"ppo.{name}", getattr(p, name))
    rollout = p.n_steps * p.n_envs
    if rollout % p.batch_size:
        raise ConfigError("ppo.batch_size", f"must divide n_steps * n_envs = {rollout}, got {p.batch_size}")
    _positive("ppo.learning_rate", p.learning_rate)
    _choice("ppo.lr_schedule", p.lr_schedule, ("constant", "linear"))
    _choice("ppo.clip_range_schedule", p.clip_range_schedule, ("constant", "linear"))
    _in_unit_interval("ppo.gamma", p.gamma, open_right=True)
    _in_unit_interval("ppo.gae_lambda", p.gae_lambda)
    _positive("ppo.clip_range", p.clip_range)
    for name in ("ent_coef", "vf_coef"):
        value = getattr(p, name)
        if not (isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0):
            raise ConfigError(f"ppo.{name}", f"must be a number >= 0, got {value!r}")
    _positive("ppo.max_grad_norm", p.max_grad_norm, allow_inf=True)
    _positive("ppo.adam_eps", p.adam_eps)
    if not isinstance(p.sde_sample_freq, int) or p.sde_sample_freq == 0 or p.sde_sample_freq < -1:
        raise ConfigError("ppo.sde_sample_freq",
                          f"must be -1 (once per rollout) or an integer >= 1, got {p.sde_sample_freq!r}")
    _choice("ppo.activation", p.activation, ("relu", "tanh"))
    if not (isinstance(p.kl_coef, (int, float)) and not isinstance(p.kl_coef, bool) and 0 <= p.kl_coef < math.inf):
        raise ConfigError("ppo.kl_coef", f"must be a finite number >= 0 (0: no KL penalty), got {p.kl_coef!r}")
    _choice("ppo.kl_estimator", p.kl_estimator, ("k2", "k3"))
    for name in ("pi_hidden", "vf_hidden"):
        _widths(f"ppo.{name}", getattr(p, name))
    # An MJX port has its Gymnasium original's spec (tested), which is cheaper to build.
    spec = make_env(cfg.env).spec if cfg.backend == "jax" else gym_spec(cfg.env)
    if p.use_sde and spec.discrete:
        raise ConfigError("ppo.use_sde", f"needs continuous actions; {cfg.env} has discrete actions")
    if not spec.discrete and cfg.bpo.mu_loss != "cross_entropy":
        raise ConfigError("bpo.mu_loss", f"chooses between the discrete losses of eq. (15); {cfg.env} has continuous "
                          "actions, whose mu loss is eq. (16): leave it 'cross_entropy'")
    _validate_behaviour(cfg.bpo)
    if cfg.algo == "ppo" and math.isfinite(cfg.bpo.trust_region_delta):
        raise ConfigError("bpo.trust_region_delta", "masks segments by pi/mu, which is 1 in plain PPO; use algo bpo "
                          "or leave it inf")
    return cfg
