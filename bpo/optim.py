"""The one optimiser of the gradient learners: Adam after a global gradient-norm clip.

PPO's actor and critic (Tables 3-4) and the behaviour step's Q, Q-hat and mu (Appendix C.2) all
use it. The learning rate is part of the transformation; callers whose rate is traced (vmapped
hyperparameters, decayed over the run) build it inside the traced update. Adam's state does not
depend on the rate, so a state made by one rate's optimiser serves every other's.
"""

import optax


def clipped_adam(lr, adam_eps: float, max_grad_norm: float) -> optax.GradientTransformation:
    """Gradients clipped to global norm ``max_grad_norm`` (no clip when it is infinite), then Adam
    with ``eps = adam_eps`` and learning rate ``lr`` (a float or a traced scalar).

    Returns:
        The optax transformation; its updates are added to the parameters (they are -lr times
        Adam's direction)."""
    clip = [] if max_grad_norm == float("inf") else [optax.clip_by_global_norm(max_grad_norm)]
    return optax.chain(*clip, optax.adam(lr, eps=adam_eps))
