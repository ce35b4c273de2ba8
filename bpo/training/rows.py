"""Several configurations in one compiled program: rows that differ only in traced
hyperparameters (Table 1's per-decision BPO rows differ only in c_bar and rho_bar) are vmapped
together with their seeds, as rejax vmaps hyperparameters. On an accelerator a column of Table 1
then costs one program's wall time instead of one per row.

Each row keeps its own seeds (``seed_keys(cfg.seed, cfg.seeds)``, the keys it gets when run
alone) and its own hyperparameters, so its results equal the row run alone to float rounding
(vmapping more lanes changes XLA's fusion and reduction order, so not bitwise). A grouped run is
therefore opt-in, and its summary records the group.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from bpo.config.schema import ConfigError, OnPolicyTrainConfig, TrainConfig, to_dict, traced_fields, traced_hyperparams
from bpo.runners import onpolicy
from bpo.runners.jax_runner import JaxRunner
from bpo.runners.seeds import seed_keys
from bpo.training.driver import drive
from bpo.training.run_output import RunOutput, default_seed_chunk

# Config fields that may differ between rows of one program: the traced hyperparameters (their
# values enter the program as data), the base seed and the variant's label.
ROW_FIELDS = {OnPolicyTrainConfig: ("seed", "variant", *traced_fields(OnPolicyTrainConfig))}


def can_share(cfg: TrainConfig) -> bool:
    """Whether ``cfg`` can share a compiled program with other rows: an on-policy run whose
    environments step inside the program (JAX or MJX, or MuJoCo on threads called from it; not the
    Gymnasium host runner, whose loop is in Python)."""
    return type(cfg) in ROW_FIELDS and cfg.backend != "gymnasium"


def program_fields(cfg: TrainConfig) -> dict:
    """What must be equal for configs to share a program: the config without its row fields, flat."""
    fields = ROW_FIELDS.get(type(cfg))
    if fields is None:
        raise ConfigError("rows", f"only on-policy JAX runs can share a program, not {type(cfg).__name__}")
    return {k: v for k, v in _flatten(to_dict(cfg)).items() if k not in fields}


def program_key(cfg: TrainConfig) -> str:
    """A hashable form of ``program_fields``: configs with the same key can share a program."""
    return repr(sorted(program_fields(cfg).items()))


def _flatten(data: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in data.items():
        if isinstance(value, dict):
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[prefix + key] = value
    return out


def check_rows(cfgs: list[TrainConfig]) -> None:
    """Configs that cannot share one program raise a ``ConfigError`` naming the first difference."""
    if not cfgs:
        raise ConfigError("rows", "no configuration given")
    if any(isinstance(c, OnPolicyTrainConfig) and not can_share(c) for c in cfgs):
        raise ConfigError("rows", "Gymnasium runs step on the host and cannot share a compiled program; use "
                          "backend jax or mjx")
    first = program_fields(cfgs[0])
    for cfg in cfgs[1:]:
        other = program_fields(cfg)
        diff = sorted(k for k in first.keys() | other.keys() if first.get(k, KeyError) != other.get(k, KeyError))
        diff = [k for k in diff if k.rpartition(".")[0] not in diff]  # a section one run lacks: its name alone
        if diff:
            raise ConfigError("rows", f"configurations differ in {diff}, which are not traced; allowed to differ: "
                              f"{list(ROW_FIELDS[type(cfg)])}")


def group_config(cfgs: list[TrainConfig]) -> TrainConfig:
    """The config a group of rows trains and checkpoints as: the first row's with every row's seeds
    (a single config as it is)."""
    return cfgs[0] if len(cfgs) == 1 else dataclasses.replace(cfgs[0], seeds=sum(cfg.seeds for cfg in cfgs))


def run_rows(cfgs: list[TrainConfig], progress=None, seed_chunk: int | None = None,
             checkpoint_dir: Path | None = None, checkpoint_every: int = 0) -> list[RunOutput]:
    """Train validated configs that differ only in ``ROW_FIELDS`` as one program, all rows' seeds
    vmapped together; one ``RunOutput`` per config, in order (timings are the group's). With
    ``checkpoint_dir`` and ``checkpoint_every = N > 0`` the group is checkpointed and continued as
    one run is (``bpo.training.driver``); the folder must be the group's own (its rows and their
    order), since the checkpoint's config is the first row's with every row's seeds."""
    check_rows(cfgs)
    start = time.perf_counter()
    sizes = [cfg.seeds for cfg in cfgs]
    hps = [jax.tree.map(lambda x, n=n: jnp.broadcast_to(x, (n,)), traced_hyperparams(cfg))
           for cfg, n in zip(cfgs, sizes, strict=True)]
    hp = jax.tree.map(lambda *xs: jnp.concatenate(xs), *hps)
    keys = jnp.concatenate([seed_keys(cfg.seed, cfg.seeds) for cfg in cfgs])
    seed_chunk = default_seed_chunk() if seed_chunk is None else seed_chunk
    group = group_config(cfgs)
    runner = JaxRunner(group, onpolicy.make_program(group), hp, keys, seed_chunk, progress,
                       hp_per_seed=True)
    out = drive(runner, group, checkpoint_dir, checkpoint_every)
    wall = time.perf_counter() - start
    bounds = np.cumsum([0, *sizes])
    outputs = []
    for cfg, lo, hi in zip(cfgs, bounds[:-1], bounds[1:], strict=True):
        metrics = jax.tree.map(lambda x, lo=lo, hi=hi: x[lo:hi], out.metrics)
        outputs.append(RunOutput(config=cfg, metrics=metrics, compile_time_s=out.compile_time_s, wall_time_s=wall,
                                 run_time_s=out.run_time_s, seed_chunk=seed_chunk, backend=out.backend,
                                 group_size=len(cfgs), threads=out.threads, loop_clock_s=out.loop_clock_s))
    return outputs

