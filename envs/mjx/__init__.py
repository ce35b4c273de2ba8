"""MJX ports of Gymnasium's MuJoCo v5 locomotion tasks (Ant, HalfCheetah, Hopper, Walker2d), as
functional environments for the jitted runner (``--backend mjx``). See ``envs.mjx.base`` for the
step they share and ``tests/test_mjx_envs.py`` for the parity checks against Gymnasium."""

import contextlib
import io

with contextlib.redirect_stdout(io.StringIO()):  # MJX prints that its optional Warp backend is absent
    from mujoco import mjx  # noqa: F401

from envs.mjx.ant import Ant  # noqa: E402
from envs.mjx.half_cheetah import HalfCheetah  # noqa: E402
from envs.mjx.hopper import Hopper  # noqa: E402
from envs.mjx.walker2d import Walker2d  # noqa: E402

MJX_ENVS = {cls.env_id: cls for cls in (Ant, HalfCheetah, Hopper, Walker2d)}


def make_mjx_env(env_id: str, iterations: int = 0, ls_iterations: int = 0):
    """The MJX port of ``env_id`` with the solver's (line-search) iterations, 0 for the XML's;
    raises ValueError naming the ported ids."""
    if env_id not in MJX_ENVS:
        raise ValueError(f"env: no MJX port of {env_id!r}; allowed: {sorted(MJX_ENVS)}")
    return MJX_ENVS[env_id](iterations, ls_iterations)


__all__ = ["MJX_ENVS", "Ant", "HalfCheetah", "Hopper", "Walker2d", "make_mjx_env"]
