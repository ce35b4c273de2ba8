"""Process-wide settings of bpo, in one place, with their reasons.

Two are applied when ``bpo`` is imported, because XLA reads them when its CPU client starts and
the client starts at the first JAX computation:

* ``XLA_FLAGS`` gets three CPU flags (``CPU_FLAGS``; a user's own setting of any of them is kept):

  - ``--xla_cpu_enable_concurrency_optimized_scheduler=false``. XLA's CPU runtime can deadlock on
    our vmapped runs (a while-loop evaluation inside a cond inside the update scan, several
    seeds): with the concurrency-optimised thunk scheduler a 2-seed Acrobot run never finishes,
    idle, in ``block_until_ready``. Disabling the scheduler avoids it and costs nothing measurable.
  - ``--xla_cpu_multi_thread_eigen=false``. Our matrices are small (64-256 units, minibatches of
    128-256): splitting one of them over Eigen's thread pool costs more than it saves, and a
    weight-gradient product x^T dy ran 4x slower inside the BPO update than alone. Off, the
    HalfCheetah BPO update takes about 15 % less time (``benchmarks/flop_efficiency.py``). Runs use
    the cores by running seeds side by side instead (``bpo.runners.jax_runner``).
  - ``--xla_cpu_experimental_ynn_fusion_type=individual_dot``. By default XLA hands whole fusions
    of matrix products, elementwise work and reductions to YNNPACK; on our vmapped seed chunks its
    reductions (layer norm, the FQE losses) ran at a fraction of XLA's own speed. Matrix products
    alone go to YNNPACK: Figure 2's behaviour step takes about 30 % less time.
* ``jax_cpu_enable_async_dispatch = False``. The Gymnasium host runner makes one tiny XLA call per
  environment step; with asynchronous CPU dispatch each call is handed to XLA's worker threads,
  which on one core costs more than the call itself (HalfCheetah, one core: act call 64 -> 38 us,
  environment step 132 -> 115 us with synchronous dispatch). The JAX runner makes one long call
  and waits for it, so it does not care. ``BPO_CPU_ASYNC_DISPATCH=1`` keeps JAX's default.

Two are applied by the ``bpo`` command (and by each sweep worker), not on import, so that a
library user's process keeps JAX's own cache settings and its own crash handling:

* ``enable_compile_cache()``: compiled programs are kept on disk (``BPO_COMPILE_CACHE``, default
  ``~/.cache/bpo/xla``; empty turns it off), so a repeated run of the same configuration, with any
  seed (keys are arguments, not constants), skips XLA compilation.
* ``report_crashes()``: a process that dies of a fatal signal (SIGSEGV, SIGABRT from a corrupted
  heap, SIGBUS, SIGILL, SIGFPE) prints the Python stack of every thread first (``faulthandler``).
  Such a crash happens in native code (XLA, MuJoCo, NumPy), where Python has no traceback; without
  this it leaves one line of glibc's, as a CI run once did, and nothing says what was running.
"""

from __future__ import annotations

import faulthandler
import os
import tempfile
from pathlib import Path

CPU_FLAGS = {
    "xla_cpu_enable_concurrency_optimized_scheduler": "false",
    "xla_cpu_multi_thread_eigen": "false",
    "xla_cpu_experimental_ynn_fusion_type": "individual_dot",
}


def apply_import_time_settings() -> None:
    """The XLA flags and the dispatch mode above; must run before JAX's CPU client exists."""
    flags = os.environ.get("XLA_FLAGS", "")
    added = [f"--{name}={value}" for name, value in CPU_FLAGS.items() if name not in flags]
    os.environ["XLA_FLAGS"] = " ".join([flags, *added]).strip()
    import jax  # only now: XLA_FLAGS must be in the environment before JAX is first imported

    if os.environ.get("BPO_CPU_ASYNC_DISPATCH", "0") != "1":  # a bad value: refused by async_dispatch()
        jax.config.update("jax_cpu_enable_async_dispatch", False)


def async_dispatch() -> bool:
    """``BPO_CPU_ASYNC_DISPATCH`` (unset: 0), checked: '1' keeps JAX's asynchronous CPU dispatch.
    Read at import, before any command can check it; ``bpo.infra.settings`` refuses another value
    ('true', 'yes' silently meant off)."""
    value = os.environ.get("BPO_CPU_ASYNC_DISPATCH", "0")
    if value not in ("0", "1"):
        raise ValueError(f"BPO_CPU_ASYNC_DISPATCH: must be 0 or 1, got {value!r}")
    return value == "1"


def enable_compile_cache() -> str | None:
    """Keep compiled programs on disk; returns the folder, or None when ``BPO_COMPILE_CACHE=''``."""
    folder = os.environ.get("BPO_COMPILE_CACHE", str(Path.home() / ".cache" / "bpo" / "xla"))
    if not folder:
        return None
    import jax  # see apply_import_time_settings: this module imports JAX only after setting XLA_FLAGS

    jax.config.update("jax_compilation_cache_dir", folder)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
    _atomic_cache_writes()
    return folder


def _atomic_cache_writes() -> None:
    """JAX writes a persistent-cache entry in place (``LRUCache.put``: ``path.write_bytes``), so a
    process killed while writing one (a SIGKILLed run, a preempted job) leaves a truncated entry,
    and the next process to read it crashes deserialising it: a segmentation fault in
    ``compilation_cache.get_executable_and_time``, seen in this project's test suite after its
    SIGKILL tests. Entries are written to a temporary name in the same folder and renamed into
    place, which is atomic. JAX's own path is kept where it evicts (a size limit set) or where its
    cache class is not the one this was written against."""
    from jax._src import lru_cache

    original = getattr(getattr(lru_cache, "LRUCache", None), "put", None)
    suffix = getattr(lru_cache, "_CACHE_SUFFIX", None)
    if original is None or suffix is None or getattr(original, "atomic", False):
        return

    def put(self, key: str, value: bytes) -> None:
        if not key or getattr(self, "eviction_enabled", True):
            return original(self, key, value)
        path = self.path / f"{key}{suffix}"
        if path.exists():
            return None
        # A name of its own per call, not per process: two threads compiling the same program
        # would otherwise write into one file, and the first rename publishes it half written.
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(value)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return None

    put.atomic = True
    lru_cache.LRUCache.put = put


def report_crashes() -> None:
    """Print every thread's Python stack to stderr when a fatal signal ends the process (module
    docstring); a no-op where faulthandler is already on (``python -X faulthandler``, pytest)."""
    if not faulthandler.is_enabled():
        faulthandler.enable(all_threads=True)


MAX_THREADS = 1024
"""More threads than any machine this runs on has cores: a larger BPO_THREADS is a typo."""


def cpu_threads() -> int:
    """Threads a CPU run may use to train its seeds side by side: ``BPO_THREADS`` if set, else the
    cores this process may run on. Results do not depend on it (``bpo.runners.jax_runner``)."""
    value = os.environ.get("BPO_THREADS", "")
    if value:
        # ASCII digits only: '²'.isdigit() is true and int('²') fails
        if not (value.isascii() and value.isdigit()) or not 1 <= int(value) <= MAX_THREADS:
            raise ValueError(f"BPO_THREADS: must be an integer from 1 to {MAX_THREADS}, got {value!r}")
        return int(value)
    return len(os.sched_getaffinity(0))
