"""bpo: Behaviour Policy Optimization and the policy-gradient methods it builds on, in JAX."""

import os as _os

# XLA's CPU runtime can deadlock on our vmapped runs (a while-loop evaluation inside a cond inside
# the update scan, several seeds): with its concurrency-optimised thunk scheduler a 2-seed Acrobot
# run never finishes, idle, in block_until_ready. Disabling that scheduler avoids it and costs
# nothing measurable here. Set before the CPU backend starts; a user's own XLA_FLAGS are kept.
_FLAG = "--xla_cpu_enable_concurrency_optimized_scheduler=false"
if "xla_cpu_enable_concurrency_optimized_scheduler" not in _os.environ.get("XLA_FLAGS", ""):
    _os.environ["XLA_FLAGS"] = (_os.environ.get("XLA_FLAGS", "") + " " + _FLAG).strip()

__version__ = "0.1.0"
