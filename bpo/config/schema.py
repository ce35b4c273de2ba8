"""Typed, frozen configuration of the algorithms and runs (checked by ``bpo.config.validation``).

Fields are split the rejax way: *static* fields fix shapes and loop lengths and are baked into
the compiled program; *traced* fields (learning rates, gamma, lambda, rho_bar, c_bar, tau, ...)
are passed to ``train(key, hparams)`` as arrays, so they can be ``jax.vmap``-ed like seeds.
``traced_hyperparams`` extracts them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, ClassVar, Literal, NamedTuple

import jax.numpy as jnp
import numpy as np
import tyro


class ConfigError(ValueError):
    """An invalid configuration value; the message names the field and what is allowed."""

    def __init__(self, field_name: str, message: str):
        self.field_name = field_name
        super().__init__(f"{field_name}: {message}")


TRACED = "bpo.traced"
"""The field-metadata key of ``traced``."""


def traced(default, *, overrides: str = ""):
    """A traced field: its value enters the compiled program as data, not as a constant, so that
    configs differing only in traced fields share one program (``bpo.training.rows``) and may be
    vmapped side by side. ``traced_hyperparams`` passes it to the program under the field's name;
    this marker is the one place that says which fields are traced. ``overrides``: the dotted field
    whose hyperparameter this one replaces in a BPO run when it is not None (``bpo.ppo_ent_coef``)."""
    return field(default=default, metadata={TRACED: overrides})


@dataclass(frozen=True)
class ReinforceConfig:
    """REINFORCE target update (paper Listing 2, Table 2): one policy-gradient step per episode."""

    lr_start: float = traced(0.1)
    """Learning rate at the first episode (alpha_max)."""
    lr_end: float = traced(0.01)
    """Learning rate at the last episode (alpha_min); decayed exponentially in between."""
    optimizer: Literal["adam", "sgd"] = "adam"
    """Optimiser applying the episode's summed gradient sum_t G_t grad ln pi(A_t|S_t)."""
    gamma: float = traced(0.99)
    """Discount factor gamma of the returns."""
    init_right_prob: float = 0.05
    """Starting probability of the linear-softmax policy for action 1 (right): Sutton & Barto's
    near-left start, so that learning curves start far from the optimum."""


@dataclass(frozen=True)
class ReturnConfig:
    """The off-policy return estimator of BPO (eq. (6), Remark 1): truncated importance-sampled
    TD(lambda) returns of the data mu collected. Used only when ``algo = bpo``."""

    rho_bar: float = traced(1.5)
    """'TD error' truncation rho_bar of eq. (6); inf disables it."""
    c_bar: float = traced(1.0)
    """'Trace cutting' truncation c_bar of eq. (6); inf disables it."""
    traj: Literal["per_decision", "traj", "traj_shifted"] = "per_decision"
    """Truncation mode: per-decision (eq. 6), trajectory-level 'traj' (min(c_bar, prod of
    ratios)), or the authors' shifted trajectory variant 'traj_shifted'."""


@dataclass(frozen=True)
class EpisodicReturnConfig(ReturnConfig):
    """BPO-REINFORCE's returns (Listing 3, line 7): eq. (6) with no value function."""

    lam: float = traced(1.0)
    """lambda of eq. (6) for BPO-REINFORCE. Listing 3 uses 1 with no value function (the PDIS-style
    return); below 1 it shortens the effective horizon. BPO-PPO uses ppo.gae_lambda."""


@dataclass(frozen=True)
class OnPolicyReturnConfig(ReturnConfig):
    """BPO-PPO's returns and advantages (eqs. (6), (10), (11)), and what masks them."""

    advantage: Literal["eq11", "authors"] = "eq11"
    """BPO-PPO advantage: 'eq11' is the paper's G_t - V(s_t), whose first TD error carries rho_t; 'authors' (their
    public code) is r_t + gamma((1-lam)V(s') + lam G_{t+1}) - V(s_t), without rho_t, because the ratio pi_theta/mu
    already corrects the current action (with traj 'traj_shifted', their code's form for it: G_t - V(s_t) without
    min(rho_bar, pi_t/mu_t))."""
    weight_on_advantage: bool = False
    """Decoupled-PPO form: the clipped ratio is pi_theta/pi_old and the advantage is multiplied
    by rho_t = min(rho_bar, pi_old/mu). Off: the ratio is pi_theta/mu (paper Section 5.1)."""
    trust_region_delta: float = math.inf
    """BPO-PPO Trust Region Masking (Li et al., "Trust Region Masking for Long-Horizon LLM
    Reinforcement Learning"): a trajectory segment of the rollout (one environment's steps up to an
    episode end) is left out of the policy loss when its score exceeds
    delta; the loss still averages over all steps. inf turns it off."""
    trust_region_criterion: Literal["max_abs_log_ratio", "mean_k3"] = "max_abs_log_ratio"
    """Segment score: the largest per-step |log pi/mu|, or the mean k3 = rho - 1 - log rho."""


