"""Getting finished results onto disk whole, or somewhere the user is told about: the one mechanism
of ``bpo train``, the sweeps and ``bpo verify-variance``.

* **Whole or not at all.** A run directory is written into a staging folder and swapped into place
  (``replace_dir``): a rewrite that fails half-way leaves the old run as it was, and a reader never
  sees new files beside an old ``summary.json``.
* **Kept when the disk fails** (``save_or_rescue``). The results live in memory until they are
  written. A write that failed for want of space is retried (``BPO_WRITE_RETRIES`` more times,
  ``BPO_WRITE_RETRY_S`` seconds apart: the disk may be freed meanwhile); then they are written to a rescue folder,
  preferring other file systems than the run's (``BPO_RESCUE_DIR``, ``~/bpo-rescued``, the system's
  temporary folder, ``/dev/shm``, which is memory); a file over the process's file-size limit is
  written there in parts under the limit (``cat NAME.part* > NAME``). As a last resort the summary
  is printed. The message names where the results are.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import hashlib
import os
import re
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from bpo.config.schema import ConfigError
from bpo.infra import results

T = TypeVar("T")
RUN_FILES = ("config.json", "curve.csv", "train_metrics.csv", "summary.json", "spec.json", "policies.msgpack",
             "evaluations")
"""A run's own files: replaced together. Anything else in a run directory (``tb/``, ``checkpoint/``,
the user's files) is kept by ``publish_run_dir``, except what was derived from the run it replaces
(``derived_from_the_run``)."""
DERIVED_MARKERS = ("probe.json",)
"""Files that mark a folder as derived from a run's policies (``bpo probe`` writes ``RUN/NAME/probe.json``)."""


def derived_from_the_run(entry: Path) -> bool:
    """Whether ``entry`` of a run directory was made from that run (a probe of its policies): it
    goes with the run when the run is replaced, since it describes policies that are gone."""
    return entry.is_dir() and any((entry / marker).is_file() for marker in DERIVED_MARKERS)
RESCUE_ENV = "BPO_RESCUE_DIR"
PASSING = (errno.ENOSPC, errno.EDQUOT)
"""Write errors that may pass if the write is retried later (space freed meanwhile)."""


def _tag() -> str:
    return f"{socket.gethostname()}.{os.getpid()}"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)  # the renames themselves survive a crash
    finally:
        os.close(fd)


def replace_dir(staging: Path, final: Path, trash: Path, keep_others: bool = False) -> None:
    """Put the complete folder ``staging`` at ``final``. With ``keep_others`` what an existing
    ``final`` holds besides the run's own files (``RUN_FILES``) and what was derived from them
    (``derived_from_the_run``) is first linked into the new folder (hard links, else copies), so
    that it is in both until the swap. The swap exchanges the two folders in one step
    (``_exchange``), so that ``final`` is the old folder or the new one whenever a process is
    killed, never absent; where the system cannot (not Linux, or a file system without it) the
    old folder is renamed to ``trash`` first and, between the two renames, ``final`` is absent,
    never half-written; a failed second rename puts the old folder back."""
    staging, final, trash = Path(staging), Path(final), Path(trash)
    if final.exists() and not final.is_dir():  # not ours to replace (a user's file where the folder was)
        raise NotADirectoryError(errno.ENOTDIR, "not a folder", str(final))
    if not final.exists():
        os.replace(staging, final)
        _fsync_dir(final.parent)
        return
    if keep_others:
        for entry in sorted(final.iterdir()):
            if entry.name not in RUN_FILES and not derived_from_the_run(entry) and not (staging / entry.name).exists():
                _link_copy(entry, staging / entry.name)
    if _exchange(staging, final):
        old = staging  # the old folder, now where the new one was
    else:
        shutil.rmtree(trash, ignore_errors=True)
        os.replace(final, trash)
        try:
            os.replace(staging, final)
        except BaseException:
            os.replace(trash, final)
            raise
        old = trash
    _fsync_dir(final.parent)
    shutil.rmtree(old, ignore_errors=True)


def _link_copy(source: Path, target: Path) -> None:
    """``source`` (a file, a link or a folder) at ``target`` too: hard links where the file system
    allows them (no data copied), else copies."""
    def link(a, b):
        try:
            os.link(a, b)
        except OSError:
            shutil.copy2(a, b)
    if source.is_symlink():
        os.symlink(os.readlink(source), target)
    elif source.is_dir():
        shutil.copytree(source, target, symlinks=True, copy_function=link)
    else:
        link(source, target)


RENAME_EXCHANGE, AT_FDCWD = 2, -100
"""Linux's ``renameat2`` flag that swaps two paths in one step, and its "relative to the working
directory" descriptor."""


