"""The registry of policy-gradient methods (``cfg.method``), and the validation of a run's config:
its fields (``bpo.config.validation``), then its method's own settings.

PPO and A2C are built in. A method of one's own is one module that defines a
``bpo.agents.target.TargetUpdate`` and calls ``register_method`` (with, usually, a preset:
``bpo.config.presets.register_preset``); ``bpo`` commands import it when it is named in ``BPO_PLUGINS``
(``docs/methods.md``). It then runs alone (no ``bpo`` section) and with BPO (a ``bpo`` section)
on every backend, in sweeps, tables and plots, like the built-in ones.
"""

from __future__ import annotations

from bpo.agents.a2c import A2C
from bpo.agents.ppo import PPO
from bpo.agents.target import TargetUpdate
from bpo.config.schema import ConfigError, OnPolicyTrainConfig
from bpo.config.validation import check_fields

_METHODS: dict[str, TargetUpdate] = {m.name: m for m in (PPO(), A2C())}
BUILT_IN = frozenset(_METHODS)
"""The methods every process has without a plug-in (``BPO_PLUGINS``)."""
RESERVED = ("bpo", "reinforce")
"""Names that mean something else in run ids and table rows (BPO on a method; the episodic
algorithm)."""


def register_method(method: TargetUpdate) -> TargetUpdate:
    """Make ``method`` runnable as ``method = method.name``. A method of the same class (the same
    name in the same source file: a plug-in imported twice, say by ``BPO_PLUGINS`` and by a sweep
    file) registers again in place; another method under a taken name is refused. Returns ``method``."""
    name = getattr(method, "name", None)
    if not isinstance(name, str) or not name.isidentifier() or name in RESERVED:
        raise ConfigError("method", f"a method's name must be an identifier other than {list(RESERVED)}, got {name!r}")
    missing = [m for m in ("label", "validate", "init", "behaviour_batch", "update") if not hasattr(method, m)]
    if missing:
        raise ConfigError("method", f"{name!r} lacks {missing} of bpo.agents.target.TargetUpdate")
    known = _METHODS.get(name)
    if known is not None and _origin(known) != _origin(method):
        owner, source = _origin(known)
        raise ConfigError("method", f"{name!r} is already registered by {owner} of {source}")
    _METHODS[name] = method
    return method


def _origin(method) -> tuple[str, str | None]:
    """(class name, source file) of a method object: the file read from its ``update``'s code, which
    a module loaded from a path without a ``sys.modules`` entry (a sweep file) has too."""
    cls = type(method)
    code = getattr(getattr(cls, "update", None), "__code__", None)
    return cls.__qualname__, code.co_filename if code is not None else None


def method_names() -> list[str]:
    return sorted(_METHODS)


def get_method(name: str) -> TargetUpdate:
    """The registered method ``name``; a ``ConfigError`` naming ``method`` otherwise."""
    if name not in _METHODS:
        raise ConfigError("method", f"must be one of {method_names()} (a method of one's own is registered by a "
                                    f"module named in BPO_PLUGINS: docs/methods.md), got {name!r}")
    return _METHODS[name]


def validate(cfg):
    """Check every field and cross-field constraint of a run's config, then, for an on-policy
    config, the settings of its method; raise ``ConfigError`` before anything compiles. Returns
    ``cfg``."""
    on_policy = isinstance(cfg, OnPolicyTrainConfig)
    if on_policy and isinstance(cfg.method, str):
        get_method(cfg.method)  # an unknown method first: the other checks may depend on it
    cfg = check_fields(cfg)
    if on_policy:
        get_method(cfg.method).validate(cfg)
    return cfg
