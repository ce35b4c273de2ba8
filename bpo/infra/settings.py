"""The ``BPO_*`` environment settings of a run, checked together before any work.

Each is read by the module that uses it (``bpo.infra.runtime``, ``bpo.infra.stall``,
``bpo.infra.publish``); this module asks each of them, so that every command refuses a bad value
up front with the variable named (docs/runs.md).
"""

from __future__ import annotations

from bpo.config.schema import ConfigError
from bpo.infra import publish
from bpo.infra.progress import log_every_s
from bpo.infra.runtime import async_dispatch, cpu_threads
from bpo.infra.stall import stall_minutes


def validate_environment() -> None:
    """The ``BPO_*`` environment variables a run reads only later (``BPO_THREADS``,
    ``BPO_STALL_MINUTES``, ``BPO_WRITE_RETRIES``, ``BPO_WRITE_RETRY_S``, ``BPO_LOG_EVERY_S``) or reads
    at import without a word (``BPO_CPU_ASYNC_DISPATCH``), checked before any work:
    a bad one is a ``ConfigError`` naming it, not a traceback an hour in."""
    for check in (cpu_threads, stall_minutes, publish.check_environment, log_every_s, async_dispatch):
        try:
            check()
        except ConfigError:
            raise
        except ValueError as e:  # "NAME: what is wrong" from modules that cannot import bpo.config.schema
            name, _, what = str(e).partition(": ")
            raise ConfigError(name, what) from None