def _exchange(a: Path, b: Path) -> bool:
    """Swap the folders ``a`` and ``b`` in one step (Linux ``renameat2(RENAME_EXCHANGE)``); False,
    having changed nothing, where the call fails."""
    function = getattr(_libc(), "renameat2", None)
    if function is None:
        return False
    # Any failure (a file system or kernel without it, a sandbox that blocks the call, another
    # device): the two renames then do it or report the real error themselves.
    return function(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE) == 0


@functools.cache
def _libc():
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:  # no C library to load here (an unusual platform): the two renames
        return None


def name_max(folder: Path) -> int:
    """The longest file name (in bytes) the file system of ``folder`` (or its nearest existing
    ancestor) holds; 255 where it does not say."""
    for p in (Path(folder).absolute(), *Path(folder).absolute().parents):
        with contextlib.suppress(OSError, ValueError):
            return os.pathconf(p, "PC_NAME_MAX")
    return 255


def fitted_name(head: str, name: str, tail: str, limit: int) -> str:
    """``head + name + tail``, with ``name`` shortened to fit ``limit`` bytes when it must: its
    start, then ``~`` and 8 hex digits of its hash, so that different long names stay different."""
    whole = head + name + tail
    if len(whole.encode()) <= limit:
        return whole
    digest = "~" + hashlib.sha256(name.encode()).hexdigest()[:8]
    room = limit - len((head + digest + tail).encode())
    start = name.encode()[:max(room, 0)].decode(errors="ignore")
    return head + start + digest + tail


def staging_for(out_dir: Path) -> tuple[Path, Path]:
    """The staging and trash folders of a single run directory: hidden siblings of it, on its file
    system, named after it, this host and this process (the run's name shortened where the file
    system's name limit needs it: a run folder's name may use the whole limit)."""
    out_dir = Path(out_dir)
    limit = name_max(out_dir.parent)
    return tuple(out_dir.parent / fitted_name(".", out_dir.name, f".{kind}.{_tag()}", limit)
                 for kind in ("staging", "replaced"))


def lock_path_for(out_dir: Path) -> Path:
    """The lock file of a single run directory (``bpo.training.job.check_outputs``): a hidden sibling,
    like its staging folder, since the folder itself is replaced when the run is published."""
    out_dir = Path(out_dir)
    return out_dir.parent / fitted_name(".", out_dir.name, ".lock", name_max(out_dir.parent))


def publish_run_dir(out_dir: Path, write_files: Callable[[Path], T]) -> T:
    """``write_files(folder)`` into a staging folder beside ``out_dir``, then swapped into place,
    keeping what ``out_dir`` held besides an older run's files (``tb/``, ``checkpoint/``). What
    killed publishers of ``out_dir`` on this host left beside it is removed first
    (``clear_leftovers``)."""
    clear_leftovers(out_dir)
    staging, trash = staging_for(out_dir)
    shutil.rmtree(staging, ignore_errors=True)
    try:
        value = write_files(staging)
        replace_dir(staging, out_dir, trash, keep_others=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return value


def clear_leftovers(out_dir: Path) -> list[str]:
    """Remove the staging and trash siblings of ``out_dir`` (``staging_for``) that a process of this
    host killed while it published left behind: a new run not yet swapped in (its old folder
    kept its checkpoint, so ``--resume`` redoes it) or an old run already swapped out. Another
    host's, and a live process's (a publish under way), are kept: whether they are still in use
    cannot be told from here. Returns the names removed."""
    out_dir, host = Path(out_dir), socket.gethostname()
    pattern = re.compile(rf"\.(staging|replaced)\.{re.escape(host)}\.([0-9]+)$")
    limit, removed = name_max(out_dir.parent), []
    with contextlib.suppress(OSError):  # no parent folder yet: nothing was left
        for entry in sorted(out_dir.parent.iterdir()):
            found = pattern.search(entry.name)
            if (found is None or entry.name != fitted_name(".", out_dir.name, found[0], limit)
                    or _alive(int(found[2]))):
                continue  # not a leftover of this folder on this host, or its process still runs
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry.name)
    return removed


def _alive(pid: int) -> bool:
    """Whether a process ``pid`` runs on this host (one of another user counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def check_publishable(out_dir: Path, field: str = "--out") -> None:
    """Before any work: ``out_dir``'s name fits its file system, and the folder that will receive
    its staging sibling can be written (where that folder is still to be made, its nearest
    existing ancestor, in which the run's folders are made)."""
    parent = Path(out_dir).absolute().parent
    limit, size = name_max(parent), len(Path(out_dir).name.encode())
    parent = next(p for p in (parent, *parent.parents) if p.exists())
    if size > limit:
        raise ConfigError(field, f"the folder name {Path(out_dir).name[:40]!r}... has {size} bytes; allowed: at "
                                 f"most {limit}, the longest name the file system holds")
    try:
        with tempfile.TemporaryFile(dir=parent, prefix=".bpo-write-check-"):
            pass
    except OSError as e:
        raise ConfigError(field, f"cannot write beside {str(out_dir)!r} in {str(parent)!r} ({e.strerror or e}): a "
                                 "run is written beside its folder and renamed into place; allowed: a folder whose "
                                 "parent this user can write") from None


MAX_WRITE_RETRIES = 100
MAX_WRITE_RETRY_S = 3600.0


def _env_number(name: str, default: float, minimum: float, maximum: float, integer: bool = False) -> float:
    """A number from the environment in [minimum, maximum] (finite: a write path that sleeps or
    loops forever loses the results it exists to save), or ``default`` when unset."""
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw) if integer else float(raw)
    except ValueError:
        value = None
    if value is None or not minimum <= value <= maximum:
        kind = "an integer" if integer else "a number"
        raise ConfigError(name, f"must be {kind} from {minimum:g} to {maximum:g}, got {raw!r}")
    return value


