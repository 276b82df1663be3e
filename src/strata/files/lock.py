"""The exclusive directory lock: one writer process per store."""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

from strata.errors import StoreLockedError
from strata.files.io import disk_full_or_same
from strata.files.layout import LOCK_NAME


class DirectoryLock:
    """An ``flock`` on ``<dir>/lock`` held for the life of the writer; released on close or death."""

    def __init__(self, directory: Path) -> None:
        self.path = Path(directory) / LOCK_NAME
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
            who = f" (pid {holder})" if holder else ""
            raise StoreLockedError(
                f"store {self.path.parent} is open for writing by another process{who}; "
                "reads need no lock (strata.open(DIR, readonly=True) in Python; the "
                "commands info, stat, get, query, scan and verify), a write waits until that "
                "process ends (`strata serve`: stop it with Ctrl-C or SIGTERM)") from None
        self._fd = fd
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
