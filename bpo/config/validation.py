"""Validation of a config: every field and cross-field constraint, checked before anything is
compiled or written. Each failure is a ``ConfigError`` naming the field and what is allowed.

Every field is checked for its declared type as well as its range, whatever value it holds: a
bool is never taken for a number (Python's ``True == 1``) nor a number for a bool, NaN and ints
beyond float range are no numbers, and inf only where a field documents it. So ``validate`` raises
``ConfigError`` on any bad value, never another exception.

Validation needs the environments' specs (discrete or continuous actions, which ids exist on which
backend) and the variant names, so it sits above ``bpo.config.schema``, ``bpo.config.presets`` and ``envs``.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import typing
from typing import Literal

from bpo.config.presets import VARIANTS, check_preset_name, variant_problem
from bpo.config.schema import (
    METHOD_SECTIONS,
    BehaviourConfig,
    ConfigError,
    EpisodicBehaviourConfig,
    OnPolicyBehaviourConfig,
    OnPolicyTrainConfig,
    ReturnConfig,
    method_section,
)
from envs import FUNCTIONAL_ENVS, JAX_ENVS, make_env
from envs.gymnasium_envs import GYMNASIUM_ENVS, MUJOCO_ENVS, gym_spec

# --- kinds of values ---------------------------------------------------------------------------


def _integer(value) -> bool:
    """An int that is not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def _real_number(value) -> bool:
    """An int or float usable as a float: not a bool, not NaN, not an int beyond float range
    (which float() and the math functions reject with OverflowError). inf is a real number here."""
    if _integer(value):
        return abs(value) <= sys.float_info.max
    return isinstance(value, float) and not math.isnan(value)


def _finite_number(value) -> bool:
    return _real_number(value) and math.isfinite(value)


# --- rules: each raises ConfigError(name, what is allowed) -------------------------------------


MAX_COUNT = 2**31 - 1  # steps, episodes and updates are counted in int32 inside the programs


def int_at_least(name, value, low):
    """An integer field from ``low`` to what an int32 holds: every one is a count, a size or a loop
    length inside the programs (an epoch count of 2**63 passed, and failed minutes later, tracing)."""
    if not (_integer(value) and value >= low):
        raise ConfigError(name, f"must be an integer >= {low}, got {value!r}")
    if value > MAX_COUNT:
        raise ConfigError(name, f"must be an integer <= {MAX_COUNT:,} (the programs count in 32 bits), got {value!r}")


def _count(name, value):
    """A count of steps, episodes, evaluations or seeds: from 1 to what an int32 holds."""
    int_at_least(name, value, 1)


MAX_PHYSICS_THREADS = 1024  # beyond it a thread may fail to start (100,000 hung) and more threads only wait
MAX_SEED = 2**32 - 1  # JAX's PRNGKey keeps 32 bits of a seed (without x64): seed + 2**32 would repeat seed


def _seed(value) -> None:
    if not (_integer(value) and 0 <= value <= MAX_SEED):
        raise ConfigError("seed", f"must be an integer in [0, {MAX_SEED}] (a random key keeps 32 bits of it, so a "
                                  f"larger seed would repeat a smaller one), got {value!r}")


def positive(name, value, allow_inf=False):
    if not (_real_number(value) and value > 0 and (allow_inf or math.isfinite(value))):
        allowed = "a number > 0 (inf allowed)" if allow_inf else "a finite number > 0"
        raise ConfigError(name, f"must be {allowed}, got {value!r}")


def non_negative(name, value, note=""):
    """A finite number >= 0, e.g. a loss coefficient (0 turns its term off)."""
    if not (_finite_number(value) and value >= 0):
        raise ConfigError(name, f"must be a finite number >= 0{note}, got {value!r}")


def _finite(name, value):
    if not _finite_number(value):
        raise ConfigError(name, f"must be a finite number, got {value!r}")