def check_environment() -> None:
    """The variables read after the work, checked before it (a ``ConfigError`` naming one)."""
    _env_number("BPO_WRITE_RETRIES", 2, 0, MAX_WRITE_RETRIES, integer=True)
    _env_number("BPO_WRITE_RETRY_S", 30, 0, MAX_WRITE_RETRY_S)


def rescue_candidates(out_dir: Path) -> list[Path]:
    """Folders to rescue results into: ``BPO_RESCUE_DIR`` when set, then the others, those on another
    file system than ``out_dir``'s first."""
    given = [Path(os.environ[RESCUE_ENV]).absolute()] if os.environ.get(RESCUE_ENV) else []
    places = [Path.home() / "bpo-rescued", Path(tempfile.gettempdir()), Path("/dev/shm")]
    unique = [p for p in dict.fromkeys(p.absolute() for p in places) if p not in given]

    def device(path: Path) -> int | None:
        for p in (path, *path.parents):
            with contextlib.suppress(OSError):
                return os.stat(p).st_dev
        return None

    here = device(Path(out_dir).absolute())
    return given + sorted(unique, key=lambda p: device(p) == here)  # stable: other file systems first


def _write_with_retries(out_dir: Path, write_files: Callable[[Path], T], say: Callable[[str], None]) -> T:
    retries = int(_env_number("BPO_WRITE_RETRIES", 2, 0, MAX_WRITE_RETRIES, integer=True))
    wait = _env_number("BPO_WRITE_RETRY_S", 30, 0, MAX_WRITE_RETRY_S)
    for attempt in range(retries + 1):
        try:
            return write_files(out_dir)
        except OSError as e:
            if attempt == retries or e.errno not in PASSING:
                raise
            say(f"writing {str(out_dir)!r} failed ({e.strerror or e}); the results are kept in memory: "
                f"retrying in {wait:g} s ({retries - attempt} more tries)")
            time.sleep(wait)
    raise AssertionError("unreachable")


def _rescue(out_dir: Path, write_files: Callable[[Path], T], say) -> tuple[T, Path] | None:
    name = Path(out_dir).name or "run"
    for place in rescue_candidates(out_dir):
        try:
            place.mkdir(parents=True, exist_ok=True)
            prefix = fitted_name("bpo-rescued-", name, "-", name_max(place) - 8)  # mkdtemp adds 8 characters
            folder = Path(tempfile.mkdtemp(prefix=prefix, dir=place))
        except OSError:
            continue
        try:
            with results.oversize_in_parts():
                return write_files(folder), folder
        except OSError as e:
            say(f"rescue into {str(folder)!r} failed too ({e.strerror or e})")
            shutil.rmtree(folder, ignore_errors=True)
    return None


def save_or_rescue(out_dir: Path, write_files: Callable[[Path], T], field: str = "--out",
                   last_resort: Callable[[], str] | None = None) -> tuple[T | None, Path | None]:
    """Write the results with ``write_files(folder)`` into ``out_dir`` (module docstring: retried,
    then rescued elsewhere, then ``last_resort()`` printed). Returns (its value, None) when
    ``out_dir`` was written, (value, rescue folder) when rescued, (None, None) when nothing could
    be written; every failure is reported on stderr, one line each, prefixed with ``field``."""
    def say(message: str) -> None:
        print(f"error: {field}: {message}", file=sys.stderr, flush=True)

    try:
        return _write_with_retries(out_dir, write_files, say), None
    except OSError as e:
        say(f"writing {str(out_dir)!r} failed after the work ({e.strerror or e})")
    rescued = _rescue(out_dir, write_files, say)
    if rescued is not None:
        value, folder = rescued
        parts = sorted(p.name for p in folder.glob("*.part000"))
        joined = (f"; files over this process's size limit are in parts: `cat NAME.part* > NAME` for "
                  f"{', '.join(p.removesuffix('.part000') for p in parts)}") if parts else ""
        say(f"the results are in {str(folder)!r}{joined}")
        return value, folder
    say("no rescue folder could be written either" + (f"; the results: {last_resort()}" if last_resort else ""))
    return None, None
