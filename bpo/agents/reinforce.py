"""REINFORCE (Listing 2): theta <- theta + alpha * sum_t G_t grad ln pi_theta(A_t|S_t).

The per-step updates of the listing are applied as one step per episode on their sum, with the
learning rate decayed exponentially from ``lr_start`` to ``lr_end`` over the run (Table 2).
BPO-REINFORCE (Listing 3) uses the same update with G_t the truncated IS return.
"""

import jax
import jax.numpy as jnp
import optax

from bpo.fqe import take_action


def exponential_schedule(lr_start, lr_end, n_updates: int):
    """alpha_k = lr_start * (lr_end / lr_start)^(k / (n_updates - 1)); k is the update index."""
    span = max(n_updates - 1, 1)

    def schedule(count):
        frac = jnp.minimum(count, span) / span
        return lr_start * (lr_end / lr_start) ** frac

    return schedule


def make_optimizer(kind: str, lr_start, lr_end, n_updates: int):
    schedule = exponential_schedule(lr_start, lr_end, n_updates)
    if kind == "adam":
        return optax.adam(schedule)
    if kind == "sgd":
        return optax.sgd(schedule)
    raise ValueError(f"reinforce.optimizer must be 'adam' or 'sgd', got {kind!r}")


def reinforce_loss(params, apply_fn, obs, actions, returns, mask):
    """-sum_t mask_t G_t ln pi(A_t|S_t); its negative gradient is Listing 2's summed update."""
    log_probs = take_action(jax.nn.log_softmax(apply_fn(params, obs), axis=-1), actions)
    return -jnp.sum(mask * jax.lax.stop_gradient(returns) * log_probs)


def reinforce_update(params, opt_state, tx, apply_fn, obs, actions, returns, mask):
    loss, grads = jax.value_and_grad(reinforce_loss)(params, apply_fn, obs, actions, returns, mask)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss
