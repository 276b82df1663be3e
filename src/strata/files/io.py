"""The seam between strata and the operating system's files.

Every file strata creates, allocates, syncs, renames or removes goes through a ``FileOps``
(``tests/docs/test_file_seam.py`` fails when a module outside ``strata.files`` calls
``os.fsync``, ``os.fdatasync``, ``os.rename``, ``os.replace`` or ``os.posix_fallocate``).
Production uses ``FileOps`` itself. Objects that are handed a ``FileOps`` (segments, the
checkpoint, the tier's metadata) use theirs; the rest ask ``file_ops()``, which answers
``DEFAULT_FILE_OPS`` unless a test installed another one with
``strata.testing.faults.installed`` (LevelDB's fault-injection ``Env``): that is how a test drops
unsynced bytes, tears writes, fills the disk or records the order of syncs and renames,
without patching ``os``.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import time
from pathlib import Path
from typing import Callable

from strata.errors import DiskFullError

MADV_POPULATE_WRITE = getattr(mmap, "MADV_POPULATE_WRITE", 23)
PAGE = mmap.PAGESIZE


def disk_full_or_same(exc: OSError, message: str) -> OSError:
    """``exc`` as a DiskFullError saying ``message`` when it is ENOSPC or EDQUOT (a full disk
    or quota), else ``exc`` itself: raise the result."""
    if isinstance(exc, DiskFullError) or exc.errno not in (errno.ENOSPC, errno.EDQUOT):
        return exc
    full = DiskFullError(exc.errno, message)
    full.__cause__ = exc
    return full


class FileOps:
    """Plain POSIX file operations (the production implementation)."""

    def create_preallocated(self, path: Path, size: int) -> int:
        """Create ``path`` with ``size`` bytes reserved on disk; return an O_RDWR fd.

        Reserving the blocks up front means a full disk is reported here, as DiskFullError,
        instead of as SIGBUS when a page of the mapping is first written.
        """
        try:
            return self._create(path, lambda fd: self.allocate(fd, size, path))
        except DiskFullError as exc:
            if self.holes_are_safe(path.parent):
                raise
            # tmpfs: every file is reserved whole (see holes_are_safe), so a small one is
            # full at the first segment; say why and what fits
            full = DiskFullError(exc.errno, f"{exc.strerror}; on a memory file system "
                                 f"({_fs_type(path.parent)}) a store's files take their whole "
                                 "size at once: a smaller StoreConfig.segment_size (and "
                                 "consume_queue_units) fits")
            raise full from exc.__cause__

    def create_sparse(self, path: Path, size: int, reserve: list[tuple[int, int]]) -> int:
        """Create ``path`` at ``size`` bytes with only the ``(offset, length)`` ranges of
        ``reserve`` allocated (the rest is a hole until ``allocate_range`` reserves it); return
        an O_RDWR fd. A full disk is DiskFullError here and leaves no file."""
        def grow(fd: int) -> None:
            os.ftruncate(fd, size)
            for offset, length in reserve:
                self.allocate_range(fd, offset, length, path)
        return self._create(path, grow)

    @staticmethod
    def _create(path: Path, reserve: Callable[[int], None]) -> int:
        """A new file at ``path``, given its blocks by ``reserve(fd)``; removed if that fails."""
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            reserve(fd)
        except BaseException:
            os.close(fd)
            try:
                os.unlink(path)
            except OSError:
                pass
            raise
        return fd

    def holes_are_safe(self, directory: Path) -> bool:
        """Whether a sparse file in ``directory`` may be mapped: False on a memory-backed file
        system (tmpfs, ramfs), where even *reading* a hole through a shared mapping takes a
        page and a full file system answers that with SIGBUS."""
        return _fs_type(directory) not in MEMORY_FILE_SYSTEMS

    def fallocate(self, fd: int, offset: int, length: int, path: Path) -> None:
        """``posix_fallocate`` of an open file (``path`` names it): the OSError of a full disk
        comes out as it is, for callers that word their own DiskFullError."""
        os.posix_fallocate(fd, offset, length)

    def allocate_range(self, fd: int, offset: int, length: int, path: Path) -> None:
        """Reserve the blocks of ``[offset, offset + length)`` of an open file, so that writing
        them through a mapping cannot fault on a full disk (DiskFullError here instead)."""
        try:
            self.fallocate(fd, offset, length, path)
        except OSError as exc:
            raise disk_full_or_same(exc, f"no space left to reserve {length} bytes of {path} "
                                    f"at {offset}")

    def allocate(self, fd: int, size: int, path: Path) -> None:
        """Reserve the first ``size`` bytes of a new file (DiskFullError on a full disk)."""
        try:
            self.fallocate(fd, 0, size, path)
        except OSError as exc:
            raise disk_full_or_same(exc, f"no space left to create {path} ({size} bytes)")

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

    def write(self, path: Path, fd: int, data) -> int:
        """One ``os.write`` of ``data`` to the open file ``fd`` (``path`` names it): the count
        written, which may be short (appenders loop; a fault layer cuts writes here)."""
        return os.write(fd, data)

    def pwrite(self, path: Path, fd: int, data, offset: int) -> None:
        """Write all of ``data`` to the open file ``fd`` (``path`` names it) at ``offset``
        (``os.pwrite``, repeated after a short write). Into a file that is also mapped shared,
        this lands in the same page cache pages the mapping shows."""
        with memoryview(data) as view, view.cast("B") as rest:
            done = 0
            while done < len(rest):
                done += os.pwrite(fd, rest[done:], offset + done)

    def start_writeback(self, path: Path, fd: int, offset: int, length: int) -> bool:
        """Ask the kernel to start writing ``[offset, offset + length)`` of the open file ``fd``
        (``path`` names it) to disk now, without waiting for it; False where there is no way
        to ask (not Linux). A hint, not a sync: it makes nothing durable, and the fdatasync
        that a confirm waits for is still made. Its use is a stream's tail: pages whose
        write-back started while later bytes were being written leave that fdatasync little
        to wait for (``sync_file_range`` with ``SYNC_FILE_RANGE_WRITE``, called through ctypes
        so the GIL is released should the device queue be full). False too when the call
        fails: the fdatasync after it does the writing, or reports the error."""
        if _SYNC_FILE_RANGE is None or length <= 0:
            return False
        # a failure (unsupported, or an I/O error) is left to the fdatasync to do or report
        return _SYNC_FILE_RANGE(fd, offset, length, SYNC_FILE_RANGE_WRITE) == 0

    def reserve_beyond_end(self, path: Path, fd: int, offset: int, length: int) -> bool:
        """Give the open file ``fd`` (``path`` names it) the blocks of ``[offset, offset +
        length)`` without changing its size (``fallocate`` with ``FALLOC_FL_KEEP_SIZE``, through
        ctypes); False where that cannot be done (not Linux, a file system without it, a full
        disk: the writes themselves then allocate, and report a full disk). For an append-only
        file whose end is still read as its size: writes into reserved blocks skip the file
        system's block reservation page by page (on ext4 here, 25–30 % less CPU in ``pwrite``).
        A same-size ``ftruncate`` gives back what was not written."""
        if _FALLOCATE is None or length <= 0:
            return False
        return _FALLOCATE(fd, FALLOC_FL_KEEP_SIZE, offset, length) == 0

    def fsync(self, path: Path, fd: int) -> None:
        """Make the data and metadata of the open file ``fd`` (``path`` names it) durable."""
        os.fsync(fd)

    def fdatasync(self, path: Path, fd: int) -> None:
        """Make the data of the open file ``fd`` durable (its size too, not its times)."""
        os.fdatasync(fd)

    def fsync_path(self, path: Path) -> None:
        """Open ``path``, fsync it and close it (a file written by someone else, or by a
        library that does not hand out its descriptor)."""
        fd = os.open(path, os.O_RDONLY)
        try:
            self.fsync(path, fd)
        finally:
            os.close(fd)

    def fsync_dir(self, directory: Path) -> None:
        """Make the creations, renames and removals of names in ``directory`` durable."""
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def write_atomic(self, path: Path, data: bytes) -> None:
        """Replace ``path`` with ``data`` so a crash leaves the old or the new bytes, whole.

        With no room for the new bytes it raises DiskFullError, and ``path`` keeps its old
        bytes (the temporary file is removed)."""
        tmp = path.with_name(path.name + ".tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                self.reserve(fd, len(data), tmp)
                if os.write(fd, data) != len(data):
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp))
                self.fsync(tmp, fd)
            finally:
                os.close(fd)
        except OSError as exc:
            self.remove(tmp)
            raise disk_full_or_same(exc, f"no space left to write {path} ({len(data)} bytes); "
                                    "it keeps its previous contents")
        self.replace(tmp, path)
        self.fsync_dir(path.parent)

    def reserve(self, fd: int, size: int, path: Path) -> None:
        """Hook before a small file's bytes are written (the fault layer refuses it when its
        simulated disk is full)."""

    def replace(self, src: Path, dst: Path) -> None:
        """Give ``src`` the name ``dst`` (replacing any file there) atomically; the caller
        fsyncs the directory (once for many renames) when the new name must survive a crash."""
        os.replace(src, dst)

    def rename(self, src: Path, dst: Path) -> None:
        """``replace`` and make it durable (fsync of ``dst``'s directory)."""
        self.replace(src, dst)
        self.fsync_dir(Path(dst).parent)

    def remove(self, path: Path) -> None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass

    def prefault(self, mm: mmap.mmap, start: int, end: int) -> None:
        """Touch pages ahead of the writer so the put path does not pay first-touch faults.

        ``mmap.madvise`` holds the GIL for its whole duration, so libc's madvise is called
        through ctypes, which releases it: a segment is pre-faulted on another core while
        producers keep appending. Without that (no libc, or a kernel without
        MADV_POPULATE_WRITE) pages are read one by one in small chunks.
        """
        pos = start - start % PAGE
        if _populate_write(mm, pos, end - pos):
            return
        chunk = 4 << 20
        while pos < end:
            n = min(chunk, end - pos)
            try:
                mm.madvise(MADV_POPULATE_WRITE, pos, n)
            except (OSError, ValueError):   # a read touch: writing a byte back could undo
                for off in range(pos, pos + n, PAGE):   # a store the writer just made there
                    mm[off]
            pos += n
            time.sleep(0)


    def release_pages(self, mm: mmap.mmap) -> None:
        """MADV_DONTNEED over a whole mapping, without the GIL when libc is at hand."""
        if not _madvise_whole(mm, mmap.MADV_DONTNEED):
            try:
                mm.madvise(mmap.MADV_DONTNEED)
            except (OSError, ValueError):
                pass  # only a hint


MEMORY_FILE_SYSTEMS = frozenset({"tmpfs", "ramfs", "hugetlbfs", "shm", "devtmpfs"})


def _fs_type(directory: Path) -> str:
    """The type of the file system holding ``directory`` (from /proc/mounts; "" if unknown)."""
    try:
        where = os.path.realpath(directory)
        best, kind = "", ""
        with open("/proc/mounts", encoding="utf-8", errors="replace") as f:
            for line in f:
                parts = line.split()
                if len(parts) < 3:
                    continue
                point = parts[1].replace("\\040", " ")
                inside = where == point or where.startswith(point.rstrip("/") + "/")
                if inside and len(point) >= len(best):
                    best, kind = point, parts[2]
        return kind
    except OSError:
        return ""


def _libc(name: str, *argtypes):
    """libc's function ``name`` (returning an int, errno kept), None where there is none:
    called through ctypes, which releases the GIL for the call."""
    try:
        fn = getattr(ctypes.CDLL(None, use_errno=True), name)
    except (OSError, AttributeError):
        return None
    fn.argtypes = argtypes
    fn.restype = ctypes.c_int
    return fn


_MADVISE = _libc("madvise", ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)

SYNC_FILE_RANGE_WRITE = 2      # <linux/fs.h>: start write-out of dirty pages, do not wait
_SYNC_FILE_RANGE = _libc("sync_file_range", ctypes.c_int, ctypes.c_int64, ctypes.c_int64,
                        ctypes.c_uint)

FALLOC_FL_KEEP_SIZE = 1        # <linux/falloc.h>: allocate, leave the size alone
_FALLOCATE = _libc("fallocate", ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)


def _address(mm: mmap.mmap) -> int | None:
    """The address of a writable mapping (a brief buffer export), None if unavailable."""
    try:
        anchor = ctypes.c_char.from_buffer(mm)
    except (TypeError, ValueError, BufferError):
        return None
    base = ctypes.addressof(anchor)
    del anchor
    return base


def _madvise_whole(mm: mmap.mmap, advice: int) -> bool:
    if _MADVISE is None or mm.closed:
        return False
    base = _address(mm)
    return base is not None and _MADVISE(base, len(mm), advice) == 0


def _populate_write(mm: mmap.mmap, pos: int, length: int) -> bool:
    """MADV_POPULATE_WRITE on ``mm[pos:pos + length]`` without the GIL; False if unavailable."""
    if _MADVISE is None or length <= 0 or mm.closed:
        return _MADVISE is not None and length <= 0
    base = _address(mm)
    if base is None:
        return False
    chunk = 64 << 20
    while length > 0:
        n = min(chunk, length)
        if _MADVISE(base + pos, n, MADV_POPULATE_WRITE) != 0:
            return False  # e.g. EINVAL on kernels before 5.14: the caller touches pages
        pos += n
        length -= n
    return True


DEFAULT_FILE_OPS = FileOps()


_INSTALLED: list[FileOps] = []


def file_ops() -> FileOps:
    """The FileOps of code that is not handed one: ``DEFAULT_FILE_OPS``, or the layer a test
    installed (``strata.testing.faults.installed``), innermost first."""
    return _INSTALLED[-1] if _INSTALLED else DEFAULT_FILE_OPS


def install(ops: FileOps) -> None:
    """The seam's hook for tests: from now on ``file_ops()`` answers ``ops`` (until
    ``uninstall(ops)``). Production code never calls it."""
    _INSTALLED.append(ops)


def uninstall(ops: FileOps) -> None:
    """Undo ``install(ops)``."""
    _INSTALLED.remove(ops)


def fsync_dir(directory: Path | str) -> None:
    """Make the names in ``directory`` durable, through the installed ``file_ops()``."""
    file_ops().fsync_dir(Path(directory))
