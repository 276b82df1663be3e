"""The exclusive directory lock: one writer process per store (and per ref store), and the
check whether some process holds it."""

from __future__ import annotations

import errno
import fcntl
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from strata.errors import StoreLockedError
from strata.files.io import disk_full_or_same
from strata.files.layout import LOCK_NAME

STORE_HINT = ("reads need no lock (strata.open(DIR, readonly=True) in Python; the "
              "commands info, stat, get, query, scan and verify), a write waits until that "
              "process ends (`strata serve`: stop it with Ctrl-C or SIGTERM)")


class DirectoryLock:
    """An ``flock`` on ``<dir>/<name>`` held for the life of the writer; released on close or
    death. ``what`` names the directory in the error a second writer gets, ``by`` the holder,
    ``hint`` says what the caller can do instead; ``write_pid`` records the holder's pid in
    the file (the message store's ``lock``; the ref store's ``refstore.lock`` stays empty,
    see docs/format.md)."""

    def __init__(self, directory: Path | str, name: str = LOCK_NAME, *, what: str = "store",
                 hint: str = STORE_HINT, write_pid: bool = True,
                 by: str = "another process") -> None:
        self.path = Path(directory) / name
        self.what = what
        self.by = by
        self.hint = hint
        self.write_pid = write_pid
        self._fd: int | None = None

    def acquire(self) -> None:
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise disk_full_or_same(exc, f"no space left to create the lock file {self.path}")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = ""
            try:
                holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            except OSError:
                pass
            os.close(fd)
            if holder == str(os.getpid()):      # this very process holds it: say so
                raise StoreLockedError(
                    f"{self.what} {self.path.parent} is already open for writing in this "
                    f"process (pid {holder}); close that one first, or use it instead of "
                    f"opening the {self.what} again") from None
            who = f" (pid {holder})" if holder else ""
            raise StoreLockedError(
                f"{self.what} {self.path.parent} is open for writing by {self.by}{who}; "
                f"{self.hint}") from None
        self._fd = fd
        if not self.write_pid:
            return
        try:
            self._write_pid(fd)
        except BaseException:
            self.release()
            raise

    def _write_pid(self, fd: int) -> None:
        """Say who holds the lock (only informative: the flock is the lock). On a full disk
        the file may have no room for it, and then it says nothing: the store still opens."""
        pid = f"{os.getpid()}\n".encode()
        try:
            os.pwrite(fd, pid, 0)
            os.ftruncate(fd, len(pid))
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            try:
                os.ftruncate(fd, 0)   # no stale pid of an earlier writer
            except OSError:
                pass

    def release(self) -> None:
        if self._fd is not None:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            finally:
                os.close(self._fd)
                self._fd = None

    @property
    def held(self) -> bool:
        return self._fd is not None


def writer_alive(directory: Path | str, name: str = LOCK_NAME) -> bool:
    """True if some process holds the writer lock ``<directory>/<name>`` right now."""
    path = Path(directory) / name
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing drops our shared lock, if we got one
    return False


@contextmanager
def exclusive(path: Path | str) -> Iterator[None]:
    """Hold a blocking exclusive ``flock`` on ``path`` (created if missing) for the block:
    short critical sections shared between processes, such as a conditional write."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)   # closing the descriptor releases the lock