def _in_unit_interval(name, value, open_left=False, open_right=False):
    above = _real_number(value) and (value > 0 if open_left else value >= 0)
    if not (above and (value < 1 if open_right else value <= 1)):
        interval = f"{'(' if open_left else '['}0, 1{')' if open_right else ']'}"
        raise ConfigError(name, f"must be in {interval}, got {value!r}")


def _widths(name, widths):
    if not (isinstance(widths, tuple) and widths and all(_integer(w) and w >= 1 for w in widths)):
        raise ConfigError(name, f"must be a non-empty tuple of positive integers, got {widths!r}")


def _choice(name, value, allowed):
    if value not in allowed:
        raise ConfigError(name, f"must be one of {list(allowed)}, got {value!r}")


def _string(name, value):
    if not isinstance(value, str):
        raise ConfigError(name, f"must be a string, got {value!r}")


def _declared_choices(prefix, obj):
    """Every field of the dataclass ``obj`` declared ``bool`` holds True or False (a truthy string
    or 0 would silently switch an option), and every field declared ``Literal[...]`` one of its
    choices. Read from the declarations, so that a switch added to a config is checked too."""
    hints = typing.get_type_hints(type(obj))
    for f in dataclasses.fields(obj):
        name, value, hint = f"{prefix}{f.name}", getattr(obj, f.name), hints[f.name]
        if hint is bool and not isinstance(value, bool):
            raise ConfigError(name, f"must be True or False, got {value!r}")
        if typing.get_origin(hint) is Literal:
            _choice(name, value, typing.get_args(hint))


# --- the configs -------------------------------------------------------------------------------


def check_fields(cfg):
    """Check every field and cross-field constraint that does not depend on the method; raise
    ConfigError before anything compiles. A run's whole check, the method's settings included, is
    ``bpo.agents.methods.validate``."""
    if isinstance(cfg, OnPolicyTrainConfig):
        return _validate_onpolicy(cfg)
    check_preset_name(cfg.preset)
    _declared_choices("", cfg)  # eval_deterministic
    _choice("env", cfg.env, sorted(JAX_ENVS))
    for name in ("seeds", "episodes", "eval_every", "eval_episodes", "max_episode_steps"):
        _count(name, getattr(cfg, name))
    _seed(cfg.seed)
    int_at_least("save_policies_every", cfg.save_policies_every, 0)
    if cfg.episodes % cfg.eval_every:
        raise ConfigError("eval_every", f"must divide episodes ({cfg.episodes}), got {cfg.eval_every}")

    r = cfg.reinforce
    _declared_choices("reinforce.", r)  # optimizer
    positive("reinforce.lr_start", r.lr_start)
    positive("reinforce.lr_end", r.lr_end)
    _in_unit_interval("reinforce.gamma", r.gamma)
    _in_unit_interval("reinforce.init_right_prob", r.init_right_prob, open_left=True, open_right=True)

    _validate_returns(cfg.returns)
    _in_unit_interval("returns.lam", cfg.returns.lam)
    b = _bpo_section(cfg, EpisodicBehaviourConfig)
    if b is not None:
        _validate_behaviour(b)
        _validate_authors_bugs(b, None, discrete=True)  # ShortCorridor: discrete actions
        _widths("bpo.mu_hidden", b.mu_hidden)
        if b.clip_targets and r.gamma >= 1.0:
            raise ConfigError("reinforce.gamma", "must be < 1 when bpo.clip_targets bounds targets by r/(1-gamma)")
    return cfg


def _bpo_section(cfg, section_type):
    """The run's behaviour step, or None for the method alone; anything else is refused."""
    if cfg.bpo is not None and not isinstance(cfg.bpo, section_type):
        raise ConfigError("bpo", f"must be a {section_type.__name__} (BPO on {cfg.method}) or None ({cfg.method} "
                                 f"alone), got {type(cfg.bpo).__name__}")
    return cfg.bpo


