"""The seam between strata and the operating system's files.

Every file strata creates, syncs, renames or removes goes through a ``FileOps``. Production
uses ``FileOps`` itself; tests swap in ``strata.files.faults.FaultInjectingFileOps`` to drop
unsynced bytes, tear writes and fill the disk without root tricks.
"""

from __future__ import annotations

import errno
import mmap
import os
import time
from pathlib import Path

from strata.errors import DiskFullError

MADV_POPULATE_WRITE = getattr(mmap, "MADV_POPULATE_WRITE", 23)
PAGE = mmap.PAGESIZE


class FileOps:
    """Plain POSIX file operations (the production implementation)."""

    def create_preallocated(self, path: Path, size: int) -> int:
        """Create ``path`` with ``size`` bytes reserved on disk; return an O_RDWR fd.

        Reserving the blocks up front means a full disk is reported here, as DiskFullError,
        instead of as SIGBUS when a page of the mapping is first written.
        """
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            self.allocate(fd, size, path)
        except BaseException:
            os.close(fd)
            try:
                os.unlink(path)
            except OSError:
                pass
            raise
        return fd

    def allocate(self, fd: int, size: int, path: Path) -> None:
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise DiskFullError(
                    exc.errno, f"no space left to create {path} ({size} bytes)") from exc
            raise

    def msync(self, path: Path, mm: mmap.mmap, start: int, length: int,
              fd: int | None = None) -> None:
        """Make ``mm[start:start+length]`` durable (start is rounded down to a page).

        With the file's ``fd`` this is an ``fdatasync``, which on Linux writes back the dirty
        pages of shared mappings too and, unlike ``mmap.flush``, releases the GIL while it waits.
        """
        if fd is not None:
            os.fdatasync(fd)
            return
        aligned = start - start % PAGE
        mm.flush(aligned, length + (start - aligned))

    def fsync(self, path: Path, fd: int) -> None:
        os.fsync(fd)

    def fsync_dir(self, directory: Path) -> None:
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def write_atomic(self, path: Path, data: bytes) -> None:
        """Replace ``path`` with ``data`` so a crash leaves the old or the new bytes, whole."""
        tmp = path.with_name(path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, data)
            self.fsync(tmp, fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        self.fsync_dir(path.parent)

    def rename(self, src: Path, dst: Path) -> None:
        os.replace(src, dst)
        self.fsync_dir(dst.parent)

    def remove(self, path: Path) -> None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass

    def prefault(self, mm: mmap.mmap, start: int, end: int) -> None:
        """Touch pages ahead of the writer so the put path does not pay first-touch faults."""
        # madvise holds the GIL for its whole duration: work in small chunks and yield between
        # them, so producers are not stalled while the next segment is being prepared.
        chunk = 4 << 20
        pos = start - start % PAGE
        while pos < end:
            n = min(chunk, end - pos)
            try:
                mm.madvise(MADV_POPULATE_WRITE, pos, n)
            except (OSError, ValueError):
                for off in range(pos, pos + n, PAGE):
                    mm[off] = mm[off]
            pos += n
            time.sleep(0)


DEFAULT_FILE_OPS = FileOps()
