"""Checkpoints of a run in progress: everything needed to continue it bit for bit.

A checkpoint is one file, ``DIR/checkpoint.msgpack``, written to a temporary name and renamed, so
a run killed at any moment leaves the previous checkpoint whole. It holds the run's state as a
pytree of arrays (every train state with its optimiser states, the observation normaliser, the
replay buffer, the RNG keys; for Gymnasium runs also the environments' simulator states), the
curve and training metrics so far, and how far the run got. ``DIR/checkpoint.json`` says the same
in words (config, progress) for people and for ``bpo train --resume``.

Serialisation is flax's msgpack of the state dict, restored against a template of the same
structure (the runner builds it), so a checkpoint never unpickles code. The file ends with the
SHA-256 of what precedes it (``TRAILER``), so that a file changed after it was written (a flipped
bit, an edit) is refused rather than half-used; files of older versions, without it, still load.
Loading also checks what the digest cannot vouch for in a file of an older version or of another
program: the progress (a count within the run's iterations, times that are numbers) and each
array's dtype and shape against the template, the run's state after the iterations done.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import numpy as np
from flax import serialization

from bpo.config.schema import MAX_CONFIG_NESTING, RESUMABLE_CHANGES, ConfigError, current_config, nesting, to_dict
from bpo.infra import results

STATE_FILE, INFO_FILE = "checkpoint.msgpack", "checkpoint.json"
TRAILER = b"bpo-sha256"  # then the SHA-256 digest of the bytes before it, at the file's end
_TAIL = len(TRAILER) + hashlib.sha256().digest_size


class CheckpointWriteError(OSError):
    """A checkpoint could not be written (disk full, permissions changed mid-run); the one before
    it, if any, is still in place."""


class UnreadableCheckpoint(ConfigError):
    """A checkpoint that cannot be used as it is (truncated, garbage, written by something else,
    missing what a checkpoint holds); the message names the file and what is wrong."""

    def __init__(self, path: Path, what: str):
        super().__init__("checkpoint", f"{str(path)!r} cannot be used ({what}); remove the checkpoint folder to "
                                       "start the run again")


def _read(path: Path, parse):
    """``parse(path)``, any failure an ``UnreadableCheckpoint`` naming ``path``."""
    try:
        return parse(path)
    except Exception as e:  # noqa: BLE001 -- whatever a damaged file makes a parser raise
        raise UnreadableCheckpoint(path, f"{type(e).__name__}: {e}") from e


class NonFiniteError(RuntimeError):
    """A loss or parameter became NaN or infinite; the message names it and the update."""


def save(directory: Path, state, extra: dict, info: dict, config) -> None:
    """``state``: a pytree restored later against a template of the same structure; ``extra``: a
    dict of arrays, lists and bytes restored as it is (curves so far, simulator snapshots).

    ``info`` (progress, settings) and the config go into the state file itself, so that one rename
    replaces the whole checkpoint: a process killed at any moment leaves an old or a new
    checkpoint, never new state with old progress. ``checkpoint.json`` repeats them for people
    and for tools that only need the config."""
    directory = Path(directory)
    info = {**info, "config": to_dict(config)}
    payload = {"state": serialization.to_state_dict(jax.tree.map(np.asarray, state)), "extra": extra,
               "info": json.dumps(info)}
    try:
        write_payload(directory, payload)
        results.atomic_write_json(directory / INFO_FILE, info)
    except OSError as e:
        raise CheckpointWriteError(f"writing the checkpoint in {str(directory)!r} failed ({e})") from e


def _info(raw: dict, directory: Path) -> dict:
    """The info saved inside the state file (older checkpoints kept it only in checkpoint.json),
    with the keys every checkpoint has."""
    path = Path(directory) / (STATE_FILE if "info" in raw else INFO_FILE)
    info = _read(path, lambda p: json.loads(raw["info"] if "info" in raw else p.read_text()))
    missing = [k for k in ("iterations_done", "config") if not isinstance(info, dict) or k not in info]
    if missing:
        raise UnreadableCheckpoint(path, f"its progress has no {', '.join(missing)}")
    if (depth := nesting(info)) > MAX_CONFIG_NESTING + 1:  # its config, one level down, is read recursively
        raise UnreadableCheckpoint(path, f"its settings nest {depth} levels deep; a checkpoint's nest at most "
                                         f"{MAX_CONFIG_NESTING + 1}")
    if why := _progress_problem(info):
        raise UnreadableCheckpoint(path, why)
    return info


def _progress_problem(info: dict) -> str | None:
    """What is wrong with a checkpoint's progress, if anything: the iterations done must be a count
    within the run's iterations (when recorded), the times numbers."""
    done, total, elapsed = info["iterations_done"], info.get("iterations"), info.get("elapsed")
    count = lambda x: isinstance(x, int) and not isinstance(x, bool) and x >= 0  # noqa: E731
    if not count(done) or (total is not None and (not count(total) or done > total)):
        return f"its progress, {done!r} of {total!r} iterations, is not a count of the run's iterations"
    if elapsed is not None and not (isinstance(elapsed, dict) and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in elapsed.values())):
        return f"its elapsed times, {elapsed!r}, are not a mapping of names to seconds"
    return None