def _validate_returns(g: ReturnConfig) -> None:
    _declared_choices("returns.", g)  # traj, advantage, ... and the switches
    positive("returns.rho_bar", g.rho_bar, allow_inf=True)
    positive("returns.c_bar", g.c_bar, allow_inf=True)


def _validate_behaviour(b: BehaviourConfig) -> None:
    _declared_choices("bpo.", b)  # mu_loss, q_hat_head, ... and the switches
    for name in ("replay_size", "q_batch_size", "mu_batch_size", "n_qvf_epochs", "n_mu_epochs"):
        int_at_least(f"bpo.{name}", getattr(b, name), 1)
    for name in ("q_batch_size", "mu_batch_size"):
        if getattr(b, name) > b.replay_size:
            raise ConfigError(
                "bpo.replay_size",
                f"must hold at least one batch: replay_size={b.replay_size} < {name}={getattr(b, name)}",
            )
    positive("bpo.q_lr", b.q_lr)
    positive("bpo.mu_lr", b.mu_lr)
    positive("bpo.adam_eps", b.adam_eps)
    positive("bpo.q_max_grad_norm", b.q_max_grad_norm, allow_inf=True)
    positive("bpo.mu_max_grad_norm", b.mu_max_grad_norm, allow_inf=True)
    _widths("bpo.q_hidden", b.q_hidden)
    non_negative("bpo.symlog_reg_coef", b.symlog_reg_coef)
    _in_unit_interval("bpo.polyak_tau", b.polyak_tau, open_left=True)  # 0 would freeze the targets at init
    positive("bpo.q_hat_floor", b.q_hat_floor)
    non_negative("bpo.mu_ent_coef", b.mu_ent_coef)


def _validate_authors_bugs(b: BehaviourConfig, rollout: int | None, discrete: bool) -> None:
    """The switches that reproduce the authors' code's bugs apply where their code has them.

    ``rollout``: transitions per update (None: episodes of varying length, BPO-REINFORCE)."""
    for name in ("mu_q_hat_batch_min", "mu_q_hat_unclipped_actions", "fqe_unclipped_actions"):
        if getattr(b, name) and discrete:
            raise ConfigError(f"bpo.{name}", "applies to continuous actions; this run's actions are discrete "
                              "(leave it False)")
    for name in ("mu_q_hat_unclipped_actions", "fqe_unclipped_actions"):
        if getattr(b, name) and not getattr(b, "clip_actions", True):
            raise ConfigError(f"bpo.{name}", "has no effect with bpo.clip_actions False, where no action is "
                              "clipped (leave it False)")
    if not b.replay_epoch_filled_only:
        return
    if rollout is None:
        raise ConfigError("bpo.replay_epoch_filled_only", "needs rollouts of a fixed length (BPO-PPO or BPO-A2C); "
                          "episodes vary in length (leave it False)")
    for name in ("q_batch_size", "mu_batch_size"):
        size = getattr(b, name)
        if not (_integer(size) and size >= 1 and _integer(b.replay_size)):
            continue  # not numbers yet: the behaviour's own checks, later, name the field
        if rollout % size or b.replay_size % size:
            raise ConfigError("bpo.replay_epoch_filled_only", f"needs whole minibatches: bpo.{name}={size} must "
                              f"divide the rollout ({rollout}) and bpo.replay_size ({b.replay_size})")


BACKEND_ENVS = {"jax": FUNCTIONAL_ENVS, "gymnasium": GYMNASIUM_ENVS, "mjx": MUJOCO_ENVS, "threads": MUJOCO_ENVS}
"""The environments each on-policy backend has."""


