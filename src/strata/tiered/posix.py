"""The POSIX directory backend: one file per object under a root directory.

A write goes to a temporary file in the object's directory, is fsynced and renamed over the
object, and the directory is fsynced (``FileOps.write_atomic``), so a crash leaves the old
object or the new one, whole. Conditional writes hold an ``flock`` on ``<root>/.lock`` while
they compare versions; a version is the CRC32C and size of the object's bytes.
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

import numpy as np
from crc32c import crc32c

from strata.files.io import FileOps
from strata.files.io import file_ops as installed_file_ops
from strata.files.lock import exclusive
from strata.tiered.backend import TierBackend
from strata.tiered.errors import TierConflictError, TierUnavailableError

TMP_SUFFIX = ".tmp"
LOCK_FILE = ".lock"


DIRECT_MIN = 1 << 20   # put_many writes objects this large from aligned memory with O_DIRECT
DIRECT_ALIGN = 4096


def _aligned(data) -> bool:
    """Whether ``data``'s first byte lies on a ``DIRECT_ALIGN`` boundary."""
    try:
        return np.frombuffer(data, np.uint8).ctypes.data % DIRECT_ALIGN == 0
    except (TypeError, ValueError):
        return False


def check_path(path: str) -> str:
    """A backend path: relative, '/'-separated, no empty, '.' or '..' part."""
    parts = path.split("/")
    if not path or any(p in ("", ".", "..") for p in parts) or path.endswith(TMP_SUFFIX):
        raise ValueError(f"bad tier object path {path!r}")
    return path


def content_version(data) -> str:
    return f"{crc32c(data):08x}-{len(data)}"


