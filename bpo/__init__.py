"""bpo: Behaviour Policy Optimization and the policy-gradient methods it builds on, in JAX."""

__version__ = "0.1.0"
