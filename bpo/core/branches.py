"""A step that runs only where a traced condition holds, traced once.

``jax.lax.cond`` needs both branches to return the same shapes, so the branch that skips a step
returns zeros shaped like the step's metrics, and those shapes come from tracing the step. Traced
a second time inside the cond, a step that is a whole PPO or BPO update doubled the Python
tracing and lowering of the run's program: on every compile, and on every compile-cache hit,
which redoes both (docs/speed.md, "Compiling"). Jitted once here, the step's shapes and its
branch come from one trace: the cond reuses the jit's cached trace, and XLA inlines the call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp


def zeros_shaped(shapes: Any) -> Any:
    """Zeros of every ``jax.ShapeDtypeStruct`` in the tree ``shapes``."""
    return jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)


def traced_once(fn: Callable, *args) -> tuple[Callable, Any]:
    """``fn`` jitted and the shapes of its output on ``args``; calling the jitted ``fn`` again on
    arguments of the same shapes, in any branch of the same program, reuses this one trace.

    Args:
        fn: a function of ``args`` (it may close over tracers of the enclosing program).
        args: example arguments (values or tracers).
    Returns:
        (the jitted ``fn``, the tree of ``jax.ShapeDtypeStruct`` it returns)."""
    jitted = jax.jit(fn)
    return jitted, jax.eval_shape(jitted, *args)


def step_or_skip(pred, step: Callable, carry, *args):
    """``step(carry, *args)`` where ``pred`` holds; else the carry as it is and zero metrics.

    Args:
        pred: a boolean scalar; under ``vmap`` a batched one makes the cond a select, which runs
            the step and keeps the carry where ``pred`` is false.
        step: ``(carry, *args) -> (carry, metrics)``.
        carry: the state the step updates.
        args: the step's other arguments.
    Returns:
        (the new carry, the step's metrics or zeros of their shapes)."""
    jitted, (_, metrics) = traced_once(step, carry, *args)
    return jax.lax.cond(pred, jitted, lambda c, *_: (c, zeros_shaped(metrics)), carry, *args)
