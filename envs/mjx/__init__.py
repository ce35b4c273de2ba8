"""MJX ports of Gymnasium's MuJoCo v5 locomotion tasks (Ant, HalfCheetah, Hopper, Walker2d), as
functional environments for the jitted runner (``--backend mjx``). The tasks themselves are
defined once in ``envs.locomotion``; see ``envs.mjx.base`` for the step they share on MJX and
``tests/test_mjx_envs.py`` for the parity checks against Gymnasium."""

import contextlib
import io

with contextlib.redirect_stdout(io.StringIO()):  # MJX prints that its optional Warp backend is absent
    from mujoco import mjx  # noqa: F401

from envs.locomotion import get_task  # noqa: E402
from envs.mjx.base import MjxEnv  # noqa: E402


def make_mjx_env(env_id: str, iterations: int = 0, ls_iterations: int = 0) -> MjxEnv:
    """The MJX port of ``env_id`` with the solver's (line-search) iterations, 0 for the XML's;
    raises ValueError naming the ported ids."""
    return MjxEnv(get_task(env_id, "MJX"), iterations, ls_iterations)


__all__ = ["MjxEnv", "make_mjx_env"]
