"""The one optimiser of the gradient learners: a global gradient-norm clip, then Adam or RMSprop.

PPO's actor and critic (Tables 3-4) and the behaviour step's Q, Q-hat and mu (Appendix C.2) use
Adam; A2C uses RMSprop by default, as its reference implementations do. The learning rate is part
of the transformation; callers whose rate is traced (vmapped hyperparameters, decayed over the run)
build it inside the traced update. Neither method's state depends on the rate, so a state made by
one rate's optimiser serves every other's.
"""

from typing import Literal

import optax

RMSPROP_DECAY = 0.99
"""RMSprop's smoothing constant (torch's ``alpha``): Stable-Baselines3's A2C fixes it at 0.99."""


def clipped_adam(lr, adam_eps: float, max_grad_norm: float) -> optax.GradientTransformation:
    """``clipped`` with Adam."""
    return clipped(lr, "adam", adam_eps, max_grad_norm)


def clipped(lr, optimizer: Literal["adam", "rmsprop"], eps: float, max_grad_norm: float
            ) -> optax.GradientTransformation:
    """Gradients clipped to global norm ``max_grad_norm`` (no clip when it is infinite), then
    ``optimizer`` with epsilon ``eps`` and learning rate ``lr`` (a float or a traced scalar).

    RMSprop is torch's ``RMSprop(alpha=0.99, eps=eps)`` (SB3's A2C): nu = 0.99 nu + 0.01 g^2 from
    nu = 0, step lr g / (sqrt(nu) + eps), eps outside the root, no momentum, no centring.

    Returns:
        The optax transformation; its updates are added to the parameters."""
    clip = [] if max_grad_norm == float("inf") else [optax.clip_by_global_norm(max_grad_norm)]
    if optimizer == "rmsprop":
        step = optax.rmsprop(lr, decay=RMSPROP_DECAY, eps=eps, eps_in_sqrt=False)
    else:
        step = optax.adam(lr, eps=eps)
    return optax.chain(*clip, step)