def write_payload(directory: Path, payload: dict) -> None:
    """The state file of ``directory``: ``payload`` ({"state", "extra", "info"}) as msgpack, then
    ``TRAILER`` and the SHA-256 of the msgpack bytes; written atomically."""
    data = serialization.msgpack_serialize(payload)
    results.atomic_write_bytes(Path(directory) / STATE_FILE, data + TRAILER + hashlib.sha256(data).digest())


def read_payload(directory: Path) -> dict:
    """The payload of ``directory``'s state file (``write_payload``), its digest checked; an
    ``UnreadableCheckpoint`` for a file that is not one."""
    raw = _restore(Path(directory) / STATE_FILE)
    if not isinstance(raw, dict) or not {"state", "extra"} <= set(raw):
        raise UnreadableCheckpoint(Path(directory) / STATE_FILE, "not a bpo checkpoint: no state and extra in it")
    return raw


def _restore(path: Path):
    """The msgpack payload of the state file ``path``, its trailing digest checked (``TRAILER``)."""
    def parse(p: Path):
        data = memoryview(p.read_bytes())  # slices of it are views: a large checkpoint is not copied
        body, tail = data[:-_TAIL], bytes(data[-_TAIL:])
        mark, digest = tail[:len(TRAILER)], tail[len(TRAILER):]
        if mark == TRAILER:
            if hashlib.sha256(body).digest() != digest:
                raise ValueError("its SHA-256 does not match its contents: the file changed after it was written")
            data = body
        return serialization.msgpack_restore(data)
    return _read(path, parse)


def read_info(directory: Path) -> dict:
    """The progress and config saved with the checkpoint's state (``save``)."""
    raw = _restore(Path(directory) / STATE_FILE)
    return _info(raw if isinstance(raw, dict) else {}, directory)


def mismatch(directory: Path, config, seed_chunk: int | None = None) -> str | None:
    """Why the checkpoint in ``directory`` cannot continue a run of ``config`` (written by another
    configuration, or with another seed chunk, which is part of the compiled program); None if it can."""
    return info_mismatch(read_info(directory), config, seed_chunk)


def info_mismatch(info: dict, config, seed_chunk: int | None = None) -> str | None:
    """``mismatch`` for a checkpoint's info already read (``read_info``)."""
    try:  # read as today's layout (an older version's names: bpo.config.schema.from_dict)
        recorded = current_config(info["config"])
    except (TypeError, ValueError, AttributeError):
        recorded = None
    if recorded is None or _comparable(to_dict(recorded)) != _comparable(to_dict(config)):
        return "the checkpoint was written by a different configuration"
    if seed_chunk is not None and info.get("seed_chunk", seed_chunk) != seed_chunk:
        return f"the checkpoint was written with seed_chunk={info['seed_chunk']}, this run uses {seed_chunk}"
    return None


def _comparable(config: dict) -> dict:
    """A config as JSON holds it, without the fields a resumed run may change (``RESUMABLE_CHANGES``)."""
    return {k: v for k, v in json.loads(json.dumps(config)).items() if k not in RESUMABLE_CHANGES}


def exists(directory: Path | None) -> bool:
    """Whether ``directory`` holds a checkpoint: its state file, which holds the info too (``save``);
    ``checkpoint.json`` is only for people."""
    return directory is not None and (Path(directory) / STATE_FILE).exists()


