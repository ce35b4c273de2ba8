"""Network architectures: MLP torsos with optional layer norm and a zero-initialised head
(Appendix C.2), and the linear-softmax policy of the ShortCorridor experiment (Section 6)."""

from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from bpo.core.distributions import Dist, logits_dist, sde_scale


class LayerNorm(nn.Module):
    """Layer normalisation (Ba et al. 2016) with learned scale and bias, as flax's LayerNorm
    (epsilon 1e-6) but with both moments from one pass, E[x^2] - E[x]^2: on a CPU this small
    network's step time is dominated by the normalisation, and one pass is about a quarter faster."""

    epsilon: float = 1e-6

    @nn.compact
    def __call__(self, x):
        scale = self.param("scale", nn.initializers.ones, (x.shape[-1],))
        bias = self.param("bias", nn.initializers.zeros, (x.shape[-1],))
        mean = jnp.mean(x, axis=-1, keepdims=True)
        var = jnp.maximum(jnp.mean(x * x, axis=-1, keepdims=True) - mean * mean, 0.0)
        return (x - mean) * jax.lax.rsqrt(var + self.epsilon) * scale + bias


class MLP(nn.Module):
    """ReLU MLP. ``layer_norm`` normalises every hidden layer before its activation.

    ``zero_head`` initialises the final kernel to zeros so early predictions are exactly the
    head bias (``head_bias``, default zeros): this prevents early overestimation with symlog
    targets and lets a behaviour policy start identical to a target policy.
    """

    hidden: Sequence[int]
    out: int
    layer_norm: bool = False
    zero_head: bool = False
    head_bias: Sequence[float] | None = None
    orthogonal: bool = False  # hidden kernels orthogonal with gain 1 (the authors' Q networks); else LeCun normal

    @nn.compact
    def __call__(self, x):
        hidden_init = _ortho(1.0) if self.orthogonal else nn.initializers.lecun_normal()
        for width in self.hidden:
            x = nn.Dense(width, kernel_init=hidden_init)(x)
            if self.layer_norm:
                x = LayerNorm()(x)
            x = nn.relu(x)
        kernel_init = nn.initializers.zeros if self.zero_head else nn.initializers.lecun_normal()
        if self.head_bias is None:
            bias_init = nn.initializers.zeros
        else:
            head_bias = np.asarray(self.head_bias, dtype=np.float32)
            bias_init = lambda *_: jnp.asarray(head_bias)  # noqa: E731
        return nn.Dense(self.out, kernel_init=kernel_init, bias_init=bias_init)(x)


class LinearSoftmax(nn.Module):
    """Softmax policy linear in state-action features: logits[a] = theta . x(s, a).

    ``features[a]`` is x(s, a), identical in every state (the ShortCorridor agent cannot tell
    states apart). ``init_logits`` fixes the starting policy: theta is the least-squares
    solution of X theta = init_logits.
    """

    features: Sequence[Sequence[float]]
    init_logits: Sequence[float]

    @nn.compact
    def __call__(self, obs):
        x = np.asarray(self.features, dtype=np.float32)
        theta0 = np.linalg.lstsq(x, np.asarray(self.init_logits, dtype=np.float32), rcond=None)[0]
        theta = self.param("theta", lambda *_: jnp.asarray(theta0, dtype=jnp.float32))
        logits = jnp.asarray(x) @ theta
        return jnp.broadcast_to(logits, obs.shape[:-1] + logits.shape)


# x(s, left) = [0, 1] and x(s, right) = [1, 0]; rows are indexed by action (0 = left, 1 = right).
SHORT_CORRIDOR_FEATURES = ((0.0, 1.0), (1.0, 0.0))


def two_action_logits(p_second: float) -> tuple[float, float]:
    """Centred logits of a two-action softmax that picks action 1 with probability p_second."""
    z = float(np.log(p_second) - np.log1p(-p_second))
    return (-z / 2.0, z / 2.0)


def _ortho(gain):
    return nn.initializers.orthogonal(gain)


def init_gain(sb3_gain: float, unit_gains: bool) -> float:
    """An orthogonal kernel's gain: SB3's (sqrt 2 hidden, 0.01 policy head, 1 value head), or 1 on
    every layer (``ppo.ortho_gains = 'unit'``, the authors' public code)."""
    return 1.0 if unit_gains else sb3_gain


class Torso(nn.Module):
    """Hidden layers of the PPO actor and critic (SB3's orthogonal init, gain sqrt 2)."""

    hidden: Sequence[int]
    activation: str = "relu"
    ortho_init: bool = True
    unit_gains: bool = False

    @nn.compact
    def __call__(self, x):
        act = nn.relu if self.activation == "relu" else nn.tanh
        init = _ortho(init_gain(np.sqrt(2.0), self.unit_gains)) if self.ortho_init else nn.initializers.lecun_normal()
        for width in self.hidden:
            x = act(nn.Dense(width, kernel_init=init)(x))
        return x


def sde_feature_width(hidden: Sequence[int], sde_features: str) -> int:
    """Width of gSDE's features, the first axis of the exploration matrices: the last hidden layer's
    (``'latent'``) or 1 (``'constant'``)."""
    return hidden[-1] if sde_features == "latent" else 1


class Actor(nn.Module):
    """Policy network: returns ``(Dist, latent)``.

    Discrete: logits. Continuous: Gaussian mean and a state-independent ``log_std`` parameter
    initialised to ``log_std_init``; with ``use_sde`` the log std is a [features, action] matrix and
    the std depends on gSDE's features, see ``bpo.core.distributions``: the last hidden layer
    (``sde_features = 'latent'``), or the constant 1 (``'constant'``: a state-independent std whose
    noise gSDE holds, the authors' code's "gSDE"). The second output is those features.
    """

    hidden: Sequence[int]
    n_out: int
    discrete: bool
    use_sde: bool = False
    log_std_init: float = 0.0
    activation: str = "relu"
    ortho_init: bool = True
    unit_gains: bool = False
    sde_features: str = "latent"

    @nn.compact
    def __call__(self, obs):
        latent = Torso(self.hidden, self.activation, self.ortho_init, self.unit_gains)(obs)
        head_init = _ortho(init_gain(0.01, self.unit_gains)) if self.ortho_init else nn.initializers.lecun_normal()
        loc = nn.Dense(self.n_out, kernel_init=head_init)(latent)
        if self.discrete:
            return logits_dist(loc), latent
        if self.use_sde:
            width = sde_feature_width(self.hidden, self.sde_features)
            features = latent if self.sde_features == "latent" else jnp.ones((*latent.shape[:-1], width), latent.dtype)
            log_std = self.param("log_std", nn.initializers.constant(self.log_std_init), (width, self.n_out))
            return Dist(loc, sde_scale(features, log_std)), features
        log_std = self.param("log_std", nn.initializers.constant(self.log_std_init), (self.n_out,))
        return Dist(loc, jnp.broadcast_to(jnp.exp(log_std), loc.shape)), latent


class Critic(nn.Module):
    """State-value network V(s) (separate from the actor, as in the paper's tables)."""

    hidden: Sequence[int]
    activation: str = "relu"
    ortho_init: bool = True
    unit_gains: bool = False

    @nn.compact
    def __call__(self, obs):
        x = Torso(self.hidden, self.activation, self.ortho_init, self.unit_gains)(obs)
        init = _ortho(1.0) if self.ortho_init else nn.initializers.lecun_normal()
        return nn.Dense(1, kernel_init=init)(x)[..., 0]
