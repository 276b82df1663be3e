"""Data-file I/O: the directory lock, the current file's buffered writer, pread of old files."""

from __future__ import annotations

import errno
import os
import threading

import numpy as np
from crc32c import crc32c

from strata.errors import DiskFullError
from strata.files.io import PAGE, file_ops
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


WRITEBACK_BUFFERS = 4
"""Every this many write buffers' worth of bytes handed to the OS, the current file asks the
kernel to start writing them to disk (``FileOps.start_writeback``)."""

RESERVE_BUFFERS = 8
"""How many write buffers' worth of disk blocks the current file reserves ahead of its
written bytes (``FileOps.reserve_beyond_end``), a stretch at a time as the bytes reach the
reserved end: writes into reserved blocks skip the file system's block reservation page by
page, and a file nothing is written to takes no blocks."""


class CurrentFile:
    """The file new records are appended to, with write buffers in front of it.

    ``size`` counts buffered bytes too; ``flushed`` is how far the OS has the bytes. Only the
    store's server thread appends. A buffer that fills up is *sealed*: it keeps its bytes
    unchanged until the server thread has written it (``write_sealed``, called without the
    store lock, so clients and readers are not held up by the copy into the page cache) and
    then marked written (``sealed_written``, under the lock), which is when ``flushed``
    moves past it. Readers copy a record from the active or a sealed buffer under the store
    lock while it is at or past ``flushed``: they never ``pread`` bytes the OS does not have.

    Every ``WRITEBACK_BUFFERS`` buffers' worth of written bytes, ``writeback_due`` names a
    stretch whose write-back to disk the sync thread then starts (a hint, not a sync): the
    page cache would otherwise keep them dirty until the fdatasync of the next sync point,
    which then writes them all. Confirms still wait for that fdatasync.

    Buffers are numpy arrays reused (and handed on to the next file at a roll), so the batch
    encoder writes into memory that is already mapped: a fresh 1 MiB buffer per flush costs
    a page fault per 4 KiB, about as much as the encoding itself.
    """

    def __init__(self, directory: str, number: int, size: int, buffer_limit: int,
                 buffers: list[np.ndarray] | None = None, reserve_to: int = 0) -> None:
        self.directory = directory
        self.number = number
        self.path = layout.data_path(directory, number)
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        if os.fstat(self.fd).st_size != size:
            os.ftruncate(self.fd, size)
        # disk blocks are reserved ahead of the written bytes, a stretch at a time (``write_
        # sealed``), never past ``reserve_to``: a file nothing is written to takes no blocks
        self.reserve_to = reserve_to
        self._reserved_end = size          # blocks reserved up to here
        self._reserved = False             # some past the size (given back at roll and close)
        self.size = size
        self.flushed = size
        self.synced = size
        self.writeback_from = size         # write-back not yet started from here on
        self.buffer_limit = buffer_limit
        self._spare = buffers or []
        self.buf = self._fresh(buffer_limit)
        self._mv = memoryview(self.buf)
        self.buf_start = size              # file position of the active buffer's byte 0
        self.sealed: list[tuple[int, np.ndarray, int]] = []   # (position, buffer, length)

    def _fresh(self, n: int) -> np.ndarray:
        for k, b in enumerate(self._spare):
            if len(b) >= n:
                return self._spare.pop(k)
        return np.empty(max(n, self.buffer_limit), dtype=np.uint8)

    @property
    def fill(self) -> int:
        """Bytes in the active write buffer."""
        return self.size - self.buf_start

    def reserve(self, n: int) -> int:
        """Make room for ``n`` more bytes in the active buffer (sealing it and taking a
        fresh one, at least ``n`` long); returns the buffer position they go to."""
        fill = self.size - self.buf_start
        if fill + n > len(self.buf):
            self.seal()
            if n > len(self.buf):
                self._mv.release()
                self._spare.append(self.buf)
                self.buf = self._fresh(n)
                self._mv = memoryview(self.buf)
            fill = 0
        return fill

    def wrote(self, n: int) -> None:
        """``n`` bytes were put in the buffer at ``reserve``'s position: count them, and seal
        the buffer once it holds ``buffer_limit`` bytes."""
        self.size += n
        if self.size - self.buf_start >= self.buffer_limit:
            self.seal()

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

    def seal(self) -> None:
        """Queue the active buffer's bytes for writing; continue in a fresh buffer."""
        fill = self.size - self.buf_start
        if not fill:
            return
        self.sealed.append((self.buf_start, self.buf, fill))
        self._mv.release()
        self.buf = self._fresh(self.buffer_limit)
        self._mv = memoryview(self.buf)
        self.buf_start = self.size

    def write_sealed(self, sealed: list[tuple[int, np.ndarray, int]]) -> None:
        """pwrite sealed buffers (a prefix of ``self.sealed``, in order). Server thread only;
        needs no lock: nobody changes a sealed buffer, and ``flushed`` does not move yet.
        Reserves the file's next ``RESERVE_BUFFERS`` buffers' worth of blocks first when the
        bytes reach past what is reserved."""
        if sealed:
            pos, _buf, n = sealed[-1]
            self._reserve_ahead(pos + n)
        for pos, buf, n in sealed:
            _write_all(self.fd, buf[:n], pos)

    def _reserve_ahead(self, end: int) -> None:
        """Once the bytes reach ``end`` past what is reserved, reserve the blocks from there
        to ``RESERVE_BUFFERS`` buffers past ``end`` (at most ``reserve_to``). Where that cannot
        be done (a full disk, no ``fallocate``) this file stops trying: its writes allocate as
        they go, and report a full disk themselves."""
        if end <= self._reserved_end or self._reserved_end >= self.reserve_to:
            return
        stop = min(self.reserve_to, end + RESERVE_BUFFERS * self.buffer_limit)
        if file_ops().reserve_beyond_end(self.path, self.fd, self._reserved_end,
                                         stop - self._reserved_end):
            self._reserved = True
            self._reserved_end = stop
        else:
            self._reserved_end = self.reserve_to

    def writeback_due(self) -> tuple[int, int] | None:
        """The stretch ``(start, end)`` of bytes the OS has whose write-back should start
        now, once ``WRITEBACK_BUFFERS`` buffers' worth of whole pages came since the last one
        (the page still being filled is left out: a page under write-back could hold up the
        next ``pwrite`` into it). Server thread, after ``sealed_written``."""
        end = self.flushed - self.flushed % PAGE
        start = self.writeback_from
        if end - start < WRITEBACK_BUFFERS * self.buffer_limit:
            return None
        self.writeback_from = end
        return start, end

    def start_writeback(self, start: int, end: int) -> None:
        """Ask the kernel to start writing ``[start, end)`` to disk (the sync thread, which
        alone closes a rolled file: never a closed descriptor)."""
        if self.fd >= 0:
            file_ops().start_writeback(self.path, self.fd, start, end - start)

    def sealed_written(self, sealed: list[tuple[int, np.ndarray, int]]) -> None:
        """``write_sealed(sealed)`` returned: the OS has those bytes (store lock held)."""
        if not sealed:
            return
        del self.sealed[:len(sealed)]
        pos, _buf, n = sealed[-1]
        self.flushed = pos + n
        self._spare.extend(buf for _pos, buf, _n in sealed)

    def flush(self) -> None:
        """Hand every buffered byte to the OS now."""
        self.seal()
        pending = list(self.sealed)
        self.write_sealed(pending)
        self.sealed_written(pending)

    def successor(self) -> "CurrentFile":
        """The next current file (number + 1), taking over this one's buffers once every byte
        of this one is written and its unwritten reserved blocks are given back (at the roll,
        before the GC may take this file up)."""
        self.flush()
        self._release_reserve()
        self._mv.release()
        buffers = self._spare + [self.buf]
        self._spare = []
        return CurrentFile(self.directory, self.number + 1, 0, self.buffer_limit, buffers,
                           self.reserve_to)

    def _release_reserve(self) -> None:
        """Give back the blocks reserved past the end (a same-size ``ftruncate``)."""
        if self._reserved:
            os.ftruncate(self.fd, self.size)
            self._reserved = False

    def sync(self) -> None:
        """Make everything flushed durable (fdatasync)."""
        if self.synced != self.flushed:
            target = self.flushed
            file_ops().fdatasync(self.path, self.fd)
            self.synced = target

    def sync_to(self, target: int) -> None:
        """fdatasync if bytes up to ``target`` (written before the call) may not be durable
        (the sync thread; a closed file was synced as it closed)."""
        if self.fd >= 0 and self.synced < target:
            file_ops().fdatasync(self.path, self.fd)
            self.synced = max(self.synced, target)

    def read_buffered(self, offset: int, total: int) -> bytes | None:
        """The bytes of a record still in a buffer, or None if the OS already has it."""
        if offset < self.flushed:
            return None
        if offset >= self.buf_start:
            start = offset - self.buf_start
            return self.buf[start:start + total].tobytes()
        for pos, buf, n in self.sealed:
            if pos <= offset < pos + n:
                return buf[offset - pos:offset - pos + total].tobytes()
        return None

    def close(self) -> None:
        if self.fd >= 0:
            self.flush()
            self._release_reserve()
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


def scan_columns(data) -> tuple[list[int], list[int], list[bytes]]:
    """Offsets, sizes and ids of the whole records in ``data`` (``refstore_record.scan``),
    as three lists: ints and bytes are not tracked by Python's cycle collector, so a file of
    thousands of records does not set off collections the way a list of tuples does."""
    offs: list[int] = []
    totals: list[int] = []
    ids: list[bytes] = []
    for off, total, m in rec.scan(data):
        offs.append(off)
        totals.append(total)
        ids.append(m)
    return offs, totals, ids


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
