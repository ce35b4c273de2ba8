"""Process-wide settings of bpo, in one place, with their reasons.

Two are applied when ``bpo`` is imported, because XLA reads them when its CPU client starts and
the client starts at the first JAX computation:

* ``XLA_FLAGS += --xla_cpu_enable_concurrency_optimized_scheduler=false``. XLA's CPU runtime can
  deadlock on our vmapped runs (a while-loop evaluation inside a cond inside the update scan,
  several seeds): with the concurrency-optimised thunk scheduler a 2-seed Acrobot run never
  finishes, idle, in ``block_until_ready``. Disabling the scheduler avoids it and costs nothing
  measurable. A user's own setting of this flag is kept.
* ``jax_cpu_enable_async_dispatch = False``. The Gymnasium host runner makes one tiny XLA call per
  environment step; with asynchronous CPU dispatch each call is handed to XLA's worker threads,
  which on one core costs more than the call itself (HalfCheetah, one core: act call 64 -> 38 us,
  environment step 132 -> 115 us with synchronous dispatch). The JAX runner makes one long call
  and waits for it, so it does not care. ``BPO_CPU_ASYNC_DISPATCH=1`` keeps JAX's default.

One is applied by the ``bpo`` command (and by each sweep worker), not on import, so that a
library user's process keeps JAX's own cache settings:

* ``enable_compile_cache()``: compiled programs are kept on disk (``BPO_COMPILE_CACHE``, default
  ``~/.cache/bpo/xla``; empty turns it off), so a repeated run of the same configuration, with any
  seed (keys are arguments, not constants), skips XLA compilation.
"""

from __future__ import annotations

import os
from pathlib import Path

SCHEDULER_FLAG = "--xla_cpu_enable_concurrency_optimized_scheduler=false"


def apply_import_time_settings() -> None:
    """The XLA flag and the dispatch mode above; must run before JAX's CPU client exists."""
    if "xla_cpu_enable_concurrency_optimized_scheduler" not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + SCHEDULER_FLAG).strip()
    import jax  # only now: XLA_FLAGS must be in the environment before JAX is first imported

    if os.environ.get("BPO_CPU_ASYNC_DISPATCH", "0") != "1":
        jax.config.update("jax_cpu_enable_async_dispatch", False)


def enable_compile_cache() -> str | None:
    """Keep compiled programs on disk; returns the folder, or None when ``BPO_COMPILE_CACHE=''``."""
    folder = os.environ.get("BPO_COMPILE_CACHE", str(Path.home() / ".cache" / "bpo" / "xla"))
    if not folder:
        return None
    import jax  # see apply_import_time_settings: this module imports JAX only after setting XLA_FLAGS

    jax.config.update("jax_compilation_cache_dir", folder)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
    return folder
