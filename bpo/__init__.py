"""bpo: Behaviour Policy Optimization and the policy-gradient methods it builds on, in JAX.

Importing ``bpo`` applies two process-wide JAX/XLA settings that must precede JAX's CPU client
(``bpo.infra.runtime`` explains both; ``docs/runtime.md`` lists them for library users).
"""

from bpo.infra.runtime import apply_import_time_settings

apply_import_time_settings()

__version__ = "0.1.0"
