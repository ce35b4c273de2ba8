"""Modules of one's own that every ``bpo`` command imports first: ``BPO_PLUGINS``, a comma-separated
list of importable module names (``my_methods``, ``lab.pg.vpg``) or paths of Python files
(``/home/me/vpg.py``). A plug-in registers what it adds when it is imported: a method
(``bpo.agents.methods.register_method``), its presets (``bpo.config.presets.register_preset``). Sweep
workers and Slurm jobs inherit the variable, so a sweep of a plug-in's method runs as any other
(``docs/methods.md``).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import sys
from pathlib import Path

from bpo.config.schema import ConfigError

PLUGINS_ENV = "BPO_PLUGINS"
_MODULE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


def plugin_entries(environ=os.environ) -> list[str]:
    """The entries of ``BPO_PLUGINS``, each checked for form (a module name or a ``.py`` file)."""
    raw = environ.get(PLUGINS_ENV, "")
    entries = [e.strip() for e in raw.split(",") if e.strip()]
    for entry in entries:
        if not (entry.endswith(".py") or _MODULE_NAME.match(entry)):
            raise ConfigError(PLUGINS_ENV, f"{entry!r} is neither a module name (my_methods, lab.vpg) nor a "
                                           "path ending in .py; entries are separated by commas")
    return entries


def _loaded_from(path: Path) -> bool:
    """Whether a module already imported (by pytest, or by an earlier call) came from ``path``."""
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if file and Path(file).resolve() == path:
            return True
    return False


def _load_file(path: Path) -> None:
    if not path.is_file():
        raise ConfigError(PLUGINS_ENV, f"{str(path)!r} is not a file")
    if _loaded_from(path):
        return
    name = f"bpo_plugin_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise


def load_plugins(environ=os.environ) -> list[str]:
    """Import every module ``BPO_PLUGINS`` names (each once per process); return the entries. A
    plug-in that cannot be imported is a ``ConfigError`` naming the variable, with the cause."""
    entries = plugin_entries(environ)
    for entry in entries:
        try:
            if entry.endswith(".py"):
                _load_file(Path(entry).expanduser().resolve())
            else:
                importlib.import_module(entry)
        except ConfigError as e:
            if e.field_name == PLUGINS_ENV:
                raise
            raise ConfigError(PLUGINS_ENV, f"{entry!r} was refused when imported: {e}") from e
        except Exception as e:  # the plug-in's own error: name it, with what it said
            raise ConfigError(PLUGINS_ENV, f"{entry!r} could not be imported: {type(e).__name__}: {e}") from e
    return entries
