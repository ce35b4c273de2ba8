"""bpo: Behaviour Policy Optimization and the policy-gradient methods it builds on, in JAX."""

import os as _os

# XLA's CPU runtime can deadlock on our vmapped runs (a while-loop evaluation inside a cond inside
# the update scan, several seeds): with its concurrency-optimised thunk scheduler a 2-seed Acrobot
# run never finishes, idle, in block_until_ready. Disabling that scheduler avoids it and costs
# nothing measurable here. Set before the CPU backend starts; a user's own XLA_FLAGS are kept.
_FLAG = "--xla_cpu_enable_concurrency_optimized_scheduler=false"
if "xla_cpu_enable_concurrency_optimized_scheduler" not in _os.environ.get("XLA_FLAGS", ""):
    _os.environ["XLA_FLAGS"] = (_os.environ.get("XLA_FLAGS", "") + " " + _FLAG).strip()

# The host runner (Gymnasium environments) makes one tiny XLA call per environment step. With
# asynchronous CPU dispatch each call is handed to XLA's worker threads, which on one core costs
# more than the call itself and slows the next environment step (HalfCheetah, one core: act call
# 64 -> 38 us, environment step 132 -> 115 us with synchronous dispatch). The JAX runner makes one
# long call and waits for it, so it does not care. Read when the CPU client starts, so it is set
# on import, before the client exists; BPO_CPU_ASYNC_DISPATCH=1 keeps JAX's default.
if _os.environ.get("BPO_CPU_ASYNC_DISPATCH", "0") != "1":
    import jax as _jax

    _jax.config.update("jax_cpu_enable_async_dispatch", False)

__version__ = "0.1.0"
