"""Exclusive file locks (``fcntl.flock``), which the kernel releases when the process holding one
ends, however it ends: a sweep's run and index locks (``experiments.store``) and the lock a
``bpo train`` holds on its output folder (``bpo.training.job.check_outputs``).

A lock file is removed by its holder when it releases it; whoever takes a lock checks that the
file it locked is still the one at that path, so a removal never lets two processes hold the
same lock.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import sys
from pathlib import Path

_NO_LOCKS = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS)  # file systems without flock
_warned: list[bool] = []  # that locks do not work here, once per process


class Lock:
    """An exclusive ``flock`` on the file ``path``. ``release()`` removes the file and unlocks (and,
    with ``tidy_parent``, removes its folder once empty: a sweep's ``.locks``); a process that ends
    without releasing (even by SIGKILL) unlocks too, and leaves only an unlocked empty file behind."""

    def __init__(self, path: Path, fd: int, tidy_parent: bool = False):
        self.path, self.fd, self.tidy_parent = Path(path), fd, tidy_parent

    def release(self) -> None:
        if self.fd < 0:
            return
        with contextlib.suppress(OSError):
            if same_file(self.path, self.fd):  # removed while still held: see acquire
                os.unlink(self.path)
        os.close(self.fd)
        self.fd = -1
        if self.tidy_parent:
            with contextlib.suppress(OSError):  # not empty (other locks), or already gone
                self.path.parent.rmdir()

    def __enter__(self) -> Lock:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def same_file(path: Path, fd: int) -> bool:
    """Whether ``path`` is still the file open as ``fd``."""
    try:
        a, b = os.stat(path), os.fstat(fd)
    except FileNotFoundError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def acquire(path: Path, blocking: bool, tidy_parent: bool = False) -> Lock | None:
    """Lock ``path`` (created if needed, and its folder); None when another process holds it and
    not ``blocking``. OSError when the folder cannot be created or written."""
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        except FileNotFoundError:  # a sweep's .locks absent, or just removed as empty by another process
            path.parent.mkdir(exist_ok=True)
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            os.close(fd)
            return None
        except OSError as e:
            if e.errno not in _NO_LOCKS:
                os.close(fd)
                raise
            if not _warned:
                print(f"warning: {path.parent} does not support file locks ({e.strerror}): concurrent commands "
                      "writing there are not kept apart", file=sys.stderr)
                _warned.append(True)
            return Lock(path, fd, tidy_parent)
        except BaseException:
            os.close(fd)
            raise
        # The holder we waited for may have removed the file before unlocking it: then we locked a
        # file nobody else will ever look at, and must lock the one now at that path instead.
        if same_file(path, fd):
            return Lock(path, fd, tidy_parent)
        os.close(fd)