def _validate_env_backend(cfg: OnPolicyTrainConfig) -> None:
    """The environment exists for the backend (``BACKEND_ENVS``), with a hint where it exists for another one."""
    if cfg.env in BACKEND_ENVS.get(cfg.backend, ()):
        return
    if cfg.backend == "jax":
        hint = " (a Gymnasium environment: add --backend gymnasium)" if cfg.env in GYMNASIUM_ENVS else ""
        if cfg.env in MUJOCO_ENVS:
            hint = " (a MuJoCo task: add --backend gymnasium, threads or mjx)"
        raise ConfigError("env", f"must be one of {sorted(FUNCTIONAL_ENVS)} with backend jax{hint}, got {cfg.env!r}")
    if cfg.backend == "gymnasium":
        _choice("env", cfg.env, sorted(GYMNASIUM_ENVS))
    raise ConfigError("env", f"must be one of {sorted(BACKEND_ENVS[cfg.backend])} with backend {cfg.backend}, "
                             f"got {cfg.env!r}")


def _validate_settings(cfg: OnPolicyTrainConfig) -> None:
    """The method's section: present, the other method's absent, the fields every on-policy method
    shares (``ActorCriticConfig``) in range; a method's own fields are its ``validate``'s."""
    name = method_section(cfg.method)
    p = getattr(cfg, name)
    if not isinstance(p, METHOD_SECTIONS[name]):
        raise ConfigError(name, f"must be a {METHOD_SECTIONS[name].__name__} (method {cfg.method} reads it), "
                                f"got {type(p).__name__}")
    for other in METHOD_SECTIONS:
        if other != name and getattr(cfg, other) is not None:
            raise ConfigError(other, f"is method {other}'s section; method {cfg.method} reads {name}: leave it "
                                     f"null (or set method {other})")
    _declared_choices(f"{name}.", p)  # lr_schedule, activation, kl_estimator, ... and the switches
    for field in ("n_steps", "n_envs"):
        int_at_least(f"{name}.{field}", getattr(p, field), 1)
    for field in ("learning_rate", "adam_eps", "rms_prop_eps"):
        positive(f"{name}.{field}", getattr(p, field))
    for field in ("ent_coef", "vf_coef"):
        non_negative(f"{name}.{field}", getattr(p, field))
    _in_unit_interval(f"{name}.gamma", p.gamma, open_right=True)
    _in_unit_interval(f"{name}.gae_lambda", p.gae_lambda)
    positive(f"{name}.max_grad_norm", p.max_grad_norm, allow_inf=True)
    if not (_integer(p.sde_sample_freq) and (p.sde_sample_freq == -1 or p.sde_sample_freq >= 1)):
        raise ConfigError(f"{name}.sde_sample_freq",
                          f"must be -1 (once per rollout) or an integer >= 1, got {p.sde_sample_freq!r}")
    if p.sde_features != "latent" and not p.use_sde:
        raise ConfigError(f"{name}.sde_features", f"chooses gSDE's features; without {name}.use_sde every step "
                                                  "draws afresh (leave it 'latent')")
    _finite(f"{name}.log_std_init", p.log_std_init)
    for field in ("pi_hidden", "vf_hidden"):
        _widths(f"{name}.{field}", getattr(p, field))


def _validate_whole_steps(cfg: OnPolicyTrainConfig) -> None:
    """``whole_step_minibatches``: every minibatch, and D, hold whole time steps of n_envs rows."""
    name, p = method_section(cfg.method), cfg.settings
    if not p.whole_step_minibatches:
        return
    sizes = {f"{name}.batch_size": getattr(p, "batch_size", None)}
    if cfg.bpo is not None:
        sizes |= {f"bpo.{field}": getattr(cfg.bpo, field) for field in ("q_batch_size", "mu_batch_size", "replay_size")}
    elif sizes[f"{name}.batch_size"] is None:
        raise ConfigError(f"{name}.whole_step_minibatches", f"draws the minibatches of {cfg.method}'s epochs and of "
                                                           f"BPO's; {cfg.method} alone has none (leave it False)")
    for field, size in sizes.items():
        if _integer(size) and size >= 1 and size % p.n_envs:
            raise ConfigError(f"{name}.whole_step_minibatches", f"needs whole time steps: {field}={size} must be a "
                                                               f"multiple of {name}.n_envs ({p.n_envs})")


