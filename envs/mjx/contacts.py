"""MuJoCo's plane-capsule contact frames in MJX.

Both engines put two contacts on a capsule touching a plane, one per end cap, and align the first
tangent of each contact frame with the capsule's axis. They differ in when they give up on the
axis: MuJoCo (``mju_makeFrame``) projects the axis onto the plane and uses it whenever the
*unprojected* axis is non-degenerate, which a unit axis always is; MJX 3.x falls back to a fixed
world direction once the *projected* axis is shorter than 0.5, that is whenever the capsule is
within 30 degrees of the plane's normal. With pyramidal friction cones (Gymnasium's default) the
tangent frame orients the pyramid, so the two engines then apply different friction forces. Ant's
lower legs stand that steeply most of the time: without this collider an MJX Ant leaves
Gymnasium's trajectory at its first ground contact (``tests/test_mjx_envs.py``).

``mujoco_contact_frames()`` swaps MJX's plane-capsule collider for one that follows MuJoCo while
a physics step is traced. The swap is scoped to the trace, so other MJX users in the process are
unaffected, and compiled programs keep what was traced.
"""

from __future__ import annotations

import contextlib

import jax.numpy as jnp
from mujoco.mjx._src import collision_driver
from mujoco.mjx._src.collision_primitive import collider
from mujoco.mjx._src.types import GeomType

_KEY = (GeomType.PLANE, GeomType.CAPSULE)


def contact_frame(normal: jnp.ndarray, tangent: jnp.ndarray) -> jnp.ndarray:
    """MuJoCo's ``mju_makeFrame``: rows (normal, first tangent, second tangent). A proposed tangent
    shorter than 0.5 is replaced by world y, or world z when the normal is close to y."""
    normal = normal / jnp.linalg.norm(normal)
    fallback = jnp.where(jnp.abs(normal[1]) < 0.5, jnp.array([0.0, 1.0, 0.0]), jnp.array([0.0, 0.0, 1.0]))
    tangent = jnp.where(jnp.dot(tangent, tangent) < 0.25, fallback.astype(normal.dtype), tangent)
    tangent = tangent - normal * jnp.dot(normal, tangent)
    tangent = tangent / jnp.linalg.norm(tangent)
    return jnp.stack([normal, tangent, jnp.cross(normal, tangent)])


@collider(ncon=2)
def plane_capsule(plane, capsule):
    """Two contacts, one per end of the capsule's segment, framed as MuJoCo's ``mjc_PlaneCapsule``."""
    normal, axis = plane.mat[:, 2], capsule.mat[:, 2]
    radius, half_length = capsule.size[0], capsule.size[1]
    frame = contact_frame(normal, axis)
    dists, positions = [], []
    for sign in (1.0, -1.0):
        centre = capsule.pos + sign * half_length * axis
        dist = jnp.dot(centre - plane.pos, normal) - radius
        dists.append(dist)
        positions.append(centre - normal * (radius + 0.5 * dist))
    return jnp.stack(dists), jnp.stack(positions), jnp.stack([frame, frame])


@contextlib.contextmanager
def mujoco_contact_frames():
    """Trace MJX physics with MuJoCo's plane-capsule contact frames (see the module docstring)."""
    table = collision_driver._COLLISION_FUNC
    original = table[_KEY]
    table[_KEY] = plane_capsule
    try:
        yield
    finally:
        table[_KEY] = original


__all__ = ["contact_frame", "mujoco_contact_frames", "plane_capsule"]