@dataclass(frozen=True)
class BehaviourConfig:
    """BPO behaviour step (Algorithm 1 lines 9-16, Appendix C.2, Table 2): FQE of Q and Q-hat,
    then the behaviour policy mu. A run has this section when it runs BPO, and None for the
    method alone."""

    replay_size: int = 1024
    """|D|: FIFO replay of the most recent transitions collected by mu."""
    q_batch_size: int = 256
    """|B| for the FQE updates of Q and Q-hat."""
    mu_batch_size: int = 256
    """|B| for the behaviour-policy update."""
    n_qvf_epochs: int = 1
    """FQE epochs per phase for each of Q and Q-hat; an epoch is replay_size // q_batch_size
    minibatches, a random pass over the filled part of D."""
    n_mu_epochs: int = 1
    """Behaviour-policy epochs per phase (replay_size // mu_batch_size minibatches each)."""
    q_lr: float = traced(1e-3)
    """Adam learning rate of Q and Q-hat."""
    mu_lr: float = traced(1e-3)
    """Adam learning rate of mu."""
    adam_eps: float = 1e-5
    """Adam epsilon of the Q, Q-hat and mu optimisers."""
    q_max_grad_norm: float = math.inf
    """Global gradient-norm clip of Q and Q-hat (inf: none, as in Table 2)."""
    mu_max_grad_norm: float = 0.5
    """Global gradient-norm clip of mu."""
    q_hidden: tuple[int, ...] = (64, 64)
    """Hidden widths of the Q and Q-hat MLPs (ReLU)."""
    layer_norm: bool = True
    """Layer norm in the Q and Q-hat MLPs (Appendix C.2)."""
    zero_init_head: bool = True
    """Zero-initialised final layer of Q and Q-hat (Appendix C.2)."""
    q_init: Literal["lecun", "orthogonal"] = "lecun"
    """Initialisation of the hidden kernels of Q and Q-hat (the paper does not say): LeCun normal (flax's default), or
    orthogonal with gain 1 (the authors' public code: every ``ppo_bpo_zero*`` block of their configs.yaml sets it, in
    every setting)."""
    symlog_targets: bool = True
    """Q networks predict symlog(Q); targets are symlog-ed, predictions symexp-ed (Section 5.2).
    Off is the 'no symlog' ablation (Figure 5)."""
    symlog_reg_coef: float = traced(1.0)
    """Weight of mean((pred - Polyak-target-net pred)^2) in the FQE loss; active with symlog
    targets."""
    polyak_tau: float = traced(0.02)
    """Polyak rate of the FQE target networks, updated after every gradient step; in (0, 1]."""
    bootstrap_net: Literal["online", "target"] = "online"
    """Network whose next-state predictions form the Bellman target: the online network (as in
    the authors' code with symlog targets) or the Polyak target network."""
    value_net: Literal["online", "target"] = "online"
    """Network whose values the rest of the behaviour step reads: Q(s, a) in r-hat (eq. 7) and
    Q-hat in mu's loss (eqs. 15, 16). The authors' code reads the Polyak target networks when
    symlog targets are off (the ``bpo_no_symlog_target`` ablation)."""
    q_hat_head: Literal["linear", "softplus"] = "linear"
    """Q-hat's output layer: 'linear', with Q-hat floored at ``q_hat_floor`` where mu reads it
    (eq. (16) takes its log; the paper states no head or floor); 'softplus', softplus(output) +
    1e-6, positive by construction (the authors' code)."""
    fqe_loss: Literal["paper", "authors"] = "paper"
    """Form of the FQE loss: 'paper', 0.5 mean(w (p - y)^2) + c mean((p - p_target)^2) (eq. 13's one-half; the
    regulariser unweighted); 'authors', mean(w (p - y)^2) + c mean(w (p - p_target)^2) (their public code: the TD term
    twice as heavy relative to the regulariser, which is IS-weighted too). c is ``symlog_reg_coef``; p_target is the
    Polyak target network's output."""
    weight_td: bool = True
    """Weight each FQE sample by its IS ratio pi/mu, normalised to batch mean 1 (Appendix C.2)."""
    td_weight_clip: bool = False
    """Clip the TD weights as the authors' code does: log-ratio to [-10, 10], ratio to [0.1, 10],
    then normalise (Appendix C.2 names no clip; without it the normalised ratios are computed
    stably, as a softmax of the log-ratios times the batch size)."""
    clip_targets: bool = True
    """Clip Bellman targets at r_max/(1-gamma) for Q and r_hat_max/(1-gamma^2) for Q-hat, with r_max
    and r_hat_max tracked from the data and starting at 0 (Appendix C.2); the values the behaviour
    step reads (Q in eq. (7), Q-hat in mu's loss) are capped the same way."""
    clip_lower_bounds: bool = True
    """With ``clip_targets``, also clip below: Q at r_min/(1-gamma) (r_min tracked from the data,
    starting at 0) and Q-hat at 0, which q-hat, a second moment (eq. (4)), never goes below. Appendix
    C.2 names the upper bounds only; without the lower ones Q-hat fits the negative r-hat = 2 r Q - r^2
    of the first updates, sits below ``q_hat_floor`` for some actions and not others, and mu turns
    so far from pi that its IS returns have infinite variance (ShortCorridor, docs/authors_code.md).
    The authors' code clips below too."""
    q_hat_floor: float = 1e-6
    """Floor on Q-hat before log/sqrt in mu's loss."""
    mu_loss: Literal["cross_entropy", "reverse_kl"] = "cross_entropy"
    """Discrete mu loss, eq. (15): 'cross_entropy' is -sum_a q(a|s) ln mu(a|s) (authors' code); 'reverse_kl' is KL(mu ||
    q). Both are minimised at mu = q, q ∝ pi sqrt(Q-hat)."""
    use_q_hat: bool = True
    """False is the 'no Q-hat' ablation (Figure 4): mu's target drops the Q-hat term and tracks pi."""
    mu_ent_coef: float = 0.0
    """Weight of an entropy bonus in mu's loss (eqs. 15, 16 have none; the authors' code adds PPO's
    entropy coefficient there, 0.001 on MuJoCo). Static."""

    # The authors' public code's bugs, each off by default (docs/authors_code.md rows 14, 15, 17,
    # 21 and 22); together on in the preset ``mujoco_authors_code``.
    q_hat_reward: Literal["r_hat", "last_q_batch_reward"] = "r_hat"
    """The reward Q-hat's FQE regresses on: 'r_hat', r-hat = 2 r Q - r^2 of each row (eqs. 7, 14);
    'last_q_batch_reward', the raw rewards of the last minibatch Q's FQE stepped on, the same vector
    for every Q-hat minibatch, unrelated to its rows (the authors' code passes ``rewards=rewards``,
    left over from the Q loop, to its Q-hat update). Needs q_batch_size rows in both loops."""
    mu_q_hat_batch_min: bool = False
    """Continuous mu loss: replace Q-hat(s, a) of each sample in eq. (16) by its minimum over the
    minibatch, one scalar (the authors' code's ``jnp.min(q_hat_values, axis=0)``), so that one
    sample's -0.5 log Q-hat weighs as much as the batch-mean KL term."""
    mu_q_hat_unclipped_actions: bool = False
    """Continuous mu loss: Q-hat reads mu's samples unclipped in eq. (16), while the stored actions
    and a' ~ pi are clipped (the authors' code passes the action bounds to mu's update and does not
    use them)."""
    fqe_unclipped_actions: bool = False
    """Continuous actions: the FQE regressions of Q and Q-hat read the stored actions and a' ~ pi unclipped, while
    r-hat's Q(s, a) (eq. 7) reads them clipped (the authors' code passes ``clip_actions`` to its r-hat and not to its
    FQE update, whose default is False)."""
    replay_epoch_filled_only: bool = False
    """While D fills, an FQE or mu epoch is one pass over the rows D holds (fewer minibatches, as
    in the authors' code), instead of a pass padded with repeated rows to replay_size rows. Needs
    the rollout and replay_size to be multiples of q_batch_size and mu_batch_size, so that every
    minibatch is whole."""


@dataclass(frozen=True)
class EpisodicBehaviourConfig(BehaviourConfig):
    """The behaviour step of BPO-REINFORCE: mu has a network of its own."""

    mu_hidden: tuple[int, ...] = (64, 64)
    """Hidden widths of the mu MLP (ReLU). Its head starts at zero weights with the target
    policy's initial logits as bias, so mu starts identical to pi."""


