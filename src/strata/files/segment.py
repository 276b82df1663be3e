"""One fixed-size, mmapped segment file: header page, data area, footer page.

A segment knows its path, its bytes and three positions in its data area:
``wrote`` (bytes appended), ``committed`` (bytes readers may see: whole records only) and
``flushed`` (bytes made durable). It does not know which log or queue it serves.
"""

from __future__ import annotations

import errno
import mmap
import os
import threading
from pathlib import Path

import numpy as np
from crc32c import crc32c

from strata.errors import CorruptStoreError
from strata.files.io import DEFAULT_FILE_OPS, PAGE, FileOps
from strata.format.segment import (FOOTER_AREA, HEADER_AREA, KIND_COMMIT_LOG, KIND_NAMES,
                                   SegmentFooter, SegmentHeader, file_size)

# A new segment file has its full size but is sparse: only its header and footer pages and a
# first stretch of its data area are allocated. More is reserved (posix_fallocate) ahead of
# the writer by the background pre-allocator, as far as the writer's rate asks for (see
# SegmentQueue.keep_ahead), and, when a write would pass the reserved end, synchronously
# before it (a full disk is DiskFullError then, never SIGBUS from a write into a hole), in
# steps of RESERVE_MIN growing to a sixteenth of what is reserved (at most RESERVE_MAX): the
# reservation runs a little ahead of the data, not double it. SPARSE = False restores the old
# behaviour, the whole file reserved at creation (bench/append.py compares the two).
SPARSE = True
RESERVE_MIN = 1 << 20
RESERVE_MAX = 256 << 20
RESERVE_GROWTH = 16           # a writer's own step: at most 1/RESERVE_GROWTH of what is reserved


