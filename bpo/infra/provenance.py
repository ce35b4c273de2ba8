"""What made a result: the code version, the versions of the packages that decide the numbers,
and the device. Written into every run's ``summary.json`` so that a table can tell when it mixes
runs of different code or simulators (``bpo table`` and ``bpo plot`` warn)."""

from __future__ import annotations

import functools
import platform
import subprocess
from importlib import metadata
from pathlib import Path

import jax

PACKAGES = ("jax", "jaxlib", "flax", "optax", "mujoco", "mujoco-mjx", "gymnasium")
_SOURCE = Path(__file__).resolve().parents[2]  # the checkout: bpo/infra/provenance.py


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(_SOURCE), *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


@functools.cache
def code_version() -> str:
    """The git commit of the source tree, with ``-dirty`` when tracked files differ from it; the
    installed package's version (``bpo X.Y.Z``) when the code does not run from a git checkout."""
    top = _git("rev-parse", "--show-toplevel")
    commit = _git("rev-parse", "HEAD") if top is not None and Path(top).resolve() == _SOURCE else None
    if commit is None:  # not our checkout (a package installed into a venv inside another repository)
        try:
            return f"bpo {metadata.version('bpo')}"
        except metadata.PackageNotFoundError:
            return "unknown"
    dirty = _git("status", "--porcelain", "--untracked-files=no")
    return commit + ("-dirty" if dirty else "")


def package_versions() -> dict[str, str | None]:
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def provenance(backend: str) -> dict:
    """``backend``: how the run stepped its environments (``cpu``, ``gpu``, ``gymnasium-sync+cpu``);
    ``device``: the accelerator or CPU JAX computed on."""
    device = jax.devices()[0]
    return {
        "code_version": code_version(),
        "python": platform.python_version(),
        "packages": package_versions(),
        "backend": backend,
        "device": _cpu_model() if device.platform == "cpu" else f"{device.platform}: {device.device_kind}",
        "machine": platform.machine(),
    }