@dataclass(frozen=True)
class OnPolicyBehaviourConfig(BehaviourConfig):
    """The behaviour step of BPO-PPO: mu has pi's architecture (Section 5.3)."""

    clip_actions: bool = True
    """Continuous actions: Q and Q-hat see actions clipped to the action bounds (what the
    environment executes), for the stored actions, the sampled a' ~ pi and mu's samples in eq. (16).
    Log-probabilities always use the unclipped sample."""
    lr_schedule: Literal["constant", "linear"] = "constant"
    """BPO-PPO: 'linear' decays the Q, Q-hat and mu learning rates to 0 over the run, with the
    same remaining-progress factor as the PPO learning rate. (The authors' code gives every
    network the PPO optimiser, whose schedule counts each network's own steps, so mu's rate
    reaches 0 after about a quarter of a CartPole run; here the decay follows the run's progress.)"""
    ppo_ent_coef: float | None = traced(None, overrides="ppo.ent_coef")
    """Entropy coefficient of pi's update inside BPO. None: the method's own (``ppo.ent_coef``, ``a2c.ent_coef``), as
    the paper keeps the underlying PPO parameters identical (Section 6; Table 4 lists beta_ent under "PPO (shared)").
    The authors' code uses 0."""


@dataclass(frozen=True)
class EpisodicTrainConfig:
    """A training run of REINFORCE or BPO-REINFORCE on a JAX environment: one phase per episode
    (Listings 2 and 3), the whole run one jitted function, seeds vmapped."""

    preset: str = "short_corridor"
    """Label of the preset this configuration came from (recorded in the results)."""
    env: str = "ShortCorridor-v0"
    """Environment id (a pure-JAX environment from ``envs.JAX_ENVS``)."""
    seeds: int = 1
    """Number of independent runs, vmapped in one jitted call."""
    seed: int = 0
    """Base seed; run i uses jax.random.fold_in(PRNGKey(seed), i)."""
    episodes: int = 300
    """Training episodes per run (one policy update each)."""
    eval_every: int = 10
    """Evaluate pi every this many episodes (and before training)."""
    eval_episodes: int = 10
    """Episodes per evaluation; the reported return is their undiscounted mean."""
    eval_deterministic: bool = False
    """Evaluate the greedy policy instead of sampling from pi (ShortCorridor needs sampling)."""
    max_episode_steps: int = 1000
    """Step limit after which an episode is truncated."""
    save_policies_every: int = 0
    """Also keep pi and mu every this many evaluation blocks in the run's
    policies.msgpack (``bpo.training.policies``); 0: the final ones only. Changes no result."""
    reinforce: ReinforceConfig = field(default_factory=ReinforceConfig)
    """Target-policy update."""
    returns: EpisodicReturnConfig = field(default_factory=EpisodicReturnConfig)
    """Off-policy return estimator (used by BPO runs only)."""
    # constructor=: the command line lists the section's flags (--bpo.q-lr) rather than tyro's two
    # subcommands of an optional field; --bpo / --no-bpo say whether it is there (experiments.cli).
    bpo: Annotated[EpisodicBehaviourConfig | None, tyro.conf.arg(constructor=EpisodicBehaviourConfig)] = field(
        default_factory=EpisodicBehaviourConfig)
    """Behaviour step: the data come from the learned behaviour policy mu (BPO-REINFORCE, Listing 3);
    None: from pi (REINFORCE, Listing 2). On the command line --bpo / --no-bpo."""

    unit: ClassVar[str] = "episode"
    """What a row of the training metrics is, and what ``--checkpoint-every N`` counts blocks of."""
    step_unit: ClassVar[str] = "episode"
    """What a learning curve's ``step`` counts."""
    method: ClassVar[str] = "reinforce"
    """The target update: REINFORCE, the one episodic method."""

    @property
    def algo(self) -> str:
        """The algorithm's name, derived: 'bpo' with a behaviour step, else 'reinforce'."""
        return algorithm_name(self)

    @property
    def n_blocks(self) -> int:
        """Blocks of ``eval_every`` training episodes, each followed by an evaluation."""
        return self.episodes // self.eval_every

    @property
    def n_evaluations(self) -> int:
        """Evaluations of one seed, the one before training included."""
        return self.n_blocks + 1

    @property
    def env_steps_total(self) -> None:
        """Environment steps of one seed: not known ahead (episode lengths vary)."""
        return None

    @property
    def checkpoint_units(self) -> int:
        """What ``--checkpoint-every N`` counts N of in a whole run: the loop's iterations
        (the evaluation before training, then one per block)."""
        return self.n_blocks + 1

    def units_at_evaluations(self, evals: dict) -> np.ndarray:
        """Training episodes done at each evaluation, from a run's evaluation outputs."""
        return np.asarray(evals["eval_episode"][0]).astype(int)


@dataclass(frozen=True)
class ActorCriticConfig:
    """What every on-policy method of Algorithm 1 shares: the rollout, the actor and critic networks,
    their optimiser and the advantage (GAE). Stable-Baselines3's field names. Each built-in method
    has a section of its own built on it (``PPOConfig``, ``A2CConfig``), with its own defaults; a
    run has the section of its method only (``method_section``)."""

    learning_rate: float = traced(3e-4)
    """Learning rate of the actor and of the critic (PPO: separate optimisers, Tables 3-4)."""
    lr_schedule: Literal["constant", "linear"] = "constant"
    """'linear' decays the learning rate to 0 over the run (SB3's linear schedule of the
    remaining progress, evaluated once per update)."""
    n_steps: int = 2048
    """Steps per environment per rollout (T)."""
    n_envs: int = 1
    """Parallel environments; a rollout has n_steps * n_envs transitions."""
    gamma: float = traced(0.99)
    """Discount factor."""
    gae_lambda: float = traced(0.95)
    """lambda of GAE and of the truncated IS-TD(lambda) returns (BPO)."""
    ent_coef: float = traced(0.0)
    """beta_ent, weight of the entropy bonus (with BPO, bpo.ppo_ent_coef when it is set)."""
    vf_coef: float = traced(0.5)
    """beta_value, weight of the value loss (PPO: 0.5 mean((V - G)^2), eq. (12))."""
    max_grad_norm: float = 0.5
    """Global gradient-norm clip (PPO: the actor and the critic separately; A2C: together)."""
    adam_eps: float = 1e-5
    """Adam epsilon."""
    optimizer: Literal["adam", "rmsprop"] = "adam"
    """Optimiser of the actor and the critic: Adam (the paper's tables), or RMSprop with smoothing 0.99 and
    epsilon ``rms_prop_eps`` (SB3's A2C, ``use_rms_prop=True``; ``bpo.core.optim.clipped``)."""
    rms_prop_eps: float = 1e-5
    """RMSprop epsilon (SB3's A2C: 1e-5), added outside the square root as torch does."""
    normalize_advantage: bool = True
    """Standardise advantages per minibatch (SB3's PPO; A2C's minibatch is the rollout)."""
    normalize_observations: bool = True
    """Running mean/std observation normalisation (SB3 VecNormalize, clip 10), shared by every
    network, updated on training data only and frozen during evaluation."""
    use_sde: bool = False
    """Generalised state-dependent exploration (continuous actions)."""
    sde_sample_freq: int = -1
    """Resample the gSDE exploration matrices every this many steps; -1: once per rollout."""
    sde_features: Literal["latent", "constant"] = "latent"
    """What gSDE's noise multiplies: the policy's last hidden layer (Raffin et al.'s gSDE, SB3's), or
    the constant 1, which makes the std state-independent and holds each environment's noise draw
    for sde_sample_freq steps (the authors' code's "gSDE", docs/authors_code.md row 13)."""
    log_std_init: float = 0.0
    """Initial log standard deviation of the Gaussian policy."""
    pi_hidden: tuple[int, ...] = (64, 64)
    """Hidden widths of the actor MLP."""
    vf_hidden: tuple[int, ...] = (64, 64)
    """Hidden widths of the critic MLP."""
    activation: Literal["relu", "tanh"] = "relu"
    """Hidden activation of actor and critic (the paper's tables: ReLU)."""
    ortho_init: bool = True
    """Orthogonal initialisation of actor and critic (the paper does not say); off: LeCun normal."""
    ortho_gains: Literal["sb3", "unit"] = "sb3"
    """Gains of the orthogonal initialisation: SB3's (sqrt 2 hidden, 0.01 policy head, 1 value
    head), or 1 on every layer (the authors' public code)."""
    whole_step_minibatches: bool = False
    """Every minibatch (PPO's epochs, and with BPO the Q, Q-hat and mu epochs over D) is
    batch size / n_envs whole time steps, each with the rows of all n_envs environments, the time
    steps drawn at random (the authors' code); off: rows drawn independently (Stable-Baselines3).
    The same with one environment. Needs every batch size and bpo.replay_size to be multiples of
    n_envs."""


