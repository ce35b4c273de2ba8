"""MuJoCo's warnings, minus the one that Gymnasium's own task files trigger.

Gymnasium's MuJoCo v5 XML files use ``settotalmass``, which MuJoCo 3.17 deprecates: compiling one
printed that warning (13 times in a 20k-step HalfCheetah run) and wrote ``MUJOCO_LOG.TXT`` into
the working directory. The files are Gymnasium's, so the warning is not the user's to act on.
``quiet_deprecations`` installs a handler (process-wide, once) that drops it and prints every other
MuJoCo warning to stderr, with no log file."""

from __future__ import annotations

import sys

import mujoco

KNOWN = ("compiler attribute 'settotalmass' is deprecated",)


def _warning(message: str) -> None:
    if not message.startswith(KNOWN):
        print(f"MuJoCo warning: {message}", file=sys.stderr, flush=True)


def quiet_deprecations() -> None:
    """Install the handler unless someone (this module, or the user) installed one."""
    if mujoco.get_mju_user_warning() is None:
        mujoco.set_mju_user_warning(_warning)
