"""Symmetric log / exp squashing used for FQE targets (paper Section 5.2)."""

import jax.numpy as jnp


def symlog(x):
    """symlog(x) = sign(x) * ln(|x| + 1)."""
    return jnp.sign(x) * jnp.log1p(jnp.abs(x))


def symexp(x):
    """symexp(x) = sign(x) * (exp(|x|) - 1), the inverse of `symlog`."""
    return jnp.sign(x) * jnp.expm1(jnp.abs(x))