@dataclass(frozen=True)
class PPOConfig(ActorCriticConfig):
    """PPO's section (paper Listing 1, eqs. 10 and 12): the shared settings and PPO's own, the
    minibatch epochs, the clipped surrogate and an optional KL penalty. The defaults are Table 4's
    (MuJoCo default) but for ``ent_coef`` and ``log_std_init``, which keep Stable-Baselines3's 0.0;
    the presets set every value of their table (``mujoco_default``: 0.001 and -1.0)."""

    batch_size: int = 64
    """Minibatch size of the PPO epochs; must divide n_steps * n_envs."""
    n_epochs: int = 10
    """Passes over the rollout per update."""
    clip_range: float = traced(0.2)
    """epsilon of the clipped surrogate, eq. (10)."""
    clip_range_schedule: Literal["constant", "linear"] = "constant"
    """'linear' decays the clip range to 0 over the run like the learning rate."""
    kl_coef: float = 0.0
    """beta of a penalty beta KL(pi_theta || pi_old) added to the actor loss, pi_old being the target
    policy before the update (for PPO the policy that collected the rollout). 0 turns it off (the
    paper has none). Estimated on the rollout's samples, which mu drew in BPO-PPO, with the
    importance ratio rho = pi_theta / (collecting policy) of ``kl_estimator``. Static."""
    kl_estimator: Literal["k2", "k3"] = "k3"
    """Loss form of the KL penalty, both with the expected gradient of the KL: 'k2' is
    sg(rho) * 0.5 (log pi_theta - log pi_old)^2, 'k3' is rho * (pi_old/pi_theta - 1 - log(pi_old/pi_theta)),
    whose value is also an unbiased estimate of the KL. The ``kl_penalty`` metric is beta times its mean."""


@dataclass(frozen=True)
class A2CConfig(ActorCriticConfig):
    """A2C's section (Mnih et al. 2016; ``bpo.agents.a2c``): one gradient step per rollout on all of
    it, the value loss SB3's mean((V - G)^2), the actor and the critic under one optimiser and one
    gradient clip. The defaults are Stable-Baselines3's A2C (``A2C.__init__`` with ``MlpPolicy``:
    separate 64-64 tanh actor and critic, orthogonal initialisation with SB3's gains, log std 0),
    the base that rl-baselines3-zoo's hyperparams/a2c.yml changes per environment."""

    learning_rate: float = traced(7e-4)
    """Learning rate of the one optimiser over the actor and the critic."""
    n_steps: int = 5
    """Steps per environment per rollout (T); one update per rollout."""
    gae_lambda: float = traced(1.0)
    """lambda of GAE (A2C: 1, the n-step return) and of the truncated IS-TD(lambda) returns (BPO-A2C)."""
    optimizer: Literal["adam", "rmsprop"] = "rmsprop"
    """RMSprop with smoothing 0.99 and epsilon ``rms_prop_eps`` (SB3's ``use_rms_prop=True``), or Adam."""
    normalize_advantage: bool = False
    """Standardise the advantages of the rollout (SB3's A2C: off)."""
    normalize_observations: bool = False
    """Running mean/std observation normalisation (SB3 VecNormalize, clip 10): off in SB3's defaults."""
    activation: Literal["relu", "tanh"] = "tanh"
    """Hidden activation of actor and critic (SB3's MlpPolicy: tanh)."""