def _page_up(n: int) -> int:
    return -(-n // PAGE) * PAGE


def _header_to_rebuild(path: Path, kind: int, problem: str, data_size: int | None, actual: int,
                       readonly: bool) -> SegmentHeader | None:
    """The header a writer's damaged commit-log segment header must have been, or None when it
    cannot be known or must not be rewritten (a reader, another format version, a file whose
    name or size does not fit the log's geometry)."""
    if readonly or kind != KIND_COMMIT_LOG or data_size is None or "version" in problem:
        return None
    if len(path.name) != 20 or not path.name.isdigit() or int(path.name) % data_size:
        return None
    if not HEADER_AREA < actual <= file_size(data_size):
        return None
    return SegmentHeader(kind=kind, base_offset=int(path.name), data_size=data_size)


class MappedSegment:
    """A segment file mapped into memory. Data byte ``i`` lives at ``mm[HEADER_AREA + i]``."""

    def __init__(self, path: Path, header: SegmentHeader, fd: int, mm: mmap.mmap,
                 readonly: bool, file_ops: FileOps) -> None:
        self.path = path
        self.kind = header.kind
        self.base_offset = header.base_offset
        self.data_size = header.data_size
        self.fd = fd
        self.mm = mm
        self.mv = memoryview(mm)  # whole-file view for zero-copy slices; released at close
        # ... and as uint8 for the compiled readers (``record_walk.segment_map``: made once,
        # not a ``np.frombuffer`` a read); let go at close as ``mv`` is
        self.array: np.ndarray | None = np.frombuffer(mm, np.uint8)
        self.readonly = readonly
        self.file_ops = file_ops
        self.wrote = 0
        self.committed = 0
        self.flushed = 0
        self.record_count = 0
        self.min_store_timestamp = 0
        self.max_store_timestamp = 0
        self.footer: SegmentFooter | None = None
        self.closed = False
        self.restored_from: int | None = None  # the file's size if open() had to zero-extend it
        self.repaired_header: str | None = None  # what was wrong with a header open() rewrote
        # Data bytes [0, reserved) have their blocks allocated; the footer page too when
        # footer_reserved. A segment opened from disk starts at 0 (not known): the first
        # reserve() allocates from the start again, which costs nothing where blocks exist.
        self.reserved = 0
        self.footer_reserved = False
        self.prefaulted = 0          # data bytes [0, prefaulted) pre-faulted in the background
        self.ahead_requested = 0     # how far the background was asked to reserve ahead
        self.reserve_min = RESERVE_MIN   # the first (smallest) reservation step
        self._reserve_lock = threading.Lock()

    # ------------------------------------------------------------------ creation / opening

    @classmethod
    def create(cls, path: Path, kind: int, base_offset: int, data_size: int,
               file_ops: FileOps = DEFAULT_FILE_OPS, prefault: bool = False,
               reserve_min: int = RESERVE_MIN) -> "MappedSegment":
        """Create a new zero-filled segment with its header written and synced: sparse, with
        its first ``reserve_min`` data bytes reserved (all of it when not ``SPARSE``)."""
        size = file_size(data_size)
        sparse = SPARSE and file_ops.holes_are_safe(path.parent)
        first = min(data_size, _page_up(reserve_min)) if sparse else data_size
        if first < data_size:
            fd = file_ops.create_sparse(path, size, [(0, HEADER_AREA + first),
                                                     (HEADER_AREA + data_size, FOOTER_AREA)])
        else:
            fd = file_ops.create_preallocated(path, size)
        try:
            mm = mmap.mmap(fd, size)
        except BaseException:
            os.close(fd)
            file_ops.remove(path)
            raise
        header = SegmentHeader(kind=kind, base_offset=base_offset, data_size=data_size)
        raw = header.encode()
        mm[:len(raw)] = raw
        file_ops.msync(path, mm, 0, len(raw))
        seg = cls(path, header, fd, mm, False, file_ops)
        if kind == KIND_COMMIT_LOG:
            seg.advise_no_readahead()
        seg.reserved = first
        seg.footer_reserved = True
        seg.reserve_min = reserve_min
        if prefault:
            seg.prefault(0, first)
            seg.prefaulted = first
        return seg

    @classmethod
    def open(cls, path: Path, kind: int, *, readonly: bool = False,
             file_ops: FileOps = DEFAULT_FILE_OPS,
             restore_short: bool | None = None,
             data_size: int | None = None) -> "MappedSegment":
        """Open an existing segment, checking its header and size; the footer is read too.

        A file shorter than its header implies (a tail lost in a copy) is CorruptStoreError,
        unless ``restore_short`` (default: for a writer's commit-log segment): then it is
        zero-extended to its size and synced, and ``restored_from`` says how long it was (the
        commit log's recovery decides what the cut cost).

        A writer's commit-log segment whose header is damaged (bad magic or checksum) gets it
        rewritten from what the header must say: its kind, its name (the base offset) and
        ``data_size`` (the log's segment size); ``repaired_header`` says what was wrong."""
        restored = None
        rewrite = None
        fd = os.open(path, os.O_RDONLY if readonly else os.O_RDWR)
        try:
            actual = os.fstat(fd).st_size
            head = os.pread(fd, HEADER_AREA, 0)
            try:
                header = SegmentHeader.decode(head)
            except ValueError as exc:
                header = _header_to_rebuild(path, kind, str(exc), data_size, actual, readonly)
                if header is None:
                    raise CorruptStoreError(f"{path}: {exc}") from None
                rewrite = str(exc)
            if header.kind != kind:
                raise CorruptStoreError(
                    f"{path}: is a {KIND_NAMES.get(header.kind, header.kind)} segment, expected "
                    f"a {KIND_NAMES.get(kind, kind)} segment")
            if path.name.isdigit() and int(path.name) != header.base_offset:
                raise CorruptStoreError(
                    f"{path}: header says base offset {header.base_offset}, name disagrees")
            expected = file_size(header.data_size)
            if restore_short is None:
                restore_short = header.kind == KIND_COMMIT_LOG
            if actual < expected and restore_short and not readonly:
                file_ops.allocate(fd, expected, path)
                file_ops.fsync(path, fd)
                restored, actual = actual, expected
            if actual != expected:
                hint = ("; its tail was lost (a cut copy?): opening the store for writing "
                        "recovers the whole records before the cut" if actual < expected and
                        kind == KIND_COMMIT_LOG else "")
                raise CorruptStoreError(
                    f"{path}: file is {actual} bytes, its header implies {expected}{hint}")
            mm = mmap.mmap(fd, actual, access=mmap.ACCESS_READ if readonly else mmap.ACCESS_WRITE)
        except BaseException:
            os.close(fd)
            raise
        seg = cls(path, header, fd, mm, readonly, file_ops)
        st = os.fstat(fd)
        if st.st_blocks * 512 >= st.st_size:   # all of it allocated (not sparse)
            seg.reserved, seg.footer_reserved = header.data_size, True
        seg.restored_from = restored
        if rewrite is not None:
            raw = header.encode()
            mm[:len(raw)] = raw
            file_ops.msync(path, mm, 0, len(raw), fd)
            seg.repaired_header = rewrite
        seg.footer = SegmentFooter.decode(mm[HEADER_AREA + header.data_size:
                                             HEADER_AREA + header.data_size + FOOTER_AREA])
        return seg

    # ------------------------------------------------------------------ positions

    @property
    def file_size(self) -> int:
        """The file's size in bytes: header page, data area, footer page."""
        return file_size(self.data_size)

    @property
    def end_offset(self) -> int:
        return self.base_offset + self.data_size

    @property
    def sealed(self) -> bool:
        return self.footer is not None

    def remaining(self) -> int:
        return self.data_size - self.wrote

    def set_positions(self, position: int) -> None:
        """Set wrote = committed = flushed = ``position`` (after recovery or truncation)."""
        self.wrote = self.committed = self.flushed = position

    def view(self, start: int = 0, end: int | None = None) -> memoryview:
        """A zero-copy view of data bytes [start, end); release it before closing."""
        if end is None:
            end = self.data_size
        return self.mv[HEADER_AREA + start:HEADER_AREA + end]

    # ------------------------------------------------------------------ durability

    def flush(self, upto: int | None = None) -> int:
        """Make data [flushed, upto or committed) durable; returns the new flushed position."""
        target = self.committed if upto is None else min(upto, self.wrote)
        if target > self.flushed and not self.closed:
            self.file_ops.msync(self.path, self.mm, HEADER_AREA + self.flushed,
                                target - self.flushed, self.fd)
            self.flushed = target
        return self.flushed

    def write_at(self, start: int, data) -> None:
        """Write ``data`` as data bytes [start, start + len) through the file (``pwrite``)
        rather than the mapping, which shows them all the same (one page cache). On a fresh
        stretch this is the cheaper way in: a store through the mapping first faults each
        page in, and the fault reads the reserved (unwritten) blocks as zeros, page by page,
        before the copy overwrites them; ``pwrite`` of whole pages skips that read
        (docs/kafka.md, Performance). The blocks must be reserved (``reserve``) first."""
        self.file_ops.pwrite(self.path, self.fd, data, HEADER_AREA + start)

    def advise_no_readahead(self) -> None:
        """No read-ahead on page faults of this mapping while the segment is written (undone
        by ``seal``). The commit log's writer adds records with ``write_at`` and readers
        follow right behind it; a reader that touches the page just past the last record
        would otherwise make the kernel read ahead up to ``read_ahead_kb`` (8 MiB here) of
        reserved, never-written blocks, i.e. allocate and zero those page-cache pages, which
        on this VM cost ~8 µs a page against ~0.6 µs for pages ``pwrite`` allocates itself
        (docs/kafka.md, Performance). Everything a reader of this segment reaches was
        written by this process, so it is in the page cache: read-ahead has nothing to do."""
        try:
            self.mm.madvise(mmap.MADV_RANDOM)
        except (OSError, ValueError):
            pass    # only a hint

    def prefault(self, start: int, end: int) -> None:
        """Touch data pages [start, end) (within the reserved stretch: a sparse file's hole
        must not be faulted in unreserved)."""
        end = min(end, self.reserved)
        if end > start:
            self.file_ops.prefault(self.mm, HEADER_AREA + start, HEADER_AREA + end)

    def reserve(self, end: int, *, exact: bool = False) -> None:
        """Make sure data bytes [0, ``end``) have their blocks allocated before they are
        written through the mapping: allocates up to ``end``, and at least a step past the
        reserved end (``reserve_min``, growing to a sixteenth of what is reserved, at most
        RESERVE_MAX; ``exact``: just ``reserve_min``, for a caller that sized ``end`` itself).
        DiskFullError (nothing written) when the disk has no room. Cheap when ``end`` is
        reserved already."""
        if end <= self.reserved and self.footer_reserved:
            return
        with self._reserve_lock:
            if self.closed:
                return
            if not self.footer_reserved:
                self.file_ops.allocate_range(self.fd, HEADER_AREA + self.data_size,
                                             FOOTER_AREA, self.path)
                self.footer_reserved = True
            if end <= self.reserved:
                return
            step = self.reserve_min if exact else \
                min(RESERVE_MAX, max(self.reserve_min, self.reserved // RESERVE_GROWTH))
            new = min(self.data_size, _page_up(max(end, self.reserved + step)))
            self.file_ops.allocate_range(self.fd, HEADER_AREA + self.reserved,
                                         new - self.reserved, self.path)
            self.reserved = new

    def release_pages(self) -> None:
        """Drop this mapping's resident pages (MADV_DONTNEED on a shared file mapping: the data
        stays in the file and the page cache, and is faulted back in when read)."""
        if not self.closed:
            self.file_ops.release_pages(self.mm)

    def data_crc(self, length: int) -> int:
        with self.view(0, length) as mv:
            return crc32c(mv)

    def seal(self) -> SegmentFooter:
        """Write the footer (count, length, store-time range, data CRC) and sync everything."""
        footer = SegmentFooter(record_count=self.record_count, data_length=self.wrote,
                               min_store_timestamp=self.min_store_timestamp,
                               max_store_timestamp=self.max_store_timestamp,
                               data_crc=self.data_crc(self.wrote))
        self.flush(self.wrote)
        self.reserve(0)   # the footer page of a segment opened from disk
        raw = footer.encode()
        pos = HEADER_AREA + self.data_size
        self.mm[pos:pos + len(raw)] = raw
        self.file_ops.msync(self.path, self.mm, pos, len(raw), self.fd)
        self.footer = footer
        try:
            self.mm.madvise(mmap.MADV_NORMAL)   # read-ahead again for the readers of a sealed one
        except (OSError, ValueError):
            pass
        return footer

    def clear_footer(self) -> None:
        """Forget the footer (the segment is being truncated and reopened for appends)."""
        pos = HEADER_AREA + self.data_size
        if self.mm[pos:pos + FOOTER_AREA] != bytes(FOOTER_AREA):   # (a hole stays a hole)
            self.mm[pos:pos + FOOTER_AREA] = bytes(FOOTER_AREA)
            self.file_ops.msync(self.path, self.mm, pos, FOOTER_AREA, self.fd)
        self.footer = None

    def zero(self, start: int, end: int) -> int:
        """Zero data bytes [start, end), skipping chunks that already are; returns bytes zeroed."""
        chunk = 1 << 20
        zeros = bytes(chunk)
        done = 0
        pos = start
        while pos < end:
            pos = self._next_data(pos, end)   # a hole in the file reads as zeros: skipped
            if pos >= end:
                break
            n = min(chunk, end - pos)
            a = HEADER_AREA + pos
            view = np.frombuffer(self.mm, np.uint8, n, a)   # looked at in place, not copied
            dirty = bool(view.any())
            del view
            if dirty:
                self.mm[a:a + n] = zeros[:n]
                done += n
            pos += n
        if done:
            self.file_ops.msync(self.path, self.mm, HEADER_AREA + start, end - start, self.fd)
        return done

    def next_nonzero(self, pos: int, end: int) -> int:
        """The first data byte in [``pos``, ``end``) that is not zero, or ``end`` when all are
        (holes are skipped unread, SEEK_DATA). Recovery's look-ahead past a bad record: a
        record starts with its non-zero length, so a run of zeros holds none. Scans in
        stretches that grow from 4 KiB to 1 MiB, 8 bytes at a time where aligned."""
        n = PAGE
        while pos < end:
            at = self._next_data(pos, end)
            if at > pos:
                pos, n = at, PAGE
                if pos >= end:
                    break
            stop = min(end, pos + n)
            a, b = HEADER_AREA + pos, HEADER_AREA + stop
            head = min(b, -(-a // 8) * 8)         # bytes before the first aligned word
            for i in range(a, head):
                if self.mm[i]:
                    return i - HEADER_AREA
            words = (b - head) // 8
            if words:
                view = np.frombuffer(self.mm, np.uint64, words, head)
                hit = bool(view.any())
                if hit:
                    first = int(np.argmax(view != 0))
                    del view
                    i = head + 8 * first
                    return i - HEADER_AREA + next(k for k in range(8) if self.mm[i + k])
                del view
            for i in range(head + 8 * words, b):
                if self.mm[i]:
                    return i - HEADER_AREA
            pos, n = stop, min(n * 4, 1 << 20)
        return end

    def _next_data(self, pos: int, end: int) -> int:
        """The first data byte at or after ``pos`` that is not in a hole of the file (``end``
        if none is before it): holes hold zeros without reading them (SEEK_DATA)."""
        try:
            at = os.lseek(self.fd, HEADER_AREA + pos, os.SEEK_DATA) - HEADER_AREA
        except OSError as exc:
            return end if exc.errno == errno.ENXIO else pos   # ENXIO: only a hole follows
        return min(end, max(pos, at - at % PAGE))

    # ------------------------------------------------------------------ lifetime

    def close(self) -> None:
        if self.closed:
            return
        with self._reserve_lock:   # not while a background reserve() uses the fd
            self.closed = True
        self.mv.release()
        self.array = None   # (a reader holding it keeps the map, as below)
        try:
            self.mm.close()
        except BufferError:
            # A reader still holds a view; the mapping goes when the last view does.
            pass
        os.close(self.fd)

    def destroy(self) -> None:
        """Close and delete the file."""
        self.close()
        self.file_ops.remove(self.path)

    def __repr__(self) -> str:
        return (f"MappedSegment({self.path.name}, wrote={self.wrote}, "
                f"committed={self.committed}, flushed={self.flushed}, sealed={self.sealed})")