def _validate_method_name(cfg: OnPolicyTrainConfig) -> None:
    """A method's name (its own settings are checked by the method, ``bpo.agents.methods.validate``);
    whether BPO runs on it is the ``bpo`` section."""
    _string("method", cfg.method)
    _bpo_section(cfg, OnPolicyBehaviourConfig)


def _validate_action_space(cfg: OnPolicyTrainConfig) -> None:
    """Options that need a kind of action space."""
    # An MJX port has its Gymnasium original's spec (tested), which is cheaper to build.
    spec = make_env(cfg.env).spec if cfg.backend == "jax" else gym_spec(cfg.env)
    if cfg.settings.use_sde and spec.discrete:
        raise ConfigError(f"{method_section(cfg.method)}.use_sde",
                          f"needs continuous actions; {cfg.env} has discrete actions")
    if cfg.bpo is None:
        return
    _validate_authors_bugs(cfg.bpo, cfg.rollout_size, spec.discrete)
    if not spec.discrete and cfg.bpo.mu_loss != "cross_entropy":
        raise ConfigError("bpo.mu_loss", f"chooses between the discrete losses of eq. (15); {cfg.env} has continuous "
                          "actions, whose mu loss is eq. (16): leave it 'cross_entropy'")


def _validate_onpolicy(cfg: OnPolicyTrainConfig) -> OnPolicyTrainConfig:
    check_preset_name(cfg.preset)
    _declared_choices("", cfg)  # backend, vector_mode, eval_in_background
    _choice("variant", cfg.variant, ("", *VARIANTS))  # "": no variant applied
    if (problem := variant_problem(cfg)) is not None:
        raise ConfigError("variant", problem)
    _validate_env_backend(cfg)
    for name in ("seeds", "total_timesteps", "eval_every", "eval_episodes"):
        _count(name, getattr(cfg, name))
    _seed(cfg.seed)
    if not (_integer(cfg.physics_threads) and 0 <= cfg.physics_threads <= MAX_PHYSICS_THREADS):
        raise ConfigError("physics_threads", f"must be an integer from 0 (one per core) to {MAX_PHYSICS_THREADS}, got "
                                             f"{cfg.physics_threads!r}")
    int_at_least("save_policies_every", cfg.save_policies_every, 0)
    for name in ("mjx_iterations", "mjx_ls_iterations"):
        int_at_least(name, getattr(cfg, name), 0)
        if getattr(cfg, name) and cfg.backend != "mjx":
            raise ConfigError(name, f"sets MJX's solver; it does not apply to backend {cfg.backend} (leave it 0)")
    _validate_method_name(cfg)
    _validate_settings(cfg)
    if cfg.env_steps_total > MAX_COUNT:  # the budget in whole rollouts: the steps counted in the program
        raise ConfigError("total_timesteps", f"rounded up to whole rollouts ({cfg.env_steps_total:,} steps) must be "
                                             f"<= {MAX_COUNT:,} (the programs count in 32 bits)")
    _validate_action_space(cfg)
    _validate_whole_steps(cfg)
    _validate_returns(cfg.returns)
    positive("returns.trust_region_delta", cfg.returns.trust_region_delta, allow_inf=True)
    if cfg.bpo is not None:
        _validate_behaviour(cfg.bpo)
        if cfg.bpo.ppo_ent_coef is not None:
            non_negative("bpo.ppo_ent_coef", cfg.bpo.ppo_ent_coef,
                         note=f" (or None: {method_section(cfg.method)}.ent_coef)")
    elif math.isfinite(cfg.returns.trust_region_delta):
        raise ConfigError("returns.trust_region_delta", f"masks segments by pi/mu, which is 1 in {cfg.method} alone; "
                          "run BPO (--bpo) or leave it inf")
    return cfg