@dataclass(frozen=True)
class OnPolicyTrainConfig:
    """A training run of PPO or BPO-PPO (or A2C and BPO-A2C, ``method``): vectorised auto-resetting
    envs; on the jax, mjx and threads backends the whole run one jitted function (rollout, returns,
    PPO epochs or A2C's step, FQE, mu), seeds vmapped."""

    preset: str = "custom"
    """Label of the preset this configuration came from (recorded in the results); 'custom' for one
    built field by field, whose defaults are no preset's (``get_preset`` gives a preset's)."""
    env: str = "CartPole-v1"
    """Environment id: from ``envs.FUNCTIONAL_ENVS`` (backend jax), ``envs.gymnasium_envs.GYMNASIUM_ENVS``
    (backend gymnasium) or the MuJoCo v5 tasks Ant-v5, HalfCheetah-v5, Hopper-v5, Walker2d-v5 (backends
    gymnasium, threads, mjx)."""
    backend: Literal["jax", "gymnasium", "mjx", "threads"] = "jax"
    """jax: functional environments, the whole run one jitted program. gymnasium: Gymnasium
    vector environments stepped on the host, one jitted call per vector step and per update.
    mjx: the MuJoCo v5 tasks ported to MJX (``envs.mjx``), the whole run one jitted program like
    jax; made for GPUs, it also runs (slowly) on a CPU. threads: the MuJoCo v5 tasks stepped by
    MuJoCo itself (Gymnasium's physics, bit-identical) on a host thread pool, called from inside the
    jitted program like jax, so the learning runs on the default JAX device (``envs.mujoco_threads``)."""
    mjx_iterations: int = 0
    """mjx backend: the constraint solver's iterations (0: the XML's, 100 in the four tasks). In
    float32 the XML's tolerance (1e-8) is never met, so every substep runs every iteration; 4 with 8
    line-search iterations (MuJoCo Playground's locomotion setting) is several times faster, and its
    fidelity is measured in docs/mjx.md."""
    mjx_ls_iterations: int = 0
    """mjx backend: the solver's line-search iterations (0: the XML's, 50 in the four tasks)."""
    physics_threads: int = 0
    """threads backend: host threads that step the physics (0: one per CPU core). Results do not
    depend on it."""
    vector_mode: Literal["sync", "async"] = "sync"
    """Gymnasium backend: step the environments in this process (sync) or in one worker process
    each (async, worth it when an environment step costs more than the transfer)."""
    eval_in_background: bool = True
    """Gymnasium backend: evaluate in a worker process while training goes on, with a copy of the
    parameters (results are the same either way); False evaluates in the training loop."""
    variant: str = ""
    """Named algorithm variant (``bpo.config.presets.VARIANTS``): a row of Table 1 (ppo, bpo_c1.5_rho1.5,
    bpo_c1.0_rho1.0, bpo_c1.0_rho1.5, bpo_traj_c1.0), a2c (the method alone) or an ablation of the best
    row for the env and preset (bpo_no_qhat, bpo_no_symlog, bpo_no_symlog_target). It names the run's
    row and folder, so it must name the run: a flag that changes a field ``--variant`` sets is refused;
    one over a preset's own variant (the MuJoCo presets carry bpo_c1.0_rho1.5), or ``--no-bpo``, leaves
    the run the variant that names it (ppo, or none). Recorded in the results; empty when none applies."""
    method: str = "ppo"
    """The policy-gradient method, the target update of Algorithm 1, by its registered name
    (``bpo.agents.methods``): 'ppo' (Listing 1), 'a2c' (Mnih et al. 2016, one step per rollout;
    ``bpo.agents.a2c``), the first extension the paper's conclusion names, or a method of one's own
    (``docs/methods.md``). Each reads the section named after it, a method without one the ``ppo``
    section (``method_section``)."""
    seeds: int = 1
    """Number of independent runs, vmapped in one jitted call."""
    seed: int = 0
    """Base seed; run i uses jax.random.fold_in(PRNGKey(seed), i)."""
    total_timesteps: int = 100_000
    """Training budget in environment steps, rounded up to whole rollouts as SB3 does."""
    eval_every: int = 5_000
    """Evaluate every this many environment steps (rounded down to whole rollouts, at least one)
    and once at the end."""
    eval_episodes: int = 10
    """Episodes per evaluation with the deterministic policy (argmax / Gaussian mean)."""
    save_policies_every: int = 0
    """Also keep the policies (pi, the value network, the normaliser, mu) every this many updates
    in the run's policies.msgpack (``bpo.training.policies``), e.g. for the estimator probe; 0:
    the final ones only. Changes no result."""
    # One section per built-in method; a run has its method's only (the other is None). constructor=:
    # as EpisodicTrainConfig.bpo (a flag of the absent one is refused, experiments.cli).
    ppo: Annotated[PPOConfig | None, tyro.conf.arg(constructor=PPOConfig)] = field(default_factory=PPOConfig)
    """PPO's settings, and those of a method without a section of its own (None with method a2c)."""
    a2c: Annotated[A2CConfig | None, tyro.conf.arg(constructor=A2CConfig)] = None
    """A2C's settings (method a2c only)."""
    returns: OnPolicyReturnConfig = field(default_factory=OnPolicyReturnConfig)
    """Off-policy return estimator (used by BPO runs only)."""
    # constructor=: as EpisodicTrainConfig.bpo.
    bpo: Annotated[OnPolicyBehaviourConfig | None, tyro.conf.arg(constructor=OnPolicyBehaviourConfig)] = field(
        default_factory=OnPolicyBehaviourConfig)
    """Behaviour step: BPO on ``method``, the data from the learned behaviour policy mu (Listing 4;
    BPO-A2C with method a2c); None: the method alone, data from pi (Listing 1). On the command
    line --bpo / --no-bpo."""

    unit: ClassVar[str] = "update"
    """What a row of the training metrics is, and what ``--checkpoint-every N`` counts."""
    step_unit: ClassVar[str] = "env_step"
    """What a learning curve's ``step`` counts."""

    @property
    def algo(self) -> str:
        """The algorithm's name, derived: 'bpo' with a behaviour step, else the method's."""
        return algorithm_name(self)

    @property
    def settings(self) -> ActorCriticConfig:
        """The method's section (``method_section``): its rollout, networks, optimiser and own fields."""
        section = getattr(self, method_section(self.method))
        if section is None:
            raise ConfigError(method_section(self.method), f"method {self.method} reads this section, which the "
                                                           "config does not have")
        return section

    @property
    def minibatch_group(self) -> int:
        """Rows a minibatch draws together: n_envs with ``whole_step_minibatches`` (one time step of
        every environment), else 1."""
        p = self.settings
        return p.n_envs if p.whole_step_minibatches else 1

    @property
    def rollout_size(self) -> int:
        """Transitions per rollout (and per update): ``n_steps x n_envs``."""
        return self.settings.n_steps * self.settings.n_envs

    @property
    def n_updates(self) -> int:
        """The budget in whole rollouts, rounded up as SB3 does."""
        return -(-self.total_timesteps // self.rollout_size)

    @property
    def eval_schedule(self) -> np.ndarray:
        """Boolean per update: evaluate after it. Every ``eval_every`` steps (rounded down to whole
        rollouts, at least one) and after the last update; one more evaluation precedes training."""
        per_eval = max(1, self.eval_every // self.rollout_size)
        after = (np.arange(self.n_updates) + 1) % per_eval == 0
        after[-1] = True
        return after

    @property
    def n_evaluations(self) -> int:
        """Evaluations of one seed, the one before training included."""
        return int(self.eval_schedule.sum()) + 1

    @property
    def env_steps_total(self) -> int:
        """Environment steps of one seed."""
        return self.n_updates * self.rollout_size

    @property
    def checkpoint_units(self) -> int:
        """What ``--checkpoint-every N`` counts N of in a whole run: updates."""
        return self.n_updates

    def units_at_evaluations(self, evals: dict) -> np.ndarray:
        """Updates done at each evaluation, from a run's evaluation outputs."""
        return (np.asarray(evals["eval_step"][0]) // self.rollout_size).astype(int)


TrainConfig = EpisodicTrainConfig | OnPolicyTrainConfig
"""Either kind of run."""


METHOD_SECTIONS = {"ppo": PPOConfig, "a2c": A2CConfig}
"""The on-policy methods with a section of their own, by name: the section has the method's name."""


def method_section(method: str) -> str:
    """The section a method reads: its own, else ``ppo`` (a plug-in method, ``docs/methods.md``)."""
    return method if method in METHOD_SECTIONS else "ppo"


def with_method(cfg: OnPolicyTrainConfig, method: str, section=None) -> OnPolicyTrainConfig:
    """``cfg`` running ``method``: its section ``section``, else the one ``cfg`` has, else the
    section's defaults (SB3's A2C for a2c); the other method's section dropped."""
    name = method_section(method)
    kept = section if section is not None else get_dotted(cfg, name)  # an absent section: its defaults
    return dataclasses.replace(cfg, method=method, **{n: kept if n == name else None for n in METHOD_SECTIONS})


def algorithm_name(cfg) -> str:
    """'bpo' for a run with a behaviour step (a ``bpo`` section), else its method's name."""
    return "bpo" if cfg.bpo is not None else cfg.method


BPO_SECTIONS = ("bpo", "returns")
"""The sections only BPO reads: the behaviour step and the off-policy returns of eq. (6). A run
without BPO refuses a value given to one (``bpo train``, a sweep's grid): it would change nothing."""


def with_bpo(cfg, on: bool, section=None):
    """``cfg`` with BPO on (its own ``bpo`` section, else ``section``, else the defaults) or off
    (the method alone: no ``bpo`` section)."""
    if not on:
        return dataclasses.replace(cfg, bpo=None)
    if cfg.bpo is not None:
        return cfg
    return dataclasses.replace(cfg, bpo=section if section is not None else get_dotted(cfg, "bpo"))


def _optional(f) -> bool:
    """Whether a section may be None (``bpo``: a run without BPO); ``replace`` may set it whole."""
    return "None" in str(f.type)


def _section(instance, f):
    """A field's value, an optional section that is None read as its defaults: the traced
    hyperparameters of a run without BPO still have mu's (unused) learning rate, so that one
    program type serves both."""
    value = getattr(instance, f.name)
    if value is None and f.default_factory is not dataclasses.MISSING:
        default = f.default_factory()
        return default if dataclasses.is_dataclass(default) else value
    if value is None and isinstance(instance, OnPolicyTrainConfig) and f.name in METHOD_SECTIONS:
        return METHOD_SECTIONS[f.name]()  # another method's section: its fields and defaults
    return value


def _traced(cfg, prefix: str = "") -> list[tuple[str, str | None]]:
    """(dotted name, the field it overrides or None) of every field ``traced`` marks in ``cfg`` (a
    config class or instance), sections in declaration order."""
    out = []
    instance = cfg() if isinstance(cfg, type) else cfg
    for f in dataclasses.fields(instance):
        value = _section(instance, f)
        if TRACED in f.metadata:
            out.append((prefix + f.name, f.metadata[TRACED] or None))
        elif dataclasses.is_dataclass(value):
            out += _traced(value, f"{prefix}{f.name}.")
    return out


def traced_fields(cfg) -> tuple[str, ...]:
    """The dotted names of the traced fields of a config class or instance (``traced``)."""
    return tuple(name for name, _ in _traced(cfg))


def _hyperparams_type(name: str, cls, doc: str):
    """The NamedTuple of ``cls``'s traced hyperparameters, one float32 array each, named by their
    fields (derived from the ``traced`` markers, so never out of step with them)."""
    # dict: a field that two methods' sections both have (learning_rate) is one hyperparameter
    names = list(dict.fromkeys(dotted.rpartition(".")[2] for dotted, overrides in _traced(cls) if overrides is None))
    hp_type = NamedTuple(name, [(n, jnp.ndarray) for n in names])
    hp_type.__doc__ = doc
    return hp_type


PPOHyperparams = _hyperparams_type("PPOHyperparams", OnPolicyTrainConfig, """Traced hyperparameters of an
on-policy run (the fields ``traced`` marks); every leaf may carry a vmapped axis.""")
Hyperparams = _hyperparams_type("Hyperparams", EpisodicTrainConfig, """Traced hyperparameters of an episodic
run (the fields ``traced`` marks); every leaf may carry a vmapped axis.""")


def traced_hyperparams(cfg):
    """The traced fields of ``cfg`` as float32 arrays: Hyperparams or PPOHyperparams. A field that
    overrides another (``bpo.ppo_ent_coef``) replaces its value in a BPO run when it is not None."""
    values, overriding = {}, []
    for dotted, overrides in _traced(cfg):
        value = _traced_value(cfg, dotted)
        if overrides is None:
            values.setdefault(dotted.rpartition(".")[2], value)
        elif cfg.bpo is not None and value is not None:
            overriding.append((overrides.rpartition(".")[2], value))
    values.update(overriding)
    hp_type = PPOHyperparams if isinstance(cfg, OnPolicyTrainConfig) else Hyperparams
    return hp_type(**{k: jnp.asarray(v, dtype=jnp.float32) for k, v in values.items()})


def _traced_value(cfg, dotted: str):
    """A traced field's value; one of a method's section is read from the run's own section when it
    has the field, else it is the default of the section that declares it (A2C's unused clip range)."""
    head, _, leaf = dotted.partition(".")
    if isinstance(cfg, OnPolicyTrainConfig) and head in METHOD_SECTIONS and hasattr(cfg.settings, leaf):
        return getattr(cfg.settings, leaf)
    return get_dotted(cfg, dotted)


def get_dotted(cfg, dotted: str):
    """The value of a dotted field (``returns.c_bar``); a field of an absent optional section
    (``bpo.q_lr`` of a run without BPO) reads as its default."""
    for part in dotted.split("."):
        cfg = _section(cfg, next(f for f in dataclasses.fields(cfg) if f.name == part))
    return cfg


def field_names(cfg, prefix: str = "") -> list[str]:
    """Every settable field of ``cfg``, nested ones dotted (``returns.c_bar``)."""
    names = []
    for f in dataclasses.fields(cfg):
        value = _section(cfg, f)
        names += field_names(value, f"{prefix}{f.name}.") if dataclasses.is_dataclass(value) else [prefix + f.name]
    return names


def replace(cfg, _prefix: str = "", **changes):
    """dataclasses.replace that also accepts dotted names for nested fields, e.g. 'returns.c_bar'.
    A field that this kind of config does not have (``bpo.mu_hidden`` of an on-policy run, whose mu
    has pi's architecture), or a field of a section the run lacks (``bpo.q_lr`` without BPO), is a
    ``ConfigError`` naming it, never silently ignored."""
    nested: dict[str, dict] = {}
    flat = {}
    for name, value in changes.items():
        head, _, rest = name.partition(".")
        f = next((f for f in dataclasses.fields(cfg) if f.name == head), None)
        section = f is not None and dataclasses.is_dataclass(_section(cfg, f))
        if f is None or (rest and not section) or (not rest and section and not _optional(f)):
            raise ConfigError(_prefix + name, f"does not apply to {type(cfg).__name__}; its fields: "
                              f"{field_names(cfg, _prefix)}")
        if rest and getattr(cfg, head) is None:
            raise ConfigError(_prefix + name, _absent_section(cfg, head))
        if rest:
            nested.setdefault(head, {})[rest] = value
        else:
            flat[name] = value
    for head, sub in nested.items():
        flat[head] = replace(getattr(cfg, head), f"{_prefix}{head}.", **sub)
    return dataclasses.replace(cfg, **flat)


def _absent_section(cfg, head: str) -> str:
    """Why a field of the section ``head`` cannot be set on ``cfg``, which lacks it."""
    if head in METHOD_SECTIONS:
        return (f"sets the {head} section, which method {cfg.method} does not read; allowed: its own section "
                f"{method_section(cfg.method)}.* (or --method {head})")
    return (f"sets the {head} section, which this run does not have ({algorithm_name(cfg)} alone); allowed: runs "
            "with BPO (--bpo)")


def to_dict(cfg) -> dict:
    """JSON-ready dict of a config (inf becomes the string 'inf')."""

    def clean(value):
        if isinstance(value, float) and math.isinf(value):
            return "inf" if value > 0 else "-inf"
        if isinstance(value, tuple):
            return [clean(v) for v in value]
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        return value

    return clean(dataclasses.asdict(cfg))


EXECUTION_ONLY = ("vector_mode", "eval_in_background", "physics_threads", "save_policies_every")
"""Fields that change how a run executes, never what it computes (sync or async vector envs,
evaluation inline or in a worker, physics threads give identical results: tests/test_host_runner.py,
tests/test_mujoco_threads.py)."""
RESUMABLE_CHANGES = ("vector_mode", "eval_in_background", "physics_threads")
"""``EXECUTION_ONLY`` fields a run may change when it continues from its checkpoint: they change
how its steps execute, not its state (``save_policies_every`` is kept: it decides what the
checkpoint has kept so far)."""
COMPATIBLE_ADDITIONS = ("mjx_iterations", "mjx_ls_iterations", "physics_threads",
                        "save_policies_every", "method", "ppo.optimizer", "ppo.rms_prop_eps", "a2c",
                        "bpo.q_hat_reward", "bpo.mu_q_hat_batch_min", "bpo.mu_q_hat_unclipped_actions",
                        "bpo.replay_epoch_filled_only", "bpo.fqe_unclipped_actions", "ppo.whole_step_minibatches",
                        "a2c.whole_step_minibatches", "ppo.sde_features", "a2c.sde_features")
"""Fields added after runs were recorded whose default does what the code did before they existed
(0: the XML's solver iterations; threads and saved policies only change speed and outputs; the
method 'ppo' with Adam, the only one before A2C, and so no a2c section; the switches of the
authors' code's bugs and choices, off). A
recorded run lacking any other field of today's config ran code that did not have it, and may
have computed something else: it is stale (``missing_fields``). A new field joins this list only
when that is true of it."""


def missing_fields(data: dict) -> list[str]:
    """The dotted names of today's config fields that ``data`` (a recorded config.json) lacks,
    after the sections that moved (``from_dict``). A section a run does not have (``bpo`` of the
    method alone: null) counts as recorded when the file has it or any of its fields."""
    def names(d: dict, prefix: str = "") -> set[str]:
        out = set()
        for k, v in d.items():
            out |= names(v, f"{prefix}{k}.") if isinstance(v, dict) else {prefix + k}
        return out

    recorded = names(data)
    if "returns" not in data and isinstance(data.get("bpo"), dict):  # the returns section moved out of bpo
        recorded |= {"returns." + n.removeprefix("bpo.") for n in recorded if n.startswith("bpo.")}
    if _a2c_in_ppo(data):  # A2C's settings moved out of the ppo section
        recorded |= {"a2c." + n.removeprefix("ppo.") for n in recorded if n.startswith("ppo.")} | {"ppo"}
    return sorted(n for n in names(to_dict(from_dict(data))) - recorded
                  if not any(r.startswith(n + ".") for r in recorded))


def stale_fields(data: dict) -> list[str]:
    """The fields ``data`` (a recorded config) lacks other than ``COMPATIBLE_ADDITIONS``: read with
    today's defaults, they may compute something else than the code that recorded it."""
    return sorted(set(missing_fields(data)) - set(COMPATIBLE_ADDITIONS))


def current_config(data: dict):
    """A recorded config (a run's config.json, a checkpoint's) in today's layout (``from_dict``),
    or None when it is stale (``stale_fields``)."""
    return None if stale_fields(data) else from_dict(data)


def from_dict(data: dict):
    """The config ``to_dict`` wrote (a run's config.json or a checkpoint): episodic or on-policy,
    decided by its fields; lists become tuples and 'inf' strings floats again. Older files are read
    as they meant: before the return estimator had a section of its own (``returns``) its fields
    are taken from ``bpo``; before the behaviour step was an optional section, ``algo`` said whether
    the run had one ('bpo') or ran the method alone (its name), and the section was always there;
    before each method had a section of its own, A2C's settings were in ``ppo``."""
    return _build(*_current_layout(data))


def unknown_fields(data: dict) -> list[str]:
    """The dotted names in ``data`` (a run's config.json, read as ``from_dict`` reads it) that no
    field of today's config has: ``from_dict`` would drop them silently (a misspelt field of a
    hand-edited file, or one removed since)."""
    def walk(cls, d: dict, prefix: str) -> list[str]:
        found, instance = [], cls()
        fields = {f.name: f for f in dataclasses.fields(cls)}
        for key, value in d.items():
            if key not in fields:
                found.append(prefix + key)
            elif isinstance(value, dict) and dataclasses.is_dataclass(default := _section(instance, fields[key])):
                found += walk(type(default), value, f"{prefix}{key}.")
        return found

    return walk(*_current_layout(data), "")


def _current_layout(data: dict) -> tuple[type, dict]:
    """``from_dict``'s reading of an older file: (the config class, ``data`` in today's sections)."""
    cls = OnPolicyTrainConfig if "ppo" in data or "a2c" in data else EpisodicTrainConfig
    if "returns" not in data and isinstance(data.get("bpo"), dict):
        names = {f.name for f in dataclasses.fields(cls().returns)}
        data = {**data, "returns": {k: v for k, v in data["bpo"].items() if k in names},
                "bpo": {k: v for k, v in data["bpo"].items() if k not in names}}
    if "algo" in data:
        data = {k: v for k, v in data.items() if k != "algo"} | ({} if data["algo"] == "bpo" else {"bpo": None})
    if _a2c_in_ppo(data):
        names = {f.name for f in dataclasses.fields(A2CConfig)}
        data = {**data, "a2c": {k: v for k, v in data["ppo"].items() if k in names}, "ppo": None}
    return cls, data


def _a2c_in_ppo(data: dict) -> bool:
    """Whether ``data`` is an A2C run recorded before A2C had a section of its own."""
    return data.get("method") == "a2c" and "a2c" not in data and "ppo" in data


RUN_CONFIG_KEYS = ("preset", "env", "seeds", "seed")
"""Fields every run's config.json has had, whatever its version (with its method's section)."""


OPTIONAL_SECTIONS = ("bpo", *METHOD_SECTIONS)
"""The sections a run's config may hold as None: the behaviour step of a run without BPO, and the
section of a method the run does not use."""


def _check_section(instance, f, value, prefix: str) -> None:
    """A section of a recorded config is an object, or null where the run may lack it
    (``OPTIONAL_SECTIONS``): read as fields, a string or a list gave every field its default (a
    hand-edited ``"ppo": "x"`` replayed PPO's defaults, not the run's settings)."""
    optional = not prefix and f.name in OPTIONAL_SECTIONS
    if not isinstance(value, dict) and not (value is None and optional):
        raise ConfigError(prefix + f.name, f"must be an object (a section of the config){' or null' * optional}, "
                                           f"got {type(value).__name__}")


def check_run_config(data, source: str) -> None:
    """Refuse what is not a run's config.json before ``from_dict`` fills the gaps with defaults: a
    run's ``summary.json``, a checkpoint's ``checkpoint.json`` or ``{}`` would otherwise train a
    default run. Raises ``ConfigError`` naming what the file lacks."""
    if not isinstance(data, dict):
        raise ConfigError("config", f"{source!r} is not a run's config.json: it holds a {type(data).__name__}, not "
                                    "an object")
    missing = [k for k in RUN_CONFIG_KEYS if k not in data]
    if not ("ppo" in data or "a2c" in data or "reinforce" in data):
        missing.append("ppo, a2c or reinforce")
    if "bpo" not in data:
        missing.append("bpo")
    if missing:
        kind = ("is a run's summary.json, not its config.json" if "final_eval_returns" in data else
                "is a checkpoint's checkpoint.json, not a run's config.json" if "iterations_done" in data else
                "is not a run's config.json")
        raise ConfigError("config", f"{source!r} {kind}: it has no {', '.join(missing)}; allowed: the config.json "
                                    "in a run's folder")
    method = data.get("method", "ppo")
    section = method_section(method) if isinstance(method, str) else None
    if "reinforce" not in data and section is not None and data.get(section, {}) is None:
        # from_dict would read the section as its defaults: another run than the one recorded
        raise ConfigError(section, f"in {source!r} is null, and the run's method {method!r} reads it; allowed: "
                                   "its settings, an object, as the run's config.json holds them")
    if "algo" in data:  # older files: whether the run had BPO ('bpo') or ran its method alone (its name)
        algo, episodic = data["algo"], not ("ppo" in data or "a2c" in data)
        # The method's name: the file's method, else (before it had one) PPO or A2C, whose settings were in ppo.
        alone = ("reinforce",) if episodic else (data["method"],) if "method" in data else ("ppo", "a2c")
        if algo not in ("bpo", *alone) or algo == "bpo" and data.get("bpo") is None:
            raise ConfigError("algo", f"in {source!r} is {algo!r}; allowed: 'bpo' with a bpo section, or the "
                                      f"method's name ({' or '.join(map(repr, alone))}) for the method alone")


def recorded_form(cfg) -> dict:
    """``cfg`` as its run's ``config.json`` reads back (``to_dict`` through JSON: tuples as lists)."""
    return json.loads(json.dumps(to_dict(cfg), allow_nan=True))


def config_digest(data: dict) -> str:
    """The SHA-256 of a run's config as its ``config.json`` holds it (``recorded_form``; keys
    sorted). The run's ``summary.json`` and ``policies.msgpack`` carry it, which ties them to their
    run where their other fields alone do not (another run of the same task, method and seeds)."""
    return hashlib.sha256(json.dumps(data, sort_keys=True, allow_nan=True).encode()).hexdigest()


MAX_CONFIG_NESTING = 8
"""How deep a run's config.json may nest objects and arrays: its sections and tuples reach 3."""


def nesting(data) -> int:
    """How deep ``data`` (parsed JSON) nests objects and arrays, found without recursion."""
    deepest, stack = 0, [(data, 0)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, (dict, list)):
            deepest = max(deepest, depth + 1)
            stack.extend((v, depth + 1) for v in (value.values() if isinstance(value, dict) else value))
    return deepest


def read_recorded_config(path) -> tuple[dict, object]:
    """A run's recorded ``config.json`` at ``path``: its data and the config ``from_dict`` reads
    from them, for ``bpo train`` to replay and ``bpo evaluate`` to act by. What is not one (not
    JSON, nested past the recursion limit, another results file, a section of the wrong type) is a
    ``ConfigError`` naming the file."""
    def unreadable(e: Exception) -> ConfigError:
        return ConfigError("config", f"{str(path)!r} cannot be read as a run's config.json ({type(e).__name__}: {e})")

    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError, RecursionError) as e:  # RecursionError: arrays nested thousands deep
        raise unreadable(e) from None
    if (depth := nesting(data)) > MAX_CONFIG_NESTING:  # every reader below recurses into the data
        raise ConfigError("config", f"{str(path)!r} cannot be read as a run's config.json (its values nest {depth} "
                                    f"levels deep; a run's config.json nests at most {MAX_CONFIG_NESTING})")
    check_run_config(data, str(path))
    try:
        return data, from_dict(data)
    except ConfigError:
        raise
    except (ValueError, TypeError, AttributeError) as e:
        raise unreadable(e) from None


def _build(cls, data: dict, prefix: str = ""):
    kwargs, instance = {}, cls()
    for f in dataclasses.fields(cls):
        if f.name not in data:
            continue  # a field added since the file was written keeps its default
        value = data[f.name]
        default = _section(instance, f)  # an optional section absent by default: its type's defaults
        if dataclasses.is_dataclass(default):
            _check_section(instance, f, value, prefix)
        if dataclasses.is_dataclass(default) and value is not None:  # None: an optional section absent
            value = _build(type(default), value, f"{prefix}{f.name}.")
        elif isinstance(value, list):
            value = tuple(value)
        elif isinstance(value, str) and value in ("inf", "-inf") and isinstance(default, float):
            value = float(value)
        kwargs[f.name] = value
    return cls(**kwargs)