def load(directory: Path, template_after: Callable[[int], Any], migrate=None):
    """(state, extra, info) of the checkpoint in ``directory``; the info is the one saved with the
    state (``save``), and the state is shaped like ``template_after(iterations_done)``, the run's
    state after the iterations the info says were done. ``migrate``: maps a state dict written by
    an older version to this one's names before it is matched with the template."""
    directory = Path(directory)
    raw = read_payload(directory)
    info = _info(raw, directory)
    template = template_after(info["iterations_done"])
    saved = raw["state"] if migrate is None else migrate(raw["state"])
    state = _read(directory / STATE_FILE, lambda _: serialization.from_state_dict(template, saved))
    if why := _layout_problem(state, template):
        raise UnreadableCheckpoint(directory / STATE_FILE, why)
    return state, raw["extra"], info


def _layout_problem(state, template) -> str | None:
    """The first array of ``state`` whose dtype or shape is not its template's, if any (the
    runner's template is the state after the iterations the checkpoint says were done, so outputs
    of fewer iterations, or arrays of another seed count, are refused rather than half-used)."""
    for (path, leaf), want in zip(jax.tree_util.tree_flatten_with_path(state)[0], jax.tree.leaves(template),
                                  strict=True):
        if hasattr(want, "shape") and hasattr(want, "dtype"):
            got = np.asarray(leaf)
            if got.shape != tuple(want.shape) or got.dtype != np.dtype(want.dtype):
                return (f"state{jax.tree_util.keystr(path)} is {got.dtype}{list(got.shape)}, the run's "
                        f"{np.dtype(want.dtype)}{list(want.shape)}")
    return None


def remove(directory: Path) -> None:
    """Delete the checkpoint, and its folder when nothing else is in it."""
    for name in (STATE_FILE, INFO_FILE):
        (Path(directory) / name).unlink(missing_ok=True)
    with contextlib.suppress(OSError):  # absent, or holding files of someone else's
        Path(directory).rmdir()


def first_non_finite(metrics: dict, offset: int = 0) -> tuple[str, int] | None:
    """(names, update index) of the earliest non-finite values among per-update metrics
    ``{name: [seeds, updates, ...]}``: the index counts from ``offset``; the names (losses first)
    are every metric non-finite at that index, comma-separated."""
    first: dict[str, int] = {}
    for name, values in metrics.items():
        v = np.asarray(values, dtype=float)
        if v.ndim < 2 or v.shape[1] == 0 or name == "train_return":  # train_return: NaN when no episode ended
            continue
        bad = ~np.isfinite(v.reshape(v.shape[0], v.shape[1], -1)).all(axis=(0, 2))
        if bad.any():
            first[name] = int(np.flatnonzero(bad)[0])
    if not first:
        return None
    index = min(first.values())
    names = sorted((n for n, i in first.items() if i == index), key=lambda n: (not n.endswith("loss"), n))
    more = f" (and {len(names) - 4} more)" if len(names) > 4 else ""
    return ", ".join(names[:4]) + more, index + offset


def non_finite_leaf(tree, prefix: str) -> str | None:
    """The path of the first non-finite array of ``tree`` (parameters), or None."""
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        if not np.all(np.isfinite(np.asarray(leaf))):
            return prefix + jax.tree_util.keystr(path)
    return None


def raise_if_non_finite(metrics: dict, offset: int, unit: str, directory=None, state=None,
                        state_at: int | None = None) -> None:
    """Stop a run whose per-``unit`` metrics (counted from ``offset``) or ``state`` became NaN/inf,
    naming the quantity and where, counted from 1 as stop messages count ("in update 1": the first;
    the state "after update 3"); ``directory`` holds the last good checkpoint, if any."""
    bad = first_non_finite(metrics, offset)
    if bad is not None:
        name, where = bad[0], f" in {unit} {bad[1] + 1}"
    else:
        name = non_finite_leaf(state, "state") if state is not None else None
        where = f" after {unit} {state_at}" if state_at is not None else ""
    if name is None:
        return
    kept = f"; the last good checkpoint is kept in {directory}" if directory is not None else ""
    raise NonFiniteError(f"{name} is not finite{where}{kept}")