class PosixBackend(TierBackend):
    """Objects as files under ``root`` (created if missing)."""

    def __init__(self, root: str | os.PathLike, file_ops: FileOps | None = None) -> None:
        self.root = Path(root)
        self.url = f"file://{self.root}"
        self.file_ops = file_ops or installed_file_ops()
        self._direct = hasattr(os, "O_DIRECT")   # False once the file system refuses it
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise TierUnavailableError(f"tier {self.url}: cannot create the directory: "
                                       f"{exc.strerror or exc}") from None

    def _file(self, path: str) -> Path:
        return self.root / check_path(path)

    def _fail(self, what: str, path: str, exc: OSError) -> TierUnavailableError:
        return TierUnavailableError(f"tier {self.url}: {what} {path}: {exc.strerror or exc}")

    def _parent(self, f: Path) -> None:
        if not f.parent.is_dir():
            f.parent.mkdir(parents=True, exist_ok=True)
            self.file_ops.fsync_dir(f.parent.parent)

    def put(self, path: str, data) -> None:
        f = self._file(path)
        try:
            self._parent(f)
            self.file_ops.write_atomic(f, data)   # bytes-like: os.write takes it uncopied
        except OSError as exc:
            raise self._fail("writing", path, exc) from None

    def put_many(self, items) -> None:
        """Each object as ``put`` writes it (a temporary file, fsynced, renamed over the
        object), but all temporary files are written before any is fsynced and the
        directories are fsynced once after all renames: a chunk's three objects cost about
        one journal commit for their data and one for their names, not three of each. An
        object of at least ``DIRECT_MIN`` bytes in 4 KiB-aligned memory (a chunk's ``.log``,
        ``chunk.aligned_empty``) is written with O_DIRECT (``_write``). All are durable when
        this returns; a crash before leaves temporary files (``clean_partial``) or some of the
        objects, each whole."""
        if len(items) < 2:
            return super().put_many(items)
        files = [(self._file(path), path, data) for path, data in items]
        ops = self.file_ops
        opened: list[tuple[int, Path]] = []
        at = items[0][0]
        try:
            try:
                for f, path, data in files:
                    at = path
                    self._parent(f)
                    tmp = f.with_name(f.name + TMP_SUFFIX)
                    direct = self._direct and len(data) >= DIRECT_MIN and _aligned(data)
                    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
                    try:
                        fd = os.open(tmp, flags | os.O_DIRECT if direct else flags, 0o644)
                    except OSError as exc:
                        if not direct or exc.errno != errno.EINVAL:
                            raise
                        self._direct = direct = False   # a file system without O_DIRECT
                        fd = os.open(tmp, flags, 0o644)
                    opened.append((fd, tmp))
                    ops.reserve(fd, len(data), tmp)
                    self._write(fd, data, direct, tmp)
                for (fd, tmp), (_f, path, _d) in zip(opened, files):
                    at = path
                    ops.fsync(tmp, fd)
            finally:
                for fd, _tmp in opened:
                    os.close(fd)
        except OSError as exc:
            for _fd, tmp in opened:
                ops.remove(tmp)
            raise self._fail("writing", at, exc) from None
        try:
            for (_fd, tmp), (f, path, _d) in zip(opened, files):
                at = path
                ops.replace(tmp, f)
            for parent in dict.fromkeys(f.parent for f, _p, _d in files):
                ops.fsync_dir(parent)
        except OSError as exc:
            raise self._fail("writing", at, exc) from None

    def _write(self, fd: int, data, direct: bool, tmp: Path) -> None:
        """All of ``data`` into the new file ``fd`` from its start, uncopied (os.write takes
        the buffer as it is). ``direct`` (``fd`` opened with O_DIRECT, ``data`` 4 KiB
        aligned): the whole 4 KiB blocks go from the buffer straight to the disk, which skips
        the copy into fresh page-cache pages (the bulk of a buffered write's cost) and leaves
        the page cache to the store; the last partial block is written buffered (O_DIRECT
        cleared). The caller fsyncs as for any write: durability does not change."""
        view = memoryview(data).cast("B")
        done = 0
        if direct:
            whole = len(view) - len(view) % DIRECT_ALIGN
            try:
                done = os.write(fd, view[:whole])
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
                self._direct = False   # alignment the device refuses: buffered from now on
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_DIRECT)
        while done < len(view):
            n = os.write(fd, view[done:])
            if n <= 0:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp))
            done += n

    def put_if(self, path: str, data: bytes, expect: str | None) -> str:
        with exclusive(self.root / LOCK_FILE):
            now = self.version(path)
            if now != expect:
                raise TierConflictError(
                    f"tier {self.url}: {path} is at version {now}, expected {expect} (another "
                    "store writes to this tier?)")
            self.put(path, data)
            return content_version(data)

    def version(self, path: str) -> str | None:
        try:
            return content_version(self._file(path).read_bytes())
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise self._fail("reading", path, exc) from None

    def read(self, path: str, start: int = 0, length: int | None = None) -> bytes:
        try:
            with open(self._file(path), "rb") as fh:
                fh.seek(start)
                return fh.read() if length is None else fh.read(length)
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise self._fail("reading", path, exc) from None

    def size(self, path: str) -> int | None:
        try:
            return self._file(path).stat().st_size
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise self._fail("stat of", path, exc) from None

    def delete(self, path: str) -> None:
        try:
            self.file_ops.remove(self._file(path))
        except OSError as exc:
            raise self._fail("deleting", path, exc) from None

    def _walk(self):
        for dirpath, _dirs, files in os.walk(self.root):
            rel = os.path.relpath(dirpath, self.root)
            for name in files:
                yield name, name if rel == "." else f"{rel}/{name}"

    def list(self, prefix: str = "") -> list[str]:
        return sorted(p for name, p in self._walk() if p.startswith(prefix)
                      and not name.endswith(TMP_SUFFIX) and name != LOCK_FILE)

    def clean_partial(self) -> int:
        n = 0
        for name, p in list(self._walk()):
            if name.endswith(TMP_SUFFIX):
                self.file_ops.remove(self.root / p)
                n += 1
        return n
