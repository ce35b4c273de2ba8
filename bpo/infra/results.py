"""Run directories (the results convention) with atomic writes, and reading them back.

A run directory holds ``config.json`` (the resolved config), ``curve.csv`` (``step, seed,
eval_return`` and extra columns; one row per evaluation per seed) and ``summary.json``.
Each file is written to a temporary name in the same directory and renamed, so a reader never
sees half a file; ``summary.json`` is written last and marks the run as complete. A whole run
directory is written into a staging folder and swapped into place by ``bpo.infra.publish``, so it is
never a mix of two runs.
"""

from __future__ import annotations

import contextlib
import contextvars
import csv
import io
import json
import math
import os
import resource
import tempfile
from collections.abc import Iterator
from pathlib import Path

from bpo.config.schema import ConfigError, to_dict


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())


_IN_PARTS = contextvars.ContextVar("oversize_in_parts", default=False)


@contextlib.contextmanager
def oversize_in_parts() -> Iterator[None]:
    """Inside: a file over this process's size limit (``ulimit -f``) is written as NAME.part000,
    NAME.part001, ... each under the limit (``cat NAME.part* > NAME`` joins them), not refused. For
    rescuing results (``bpo.infra.publish``), where a readable file in parts beats none."""
    token = _IN_PARTS.set(True)
    try:
        yield
    finally:
        _IN_PARTS.reset(token)


def file_size_limit() -> int | None:
    """This process's limit on the size of a file it writes (``ulimit -f``), or None."""
    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    return None if soft == resource.RLIM_INFINITY else int(soft)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to a temporary file of its own beside ``path``, sync it, and rename it into
    place: readers see the old file or the new one, and concurrent writers never share a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    limit = file_size_limit()
    if _IN_PARTS.get() and limit is not None and len(data) > limit:
        for i, start in enumerate(range(0, len(data), limit)):
            _write_one(path.with_name(f"{path.name}.part{i:03d}"), data[start:start + limit])
        return
    _write_one(path, data)


def _write_one(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600 files; results are meant to be shared
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def ensure_writable_dir(path: Path, field: str = "--out") -> Path:
    """Create ``path`` (with its parents) and prove a file can be written in it, before any work
    that would be lost if it could not; otherwise a ``ConfigError`` naming ``field``."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path, prefix=".bpo-write-check-"):
            pass
    except OSError as e:
        raise ConfigError(field, f"cannot write to {str(path)!r} ({e.strerror or e}); allowed: a folder this user "
                          "can create and write") from None
    return path


@contextlib.contextmanager
def left_as_found(path: Path) -> Iterator[None]:
    """Within the block, the folders of ``path`` that did not exist before it (``ensure_writable_dir``
    makes them) are removed again if the block raises and leaves them empty: a command refused
    after making its output folder leaves nothing behind."""
    path = Path(path).absolute()
    created = [p for p in (path, *path.parents) if not p.exists()]
    try:
        yield
    except BaseException:
        for folder in created:  # deepest first
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise


def json_number(x: float | None) -> float | None:
    """A number as strict JSON holds it: None (null) for NaN or an infinity, which JSON lacks (an
    undefined statistic: the SD of one seed)."""
    return x if x is None or math.isfinite(x) else None


def atomic_write_json(path: Path, obj, keep_if_same: bool = False) -> None:
    """``obj`` as indented JSON at ``path``; with ``keep_if_same`` a file that already holds exactly
    that is left untouched (a derived file rebuilt by a command that only reads the folder)."""
    text = json.dumps(obj, indent=2, allow_nan=True) + "\n"
    if keep_if_same:
        with contextlib.suppress(OSError, UnicodeDecodeError):
            if Path(path).read_text() == text:
                return
    atomic_write_text(path, text)


def atomic_write_csv(path: Path, rows: list[dict]) -> None:
    buf = io.StringIO()
    fields = list(rows[0]) if rows else ["step", "seed", "eval_return"]
    writer = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    atomic_write_text(path, buf.getvalue())


def write_run_dir(run_dir: Path, config, curve: list[dict], summary: dict, train_metrics: list[dict] | None = None):
    run_dir = Path(run_dir)
    atomic_write_json(run_dir / "config.json", to_dict(config))
    atomic_write_csv(run_dir / "curve.csv", curve)
    if train_metrics is not None:
        atomic_write_csv(run_dir / "train_metrics.csv", train_metrics)
    atomic_write_json(run_dir / "summary.json", summary)


def read_summary(run_dir: Path) -> dict:
    return json.loads((Path(run_dir) / "summary.json").read_text())


def read_curve(run_dir: Path) -> list[dict]:
    with open(Path(run_dir) / "curve.csv") as f:
        return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(f)]
