"""Data-file I/O: the directory lock, the current file's buffered writer, pread of old files."""

from __future__ import annotations

import errno
import os
import threading

import numpy as np
from crc32c import crc32c

from strata.errors import DiskFullError
from strata.files.io import file_ops
from strata.files.lock import DirectoryLock
from strata.format import refstore_record as rec

from . import layout


def lock_directory(directory: str) -> DirectoryLock:
    """Take the ref store's exclusive writer lock (``refstore.lock``, left empty);
    StoreLockedError when another owner holds it."""
    lock = DirectoryLock(directory, layout.LOCK_NAME, what="ref store", write_pid=False,
                         by="another owner", hint="one owner per ref-store directory")
    lock.acquire()
    return lock


def _write_all(fd: int, data, pos: int) -> None:
    view = memoryview(data)
    try:
        while view:
            n = os.pwrite(fd, view, pos)
            view = view[n:]
            pos += n
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise DiskFullError(errno.ENOSPC, "no space left for ref-store data") from exc
        raise
    finally:
        view.release()


class CurrentFile:
    """The file new records are appended to, with a write buffer in front of it.

    ``size`` counts buffered bytes too; ``flushed`` is how far the OS has the bytes. Only the
    store's server thread appends; readers copy from the buffer under the store lock. The
    buffer is one numpy array reused for every flush (and handed on to the next file at a
    roll), so the batch encoder writes into memory that is already mapped: a fresh 1 MiB
    buffer per flush costs a page fault per 4 KiB, about as much as the encoding itself.
    """

    def __init__(self, directory: str, number: int, size: int, buffer_limit: int,
                 buffer: np.ndarray | None = None) -> None:
        self.number = number
        self.path = layout.data_path(directory, number)
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        if os.fstat(self.fd).st_size != size:
            os.ftruncate(self.fd, size)
        self.size = size
        self.flushed = size
        self.synced = size
        self.buffer_limit = buffer_limit
        self.buf = buffer if buffer is not None else np.empty(buffer_limit, dtype=np.uint8)
        self._mv = memoryview(self.buf)

    @property
    def fill(self) -> int:
        """Bytes in the write buffer (not yet handed to the OS)."""
        return self.size - self.flushed

    def reserve(self, n: int) -> int:
        """Make room for ``n`` more bytes in the buffer (flushing or growing it); returns the
        buffer position they go to."""
        fill = self.size - self.flushed
        if fill + n > len(self.buf):
            if fill:
                self.flush()
                fill = 0
            if n > len(self.buf):
                self._mv.release()
                self.buf = np.empty(n, dtype=np.uint8)
                self._mv = memoryview(self.buf)
        return fill

    def wrote(self, n: int) -> None:
        """``n`` bytes were put in the buffer at ``reserve``'s position: count them, and hand
        the buffer to the OS once it holds ``buffer_limit`` bytes."""
        self.size += n
        if self.size - self.flushed >= self.buffer_limit:
            self.flush()

    def append(self, msg_id: bytes, body: bytes) -> tuple[int, int]:
        """Buffer one record; returns (offset, total size)."""
        offset = self.size
        total = len(body) + rec.OVERHEAD
        at = self.reserve(total)
        mv = self._mv
        rec.HEADER.pack_into(mv, at, rec.MSG_ID_SIZE + len(body), msg_id)
        end = at + rec.HEADER_SIZE + len(body)
        mv[at + rec.HEADER_SIZE:end] = body
        rec.TRAILER.pack_into(mv, end, crc32c(mv[at:end]), rec.END_MARKER)
        self.wrote(total)
        return offset, total

    def flush(self) -> None:
        """Hand the buffer to the OS."""
        fill = self.size - self.flushed
        if fill:
            _write_all(self.fd, self._mv[:fill], self.flushed)
            self.flushed = self.size

    def take_buffer(self) -> np.ndarray:
        """The (flushed) buffer, for the next current file to reuse."""
        self.flush()
        return self.buf

    def sync(self) -> None:
        """Make everything flushed durable (fdatasync)."""
        if self.synced != self.flushed:
            target = self.flushed
            file_ops().fdatasync(self.path, self.fd)
            self.synced = target

    def read_buffered(self, offset: int, total: int) -> bytes | None:
        """The bytes of a record still in the buffer, or None if the OS already has it."""
        if offset < self.flushed:
            return None
        start = offset - self.flushed
        return self.buf[start:start + total].tobytes()

    def close(self) -> None:
        if self.fd >= 0:
            self.flush()
            self.sync()
            os.close(self.fd)
            self.fd = -1


class FileReaders:
    """One shared read descriptor per data file; ``pread`` is safe from many threads."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self._fds: dict[int, int] = {}
        self._lock = threading.Lock()

    def pread(self, number: int, offset: int, length: int) -> bytes:
        fd = self._fds.get(number)
        if fd is None:
            with self._lock:
                fd = self._fds.get(number)
                if fd is None:
                    fd = os.open(layout.data_path(self.directory, number), os.O_RDONLY)
                    self._fds[number] = fd
        data = os.pread(fd, length, offset)
        if len(data) < length:
            more = [data]
            got = len(data)
            while got < length:
                chunk = os.pread(fd, length - got, offset + got)
                if not chunk:
                    break
                more.append(chunk)
                got += len(chunk)
            data = b"".join(more)
        return data

    def close(self, number: int) -> None:
        with self._lock:
            fd = self._fds.pop(number, None)
        if fd is not None:
            os.close(fd)

    def close_all(self) -> None:
        with self._lock:
            fds = list(self._fds.values())
            self._fds.clear()
        for fd in fds:
            os.close(fd)


def read_file(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def append_and_sync(path: str, data, at: int | None = None) -> int:
    """Write ``data`` at ``at`` (default: the end) of ``path`` and fsync; returns the new size."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        pos = os.fstat(fd).st_size if at is None else at
        _write_all(fd, data, pos)
        file_ops().fsync(path, fd)
        return pos + len(data)
    finally:
        os.close(fd)


def truncate_and_sync(path: str, size: int) -> None:
    fd = os.open(path, os.O_RDWR)
    try:
        os.ftruncate(fd, size)
        file_ops().fsync(path, fd)
    finally:
        os.close(fd)
