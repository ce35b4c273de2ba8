"""What a run will hold in memory, known before it compiles, and what the machine can give.

A JAX run keeps every loop iteration's outputs (evaluations, training metrics) on the host until
it ends, then joins them (a second copy) into its results; its state (parameters, optimiser,
replay, environments) lives beside them. Their shapes are known once the iteration is traced
(``jax.jit(...).trace``), before it is lowered and XLA compiles it, so a run that cannot fit is
refused with the figure instead of ending in XLA's ``RESOURCE_EXHAUSTED`` or the kernel's OOM
killer after minutes of compiling and training.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import jax
import numpy as np

from bpo.config.schema import ConfigError


def nbytes(tree) -> int:
    """Bytes of the arrays (or ``jax.ShapeDtypeStruct``) of a pytree."""
    return sum(math.prod(x.shape) * np.dtype(x.dtype).itemsize for x in jax.tree.leaves(tree))


def _meminfo_available(text: str) -> int | None:
    for line in text.splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return None


def _cgroup_limit() -> int | None:
    """The memory limit of this process's cgroup (v2 ``memory.max``, v1 ``limit_in_bytes``), if any."""
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            value = Path(path).read_text().strip()
        except OSError:
            continue
        if value.isdigit() and int(value) < 1 << 60:  # v1 writes a huge number for "no limit"
            return int(value)
    return None


def available_bytes() -> int | None:
    """Memory this process can still take: the kernel's ``MemAvailable``, or the cgroup's limit
    when that is lower; None where neither can be read (not Linux)."""
    try:
        available = _meminfo_available(Path("/proc/meminfo").read_text())
    except OSError:
        available = None
    limit = _cgroup_limit()
    known = [v for v in (available, limit) if v is not None]
    return min(known) if known else None


def gib(n: float) -> str:
    return f"{n / 2**30:,.1f} GiB" if n >= 2**30 else f"{n / 2**20:,.1f} MiB"


SIZE_FIELDS = ("replay_size", "n_steps", "n_envs", "pi_hidden", "vf_hidden", "q_hidden", "mu_hidden")
"""The fields (by their last name) that make one seed's state large, the largest usually first:
the replay buffer, the rollout, the networks."""


def size_fields(cfg) -> list[tuple[str, object]]:
    """[(dotted name, value)] of ``cfg``'s fields that set the size of one seed's state
    (``SIZE_FIELDS``), in the sections the run has, in that order."""
    found = []
    for section in (f for f in dataclasses.fields(cfg) if dataclasses.is_dataclass(getattr(cfg, f.name))):
        found += [(f"{section.name}.{f.name}", getattr(getattr(cfg, section.name), f.name))
                  for f in dataclasses.fields(getattr(cfg, section.name)) if f.name in SIZE_FIELDS]
    return sorted(found, key=lambda nv: SIZE_FIELDS.index(nv[0].rpartition(".")[2]))


def check_run_fits(cfg, state_bytes: int, per_iteration_bytes: int, n_iterations: int,
                   available: int | None = None) -> int:
    """Refuse a run whose state and kept outputs (every iteration's, twice while they are joined
    at the end) exceed the memory available, with the figures and the field to change: ``seeds``
    when one seed would fit, else the run's budget, or, when one seed's state alone does not fit,
    the network widths and buffer sizes that make it. Returns the estimate in bytes."""
    need = state_bytes + 2 * n_iterations * per_iteration_bytes
    available = available_bytes() if available is None else available
    if available is None or need <= available:
        return need
    budget = "episodes" if hasattr(cfg, "episodes") else "total_timesteps"
    field = "seeds" if need / cfg.seeds <= available else budget
    allowed = f"fewer seeds or a smaller budget ({budget})"
    if state_bytes / cfg.seeds > available:  # neither fewer seeds nor a shorter run helps
        sizes = size_fields(cfg)
        field = sizes[0][0]
        allowed = "smaller networks or buffers: " + ", ".join(f"{name} {value}" for name, value in sizes)
    seeds = f"{cfg.seeds:,} seed{'s' if cfg.seeds != 1 else ''}"
    raise ConfigError(field, f"the run needs about {gib(need)} of memory ({seeds}: state "
                             f"{gib(state_bytes)}, outputs {gib(per_iteration_bytes)} per loop iteration x "
                             f"{n_iterations:,} iterations, kept for the results and copied once when they are "
                             f"joined) and this machine has {gib(available)} available; allowed: {allowed}")
